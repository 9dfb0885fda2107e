"""``attnscale watch LOG.jsonl``: replay a monitor's JSONL log through the early-warning detector
(:mod:`attnscale.early_warning`), print each alert in one sentence, and optionally write the
dashboard. Exit 1 when there is an alert, 0 when none, 2 on bad input."""

from __future__ import annotations

import sys

from attnscale.cli.options import add_command, add_lang_option, options_named
from attnscale.cli.output import add_json_option, add_quiet_option, check_json_target, emit_json, json_to_stdout
from attnscale.early_warning.words import summary
from attnscale.i18n import _

# examples/attn.jsonl: a real log, written by examples/attention_log.py (an unscaled GPT's first 120 steps).
EXAMPLES = [
    "attnscale watch examples/attn.jsonl                     the alerts of a run's log (exit 1 if any)",
    "attnscale watch examples/attn.jsonl --html watch.html   and a dashboard: each figure per layer × head",
    "attnscale watch examples/attn.jsonl --z 4 --window 32   a more sensitive change detection",
    "attnscale watch examples/attn.jsonl --lang zh           the alerts in Chinese",
]

# The detector's options as typed, for errors that name the library's argument.
OPTION_NAMES = {
    "window": "--window",
    "warmup": "--warmup",
    "z": "--z",
    "min_sigma": "--min-sigma",
    "float16_headroom": "--float16-headroom",
    "saturated_share": "--saturated-share",
    "rearm": "--rearm",
}


def register(sub) -> None:
    from attnscale.early_warning import DetectorConfig
    from attnscale.softmax_rows import FLOAT16_MAX

    d = DetectorConfig()
    p = add_command(
        sub,
        "watch",
        help="replay a monitor's JSONL log and raise alerts on its attention figures (exit 1 if any)",
        description="Read the per layer × head figures a JSONLSink wrote, one step record a line, and replay "
        "them through the early-warning detector: fixed thresholds (float16 overflow, saturated rows, "
        "NaN/inf logits) and a z-score over each head's trailing window (the largest |logit| rising, the "
        "smallest entropy falling, the saturated share rising; the defaults are the lead-time experiment's). Each alert is "
        "one sentence naming the step, layer, head, figure, value and threshold.",
        examples=EXAMPLES,
    )
    p.add_argument("log", metavar="LOG.jsonl", help="the log: what attnscale.torch.sinks.JSONLSink writes")
    p.add_argument(
        "--html", metavar="PAGE.html", default=None, help="also write the dashboard, one self-contained page"
    )
    p.add_argument("--window", type=int, default=d.window, help=f"steps of each head's window (default {d.window})")
    p.add_argument(
        "--warmup", type=int, default=d.warmup, help=f"values a window holds before it judges (default {d.warmup})"
    )
    p.add_argument("--z", type=float, default=d.z, help=f"the change threshold in σ (default {d.z:g})")
    p.add_argument(
        "--min-sigma",
        type=float,
        default=d.min_sigma,
        help=f"the floor of σ, in the figure's units (default {d.min_sigma:g})",
    )
    p.add_argument(
        "--float16-headroom",
        type=float,
        default=d.float16_headroom,
        help=f"alert when {FLOAT16_MAX:g} / largest |logit| falls below this (default {d.float16_headroom:g}: an overflow)",
    )
    p.add_argument(
        "--saturated-share",
        type=float,
        default=d.saturated_share,
        help=f"alert when this share of a head's rows is saturated (default {d.saturated_share:g})",
    )
    p.add_argument(
        "--rearm",
        type=int,
        default=d.rearm,
        help=f"steps a head's rule must stay clear before it alerts again (default {d.rearm})",
    )
    add_json_option(p, "the alerts")
    add_quiet_option(p)
    add_lang_option(p, "the alerts and the dashboard")
    p.set_defaults(run=run_watch_command)


def run_watch_command(args) -> int:
    from attnscale.early_warning import DetectorConfig, read_log, replay

    check_json_target(args)
    if args.html is not None:
        check_html_target(args.html)
    with options_named(OPTION_NAMES):
        config = DetectorConfig(
            window=args.window,
            warmup=args.warmup,
            z=args.z,
            min_sigma=args.min_sigma,
            float16_headroom=args.float16_headroom,
            saturated_share=args.saturated_share,
            rearm=args.rearm,
        )
    records = read_log(args.log)
    measured = [r for r in records if r["heads"]]
    if not measured:
        from attnscale.errors import InputError

        raise InputError(f"LOG.jsonl: {args.log!r} holds no step record with heads; expected a monitor's JSONL log")
    alerts = replay(measured, config)
    if not json_to_stdout(args):
        for alert in alerts:
            print(alert.sentence())
        print(summary(len(alerts), len(measured), len({(h["layer"], h["head"]) for r in measured for h in r["heads"]})))
    emit_json(
        args, {"config": vars(config) | {"figures": list(config.figures)}, "alerts": [a.to_json() for a in alerts]}
    )
    if args.html is not None:
        from attnscale.early_warning.dashboard import write_dashboard

        path = write_dashboard(args.html, measured, alerts, config, title=args.log)
        if not args.quiet:
            print(_("wrote {path}", path=path), file=sys.stderr)
    return 1 if alerts else 0


def check_html_target(target: str) -> None:
    """Refuse an unwritable ``--html FILE`` before any work (its folder must exist, as for --json)."""
    from pathlib import Path

    from attnscale import results
    from attnscale.errors import InputError

    path = Path(target)
    if path.is_dir():
        raise InputError(f"--html: {target!r} is a folder, expected a file name")
    if not path.parent.is_dir():
        raise InputError(f"--html: the folder {str(path.parent)!r} does not exist")
    results.check_writable(path.parent, "--html")
