"""Prose helpers of the report that every part of it shares: typography (:func:`pretty`), a scale
rule's name (:func:`rule_label`) and a list in prose (:func:`listed`). The words themselves are
gettext messages written where they are used (:mod:`attnscale.i18n`).
"""

from __future__ import annotations

from attnscale.i18n import N_, _
from attnscale.scales import RULES, SoftCap

# A scale rule's name on the page, by the rule's name in attnscale.scales; a soft-cap's names its cap.
RULE_LABELS = {
    "inverse_sqrt_dk": N_("1/√d_k (Vaswani et al.)"),
    "unscaled": N_("unscaled"),
    "inverse_dk": N_("1/d_k (µP)"),
    "qknorm": N_("QK-norm"),
    "softcap": N_("soft-cap {cap:g} on 1/√d_k (Gemma 2)"),
    "softcap_unscaled": N_("soft-cap {cap:g}, unscaled"),
    "logn": N_("log-n (Scalable-Softmax)"),
}


def pretty(text: str) -> str:
    """Prose typography: d_k → dₖ (the source strings stay greppable ASCII). The page's every text
    gets it from :func:`attnscale.report.html.esc`; called directly only for text that is not HTML
    (a figure's labels, the widget's data, a title the terminal shows too)."""
    return text.replace("d_{k}", "dₖ").replace("d_k", "dₖ")


def rule_label(rule: str, cap: float | None = None) -> str:
    """The name of the scale rule ``rule`` on the page. A soft-cap's names its cap: ``cap`` (what a
    result recorded), else the cap of the rule of that name in :data:`attnscale.scales.RULES`."""
    if rule not in RULE_LABELS:
        raise KeyError(f"rule: no label for the scale rule {rule!r}; expected one of {', '.join(RULE_LABELS)}")
    if cap is None and isinstance(RULES.get(rule), SoftCap):
        cap = RULES[rule].cap_value
    return pretty(_(RULE_LABELS[rule], cap=cap))


def listed(items: list[str]) -> str:
    """``items`` as a list in prose: "4, 64 and 512", "4、64、512"."""
    if len(items) == 1:
        return items[0]
    return _(", ", msgctxt="list").join(items[:-1]) + _(" and ", msgctxt="list") + items[-1]
