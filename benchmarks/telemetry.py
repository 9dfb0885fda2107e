"""Per-row attention figures at fused-kernel cost? Time and peak memory against plain PyTorch SDPA,
forward and forward + backward.

    python benchmarks/telemetry.py                 # (2, 8, 2048, 64) and (1, 8, 8192, 64), float32, CPU
    python benchmarks/telemetry.py --quick         # small shapes, a smoke run
    python benchmarks/telemetry.py --shape 2 8 2048 64 --repeats 3 --no-memory

Prints ratios (variant ÷ plain SDPA, medians, measured in the same run) and the verdicts against the
kernel's cost targets (attnscale.experiments.telemetry.TARGETS); ``--results ROOT`` also writes the
``telemetry`` result there (what ``attnscale telemetry-bench --markdown`` renders for the README). The variants and the method are
described in attnscale.experiments.telemetry.
"""

import argparse
import sys
from dataclasses import asdict

from attnscale import results
from attnscale.cli.telemetry import format_table
from attnscale.experiments.telemetry import TelemetryBenchConfig, run_telemetry_bench


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument(
        "--quick", action="store_true", help="shapes " + " and ".join(map(str, TelemetryBenchConfig.QUICK_SHAPES))
    )
    parser.add_argument(
        "--shape",
        type=int,
        nargs=4,
        action="append",
        metavar=("B", "H", "L", "D"),
        help="a shape to time (repeatable; default " + " and ".join(map(str, TelemetryBenchConfig().shapes)) + ")",
    )
    parser.add_argument("--causal", choices=("both", "no", "yes"), default="both")
    parser.add_argument("--no-memory", action="store_true", help="skip the peak-memory subprocesses")
    parser.add_argument("--no-backward", action="store_true", help="forward only")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (default: torch's own choice)")
    parser.add_argument("--results", help="also write the telemetry result under this results root")
    args = parser.parse_args(argv)
    make = TelemetryBenchConfig.quick if args.quick else TelemetryBenchConfig
    kw = dict(
        repeats=args.repeats,
        device=args.device,
        threads=args.threads,
        backward=not args.no_backward,
        causal={"both": (False, True), "no": (False,), "yes": (True,)}[args.causal],
    )
    if args.shape:
        kw["shapes"] = tuple(tuple(s) for s in args.shape)
    if args.no_memory:
        kw["memory_shapes"] = ()
    config = make(**kw)
    data = run_telemetry_bench(config)
    env = results.Envelope(kind="telemetry", data=data, quick=args.quick)
    if args.results:
        env = results.write(
            "telemetry", data, config=asdict(config), seed=config.seed, quick=args.quick, root=args.results
        )
        print(f"wrote {env.path}", file=sys.stderr)
    print(format_table(env))
    return 0


if __name__ == "__main__":
    sys.exit(main())
