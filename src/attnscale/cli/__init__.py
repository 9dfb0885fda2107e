"""The ``attnscale`` command: parse, call the library, render. Each subcommand lives in its own
module of this package and registers itself through ``register(subparsers)``."""

from __future__ import annotations

import argparse
import importlib
import sys

from attnscale import __version__
from attnscale.errors import AttnScaleError

# One module per subcommand group; each defines register(subparsers).
COMMAND_MODULES = ("core", "probe", "rescale", "report", "train", "verify", "telemetry")

EPILOG = """examples:
  attnscale report                           the HTML report: every claim of the seed, measured here
  attnscale verify --strict                  the seed's claims as a table of verdicts (exit 1 if any fails)
  attnscale probe                            do a real model's queries and keys obey the seed's assumptions?
  attnscale rescale                          a real LLM's perplexity with its attention scale × 1/8 ... 8
  attnscale train scale-vs-dk                does unscaled attention stop learning? (CPU, a few minutes)
  attnscale telemetry-bench                  attention with per-row entropy vs plain SDPA: time, memory
  attnscale softmax 14 10 12 --scale 0.125   one row: the seed's example after dividing by sqrt(64) = 8
  attnscale rules                            the scale rules, their formulas and citations
"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="attnscale",
        description="See, measure and trust what the 1/sqrt(d_k) in softmax(Q K^T / sqrt(d_k)) V does.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"attnscale {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(f"attnscale.cli.{name}").register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "run", None):
        parser.print_help()
        return 2
    try:
        return int(args.run(args) or 0)
    except AttnScaleError as err:
        print(f"attnscale {args.command}: error: {err}", file=sys.stderr)
        return 2
    except OSError as err:  # a path the user named cannot be read or written: their input, not our bug
        print(f"attnscale {args.command}: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("attnscale: interrupted", file=sys.stderr)
        return 130
