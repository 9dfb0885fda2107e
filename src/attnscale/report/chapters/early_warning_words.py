"""The early-warning chapter's sentences (and ``attnscale train early-warning``'s), each chosen by a
small pure function of the result's analysis from a table of ``N_`` messages beside it."""

from __future__ import annotations

from attnscale.i18n import N_, _
from attnscale.report.numbers import number

__all__ = [
    "DETECTOR_NAMES",
    "COMPARISON",
    "comparison_key",
    "comparison_sentence",
    "FALSE_ALARMS",
    "false_alarm_key",
    "false_alarm_sentence",
    "PROPOSAL",
    "proposal_key",
    "proposal_sentence",
    "divergence_sentence",
    "rules_sentence",
    "arms_sentence",
    "figures_sentence",
    "in_sample_sentence",
    "TIMING",
    "timing_key",
    "timing_sentence",
]

#: The analysis' detectors as the page names them (their rules: :func:`rules_sentence`).
DETECTOR_NAMES = {
    "attention": N_("attention detector (replayed, per layer)"),
    "attention_online": N_("attention detector (as it ran, per head)"),
    "olmo": N_("OLMo-core StabilityMonitor"),
    "lightning": N_("Lightning SpikeDetection"),
}
#: The loss-based peers the attention detector is compared with.
PEERS = ("olmo", "lightning")

#: The attention detector against the best loss-based peer, on the runs that diverged. A median lead is
#: over the runs where the detector alerted at all; how many it alerted before the divergence is said.
COMPARISON = {
    "none_diverged": N_("No run diverged, so no detector could warn of a divergence here."),
    "neither": N_(
        "Of the {n} runs that diverged, neither the attention detector nor a loss-spike detector alerted in the recorded steps."
    ),
    "attention_only": N_(
        "Of the {n} runs that diverged, the attention detector alerted before the divergence in {att_before}, a median {att} steps ahead; the loss-spike detectors never alerted: attention warns, the loss does not."
    ),
    "attention_silent": N_(
        "Of the {n} runs that diverged, the attention detector alerted in none, {peer} before the divergence in {peer_before}, a median {lead} steps ahead: attention warns later than the loss."
    ),
    "earlier": N_(
        "Of the {n} runs that diverged, the attention detector alerted before the divergence in {att_before}, a median {att} steps ahead; {peer} in {peer_before}, {lead} steps: attention warns {diff} steps earlier than the loss."
    ),
    "later": N_(
        "Of the {n} runs that diverged, the attention detector alerted before the divergence in {att_before}, a median {att} steps ahead; {peer} in {peer_before}, {lead} steps: attention warns later than the loss, by {diff} steps."
    ),
    "same": N_(
        "Of the {n} runs that diverged, the attention detector alerted before the divergence in {att_before}, {peer} in {peer_before}, both a median {att} steps ahead: attention warns no earlier than the loss."
    ),
}


def _row(table: list[dict], detector: str) -> dict:
    return next(r for r in table if r["detector"] == detector)


def _best_peer(table: list[dict]) -> dict | None:
    """The loss-based peer with the largest median lead time (None when none alerted)."""
    fired = [_row(table, p) for p in PEERS if _row(table, p)["lead_median"] is not None]
    return max(fired, key=lambda r: r["lead_median"]) if fired else None


def comparison_key(table: list[dict]) -> str:
    """The key of :data:`COMPARISON` for the analysis' ``table``: the attention detector's median
    lead against the best loss-based peer's (a larger lead is an earlier warning)."""
    att, peer = _row(table, "attention"), _best_peer(table)
    if att["diverged_runs"] == 0:
        return "none_diverged"
    a, p = att["lead_median"], None if peer is None else peer["lead_median"]
    if a is None:
        return "neither" if p is None else "attention_silent"
    if p is None:
        return "attention_only"
    return "earlier" if a > p else "later" if a < p else "same"


def comparison_sentence(table: list[dict]) -> str:
    att, peer = _row(table, "attention"), _best_peer(table)
    diff = None if peer is None or att["lead_median"] is None else abs(att["lead_median"] - peer["lead_median"])
    return _(
        COMPARISON[comparison_key(table)],
        n=att["diverged_runs"],
        att=number(att["lead_median"], "g"),
        att_before=att["fired_before"],
        peer=_(DETECTOR_NAMES[peer["detector"]]) if peer else "",
        peer_before=peer["fired_before"] if peer else 0,
        lead=number(peer["lead_median"], "g") if peer else "",
        diff=number(diff, "g"),
    )


