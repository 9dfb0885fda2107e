"""Measure what the per-row figures cost: time and peak memory against plain PyTorch SDPA.

Variants, all float32 on one device, on the same q, k, v (B, H, L, d), in one run:

- ``sdpa``: ``torch.nn.functional.scaled_dot_product_attention`` (the peer every ratio divides by);
- ``kernel``: :func:`attnscale.torch.attention`, fused C++ kernel, output + lse + entropy (CPU only;
  with its defaults, so the finiteness scan of q, k, v is included);
- ``kernel+range``: the same with ``max_logit=True`` (max and min logit);
- ``composed``: the composed-PyTorch backend (one fused SDPA call on [V, K]), output + lse + entropy;
- ``naive``: materialise the L×S weights, then the entropy (what diagnostic tools do today).

Times: each repeat runs every variant once, in turn, so that a busy machine slows them alike; the
median over repeats is reported. Peak memory: each variant runs in a fresh Python process, and the
figure is the rise of its peak resident set (Linux VmHWM, reset through /proc/self/clear_refs) over
the resident set just before the call, inputs already allocated; on CUDA, torch's peak allocator
statistics instead.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from typing import Callable

from attnscale.errors import InputError, require

__all__ = ["TelemetryBenchConfig", "run_telemetry_bench", "VARIANTS"]

VARIANTS = ("sdpa", "kernel", "kernel+range", "composed", "naive")


@dataclass(frozen=True)
class TelemetryBenchConfig:
    shapes: tuple = ((2, 8, 2048, 64), (1, 8, 8192, 64))   # (B, H, L, d), L = S
    repeats: int = 7                                        # timed repeats per variant (medians)
    memory_shapes: tuple = ((1, 8, 8192, 64),)              # where peak memory is measured
    variants: tuple = VARIANTS
    device: str = "cpu"
    threads: int = 0                                        # torch intra-op threads; 0 = torch's default
    seed: int = 0

    def __post_init__(self):
        for shape in (*self.shapes, *self.memory_shapes):
            if len(shape) != 4 or any(int(n) < 1 for n in shape):
                raise InputError(f"shapes: expected (B, H, L, d) with positive sizes, got {shape!r}")
        if self.threads < 0:
            raise InputError(f"threads: expected 0 (torch's default) or a positive count, got {self.threads}")
        if self.repeats < 1:
            raise InputError(f"repeats: expected at least 1, got {self.repeats}")
        unknown = set(self.variants) - set(VARIANTS)
        if unknown or "sdpa" not in self.variants:
            raise InputError(f"variants: expected a subset of {VARIANTS} including 'sdpa', got {self.variants!r}")

    QUICK_SHAPES = ((1, 4, 256, 64), (1, 4, 512, 64))       # a smoke run: seconds, not minutes

    @classmethod
    def quick(cls, **kw) -> "TelemetryBenchConfig":
        """Small shapes (:attr:`QUICK_SHAPES`; memory on the larger), other fields as given."""
        return cls(shapes=cls.QUICK_SHAPES, memory_shapes=cls.QUICK_SHAPES[-1:], **kw)


def _inputs(torch, shape, device: str, seed: int):
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(*shape, generator=g).to(device) for _ in range(3))


def _variant(torch, name: str) -> Callable:
    from attnscale.torch.attention import attention

    F = torch.nn.functional
    if name == "sdpa":
        return lambda q, k, v: F.scaled_dot_product_attention(q, k, v)
    if name == "kernel":
        return lambda q, k, v: attention(q, k, v, backend="kernel")
    if name == "kernel+range":
        return lambda q, k, v: attention(q, k, v, backend="kernel", max_logit=True)
    if name == "composed":
        return lambda q, k, v: attention(q, k, v, backend="composed")

    def naive(q, k, v):
        s = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(q.shape[-1]))      # (B, H, L, S)
        p = torch.softmax(s, dim=-1)
        return p @ v, torch.logsumexp(s, dim=-1), torch.special.entr(p).sum(-1)
    return naive


def _sync(torch, device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _available(variants, device: str):
    if device == "cpu":
        from attnscale.torch.ext import load_kernel

        if load_kernel() is None:
            return tuple(v for v in variants if not v.startswith("kernel"))
        return tuple(variants)
    return tuple(v for v in variants if not v.startswith("kernel"))


def _time_shape(torch, shape, config: TelemetryBenchConfig, variants, progress) -> dict:
    q, k, v = _inputs(torch, shape, config.device, config.seed)
    fns = {name: _variant(torch, name) for name in variants}
    times: dict[str, list[float]] = {name: [] for name in variants}
    with torch.no_grad():
        for name in variants:                       # warm-up: kernel build, allocator, caches
            fns[name](q, k, v)
        _sync(torch, config.device)
        for r in range(config.repeats):
            for name in variants:
                t0 = time.perf_counter()
                fns[name](q, k, v)
                _sync(torch, config.device)
                times[name].append(time.perf_counter() - t0)
            if progress:
                progress(r + 1, config.repeats, f"timing {shape}")
    medians = {name: statistics.median(ts) for name, ts in times.items()}
    return {"shape": list(shape), "median_s": medians, "times_s": times,
            "ratio_to_sdpa": {name: medians[name] / medians["sdpa"] for name in variants}}


_CHILD = r"""
import json, sys, torch
from attnscale.torch.benchmark import _inputs, _variant, _sync, _rss_kib
shape, name, device, seed, threads = json.loads(sys.argv[1])
if threads:
    torch.set_num_threads(threads)
