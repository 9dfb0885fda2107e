"""The ``attnscale`` command: parse, call the library, render. Each subcommand lives in its own
module of this package and registers itself through ``register(subparsers)``."""

from __future__ import annotations

import argparse
import contextlib
import importlib
import signal
import sys
import threading

from attnscale import __version__
from attnscale.cli.options import HelpFormatter, examples_epilog
from attnscale.errors import AttnScaleError
from attnscale.i18n import SOURCE_LANG, language

# One module per subcommand group; each defines register(subparsers).
COMMAND_MODULES = ("core", "probe", "rescale", "report", "train", "verify", "telemetry", "full", "watch")

EXAMPLES = [
    "attnscale report                           the HTML report: every claim of the blog post, measured here",
    "attnscale verify --strict                  the post's claims as a table of verdicts (exit 1 if any fails)",
    "attnscale probe                            do a real model's queries and keys obey the post's assumptions?",
    "attnscale rescale                          a real LLM's perplexity with its attention scale × 1/8 ... 8",
    "attnscale train scale-vs-dk                does unscaled attention stop learning? (CPU, a few minutes)",
    "attnscale telemetry-bench                  attention with per-row entropy vs plain SDPA: time, memory",
    "attnscale full                             every full experiment here, in sequence (hours), then the report",
    "attnscale watch examples/attn.jsonl        alerts on a training run's attention log (exit 1 if any)",
    "attnscale softmax 14 10 12 --scale 0.125   one row: the post's example after dividing by sqrt(64) = 8",
    "attnscale rules                            the scale rules, their formulas and citations",
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="attnscale",
        description="See, measure and trust what the 1/sqrt(d_k) in softmax(Q K^T / sqrt(d_k)) V does.",
        epilog=examples_epilog(EXAMPLES),
        formatter_class=HelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"attnscale {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(f"attnscale.cli.{name}").register(sub)
    return parser


def _first_interrupt_only(signum, frame):
    # The first Ctrl-C stops the work; the clean-up that follows (ending worker processes, caching
    # the finished cells) must not be cut short by a second one, which would leave orphans and
    # print "Exception ignored ..." tracebacks. The clean-up is bounded (see experiments.runner).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    raise KeyboardInterrupt


@contextlib.contextmanager
def _interrupt_once():
    if threading.current_thread() is not threading.main_thread():
        yield  # signals can only be handled in the main thread
        return
    before = signal.signal(signal.SIGINT, _first_interrupt_only)
    try:
        yield
    finally:
        # After a real Ctrl-C the command is exiting: stay deaf to a second one through the
        # interpreter's own exit (it joins threads); otherwise put the caller's handler back.
        if signal.getsignal(signal.SIGINT) is _first_interrupt_only:
            signal.signal(signal.SIGINT, before)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "run", None):
        parser.print_help()
        return 2
    with _interrupt_once():
        return _run(args)


def _run(args) -> int:
    try:
        # The run's words, in its --lang (English for a command without one), bound once for all it calls.
        with language(getattr(args, "lang", SOURCE_LANG)):
            return int(args.run(args) or 0)
    except AttnScaleError as err:
        print(f"attnscale {args.command}: error: {err}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # `attnscale rules | head`: the reader has gone, nothing to say
        _silence_stdout()
        return 141  # 128 + SIGPIPE, as a shell reports it
    except OSError as err:  # a path the user named cannot be read or written: their input, not our bug
        print(f"attnscale {args.command}: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("attnscale: interrupted", file=sys.stderr)
        return 130


def _silence_stdout() -> None:
    # The interpreter flushes stdout at exit; into a closed pipe that would print another error.
    import os

    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError):
        pass