#: The attention detector on the healthy runs.
FALSE_ALARMS = {
    "no_healthy": N_("No run stayed healthy, so false alarms could not be counted."),
    "none": N_("On the {healthy} runs that stayed healthy, the attention detector raised no alarm."),
    "some": N_(
        "On the {healthy} runs that stayed healthy, the attention detector raised a false alarm in {false} (its default settings; the settings below are chosen to raise none)."
    ),
}


def false_alarm_key(row: dict) -> str:
    """The key of :data:`FALSE_ALARMS` for a detector's row of the table."""
    if row["healthy_runs"] == 0:
        return "no_healthy"
    return "none" if row["false_alarm_runs"] == 0 else "some"


def false_alarm_sentence(row: dict) -> str:
    return _(FALSE_ALARMS[false_alarm_key(row)], healthy=row["healthy_runs"], false=row["false_alarm_runs"])


#: The detector as it ran in training: on every head, not only each layer's most extreme one.
ONLINE_FALSE_ALARMS = {
    "no_healthy": N_("No run stayed healthy, so the detector as it ran could not be judged for false alarms."),
    "none": N_(
        "As it ran during training, judging every head rather than each layer's most extreme one, the detector raised no alarm on the {healthy} healthy runs either."
    ),
    "some": N_(
        "As it ran during training, judging every head rather than each layer's most extreme one, the detector raised a false alarm in {false} of the {healthy} healthy runs: per head, its settings are not free of false alarms."
    ),
}


def online_false_alarm_sentence(row: dict) -> str:
    """The false alarms of the detector as it ran (the table's ``attention_online`` row)."""
    return _(ONLINE_FALSE_ALARMS[false_alarm_key(row)], healthy=row["healthy_runs"], false=row["false_alarm_runs"])


#: The attention detector's settings the measurement supports.
PROPOSAL = {
    "none": N_(
        "No setting of the grid both stays silent on every healthy run and alerts before a divergence: the measurement supports no default."
    ),
    "default": N_(
        "The measurement supports the detector's default settings (z = {z:g}, window {window}, saturated share {share:g}): no false alarm on the {healthy} healthy runs, an alert before the divergence in {before} of {diverged} runs, a median lead of {median} steps (smallest {smallest})."
    ),
    "other": N_(
        "The measurement supports z = {z:g}, window {window}, saturated share {share:g} (the default: z = {dz:g}, window {dwindow}, saturated share {dshare:g}): no false alarm on the {healthy} healthy runs, an alert before the divergence in {before} of {diverged} runs, a median lead of {median} steps (smallest {smallest})."
    ),
}


def proposal_key(proposal: dict | None, default: dict) -> str:
    """The key of :data:`PROPOSAL`: none, the default's settings, or other ones."""
    if proposal is None:
        return "none"
    c = proposal["config"]
    same = all(c[k] == default[k] for k in ("z", "window", "saturated_share"))
    return "default" if same else "other"


def proposal_sentence(proposal: dict | None, default: dict) -> str:
    key = proposal_key(proposal, default)
    if key == "none":
        return _(PROPOSAL["none"])
    c = proposal["config"]
    return _(
        PROPOSAL[key],
        z=c["z"],
        window=c["window"],
        share=c["saturated_share"],
        dz=default["z"],
        dwindow=default["window"],
        dshare=default["saturated_share"],
        healthy=proposal["healthy_runs"],
        before=proposal["fired_before"],
        diverged=proposal["diverged_runs"],
        median=number(proposal["lead_median"], "g"),
        smallest=number(proposal["lead_min"], "g"),
    )


def divergence_sentence(setup: dict, arms: list[dict]) -> str:
    """What counts as a divergence, and how many runs of each arm diverged."""
    counts = "; ".join(f"{a['arm']}: {a['diverged']}/{a['runs']}" for a in arms)
    return _(
        "A run diverges at the first step after its first {warmup} whose training loss is not finite or above {factor:g} × its running minimum (the smallest loss before that step). Runs that diverged, per arm: {counts}.",
        warmup=setup["warmup"],
        factor=setup["divergence_factor"],
        counts=counts,
    )


def rules_sentence(setup: dict) -> str:
    """The peers' rules with the parameters the analysis ran them with."""
    olmo, light = setup["olmo"], setup["lightning"]
    return _(
        "The peers, replayed with their shipped defaults: OLMo-core's StabilityMonitorCallback calls a step a spike when the loss or the gradient norm is above the mean + {k:g}σ of its last {window} values; Lightning's SpikeDetection, when the loss is not finite, or is not lower than the last one and lies at least {rtol:g} × the mean of its last {lwindow} values above that mean (at {times:g} × it or more).",
        k=olmo["threshold_std"],
        window=olmo["window"],
        rtol=light["rtol"],
        lwindow=light["window"],
        times=1 + light["rtol"],
    )