q, k, v = _inputs(torch, shape, device, seed)
fn = _variant(torch, name)
with torch.no_grad():
    if name.startswith("kernel"):
        from attnscale.torch.ext import load_kernel
        load_kernel()
    if device.startswith("cuda"):
        fn(q[..., :8, :], k[..., :8, :], v[..., :8, :]); _sync(torch, device)
        torch.cuda.reset_peak_memory_stats(); before = torch.cuda.memory_allocated()
        fn(q, k, v); _sync(torch, device)
        rise = torch.cuda.max_memory_allocated() - before
    else:
        fn(q[..., :8, :], k[..., :8, :], v[..., :8, :])   # load code paths without a big allocation
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")                                  # reset the peak resident set (VmHWM)
        before = _rss_kib("VmRSS")
        fn(q, k, v)
        rise = (_rss_kib("VmHWM") - before) * 1024
print(json.dumps({"peak_rise_bytes": rise}))
"""


def _rss_kib(field_name: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field_name + ":"):
                return int(line.split()[1])
    raise OSError(f"/proc/self/status has no {field_name}")


def _memory_shape(shape, config: TelemetryBenchConfig, variants, progress) -> dict:
    rises = {}
    for i, name in enumerate(variants):
        arg = json.dumps([list(shape), name, config.device, config.seed, config.threads])
        done = subprocess.run([sys.executable, "-c", _CHILD, arg], capture_output=True, text=True, timeout=1800,
                              env={**os.environ})
        if done.returncode != 0:
            rises[name] = None
        else:
            rises[name] = json.loads(done.stdout.strip().splitlines()[-1])["peak_rise_bytes"]
        if progress:
            progress(i + 1, len(variants), f"memory {shape}")
    base = rises.get("sdpa")
    ratios = {n: (r / base if r is not None and base else None) for n, r in rises.items()}
    return {"shape": list(shape), "peak_rise_bytes": rises, "ratio_to_sdpa": ratios}


def run_telemetry_bench(config: TelemetryBenchConfig = TelemetryBenchConfig(),
                        progress: Callable[[int, int, str], None] | None = None) -> dict:
    """Times and peak memory of every variant, with ratios to plain SDPA. Plain data."""
    torch = require("torch", "torch")
    from attnscale.provenance import environment
    from attnscale.torch.ext import kernel_status

    torch.manual_seed(config.seed)
    if config.threads:
        torch.set_num_threads(config.threads)
    variants = _available(config.variants, config.device)
    timing = [_time_shape(torch, shape, config, variants, progress) for shape in config.shapes]
    memory = [_memory_shape(shape, config, variants, progress) for shape in config.memory_shapes]
    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    return {
        "kind": "telemetry-bench",
        "config": asdict(config),
        "variants": list(variants),
        "timing": timing,
        "memory": memory,
        "kernel": kernel_status() if config.device == "cpu" else {"available": False, "reason": "CPU kernel only"},
        "threads": torch.get_num_threads(),
        "load_average": list(load) if load else None,
        "environment": environment(),
    }


def format_table(result: dict) -> str:
    """The result as a plain-text table (for the terminal and the README)."""
    lines = []
    variants = result["variants"]
    head = f"{'(B, H, L, d)':<20}" + "".join(f"{v:>14}" for v in variants)
    lines.append(f"time ÷ plain SDPA (median of {result['config']['repeats']}, "
                 f"{result['threads']} threads, {result['config']['device']})")
    lines.append(head)
    for t in result["timing"]:
        lines.append(f"{str(tuple(t['shape'])):<20}" + "".join(f"{t['ratio_to_sdpa'][v]:>14.3f}" for v in variants))
        lines.append(f"{'  sdpa median s':<20}{t['median_s']['sdpa']:>14.4f}")
    for m in result["memory"]:
        lines.append(f"peak memory rise ÷ plain SDPA at {tuple(m['shape'])}")
        lines.append(head)
        cells = []
        for v in variants:
            r = m["ratio_to_sdpa"].get(v)
            cells.append(f"{r:>14.3f}" if r is not None else f"{'failed':>14}")
        lines.append(f"{'ratio':<20}" + "".join(cells))
        lines.append(f"{'MiB':<20}" + "".join(
            f"{(m['peak_rise_bytes'][v] or 0) / 2**20:>14.1f}" for v in variants))
    for t in result["timing"]:
        if "naive" in t["ratio_to_sdpa"] and "kernel" in t["ratio_to_sdpa"]:
            lines.append(f"kernel ÷ naive at {tuple(t['shape'])}: "
                         f"{t['median_s']['kernel'] / t['median_s']['naive']:.3f}")
    if result.get("load_average"):
        lines.append("load average after the run: " + ", ".join(f"{x:.2f}" for x in result["load_average"]))
    return "\n".join(lines)


def measure_monitor(model, inputs: dict, repeats: int = 5) -> dict:
    """A model's forward with and without :func:`attnscale.torch.monitor`: times (interleaved,
    medians), whether the outputs are bit-for-bit equal, and the monitor's per-head figures."""
    torch = require("torch", "torch")
    from attnscale.torch.monitor import monitor

    def first_tensor(out):
        return out if isinstance(out, torch.Tensor) else out[0]

    plain_s, watched_s = [], []
    with torch.no_grad():
        reference = first_tensor(model(**inputs))
        equal = True
        for _ in range(repeats):
            t0 = time.perf_counter()
            model(**inputs)
            plain_s.append(time.perf_counter() - t0)
            with monitor(model) as mon:
                t0 = time.perf_counter()
                out = first_tensor(model(**inputs))
                watched_s.append(time.perf_counter() - t0)
            equal = equal and torch.equal(out, reference)
    summary = mon.as_dict()
    return {"plain_median_s": statistics.median(plain_s), "monitored_median_s": statistics.median(watched_s),
            "ratio": statistics.median(watched_s) / statistics.median(plain_s), "outputs_bitwise_equal": equal,
            "repeats": repeats, "calls_per_forward": len(summary["calls"]), **summary}
