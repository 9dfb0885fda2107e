"""The telemetry benchmark: what the per-row figures cost, forward and forward + backward, in time and
peak memory, against plain PyTorch SDPA measured in the same run (the monitor on a real model:
:mod:`.telemetry_monitor`).

Variants, all on the same q, k, v (B, H, L, d), float32 unless configured, one device:

- ``sdpa``: ``torch.nn.functional.scaled_dot_product_attention`` (the peer every ratio divides by);
- ``kernel``: :func:`attnscale.torch.attention`, fused C++ kernel, output + lse + entropy (CPU only;
  with its defaults, so without the finiteness scan of q, k, v: ``check_finite`` is off by default);
- ``kernel+range``: the same with the logit range asked for too (max and min logit);
- ``composed``: the composed-PyTorch backend (one fused SDPA call on [V, K]), output + lse + entropy;
- ``naive``: materialise the L×S weights, then the entropy (what diagnostic tools do today).

Passes: ``forward`` (under ``torch.no_grad``) and ``forward+backward`` (inputs that require grad,
``torch.autograd.grad`` of the output against one fixed output gradient), each non-causal and causal.

Times: each repeat runs every variant once, in turn, so that a busy machine slows them alike; the
median over repeats is reported, and each ratio is a median over the SDPA median of the same run.
Wall-clock time is the figure; the process's CPU time is recorded beside it (``cpu_ratio_to_sdpa``),
which a loaded machine does not inflate by preemption, though it counts threads' spin-waits: with
``threads=1`` it measures the work alone.
Peak memory: each (variant, pass) runs in a fresh Python process, and the figure is the rise of its
peak resident set (Linux VmHWM, reset through /proc/self/clear_refs) over the resident set just
before the call, inputs (and the output gradient) already allocated; on CUDA, torch's peak allocator
statistics instead. The result (kind ``telemetry``) holds every median, every ratio and its verdict
against the kernel's cost targets (:data:`TARGETS`: forward ≤ 1.05× SDPA, forward + backward ≤ 1.15×,
peak memory of forward + backward ≤ 1.1×), so that faces only format it.

Share of the machine's peak: a VM reports neither the clock nor the FMA units reliably, so the fp32
peak is measured in the same run, by the same BLAS and threads: the throughput of one n×n float32
``torch.mm`` (``peak_gemm_n``; 2·n³ flops, median of ``repeats``). Each timing row holds the attention's
flops as FlashAttention's papers count them (:func:`attention_flops`, the same number for every
variant of the row) and each variant's GFLOP/s and its ratio to that peak: a ratio of two measured
rates, not a bound (a load that slows the GEMM more than the attention can put it above 1).
"""

from __future__ import annotations

import json
import math
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

from attnscale.errors import InputError, check_choice, check_count, require
from attnscale.i18n import N_, filled
from attnscale.stored_words import PASS_NAMES

__all__ = [
    "TelemetryBenchConfig",
    "run_telemetry_bench",
    "VARIANTS",
    "PASSES",
    "TARGETS",
    "check_device",
    "attended_pairs",
    "attention_flops",
    "MATMULS",
]

VARIANTS = ("sdpa", "kernel", "kernel+range", "composed", "naive")
PASSES = ("forward", "forward+backward")
# The fused kernel's cost targets, what "at SDPA's speed" means here: time ÷ SDPA per pass, and peak
# memory of forward + backward.
TARGETS = (
    {"measure": "time", "pass": "forward", "variant": "kernel", "target": 1.05},
    {"measure": "time", "pass": "forward+backward", "variant": "kernel", "target": 1.15},
    {"measure": "peak memory", "pass": "forward+backward", "variant": "kernel", "target": 1.1},
)
#: The attention's matrix products per pass, as FlashAttention's papers count them: forward QKᵀ and
#: PV; the backward recomputes QKᵀ (its probabilities are not stored), then dV, dP, dQ and dK.
MATMULS = {"forward": 2, "forward+backward": 2 + 5}
# The progress labels (filled: the CLI says them in its --lang): the GEMM peak, and a row's step by
# (measure, causal).
PEAK_LABEL = N_("float32 GEMM peak ({n}×{n})")
STEP_LABELS = {
    ("time", False): N_("time of {pass_} at {shape}"),
    ("time", True): N_("time of {pass_} at {shape}, causal"),
    ("peak memory", False): N_("peak memory of {pass_} at {shape}"),
    ("peak memory", True): N_("peak memory of {pass_} at {shape}, causal"),
}


