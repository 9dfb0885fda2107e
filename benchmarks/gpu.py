"""The flex backend on a GPU, as one prepared run: correctness against float64 on the device, then
time and peak memory against plain PyTorch SDPA in the same run, and the issue's targets.

    python benchmarks/gpu.py                          # a CUDA machine: every section (minutes: compiles)
    python benchmarks/gpu.py --device cpu --eager     # the dry run CI makes: tiny shapes, eager FlexAttention
    python benchmarks/gpu.py --json gpu.json          # also write every number (strict JSON, atomic)

Sections, in order (each prints as it finishes; a FAIL makes the exit status 1):

1. correctness against float64: attnscale.torch.attention(backend="flex") in float32 and bfloat16
   against the chunked backend in float64 on the same device and the same (rounded) inputs:
   output, lse, entropy (held to flex.ENTROPY_ERROR_BOUND), max and min logit, for plain, causal in
   both alignments, a boolean mask with a fully masked row, QK-norm, log-n and soft-cap, with
   grouped-query heads and lengths that are not multiples of 128; on CUDA also dq, dk, dv through
   FlexAttention's backward (and 0 gradient for the fully masked row).
2. entropy error sweep: flex_precision.entropy_errors on the device, rows from uniform to frozen.
3. forward and forward+backward time ÷ SDPA, medians of interleaved rounds, at (2, 8, 2048, 64) and
   (1, 8, 8192, 64), causal and not, float32 and bfloat16. The peer: SDPA restricted to the flash
   kernel for bfloat16; PyTorch's flash kernel has no float32, so for float32 its memory-efficient
   kernel (printed with each row). Variants: "flex" (out, lse, entropy; on CUDA the max logit comes
   free with them), "flex + min logit" (logit_range=True: the second call on −q), forward+backward
   of both.
4. peak memory ÷ SDPA (CUDA): the rise of torch.cuda.max_memory_allocated over the inputs, one
   forward (no grad) and one forward+backward.
5. targets: forward ≤ 1.2×, forward+backward ≤ 1.3×, memory ≤ 1.1× for "flex", met or missed.

Compiling dominates a first run on a GPU (one FlexAttention kernel per shape, dtype, mask, grad
mode and output set); ``--skip`` leaves sections out, to split the run over several calls. The
script prints each row as it is measured and each section's seconds, so a run cut short still tells
what it got. On CUDA the script turns off torch.compile's automatic dynamic shapes and raises its recompile
limit to 64 (a training loop compiles one static kernel per shape; the benchmark's many shapes and
dtypes must not fall back to the eager path, which materialises the scores). The dry run times
eager FlexAttention on tiny CPU shapes: its ratios say nothing about a GPU, and are labelled so.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import warnings

from attnscale import AuxRequest

WITH_RANGE = AuxRequest(lse=True, entropy=True, logit_range=True)  # what the correctness section compares
TARGETS = {"forward": 1.2, "forward+backward": 1.3, "memory": 1.1}
SHAPES = ((2, 8, 2048, 64), (1, 8, 8192, 64))
DRY_SHAPES = ((1, 2, 64, 16),)  # the dry run times float32 only
DTYPES = ("float32", "bfloat16")
# (label, causal, masked, scale rule): the correctness cases, each in every dtype.
CASES = (
    ("plain", False, False, None),
    ("causal top_left", "top_left", False, None),
    ("bottom_right + mask", "bottom_right", True, None),
    ("qknorm", False, False, "qknorm"),
    ("logn, causal", "top_left", False, "logn"),
    ("softcap, causal", "top_left", False, "softcap"),
)
# Tolerances against float64 of the same inputs: (out, lse relative, logit range relative, gradients
# relative to their largest entry). bfloat16: outputs and gradients carry 8 bits.
# bfloat16 logits are those of q̂ rounded to bfloat16 after QK-norm or log-n's factor (the model's own
# rounding), hence lse and the logit range to 1e-2 relative.
TOLERANCES = {"float32": (1e-4, 1e-5, 1e-5, 1e-3), "bfloat16": (3e-2, 1e-2, 2e-2, 5e-2)}


def say(line: str = "") -> None:
    print(line, flush=True)


class section:
    """Prints the section's title, and its wall-clock seconds when it ends (for sizing a device run)."""

    def __init__(self, title: str, seconds: dict):
        self.title, self.seconds = title, seconds

    def __enter__(self):
        say(f"\n{self.title}:")
        self.t = time.perf_counter()

    def __exit__(self, *exc):
        self.seconds[self.title] = time.perf_counter() - self.t
        say(f"  ({self.seconds[self.title]:.0f} s)")
        return False