#: What an arm was built for, and its attention.
BUILT_TO = {"diverge": N_("built to diverge"), "healthy": N_("built to stay healthy")}
ATTENTION = {"qk_layernorm": N_("QK-layernorm, 1/√d_k"), "unscaled": N_("unscaled logits"), "plain": N_("1/√d_k")}


def arms_sentence(arms: list[dict]) -> str:
    """The arms: each one's attention, peak learning rate and what it was built for."""
    parts = [
        _(
            "{arm} ({attention}, peak rate {lr:g}, {built})",
            arm=a["arm"],
            attention=_(ATTENTION["qk_layernorm" if a["qk_layernorm"] else "unscaled" if a["unscaled"] else "plain"]),
            lr=a["peak_lr"],
            built=_(BUILT_TO[a["built_to"]]),
        )
        for a in arms
    ]
    return _("The arms: {arms}.", arms="; ".join(parts))


def figures_sentence(runs: list[dict]) -> str | None:
    """Which figure raised the replayed attention detector's first alert, counted over the runs where
    it alerted; None when it never did."""
    from attnscale.early_warning.words import FIGURE_WORDS

    counts: dict[str, int] = {}
    for r in runs:
        if r["attention_figure"] is not None:
            counts[r["attention_figure"]] = counts.get(r["attention_figure"], 0) + 1
    if not counts:
        return None
    parts = [
        _("{figure}: {n}", figure=_(FIGURE_WORDS[f]) if f in FIGURE_WORDS else f, n=n)
        for f, n in sorted(counts.items(), key=lambda kv: -kv[1])
    ]
    return _(
        "The attention detector's first alert, by the figure that raised it (runs): {parts}.", parts="; ".join(parts)
    )


def in_sample_sentence(proposal: dict | None, table: list[dict]) -> str | None:
    """What the supported settings' lead is worth: chosen on these runs, so an in-sample figure; and
    the best loss-based peer on the same runs, false alarms included. None without a proposal."""
    if proposal is None:
        return None
    peer = _best_peer(table)
    if peer is None:
        return _(
            "Those settings were chosen on these same runs, so their lead is an in-sample figure; no loss-spike detector alerted before a divergence."
        )
    return _(
        "Those settings were chosen on these same runs, so their lead is an in-sample figure; on the same runs {peer} alerted a median {lead} steps ahead, with a false alarm in {false} of the {healthy} healthy runs.",
        peer=_(DETECTOR_NAMES[peer["detector"]]),
        lead=number(peer["lead_median"], "g"),
        false=peer["false_alarm_runs"],
        healthy=peer["healthy_runs"],
    )


#: When the supported settings' first alerts came, against when the runs diverged.
TIMING = {
    "early": N_(
        "At those settings the first alert came at a median step {alert} of runs that diverged at a median step {diverged}: in the first half of the way. The alert marks the attention of these runs breaking early (logits growing, rows saturating), long before their loss rose: it is no sign that the loss is about to rise."
    ),
    "late": N_(
        "At those settings the first alert came at a median step {alert} of runs that diverged at a median step {diverged}: in the second half of the way, closer to the divergence than to the start."
    ),
}


def _median(xs: list) -> float:
    xs = sorted(xs)
    mid = len(xs) // 2
    return xs[mid] if len(xs) % 2 else (xs[mid - 1] + xs[mid]) / 2


def timing_key(alerts: list[int], diverged: list[int]) -> str:
    """ "early" when the median first alert lies in the first half of the median divergence step."""
    return "early" if _median(alerts) < _median(diverged) / 2 else "late"


def timing_sentence(proposal: dict | None, runs: list[dict]) -> str | None:
    """When the supported settings alerted on the runs that diverged (None without a proposal or
    without such a run)."""
    if proposal is None:
        return None
    pairs = [
        (a, r["diverged_at"])
        for a, r in zip(proposal["first_alerts"], runs)
        if a is not None and r["diverged_at"] is not None
    ]
    if not pairs:
        return None
    alerts, diverged = [a for a, _d in pairs], [d for _a, d in pairs]
    return _(
        TIMING[timing_key(alerts, diverged)],
        alert=number(_median(alerts), "g"),
        diverged=number(_median(diverged), "g"),
    )