@dataclass(frozen=True)
class TelemetryBenchConfig:
    shapes: tuple = ((2, 8, 2048, 64), (1, 8, 8192, 64))  # (B, H, L, d), L = S
    causal: tuple = (False, True)
    repeats: int = 5  # timed repeats per variant (medians)
    forward_variants: tuple = VARIANTS
    backward_variants: tuple = ("sdpa", "kernel")  # forward + backward (naive: an L×S graph)
    memory_shapes: tuple = ((1, 8, 8192, 64),)  # where peak memory is measured
    memory_variants: tuple = ("sdpa", "kernel", "kernel+range", "composed")  # naive: GiBs at 8192
    memory_causal: tuple = (False,)
    naive_max_weights: int = 1 << 26  # naive is skipped where B·H·L·S is larger (256 MiB of float32)
    backward: bool = True
    device: str = "cpu"
    threads: int = 0  # torch intra-op threads; 0 = torch's default
    seed: int = 0
    peak_gemm_n: int = 2048  # the fp32 peak: throughput of an n×n by n×n float32 torch.mm

    QUICK_SHAPES = ((1, 4, 256, 64), (1, 4, 512, 64))  # a smoke run: seconds, not minutes
    QUICK_PEAK_GEMM_N = 512

    def __post_init__(self):
        for shape in (*self.shapes, *self.memory_shapes):
            if len(shape) != 4 or any(int(n) < 1 for n in shape):
                raise InputError(f"shapes: expected (B, H, L, d) with positive sizes, got {shape!r}")
        if self.threads < 0:
            raise InputError(f"threads: expected 0 (torch's default) or a positive count, got {self.threads}")
        check_count("repeats", self.repeats)
        check_count("peak_gemm_n", self.peak_gemm_n)
        for name in ("forward_variants", "backward_variants", "memory_variants"):
            chosen = getattr(self, name)
            if set(chosen) - set(VARIANTS) or "sdpa" not in chosen:
                raise InputError(f"{name}: expected a subset of {VARIANTS} including 'sdpa', got {chosen!r}")
        for name in ("causal", "memory_causal"):
            chosen = getattr(self, name)
            if not chosen or any(not isinstance(c, bool) for c in chosen):
                raise InputError(f"{name}: expected a non-empty tuple of True/False, got {chosen!r}")

    @classmethod
    def quick(cls, **kw) -> TelemetryBenchConfig:
        """Small shapes (:attr:`QUICK_SHAPES`; memory on the larger) and a small peak GEMM
        (:attr:`QUICK_PEAK_GEMM_N`) unless given, other fields as given."""
        # kw may name the quick fields too (benchmarks/telemetry.py --quick --no-memory: memory_shapes=()).
        quick = {
            "shapes": cls.QUICK_SHAPES,
            "memory_shapes": cls.QUICK_SHAPES[-1:],
            "peak_gemm_n": cls.QUICK_PEAK_GEMM_N,
        }
        return cls(**{**quick, **kw})


def attended_pairs(L: int, S: int, causal: bool) -> int:
    """The (query, key) pairs attention computes for L queries and S keys: L·S; causal with top-left
    alignment (query i attends keys j ≤ i), Σ_{i<L} min(i+1, S), which is L(L+1)/2 when S = L."""
    if not causal:
        return L * S
    ramp = min(L, S)  # queries i < S attend i + 1 keys
    return ramp * (ramp + 1) // 2 + (L - ramp) * S  # the queries after them attend all S