def check(torch, flex, attention, device, dtype_name, grads: bool, dry: bool) -> list[dict]:
    """Section 1: one row per case, with its errors and PASS/FAIL."""
    dtype = getattr(torch, dtype_name)
    B, H_q, H_kv, L, S, d = (1, 4, 2, 40, 50, 16) if dry else (2, 8, 2, 300, 333, 64)
    g = torch.Generator().manual_seed(0)
    q64, k64, v64 = (
        torch.randn(B, h, n, d, generator=g, dtype=torch.float64) for h, n in ((H_q, L), (H_kv, S), (H_kv, S))
    )
    mask = torch.rand(B, 1, L, S, generator=g) > 0.3
    mask[0, 0, 3] = False  # a fully masked row
    q, k, v = (x.to(device=device, dtype=dtype) for x in (q64, k64, v64))
    mask = mask.to(device)
    tol_out, tol_lse, tol_range, tol_grad = TOLERANCES[dtype_name]
    bound = flex.ENTROPY_ERROR_BOUND[dtype_name]
    rows = []
    for label, causal, masked, rule in CASES:
        kw = dict(scale=rule, causal=causal, mask=mask if masked else None)
        with torch.no_grad():
            ours_out, ours = attention(q, k, v, backend="flex", aux=WITH_RANGE, **kw)
            exact_out, exact = attention(q.double(), k.double(), v.double(), backend="chunked", aux=WITH_RANGE, **kw)
        empty = torch.isnan(exact.entropy)
        full = ~empty
        err = {
            "out": float((ours_out.double() - exact_out).abs().max()),
            "lse_rel": float(((ours.lse.double() - exact.lse)[full].abs() / exact.lse[full].abs().clamp_min(1)).max()),
            "entropy_rel_to_1+|lse|": float(
                ((ours.entropy.double() - exact.entropy)[full].abs() / (1 + exact.lse[full].abs())).max()
            ),
            "range_rel": max(
                float(
                    (
                        (getattr(ours, n).double() - getattr(exact, n))[full].abs()
                        / getattr(exact, n)[full].abs().clamp_min(1)
                    ).max()
                )
                for n in ("max_logit", "min_logit")
            ),
        }
        ok = (
            err["out"] <= tol_out
            and err["lse_rel"] <= tol_lse
            and err["entropy_rel_to_1+|lse|"] <= bound
            and err["range_rel"] <= tol_range
            and bool(torch.equal(torch.isnan(ours.entropy), empty))
            and bool((ours_out[empty] == 0).all())
            and bool(torch.isneginf(ours.lse[empty]).all())
        )
        if grads:
            err["grad_rel"], grads_ok = gradient_error(torch, attention, (q, k, v), kw, empty, tol_grad)
            ok = ok and grads_ok
        rows.append({"dtype": dtype_name, "case": label, "errors": err, "ok": ok})
        shown = "  ".join(f"{n} {x:.1e}" for n, x in err.items())
        say(f"  {dtype_name:8s} {label:22s} {shown}  {'PASS' if ok else 'FAIL'}")
    return rows


