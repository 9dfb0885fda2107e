"""What does Ray cost a sweep? Cells per second on Ray ÷ on LocalBackend, same CPUs, same cells.

    python benchmarks/ray_backend.py             # the quick scale-vs-dk sweep, 2 CPUs, 3 repeats
    python benchmarks/ray_backend.py --cpus 2 --repeats 5

Each repeat runs every cell on a fresh cache with LocalBackend(cpus) and with RayBackend(num_cpus=cpus)
on a private local Ray instance started for it; the Ray time is split into start-up (ray.init to the
first task accepted) and the sweep itself. Prints medians, the ratio of throughputs, and the overhead
per cell: (Ray sweep time − local sweep time) ÷ cells.
"""

import argparse
import statistics
import sys
import tempfile
import time


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cpus", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)

    import ray

    from attnscale.experiments.training import scale_vs_dk
    from attnscale.experiments.sweeps.ray_backend import RayBackend
    from attnscale.experiments.sweeps.runner import LocalBackend, run_sweep
    from attnscale.store import ResultCache

    cells = scale_vs_dk.ScaleVsDkConfig.quick().cells()
    local, ray_sweep, ray_start = [], [], []
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        run_sweep(
            "scale-vs-dk", cells, scale_vs_dk.train_cell, ResultCache(tempfile.mkdtemp()), LocalBackend(args.cpus)
        )
        local.append(time.perf_counter() - t0)

        t0 = time.perf_counter()
        ray.init(num_cpus=args.cpus, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
        ray.get(ray.remote(lambda: None).remote())  # the instance accepts tasks
        t1 = time.perf_counter()
        run_sweep("scale-vs-dk", cells, scale_vs_dk.train_cell, ResultCache(tempfile.mkdtemp()), RayBackend())
        ray_sweep.append(time.perf_counter() - t1)
        ray_start.append(t1 - t0)
        ray.shutdown()

    n = len(cells)
    med = statistics.median
    print(f"quick scale-vs-dk sweep: {n} cells, {args.cpus} CPUs, medians of {args.repeats}")
    print("| backend | sweep time | cells/s | start-up |")
    print("|---|---|---|---|")
    print(f"| LocalBackend({args.cpus}) | {med(local):.1f} s | {n / med(local):.2f} | (in the sweep time) |")
    print(
        f"| RayBackend (local instance) | {med(ray_sweep):.1f} s | {n / med(ray_sweep):.2f} | {med(ray_start):.1f} s |"
    )
    print(
        f"cells/s on Ray ÷ on LocalBackend: {med(local) / med(ray_sweep):.2f}× (start-up excluded), "
        f"{med(local) / (med(ray_sweep) + med(ray_start)):.2f}× (included)"
    )
    print(f"overhead per cell: {(med(ray_sweep) - med(local)) / n * 1000:+.0f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
