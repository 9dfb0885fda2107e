"""``attnscale train early-warning``'s tables: per detector the lead times and false alarms, the
arms' divergences and the attention detector's supported settings, in the page's words."""

from __future__ import annotations

from attnscale.cli.output import pad
from attnscale.i18n import _


def _fmt(x) -> str:
    return "-" if x is None else f"{x:g}"


def print_early_warning(a: dict) -> None:
    from attnscale.report.chapters.early_warning_words import (  # the page's words
        DETECTOR_NAMES,
        comparison_sentence,
        divergence_sentence,
        false_alarm_sentence,
        online_false_alarm_sentence,
        in_sample_sentence,
        proposal_sentence,
        rules_sentence,
        timing_sentence,
    )

    print(divergence_sentence(a["setup"], a["arms"]))
    print(rules_sentence(a["setup"]))
    header = [
        _("detector"),
        _("diverged"),
        _("before"),
        _("after"),
        _("never"),
        _("median lead"),
        _("min lead"),
        _("healthy"),
        _("false alarms"),
    ]
    rows = [
        [
            _(DETECTOR_NAMES[r["detector"]]),
            str(r["diverged_runs"]),
            str(r["fired_before"]),
            str(r["fired_after"]),
            str(r["missed"]),
            _fmt(r["lead_median"]),
            _fmt(r["lead_min"]),
            str(r["healthy_runs"]),
            str(r["false_alarm_runs"]),
        ]
        for r in a["table"]
    ]
    widths = [max(len(str(row[i])) for row in (header, *rows)) for i in range(len(header))]
    for row in (header, *rows):
        print("  ".join(pad(cell, w, right=i > 0) for i, (cell, w) in enumerate(zip(row, widths))))
    print(comparison_sentence(a["table"]))
    print(false_alarm_sentence(next(r for r in a["table"] if r["detector"] == "attention")))
    print(online_false_alarm_sentence(next(r for r in a["table"] if r["detector"] == "attention_online")))
    print(proposal_sentence(a["proposal"], a["default_config"]))
    said = in_sample_sentence(a["proposal"], a["table"])
    for line in (said, timing_sentence(a["proposal"], a["runs"])):
        if line:
            print(line)