def attention_flops(shape, causal: bool, pass_: str, kv_length: int | None = None) -> int:
    """A model count of one attention call's floating-point operations, as FlashAttention's papers
    count them: :data:`MATMULS` ``[pass_]`` matrix products, each 2·B·H·P·d flops over the P
    :func:`attended_pairs` (softmax and scaling not counted). ``shape``: (B, H, L, d) of q;
    ``kv_length``: S, the keys' length (default L, as the benchmark's shapes). The work attention
    needs, not what a variant does: the naive one computes all L·S pairs even when causal."""
    check_choice("pass_", pass_, MATMULS)
    B, H, L, d = (int(n) for n in shape)
    return MATMULS[pass_] * 2 * B * H * attended_pairs(L, L if kv_length is None else kv_length, causal) * d


def check_device(device: str) -> None:
    """Refuse, before any work, a device this torch cannot run: one line naming it."""
    torch = require("torch", "torch")
    if device == "cpu":
        return
    if device == "cuda" or device.startswith("cuda:"):
        if not torch.cuda.is_available():
            build = f"torch {torch.__version__}" + (" (a CPU-only build)" if torch.version.cuda is None else "")
            raise InputError(f"--device: {device!r} is not available here: {build} sees no CUDA GPU; use --device cpu")
        return
    raise InputError(f"--device: expected 'cpu' or 'cuda', got {device!r} (this benchmark has no {device} path)")


def _inputs(torch, shape, device: str, seed: int):
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(*shape, generator=g).to(device) for _ in range(3))


def _variant(torch, name: str, causal: bool) -> Callable:
    """The variant as a function (q, k, v) -> output tensor (figures computed, then dropped)."""
    from attnscale.attention_aux import AuxRequest
    from attnscale.torch.functional import attention

    F = torch.nn.functional
    alignment = "top_left" if causal else False
    if name == "sdpa":
        return lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    if name in ("kernel", "kernel+range", "composed"):
        backend = "composed" if name == "composed" else "kernel"
        figures = AuxRequest(lse=True, entropy=True, logit_range=name == "kernel+range")
        return lambda q, k, v: attention(q, k, v, backend=backend, causal=alignment, aux=figures)[0]

    def naive(q, k, v):
        s = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(q.shape[-1]))  # (B, H, L, S)
        if causal:
            L, S = s.shape[-2:]
            s = s.masked_fill(torch.ones(L, S, dtype=torch.bool, device=s.device).triu(1), -math.inf)
        p = torch.softmax(s, dim=-1)
        torch.logsumexp(s, dim=-1), torch.special.entr(p).sum(-1)
        return p @ v

    return naive


def _call(torch, fn, q, k, v, dout):
    """One pass: forward only when ``dout`` is None, else forward and the gradients of q, k, v."""
    if dout is None:
        with torch.no_grad():
            return fn(q, k, v)
    return torch.autograd.grad(fn(q, k, v), (q, k, v), dout)