def gradient_error(torch, attention, qkv, kw, empty, tol) -> tuple[float, bool]:
    """dq, dk, dv of flex against float64 chunked ones, relative to each one's largest entry; a
    fully masked row's dq must be exactly 0."""
    q, _, v = qkv
    weight = torch.randn(q.shape[:-1] + v.shape[-1:], device=q.device, dtype=torch.float64)  # d loss / d out

    def grads(dtype, backend):
        xs = [x.detach().to(dtype).requires_grad_(True) for x in qkv]
        out = attention(*xs, backend=backend, **kw)
        (out * weight.to(dtype)).sum().backward()
        return [x.grad for x in xs]

    ours, exact = grads(qkv[0].dtype, "flex"), grads(torch.float64, "chunked")
    rel = max(float((a.double() - b).abs().max() / b.abs().max().clamp_min(1e-30)) for a, b in zip(ours, exact))
    zero = bool((ours[0][empty] == 0).all()) if bool(empty.any()) else True
    return rel, rel <= tol and zero


def sweep(torch, flex, device, rows: int) -> list[dict]:
    """Section 2, ``rows`` rows per sweep."""
    from attnscale.torch.flex_precision import entropy_errors

    found = []
    for name in ("float32", "float16", "bfloat16"):
        for with_range in (False, True):
            r = entropy_errors(getattr(torch, name), device, logit_range=with_range, rows=rows)
            frozen = max(e for h, e in zip(r["entropy"], r["entropy_error"]) if h < 1e-6)
            ok = r["worst"] <= flex.ENTROPY_ERROR_BOUND[name] and (not with_range or frozen <= 2e-4)
            found.append(
                {"dtype": name, "logit_range": with_range, "worst": r["worst"], "frozen_max": frozen, "ok": ok}
            )
            say(
                f"  {name:8s} logit_range={str(with_range):5s} worst |Δentropy|/(1+|lse|) {r['worst']:.2e} "
                f"(bound {flex.ENTROPY_ERROR_BOUND[name]:.0e}), frozen rows ≤ {frozen:.1e} nats  "
                f"{'PASS' if ok else 'FAIL'}"
            )
    return found


def peer(torch, device, dtype):
    """SDPA as the flash kernel where it exists (half precision on CUDA), else the efficient one."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    if device.type != "cuda":
        return "SDPA (CPU default)", lambda: _nothing()
    if dtype in (torch.float16, torch.bfloat16):
        return "SDPA flash", lambda: sdpa_kernel(SDPBackend.FLASH_ATTENTION)
    return "SDPA memory-efficient (flash has no float32)", lambda: sdpa_kernel(SDPBackend.EFFICIENT_ATTENTION)


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def variants(torch, attention, q, k, v, causal: bool, context, backward: bool):
    """name → a function running one call (and its backward when asked)."""
    F = torch.nn.functional

    def sdpa():
        with context():
            out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        if backward:
            out.sum().backward()

    def ours(logit_range):
        def run():
            out, _ = attention(
                q,
                k,
                v,
                causal="top_left" if causal else False,
                aux=AuxRequest(lse=True, entropy=True, logit_range=logit_range),
                backend="flex",
                check_finite=False,
            )
            if backward:
                out.sum().backward()

        return run

    return {"sdpa": sdpa, "flex": ours(False), "flex + min logit": ours(True)}


def timings(torch, attention, device, shapes, dtypes, repeats: int, backward: bool) -> list[dict]:
    """Section 3: one row per (shape, causal, dtype), medians of interleaved rounds ÷ SDPA's."""
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    rows = []
    for shape in shapes:
        B, H, L, d = shape
        for dtype_name in dtypes:
            dtype = getattr(torch, dtype_name)
            for causal in (False, True):
                g = torch.Generator(device=device).manual_seed(1)
                q, k, v = (
                    torch.randn(B, H, L, d, generator=g, device=device, dtype=dtype).requires_grad_(backward)
                    for _ in range(3)
                )
                name, context = peer(torch, device, dtype)
                fns = variants(torch, attention, q, k, v, causal, context, backward)
                grad = torch.enable_grad() if backward else torch.no_grad()
                with grad:
                    for fn in fns.values():  # warm-up: compiles, block masks
                        fn(), fn()
                    times = {n: [] for n in fns}
                    for _ in range(repeats):
                        for n, fn in fns.items():
                            sync()
                            t = time.perf_counter()
                            fn()
                            sync()
                            times[n].append(time.perf_counter() - t)
                med = {n: statistics.median(ts) for n, ts in times.items()}
                ratio = {n: med[n] / med["sdpa"] for n in med if n != "sdpa"}
                rows.append(
                    {
                        "shape": list(shape),
                        "dtype": dtype_name,
                        "causal": causal,
                        "peer": name,
                        "median_s": med,
                        "ratio_to_sdpa": ratio,
                    }
                )
                say(
                    f"  {str(shape):18s} {dtype_name:8s} causal={str(causal):5s} {name}: {med['sdpa'] * 1e3:8.2f} ms; "
                    + "  ".join(f"{n} {r:.2f}×" for n, r in ratio.items())
                )
    return rows


