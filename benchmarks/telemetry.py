"""Per-row attention figures at fused-kernel cost? Time and peak memory against plain PyTorch SDPA.

    python benchmarks/telemetry.py                 # (2, 8, 2048, 64) and (1, 8, 8192, 64), float32, CPU
    python benchmarks/telemetry.py --quick         # small shapes, a smoke run
    python benchmarks/telemetry.py --out attnscale-results/telemetry/summary.json

Prints ratios (variant ÷ plain SDPA, medians, measured in the same run) and the kernel ÷ naive time.
The variants and the method are described in attnscale.torch.benchmark.
"""

import argparse
import sys

from attnscale.store import write_json_atomic
from attnscale.torch.benchmark import TelemetryBenchConfig, format_table, run_telemetry_bench


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--quick", action="store_true", help="shapes " + " and ".join(map(str, TelemetryBenchConfig.QUICK_SHAPES)))
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (default: torch's own choice)")
    parser.add_argument("--out", help="also write the result as JSON here")
    args = parser.parse_args(argv)
    make = TelemetryBenchConfig.quick if args.quick else TelemetryBenchConfig
    config = make(repeats=args.repeats, device=args.device, threads=args.threads)
    result = run_telemetry_bench(config)
    print(format_table(result))
    if args.out:
        write_json_atomic(args.out, result)
        print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
