"""``attnscale report``: build the self-contained HTML report and print its path."""

from __future__ import annotations

import argparse


def _seed(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a non-negative integer, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a non-negative integer, got {value}")
    return value


def register(sub) -> None:
    p = sub.add_parser(
        "report", help="build the HTML report: the seed's story, every number measured here, as figures",
        description="Build DIR/index.html: one self-contained page (no network) with the seed's chapters, "
                    "the verification's verdicts, figures, an interactive attention row, and the chapters of "
                    "the experiments whose result files exist. Prints the page's path.",
        epilog="examples:\n  attnscale report\n  attnscale report --lang zh --out report-zh\n"
               "  attnscale report --quick            (seconds; wider confidence intervals)",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default="attnscale-report", metavar="DIR",
                   help="folder for index.html (default: ./attnscale-report)")
    p.add_argument("--lang", choices=("en", "zh"), default="en", help="page language (default: en)")
    p.add_argument("--quick", action="store_true", help="quick verification: seconds, wider intervals")
    p.add_argument("--fresh", action="store_true", help="recompute the verification even when it is cached")
    p.add_argument("--results", default="attnscale-results", metavar="DIR",
                   help="experiment results are read from here, the verification is cached under DIR/cache "
                        "(default: ./attnscale-results)")
    p.add_argument("--seed", type=_seed, default=0, help="seed of every random draw (default: 0)")
    p.set_defaults(run=run_report)


def run_report(args) -> int:
    from attnscale.cli.progress import Progress
    from attnscale.report.build import ReportConfig, build_report

    config = ReportConfig(out=args.out, results=args.results, lang=args.lang, quick=args.quick,
                          fresh=args.fresh, seed=args.seed)
    with Progress() as progress:
        result = build_report(config, progress)
    print(result.path.resolve())
    return 0