def memory(torch, attention, device, shapes) -> list[dict]:
    """Section 4 (CUDA): peak allocated memory above the inputs, ÷ SDPA's."""
    rows = []
    for shape in shapes:
        for dtype_name in DTYPES:
            dtype = getattr(torch, dtype_name)
            for backward in (False, True):
                q, k, v = (torch.randn(*shape, device=device, dtype=dtype).requires_grad_(backward) for _ in range(3))
                name, context = peer(torch, device, dtype)
                rise = {}
                for n, fn in variants(torch, attention, q, k, v, True, context, backward).items():
                    with torch.enable_grad() if backward else torch.no_grad():
                        fn()  # compiled and cached before measuring
                        for x in (q, k, v):
                            x.grad = None
                        torch.cuda.synchronize()
                        torch.cuda.reset_peak_memory_stats(device)
                        base = torch.cuda.memory_allocated(device)
                        fn()
                        torch.cuda.synchronize()
                        rise[n] = torch.cuda.max_memory_allocated(device) - base
                    for x in (q, k, v):
                        x.grad = None
                ratio = {n: rise[n] / max(rise["sdpa"], 1) for n in rise if n != "sdpa"}
                label = "forward+backward" if backward else "forward"
                rows.append(
                    {
                        "shape": list(shape),
                        "dtype": dtype_name,
                        "pass": label,
                        "causal": True,
                        "peer": name,
                        "rise_bytes": rise,
                        "ratio_to_sdpa": ratio,
                    }
                )
                say(
                    f"  {str(shape):18s} {dtype_name:8s} {label:16s} causal {name}: {rise['sdpa'] / 2**20:8.1f} MiB; "
                    + "  ".join(f"{n} {r:.2f}×" for n, r in ratio.items())
                )
    return rows


