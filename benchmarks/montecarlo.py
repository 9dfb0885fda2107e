"""Throughput of the Monte Carlo variance estimator against its floor: drawing the random numbers.

For d_k = 64 and 4096, the estimator (attnscale.montecarlo.dot_variance_estimates, run to a fixed sample
count) is timed against drawing the same Gaussian numbers in the same chunk sizes and doing nothing
else. Prints samples/second for both and their ratio (estimator / floor; target ≥ 0.7), medians of
several repeats. Run: python benchmarks/montecarlo.py [--repeats N]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from attnscale.montecarlo import dot_variance_estimates

CHUNK_ELEMENTS = 2**21


def estimator(d_k: int, n: int, seed: int) -> tuple[float, int]:
    """(seconds, samples): the cap is rounded up to whole batches, so the count is returned."""
    start = time.perf_counter()
    est = dot_variance_estimates(
        "gaussian",
        (d_k,),
        rng=np.random.default_rng(seed),
        max_samples=n,
        rel_ci_target=1e-9,
        chunk_elements=CHUNK_ELEMENTS,
    )
    elapsed = time.perf_counter() - start
    assert not est[0].converged  # ran to the cap: the work is fixed
    return elapsed, est[0].n_samples


def floor(d_k: int, n: int, seed: int) -> float:
    """Only the draws, chunked exactly as the estimator chunks them (2 × rows × d_k numbers per chunk)."""
    rng = np.random.default_rng(seed)
    rows = CHUNK_ELEMENTS // (2 * d_k)
    start = time.perf_counter()
    done = 0
    while done < n:
        m = min(rows, n - done)
        rng.standard_normal((m, d_k))
        rng.standard_normal((m, d_k))
        done += m
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    print(f"{'d_k':>6} {'samples':>9} {'estimator samples/s':>20} {'floor samples/s':>16} {'ratio':>6}")
    for d_k, n in ((64, 2**18), (4096, 2**12)):
        est_t, floor_t = [], []
        for r in range(args.repeats):  # interleaved, so load changes hit both alike
            seconds, drawn = estimator(d_k, n, r)
            est_t.append(seconds)
            floor_t.append(floor(d_k, drawn, r))
        e, f = statistics.median(est_t), statistics.median(floor_t)
        print(f"{d_k:>6} {drawn:>9} {drawn / e:>20,.0f} {drawn / f:>16,.0f} {f / e:>6.2f}")


if __name__ == "__main__":
    main()