def _sync(torch, device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _available(variants, device: str):
    if device == "cpu":
        from attnscale.torch.ext import load_kernel

        if load_kernel() is not None:
            return tuple(variants)
    return tuple(v for v in variants if not v.startswith("kernel"))


def _pass_inputs(torch, shape, config: TelemetryBenchConfig, pass_: str):
    q, k, v = _inputs(torch, shape, config.device, config.seed)
    if pass_ == "forward":
        return q, k, v, None
    dout = torch.randn(*shape, generator=torch.Generator().manual_seed(config.seed + 1)).to(config.device)
    return q.requires_grad_(), k.requires_grad_(), v.requires_grad_(), dout


def _step_label(measure: str, pass_: str, shape, causal: bool) -> str:
    """The progress label of one row's step: ``measure`` ("time" or "peak memory") of ``pass_`` at
    ``shape`` (B, H, L, d), filled (:func:`attnscale.i18n.filled`)."""
    return filled(STEP_LABELS[measure, causal], pass_=filled(PASS_NAMES[pass_]), shape=tuple(shape))


def _peak_gemm(torch, config: TelemetryBenchConfig, progress) -> dict:
    """The fp32 peak this run reaches: GFLOP/s of one n×n by n×n float32 ``torch.mm`` (n =
    ``config.peak_gemm_n``, 2·n³ flops) on the run's device and threads, warmed up once, median of
    ``config.repeats`` calls."""
    n = config.peak_gemm_n
    g = torch.Generator().manual_seed(config.seed)
    a, b = (torch.randn(n, n, generator=g, dtype=torch.float32).to(config.device) for _ in range(2))
    torch.mm(a, b)  # warm-up: BLAS threads and buffers
    _sync(torch, config.device)
    times = []
    for r in range(config.repeats):
        t0 = time.perf_counter()
        torch.mm(a, b)
        _sync(torch, config.device)
        times.append(time.perf_counter() - t0)
        if progress:
            progress(r + 1, config.repeats, filled(PEAK_LABEL, n=n))
    return {"measure": "float32 GEMM", "n": n, "gflops": 2 * n**3 / statistics.median(times) / 1e9, "times_s": times}


def _time_row(
    torch, shape, causal: bool, pass_: str, variants, config: TelemetryBenchConfig, peak_gflops: float, progress
) -> dict:
    B, H, L, _ = shape
    skipped = {}
    if "naive" in variants and B * H * L * L > config.naive_max_weights:
        skipped["naive"] = f"its {B}×{H}×{L}×{L} weights exceed naive_max_weights = {config.naive_max_weights}"
        variants = tuple(v for v in variants if v != "naive")
    q, k, v, dout = _pass_inputs(torch, shape, config, pass_)
    fns = {name: _variant(torch, name, causal) for name in variants}
    times: dict[str, list[float]] = {name: [] for name in variants}
    cpu: dict[str, list[float]] = {name: [] for name in variants}
    for name in variants:  # warm-up: kernel build, allocator, caches
        _call(torch, fns[name], q, k, v, dout)
    _sync(torch, config.device)
    label = _step_label("time", pass_, shape, causal)
    for r in range(config.repeats):
        for name in variants:
            t0, c0 = time.perf_counter(), time.process_time()
            _call(torch, fns[name], q, k, v, dout)
            _sync(torch, config.device)
            times[name].append(time.perf_counter() - t0)
            cpu[name].append(time.process_time() - c0)
        if progress:
            progress(r + 1, config.repeats, label)
    medians = {name: statistics.median(ts) for name, ts in times.items()}
    cpu_medians = {name: statistics.median(ts) for name, ts in cpu.items()}
    flops = attention_flops(shape, causal, pass_)
    gflops = {name: flops / medians[name] / 1e9 for name in variants}
    return {
        "pass": pass_,
        "shape": list(shape),
        "causal": causal,
        "median_s": medians,
        "times_s": times,
        "ratio_to_sdpa": {name: medians[name] / medians["sdpa"] for name in variants},
        "cpu_median_s": cpu_medians,
        "cpu_ratio_to_sdpa": {name: cpu_medians[name] / cpu_medians["sdpa"] for name in variants},
        "flops": flops,
        "gflops": gflops,
        "ratio_to_peak": {name: gflops[name] / peak_gflops for name in variants},
        "skipped": skipped,
    }


_CHILD = r"""
import json, sys, torch
from attnscale.experiments.telemetry import TelemetryBenchConfig, _call, _pass_inputs, _rss_kib, _sync, _variant
shape, name, causal, pass_, device, seed, threads = json.loads(sys.argv[1])
if threads:
    torch.set_num_threads(threads)
config = TelemetryBenchConfig(shapes=(tuple(shape),), memory_shapes=(), device=device, seed=seed)
q, k, v, dout = _pass_inputs(torch, shape, config, pass_)
fn = _variant(torch, name, causal)
small = [x[..., :8, :] for x in (q, k, v)] + [None if dout is None else dout[..., :8, :]]
if name.startswith("kernel"):
    from attnscale.torch.ext import load_kernel
    load_kernel()
_call(torch, fn, *small); _sync(torch, device)        # load code paths without a big allocation
if device.startswith("cuda"):
    torch.cuda.reset_peak_memory_stats(); before = torch.cuda.memory_allocated()
    _call(torch, fn, q, k, v, dout); _sync(torch, device)
    rise = torch.cuda.max_memory_allocated() - before
else:
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")                                  # reset the peak resident set (VmHWM)
    before = _rss_kib("VmRSS")
    _call(torch, fn, q, k, v, dout)
    rise = (_rss_kib("VmHWM") - before) * 1024
print(json.dumps({"peak_rise_bytes": rise}))
"""


def _rss_kib(field_name: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field_name + ":"):
                return int(line.split()[1])
    raise OSError(f"/proc/self/status has no {field_name}")


def _memory_row(shape, causal: bool, pass_: str, variants, config: TelemetryBenchConfig, progress) -> dict:
    rises, failures = {}, {}
    for i, name in enumerate(variants):
        arg = json.dumps([list(shape), name, causal, pass_, config.device, config.seed, config.threads])
        done = subprocess.run(
            [sys.executable, "-c", _CHILD, arg], capture_output=True, text=True, timeout=1800, env={**os.environ}
        )
        if done.returncode != 0:
            rises[name] = None
            failures[name] = (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1][:300]
        else:
            rises[name] = json.loads(done.stdout.strip().splitlines()[-1])["peak_rise_bytes"]
        if progress:
            progress(i + 1, len(variants), _step_label("peak memory", pass_, shape, causal))
    base = rises.get("sdpa")
    ratios = {n: (r / base if r is not None and base else None) for n, r in rises.items()}
    return {
        "pass": pass_,
        "shape": list(shape),
        "causal": causal,
        "peak_rise_bytes": rises,
        "ratio_to_sdpa": ratios,
        "failures": failures,
    }


def _verdicts(timing: list[dict], memory: list[dict]) -> list[dict]:
    """Each measured ratio of the kernel against its target: met, or missed by how much."""
    out = []
    for target in TARGETS:
        rows = timing if target["measure"] == "time" else memory
        for row in rows:
            ratio = row["ratio_to_sdpa"].get(target["variant"])
            if row["pass"] != target["pass"] or target["variant"] not in row["ratio_to_sdpa"]:
                continue
            met = None if ratio is None else ratio <= target["target"]
            out.append(
                {
                    **target,
                    "shape": row["shape"],
                    "causal": row["causal"],
                    "ratio": ratio,
                    "met": met,
                    "excess": None if ratio is None else ratio / target["target"] - 1.0,
                }
            )
    return out


def _cpu_model() -> str | None:
    try:
        with open("/proc/cpuinfo") as f:
            return next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), None)
    except OSError:
        return None


