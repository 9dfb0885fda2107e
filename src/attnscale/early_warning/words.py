"""Each alert in one sentence, generated from its numbers (English here, Chinese in the catalog
``attnscale/i18n/zh.po``): the step, the layer and head, the figure, its value, the threshold it
crossed and why that matters in the post's causal chain."""

from __future__ import annotations

from attnscale.i18n import N_, _
from attnscale.softmax_rows import FLOAT16_MAX, SATURATED_WEIGHT

__all__ = ["FIGURE_WORDS", "SENTENCES", "sentence", "sentence_key", "summary"]

#: A figure in words (what the sentences and the dashboard call it).
FIGURE_WORDS = {
    "max_abs_logit": N_("the largest |logit|"),
    "entropy_min": N_("the smallest row entropy"),
    "saturated_fraction": N_("the share of saturated rows"),
    "first_key_weight": N_("the mean weight on the first key"),
    "float16_headroom": N_("the float16 headroom"),
    "rows_broken": N_("rows with a NaN or +inf logit"),
}

#: One sentence per reason; ``float16_near``: a headroom bound above 1 crossed before any overflow.
SENTENCES = {
    "rose": N_(
        "step {step}, {layer} head {head}: {figure} rose to {value:.4g}, above {threshold:.4g} "
        "(the mean + {z:g}σ of its last {n} steps)"
    ),
    "fell": N_(
        "step {step}, {layer} head {head}: {figure} fell to {value:.4g}, below {threshold:.4g} "
        "(the mean − {z:g}σ of its last {n} steps)"
    ),
    "float16": N_(
        "step {step}, {layer} head {head}: the float16 headroom ({limit:g} / largest |logit|) is {value:.3g}×, "
        "below {threshold:g}×: its logits overflow float16"
    ),
    "float16_near": N_(
        "step {step}, {layer} head {head}: the float16 headroom ({limit:g} / largest |logit|) is {value:.3g}×, "
        "below {threshold:g}×: its logits are that close to overflowing float16"
    ),
    "saturated": N_(
        "step {step}, {layer} head {head}: {value:.0%} of its rows are saturated (largest weight > {weight:g}), "
        "at or above {threshold:.0%}: the softmax gradient through them all but vanishes"
    ),
    "broken": N_("step {step}, {layer} head {head}: {value:g} rows have a NaN or +inf logit: its attention has broken"),
}


def sentence_key(alert) -> str:
    """Which of :data:`SENTENCES` says ``alert``: its reason, but a headroom under the bound that has
    not yet overflowed (value ≥ 1) is ``float16_near``."""
    if alert.reason == "float16" and alert.value >= 1:
        return "float16_near"
    return alert.reason


def sentence(alert) -> str:
    """``alert`` (an :class:`~attnscale.early_warning.detector.Alert`) in one sentence, in the language
    bound by :func:`attnscale.i18n.language`."""
    return _(
        SENTENCES[sentence_key(alert)],
        step=alert.step,
        layer=alert.layer,
        head=alert.head,
        figure=_(FIGURE_WORDS[alert.figure]),
        value=alert.value,
        threshold=alert.threshold,
        z=alert.z,
        n=alert.window,
        limit=FLOAT16_MAX,
        weight=SATURATED_WEIGHT,
    )


def summary(alerts: int, steps: int, heads: int) -> str:
    """How many alerts over how many steps and heads, in one line (the close of ``attnscale watch``)."""
    if alerts == 0:
        return _("no alert over {steps} steps of {heads} heads", steps=steps, heads=heads)
    if alerts == 1:
        return _("one alert over {steps} steps of {heads} heads", steps=steps, heads=heads)
    return _("{alerts} alerts over {steps} steps of {heads} heads", alerts=alerts, steps=steps, heads=heads)
