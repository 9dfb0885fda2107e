"""Report chapter: how early the attention figures warn that a run diverges, against the loss-spike
detectors trainers ship (OLMo-core's StabilityMonitorCallback, Lightning's SpikeDetection).

Reads the ``train/early-warning`` result (``attnscale train early-warning``) and only formats it: every
lead time, count and setting comes from ``env.data["analysis"]``, every sentence from
:mod:`attnscale.report.chapters.early_warning_words`; the timeline draws the recorded losses."""

from __future__ import annotations

import math

from attnscale.i18n import N_, _
from attnscale.report.chapters.early_warning_words import (
    DETECTOR_NAMES,
    arms_sentence,
    comparison_sentence,
    divergence_sentence,
    false_alarm_sentence,
    online_false_alarm_sentence,
    figures_sentence,
    in_sample_sentence,
    proposal_sentence,
    rules_sentence,
    timing_sentence,
)
from attnscale.report.html import para, table
from attnscale.report.numbers import number
from attnscale.report.plotting import REFERENCE, SERIES, responsive_figure, style

KIND = "train/early-warning"
TITLE = N_("Does attention warn before the loss? Early warning against loss-spike detectors")
HOW_TO = "attnscale train early-warning"

#: Each detector's colour and marker in the timeline.
SUPPORTED = N_("attention detector (the settings the measurement supports)")
MARKS = {
    "proposal": ("D", SERIES[4]),
    "attention": ("o", SERIES[0]),
    "attention_online": ("s", SERIES[2]),
    "olmo": ("^", SERIES[1]),
    "lightning": ("v", SERIES[3]),
}


def render(env) -> str:
    a = env.data["analysis"]
    setup = a["setup"]
    att = next(r for r in a["table"] if r["detector"] == "attention")
    parts = [
        para(
            _(
                "Each run trains the logit-growth proxy ({layers} layers, {heads} heads) with AdamW, no gradient clipping, its learning rate rising linearly from 0 to its arm's peak over {steps} steps, {seeds} seed(s) per arm. Every step records the loss, the gradient norm and the monitor's per-head figures; the detectors are replayed on those records, so another setting needs no retraining.",
                layers=setup["n_layers"],
                heads=setup["n_heads"],
                steps=setup["steps"],
                seeds=setup["seeds"],
            )
        ),
        para(arms_sentence(a["arms"])),
        para(divergence_sentence(setup, a["arms"])),
        para(rules_sentence(setup)),
        para(comparison_sentence(a["table"])),
        para(false_alarm_sentence(att)),
        para(online_false_alarm_sentence(next(r for r in a["table"] if r["detector"] == "attention_online"))),
        *([para(figures)] if (figures := figures_sentence(a["runs"])) else []),
        _table(a["table"]),
        para(
            _(
                "Lead time: the divergence step minus the detector's first alert step (negative: it alerted after). Its median and smallest are over the runs where the detector alerted; a false alarm is a healthy run with any alert."
            )
        ),
        responsive_figure(
            lambda: timeline_figure(env.data["cells"], a),
            _("Loss and each detector's first alert, seed 0 of each arm"),
            _(
                "Dashed: the divergence. Each marker: a detector's first alert, on the loss curve; the diamond: the attention detector at the settings the measurement supports (below)."
            ),
        ),
        para(proposal_sentence(a["proposal"], a["default_config"])),
        *([para(said)] if (said := in_sample_sentence(a["proposal"], a["table"])) else []),
        *([para(when)] if (when := timing_sentence(a["proposal"], a["runs"])) else []),
        _grid_table(a["grid"]),
        para(
            _(
                "The replayed detector reads each layer's most extreme head (the largest |logit|, the smallest entropy, the largest saturated share): a per-head detector has more heads to alert on, so these settings are a proposal to check per head, not a measured per-head result. The detector as it ran read every head, at the default settings of the code that trained the runs only (the table's per-head row)."
            )
        ),
    ]
    return "\n".join(parts)


def _table(rows: list[dict]) -> str:
    header = [
        _("detector"),
        _("diverged runs"),
        _("alerted before"),
        _("after"),
        _("never"),
        _("median lead (steps)"),
        _("smallest lead"),
        _("healthy runs"),
        _("false alarms"),
    ]
    body = [
        [
            _(DETECTOR_NAMES[r["detector"]]),
            r["diverged_runs"],
            r["fired_before"],
            r["fired_after"],
            r["missed"],
            number(r["lead_median"], "g"),
            number(r["lead_min"], "g"),
            r["healthy_runs"],
            r["false_alarm_runs"],
        ]
        for r in rows
    ]
    return table(header, body)


def _grid_table(grid: list[dict]) -> str:
    header = [
        "z",
        _("window"),
        _("saturated share"),
        _("alerted before"),
        _("median lead"),
        _("smallest lead"),
        _("false alarms"),
    ]
    body = [
        [
            number(r["config"]["z"], "g"),
            r["config"]["window"],
            number(r["config"]["saturated_share"], "g"),
            f"{r['fired_before']}/{r['diverged_runs']}",
            number(r["lead_median"], "g"),
            number(r["lead_min"], "g"),
            f"{r['false_alarm_runs']}/{r['healthy_runs']}",
        ]
        for r in grid
    ]
    return table(header, body)


def timeline_figure(cells: list[dict], a: dict):
    """One panel per run of ``a["timeline"]``: its training loss per step, its divergence and each
    detector's first alert."""
    picked = a["timeline"]
    with style() as plt:
        fig, axes = plt.subplots(
            1, len(picked), figsize=(3.2 * len(picked), 3.4), sharey=True, constrained_layout=True, squeeze=False
        )
        for ax, i in zip(axes[0], picked):
            run, loss = a["runs"][i], cells[i]["result"]["loss"]
            ys = [math.nan if v is None else v for v in loss]
            ax.plot(range(1, len(ys) + 1), ys, color=REFERENCE, lw=0.6)
            if run["diverged_at"] is not None:
                ax.axvline(run["diverged_at"], color=REFERENCE, ls="--", lw=0.9)
            firsts = {d: run[d] for d in DETECTOR_NAMES}
            if a["proposal"] is not None:
                firsts["proposal"] = a["proposal"]["first_alerts"][i]
            for detector, step in firsts.items():
                marker, color = MARKS[detector]
                if step is not None and step <= len(ys):
                    ax.plot(
                        [step],
                        [ys[step - 1]],
                        marker,
                        color=color,
                        ms=7,
                        label=_(SUPPORTED if detector == "proposal" else DETECTOR_NAMES[detector]),
                    )
            ax.set_title(_("{arm}, seed {seed}", arm=run["arm"], seed=run["seed"]))
            ax.set_xlabel(_("step"))
        axes[0][0].set_ylabel(_("training loss"))
        handles = {h.get_label(): h for ax in axes[0] for h in ax.get_lines() if not h.get_label().startswith("_")}
        fig.legend(list(handles.values()), list(handles), loc="outside lower center", ncol=2, fontsize=8)
    return fig
