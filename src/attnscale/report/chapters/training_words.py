"""Which sentences the scale-vs-dk result calls for (the training chapter's choices, report/chapters/training.py).

Each table holds the sentences one part of the chapter chooses between (English, marked with ``N_``;
translated where the chapter fills them) and sits beside the small pure function that picks the key
from the numbers of the result. The thresholds are the experiment's own, read from the set-up the
analysis records (``setup["saturated_run"]``: ``scale_vs_dk.SATURATED_RUN``; ``setup["logit_growth"]``:
``scale_vs_dk.LOGIT_GROWTH``; ``setup["caps"]``: each soft-cap rule's cap), so a result is always read with
the thresholds it was made with and the report imports nothing from the experiments. Changing a
sentence here never needs a training run.
"""

from __future__ import annotations

import math

from attnscale.i18n import N_

__all__ = [
    "SINGLE_KEY",
    "single_key_versus",
    "REFERENCE",
    "reference_reach",
    "GRADIENT",
    "gradient_direction",
    "PATHS",
    "dominant_path",
    "TRENDS",
    "logit_trend",
    "growth_saturates",
    "SOFTCAP",
    "softcap_outcomes",
    "softcap_lower_logits",
    "GRADIENT_FLOOR",
    "gradient_floor",
]

#: One attended key against guessing the most likely count, in the introduction.
SINGLE_KEY = {
    "same": N_("the same as guessing the most likely count ({prior:.3f})"),
    "above": N_("against {prior:.3f} for guessing the most likely count"),
}


def single_key_versus(analysis: dict) -> str:
    """ "same" when the one-key ceiling equals the prior's mode (up to rounding: both are computed
    probabilities), else "above"."""
    same = math.isclose(analysis["single_key_ceiling"], analysis["prior_ceiling"], rel_tol=1e-9, abs_tol=1e-12)
    return "same" if same else "above"


#: Where 1/√dₖ itself does not reach the target (nothing is said where it does everywhere).
REFERENCE = {
    "nowhere": N_(
        "Within {steps} steps not even 1/√dₖ reaches {target:g} accuracy, with either optimiser: this sweep cannot tell a rule that learns from one that does not."
    ),
    "partly": N_(
        "1/√dₖ itself reaches {target:g} accuracy on only part of the sweep ({where}; seeds reaching / seeds): where it does not, no rule can be judged slower than it."
    ),
}


def reference_reach(rows: list[dict]) -> str | None:
    """rows: the reference rule's (d_k, optimiser) groups, each with ``reached`` and ``seeds``. None when
    every seed of every group reaches the target, "nowhere" when none does, else "partly"."""
    if all(r["reached"] == r["seeds"] for r in rows):
        return None
    return "nowhere" if all(r["reached"] == 0 for r in rows) else "partly"


#: The gradient reaching W_Q (or W_K) at step 0, unscaled against 1/√dₖ.
GRADIENT = {
    "larger": N_(
        "At step 0 the gradient reaching {w} is larger without the scale, not smaller: unscaled ÷ 1/√dₖ = {ratios} (the scale alone would make it {alone})."
    ),
    "smaller": N_(
        "At step 0 the gradient reaching {w} is smaller without the scale: unscaled ÷ 1/√dₖ = {ratios}, although the scale alone would make it {alone}: saturation at initialisation shrinks it by more than the missing 1/√dₖ enlarges it."
    ),
    "mixed": N_(
        "At step 0 the gradient reaching {w} is larger without the scale at dₖ = {up} and smaller at dₖ = {down}: unscaled ÷ 1/√dₖ = {ratios} (the scale alone: {alone})."
    ),
}


def gradient_direction(rows: list[dict]) -> tuple[str | None, list[int], list[int]]:
    """rows: per d_k the ``ratio`` unscaled ÷ 1/√dₖ. The key of :data:`GRADIENT` (None without rows) and
    the d_k at which the ratio is above 1 and at most 1."""
    larger = [r["d_k"] for r in rows if r["ratio"] > 1]
    smaller = [r["d_k"] for r in rows if r["ratio"] <= 1]
    direction = None if not rows else "larger" if not smaller else "smaller" if not larger else "mixed"
    return direction, larger, smaller


#: The path most of the failing runs take through saturation.
PATHS = {
    "stayed": N_("Most of them start saturated and stay so."),
    "became": N_("Most of them are not saturated at step 0 but become so as training goes on."),
    "left": N_("Most of them start saturated and leave saturation."),
    "never": N_(
        "Most of them are never saturated at a logged step: saturation, counted this way, does not explain those failures."
    ),
}


