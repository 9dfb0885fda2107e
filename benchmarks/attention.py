"""Benchmark: attnscale.attention (NumPy, head by head) vs a naive NumPy four-liner vs torch SDPA.

Float32, no mask, default scale 1/√d_k, at (B, H, L, d_k) = (4, 8, 512, 64) and (2, 8, 2048, 64)
(L = S, d_v = d_k). In each round the three run one after another (interleaved, so that a noisy machine
hurts all of them alike); the table gives every round's time, then the median, the minimum, and the
ratio of medians to the naive four-liner. The target: attnscale ≤ 1.1× naive (the
reference's head-by-head loop should cost no more than the four-liner it replaces).

Peak memory is traced separately (tracemalloc sees NumPy's array allocations, not torch's): the most
memory held at once during one call beyond what existed before it, in MiB and in units of one L×S
float32 array; "temporaries" is that peak minus the (B, H, L, d_v) output. The target:
attnscale never holds more than one L×S float array per head at once.

    python benchmarks/attention.py                          # both sizes, 7 rounds
    python benchmarks/attention.py --rounds 11 --json bench.json
    python benchmarks/attention.py --threads 1              # BLAS and torch on one thread each

On a machine shared with other work, --threads 1 gives steadier numbers: two BLAS threads on two busy
cores spend much of their time waiting for each other.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import time
import tracemalloc

import numpy as np

from attnscale import attention
from attnscale.provenance import environment
from attnscale.store import write_json_atomic

SIZES = [(4, 8, 512, 64), (2, 8, 2048, 64)]


def naive_attention(q, k, v):
    """The four lines people write, on the whole batch at once (with an in-place normalisation)."""
    s = q @ k.swapaxes(-1, -2) * np.float32(1 / math.sqrt(q.shape[-1]))  # (B, H, L, S)
    s -= s.max(axis=-1, keepdims=True)
    p = np.exp(s)
    p /= p.sum(axis=-1, keepdims=True)  # noqa: E702
    return p @ v


def make_inputs(B, H, L, d_k, seed=0):
    rng = np.random.default_rng(seed)
    return tuple(rng.standard_normal((B, H, L, d_k), dtype=np.float32) for _ in range(3))


def contenders(q, k, v):
    """name -> zero-argument callable computing the (B, H, L, d_v) output."""
    runs = {
        "attnscale": lambda: attention(q, k, v),
        "naive numpy": lambda: naive_attention(q, k, v),
    }
    try:
        import torch
    except ImportError:
        return runs
    tq, tk, tv = (torch.from_numpy(x) for x in (q, k, v))

    def sdpa():
        with torch.inference_mode():
            return torch.nn.functional.scaled_dot_product_attention(tq, tk, tv)

    runs["torch sdpa"] = sdpa
    return runs


def time_rounds(runs: dict, rounds: int) -> dict[str, list[float]]:
    for fn in runs.values():  # warm up: first-touch page faults, BLAS thread start, torch dispatch
        fn()
    times = {name: [] for name in runs}
    for _ in range(rounds):
        for name, fn in runs.items():
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    return times


def traced_peak(fn) -> int:
    """Bytes: the most NumPy (and Python) memory held at once during fn(), beyond what existed before."""
    tracemalloc.start()
    try:
        base, _ = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        fn()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return peak - base


def check_agreement(q, k, v) -> float:
    """max |attnscale − naive| / max |naive|: the contenders compute the same thing."""
    a, b = attention(q, k, v), naive_attention(q, k, v)
    return float(np.max(np.abs(a - b)) / np.max(np.abs(b)))


def bench(size, rounds: int) -> dict:
    B, H, L, d_k = size
    q, k, v = make_inputs(B, H, L, d_k)
    runs = contenders(q, k, v)
    times = time_rounds(runs, rounds)
    ls_bytes = L * L * 4
    out_bytes = B * H * L * d_k * 4
    peaks = {name: traced_peak(runs[name]) for name in ("attnscale", "naive numpy")}
    naive_median = statistics.median(times["naive numpy"])
    return {
        "size": {"B": B, "H": H, "L": L, "S": L, "d_k": d_k, "d_v": d_k, "dtype": "float32"},
        "rounds": rounds,
        "times_s": times,
        "median_s": {n: statistics.median(t) for n, t in times.items()},
        "min_s": {n: min(t) for n, t in times.items()},
        "ratio_to_naive": {n: statistics.median(t) / naive_median for n, t in times.items()},
        "peak_bytes": peaks,
        "peak_in_LxS": {n: p / ls_bytes for n, p in peaks.items()},
        "temporaries_in_LxS": {n: (p - out_bytes) / ls_bytes for n, p in peaks.items()},
        "max_rel_diff_attnscale_vs_naive": check_agreement(q, k, v),
    }


def threads() -> dict:
    info = {"cpu_count": os.cpu_count()}
    try:
        import torch

        info["torch_threads"] = torch.get_num_threads()
    except ImportError:
        pass
    try:
        from threadpoolctl import threadpool_info

        info["blas_threads"] = [p.get("num_threads") for p in threadpool_info()]
    except ImportError:
        pass
    return info


def render(result: dict) -> str:
    lines = []
    for r in result["results"]:
        s = r["size"]
        lines.append(
            f"\n(B, H, L, d_k) = ({s['B']}, {s['H']}, {s['L']}, {s['d_k']}), float32, {r['rounds']} rounds; "
            f"attnscale vs naive max rel diff {r['max_rel_diff_attnscale_vs_naive']:.2e}"
        )
        lines.append("raw times (ms), one column per round:")
        for name, t in r["times_s"].items():
            lines.append(f"  {name:<12} " + " ".join(f"{x * 1e3:8.1f}" for x in t))
        lines.append(
            f"  {'':<12} {'median ms':>10} {'min ms':>10} {'ratio':>7}  {'peak MiB':>9} "
            f"{'peak /LxS':>9} {'temps /LxS':>10}"
        )
        for name in r["times_s"]:
            peak = r["peak_bytes"].get(name)
            mem = (
                f"{peak / 2**20:9.1f} {r['peak_in_LxS'][name]:9.2f} {r['temporaries_in_LxS'][name]:10.2f}"
                if peak is not None
                else f"{'n/a':>9} {'n/a':>9} {'n/a':>10}"
            )
            lines.append(
                f"  {name:<12} {r['median_s'][name] * 1e3:10.1f} {r['min_s'][name] * 1e3:10.1f} "
                f"{r['ratio_to_naive'][name]:7.2f}  {mem}"
            )
        ratio = r["ratio_to_naive"]["attnscale"]
        lines.append(f"  target attnscale <= 1.10x naive: {'met' if ratio <= 1.1 else 'MISSED'} ({ratio:.2f}x)")
    lines.append(f"\nthreads: {result['threads']}")
    return "\n".join(lines)


def limit_threads(n: int) -> None:
    """BLAS (through threadpoolctl, which can change it after NumPy is loaded) and torch."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        raise SystemExit(
            "--threads needs threadpoolctl (pip install threadpoolctl), "
            "or set OPENBLAS_NUM_THREADS / OMP_NUM_THREADS before running"
        ) from None
    threadpool_limits(n)
    try:
        import torch

        torch.set_num_threads(n)
    except ImportError:
        pass


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=7, help="timed rounds per size (default 7)")
    parser.add_argument(
        "--sizes", nargs="+", default=None, metavar="B,H,L,D", help="sizes to run (default: 4,8,512,64 2,8,2048,64)"
    )
    parser.add_argument("--threads", type=int, default=None, help="limit BLAS and torch to N threads")
    parser.add_argument("--json", default=None, help="also write the results here (atomically)")
    args = parser.parse_args(argv)
    if args.threads:
        limit_threads(args.threads)
    sizes = [tuple(int(x) for x in s.split(",")) for s in args.sizes] if args.sizes else SIZES
    result = {
        "benchmark": "attention",
        "results": [bench(size, args.rounds) for size in sizes],
        "threads": threads(),
        "environment": environment(),
    }
    print(render(result))
    if args.json:
        write_json_atomic(args.json, result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