def run_telemetry_bench(
    config: TelemetryBenchConfig = TelemetryBenchConfig(), progress: Callable[[int, int, str], None] | None = None
) -> dict:
    """Times and peak memory of every variant and pass, ratios to plain SDPA and verdicts against
    :data:`TARGETS`, and each time's share of the fp32 GEMM peak measured first. Plain data: the
    ``data`` of a ``telemetry`` result."""
    torch = require("torch", "torch")
    from attnscale.torch.ext import kernel_status

    check_device(config.device)
    torch.manual_seed(config.seed)
    if config.threads:
        torch.set_num_threads(config.threads)
    passes = PASSES if config.backward else PASSES[:1]
    variants = {
        "forward": _available(config.forward_variants, config.device),
        "forward+backward": _available(config.backward_variants, config.device),
    }
    peak = _peak_gemm(torch, config, progress)
    timing = [
        _time_row(torch, shape, causal, pass_, variants[pass_], config, peak["gflops"], progress)
        for pass_ in passes
        for shape in config.shapes
        for causal in config.causal
    ]
    memory = [
        _memory_row(
            shape,
            causal,
            pass_,
            [v for v in _available(config.memory_variants, config.device) if v in variants[pass_]],
            config,
            progress,
        )
        for pass_ in passes
        for shape in config.memory_shapes
        for causal in config.memory_causal
    ]
    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    return {
        "rows": timing,
        "peak": peak,
        "memory": memory,
        "verdicts": _verdicts(timing, memory),
        "variants": {p: list(variants[p]) for p in passes},
        "repeats": config.repeats,
        "device": config.device,
        "kernel": kernel_status() if config.device == "cpu" else {"available": False, "reason": "CPU kernel only"},
        "threads": torch.get_num_threads(),
        "load_average": list(load) if load else None,
        "machine": {"cpu": _cpu_model(), "cores": os.cpu_count(), "torch": torch.__version__},
    }