def verdicts(forward, backward, mem, dry: bool) -> list[str]:
    """Section 5: a line per measured ratio of "flex" against its target."""
    lines = []
    note = " (dry run on CPU, eager: not a GPU measurement)" if dry else ""

    def line(what, ratio, target):
        state = "met" if ratio <= target else f"missed by {ratio / target - 1:.0%}"
        return f"  target: {what} ≤ {target}×: {ratio:.2f}× {state}{note}"

    for kind, rows in (("forward", forward), ("forward+backward", backward)):
        for r in rows:
            lines.append(
                line(
                    f"{kind} {tuple(r['shape'])} {r['dtype']} causal={r['causal']}",
                    r["ratio_to_sdpa"]["flex"],
                    TARGETS[kind],
                )
            )
    for r in mem:
        lines.append(
            line(
                f"memory {r['pass']} {tuple(r['shape'])} {r['dtype']} causal",
                r["ratio_to_sdpa"]["flex"],
                TARGETS["memory"],
            )
        )
    return lines


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda", help="cuda (default) or cpu (the dry run, with --eager)")
    parser.add_argument("--eager", action="store_true", help="FlexAttention's eager path (tiny shapes on CPU)")
    parser.add_argument("--repeats", type=int, default=0, help="timed rounds (default 20 on CUDA, 1 in the dry run)")
    parser.add_argument(
        "--skip",
        action="append",
        default=[],
        choices=("correctness", "sweep", "time", "memory"),
        help="leave out a section (repeatable)",
    )
    parser.add_argument("--json", help="also write every number to this file")
    args = parser.parse_args(argv)

    import torch

    from attnscale.torch import attention
    from attnscale.torch.backends import flex

    device = torch.device(args.device)
    if device.type not in ("cpu", "cuda"):
        parser.error(f"--device: expected 'cpu' or 'cuda', got {args.device!r}")
    if device.type == "cuda" and not torch.cuda.is_available():
        parser.error("--device: 'cuda' is not available here; the dry run is --device cpu --eager")
    if device.type == "cpu" and not args.eager:
        parser.error("--device cpu needs --eager: compiled FlexAttention on CPU returns no lse (PyTorch 2.13)")
    dry = device.type == "cpu"
    repeats = args.repeats or (1 if dry else 20)
    warnings.filterwarnings("ignore", message=".*flex_attention called without torch.compile")
    if device.type == "cuda":
        torch._dynamo.config.automatic_dynamic_shapes = False
        torch._dynamo.config.recompile_limit = 64
        what = torch.cuda.get_device_name(device)
    else:
        what = "CPU (dry run: eager FlexAttention, tiny shapes; its times say nothing about a GPU)"
    say(f"torch {torch.__version__} on {what}; auto on CUDA: {flex.cuda_status()}")
    say(f"flex mode: {'eager' if args.eager else 'compiled'}; repeats {repeats}")
    result = {"torch": torch.__version__, "device": what, "eager": args.eager, "dry_run": dry, "repeats": repeats}
    started = time.perf_counter()
    seconds = result["section_seconds"] = {}
    with flex.eager() if args.eager else _nothing():
        if "correctness" not in args.skip:
            with section("correctness against float64 (flex vs chunked float64 on the device)", seconds):
                if dry:
                    say("  gradients: skipped (FlexAttention has no backward on CPU)")
                result["correctness"] = [
                    row for name in DTYPES for row in check(torch, flex, attention, device, name, not dry, dry)
                ]
        if "sweep" not in args.skip:
            with section("entropy error sweep (uniform → frozen rows, against float64)", seconds):
                result["sweep"] = sweep(torch, flex, device, rows=30 if dry else 200)
        shapes = DRY_SHAPES if dry else SHAPES
        forward = backward = mem = []
        if "time" not in args.skip:
            with section("forward: time ÷ SDPA (medians)", seconds):
                forward = result["forward"] = timings(
                    torch, attention, device, shapes, DTYPES[:1] if dry else DTYPES, repeats, backward=False
                )
            if dry:
                say("\nforward+backward: skipped (FlexAttention has no backward on CPU)")
            else:
                with section("forward+backward: time ÷ SDPA (medians)", seconds):
                    backward = result["forward+backward"] = timings(
                        torch, attention, device, shapes, DTYPES, repeats, backward=True
                    )
        if "memory" not in args.skip and not dry:
            with section("peak memory rise ÷ SDPA", seconds):
                mem = result["memory"] = memory(torch, attention, device, shapes)
    say("\ntargets:")
    result["targets"] = verdicts(forward, backward, mem, dry)
    for line in result["targets"]:
        say(line)
    failed = [r for section in ("correctness", "sweep") for r in result.get(section, []) if not r["ok"]]
    result["seconds"] = time.perf_counter() - started
    verdict = f"{len(failed)} check(s) failed" if failed else "all checks passed"
    say(f"\n{verdict}; {result['seconds']:.0f} s")
    if args.json:
        from attnscale.store import write_json_atomic

        write_json_atomic(args.json, result)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