def dominant_path(outcome: dict) -> str | None:
    """outcome: runs counted by path (``stayed_saturated``, ``became_saturated``, ``left_saturation``,
    ``never_saturated``). The path most of them take; a tie goes to the first in that order."""
    if not outcome["runs"]:
        return None
    counts = {
        "stayed": outcome["stayed_saturated"],
        "became": outcome["became_saturated"],
        "left": outcome["left_saturation"],
        "never": outcome["never_saturated"],
    }
    return max(counts, key=counts.get)


#: How the failing runs' logit spread moves from step 0 to the last logged step ({G}: the factor).
TRENDS = {
    "grows": N_("Their logits grow during training (median last ÷ first logit standard deviation ≥ {G:g})."),
    "shrinks": N_("Their logits shrink during training (median ratio ≤ 1/{G:g})."),
    "steady": N_("Their logit spread stays within a factor {G:g} of where it started."),
}


def logit_trend(median: float | None, factor: float) -> str | None:
    """median: of last ÷ step-0 logit standard deviation over runs; factor: the experiment's
    ``LOGIT_GROWTH``. "grows" at or above it, "shrinks" at or below its inverse, else "steady"."""
    if median is None:
        return None
    return "grows" if median >= factor else "shrinks" if median <= 1 / factor else "steady"


def growth_saturates(trend: str | None, path: str | None) -> bool:
    """Whether the failing runs' logits grow and most become saturated on the way: then the chapter
    offers, as a hypothesis, that the growth is what saturates and stops them."""
    return trend == "grows" and path == "became"


#: Soft-cap on unscaled logits at a d_k where it starts saturated ({cap}: its cap).
SOFTCAP = {
    "learns": N_(
        "At dₖ = {d_k} soft-cap {cap:g} starts with {cap0} of its query rows saturated (unscaled: {un0}) and still reaches the target on {r}/{n} seeds with Adam (unscaled: {ru}/{n}): starting saturated does not by itself stop learning here."
    ),
    "fails": N_(
        "At dₖ = {d_k} soft-cap {cap:g} starts with {cap0} of its query rows saturated (unscaled: {un0}) and reaches the target on {r}/{n} seeds with Adam (unscaled: {ru}/{n})."
    ),
}


def softcap_outcomes(rows: list[dict], saturated_run: float) -> list[tuple[str, dict]]:
    """rows: soft-cap against unscaled with Adam, per d_k. The rows whose seed-mean saturated fraction at
    step 0 is at least ``saturated_run``, keyed "learns" (most seeds reach the target) or "fails"; the
    learning ones first."""
    saturated = [r for r in rows if (r["softcap_saturated_start"] or 0) >= saturated_run]
    learns = [r for r in saturated if 2 * r["softcap_reached"] > r["seeds"]]
    return [("learns", r) for r in learns] + [("fails", r) for r in saturated if r not in learns]


def softcap_lower_logits(rows: list[dict], saturated_run: float) -> list[int]:
    """The d_k at which soft-cap starts saturated, learns, and ends with a smaller logit standard deviation
    than unscaled: where the chapter offers (as a hypothesis) that the cap is what lets it learn."""
    learns = [r for key, r in softcap_outcomes(rows, saturated_run) if key == "learns"]
    return [
        r["d_k"]
        for r in learns
        if None not in (r["softcap_logit_std_end"], r["unscaled_logit_std_end"])
        and r["softcap_logit_std_end"] < r["unscaled_logit_std_end"]
    ]


#: The gradient of unscaled attention with Adam at the largest d_k: exactly zero, or how low it falls.
GRADIENT_FLOOR = {
    "zero": N_(
        "Unscaled attention with Adam at dₖ = {d_k}: the gradient is exactly zero at a logged step in {z}/{seeds} seeds."
    ),
    "falls": N_(
        "The smallest logged ‖∇W_Q‖ of unscaled attention with Adam at dₖ = {d_k} is {smallest}, against {first} at step 0 (seed mean): the gradient becomes smaller, not zero."
    ),
    "stays": N_(
        "The logged ‖∇W_Q‖ of unscaled attention with Adam at dₖ = {d_k} never falls below its step-0 value ({first}, seed mean; smallest {smallest})."
    ),
}


def gradient_floor(finding: dict) -> str | None:
    """finding: the zero-gradient figures of that group. "zero" when some seed's gradient was exactly zero,
    else "falls" or "stays" by the smallest logged ‖∇W_Q‖ against its step-0 mean; None without both."""
    if finding["group_zero"]:
        return "zero"
    smallest, first = finding["smallest_grad_wq"], finding["step0_grad_wq"]
    if None in (smallest, first):
        return None
    return "falls" if smallest < first else "stays"
