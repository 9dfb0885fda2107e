"""Group 9: softmax must give all its weight away even when nothing matters: its weights sum to 1, so
equal logits give the uniform 1/n whatever their value. softmax₁ (Miller 2023, "Attention is off by
one") adds 1 to the denominator, e^{xᵢ}/(1 + Σⱼ e^{xⱼ}), i.e. a softmax with an extra logit 0 whose
weight is dropped, and can give almost nothing away: equal logits c give a total n·e^c/(1 + n·e^c).
"""

from __future__ import annotations

import math

import numpy as np

from attnscale.claims.context import Context
from attnscale.claims.register import claim
from attnscale.i18n import N_, _
from attnscale.softmax_rows import softmax

LEVELS = tuple(float(c) for c in range(-12, 7, 2))
N_KEYS = 8


def softmax_one(logits) -> np.ndarray:
    """softmax₁ over the last axis: softmax of the logits with an extra 0 logit, that weight dropped."""
    x = np.asarray(logits, dtype=np.float64)
    padded = np.concatenate([x, np.zeros(x.shape[:-1] + (1,))], axis=-1)
    return softmax(padded)[..., :-1]


def run(ctx: Context) -> None:
    ns = (1, 2, 8, 64, 1024)
    worst_uniform, worst_sum = 0.0, 0.0
    for n in ns:
        for c in LEVELS:
            p = softmax(np.full(n, c))
            worst_uniform = max(worst_uniform, float(np.max(np.abs(p - 1.0 / n))) * n)
            worst_sum = max(worst_sum, abs(float(np.sum(p)) - 1.0))
    tol = 4 * np.finfo(float).eps
    ctx.add(
        claim(
            "S9.1",
            N_(
                "softmax's weights always sum to 1: a token must give all its attention away, equal logits → uniform 1/n"
            ),
            expected=lambda: _(
                "|Σp − 1| and n·|p − 1/n| ≤ {tol:.1e} for equal logits c = {low:g}…{high:g}, n = {ns}",
                tol=tol,
                low=LEVELS[0],
                high=LEVELS[-1],
                ns=", ".join(map(str, ns)),
            ),
            measured=lambda: _(
                "max |Σp − 1| = {sum_error:.1e}, max n·|p − 1/n| = {uniform_error:.1e}",
                sum_error=worst_sum,
                uniform_error=worst_uniform,
            ),
            verdict="holds" if worst_sum <= tol and worst_uniform <= tol else "fails",
            note=lambda: _(
                "a consistency check of attnscale.softmax, not an independent test: softmax divides by the sum of its weights, so they sum to 1 by construction; what is checked is that the floating-point result stays within a few ulps of that"
            ),
        )
    )
    totals = [float(np.sum(softmax_one(np.full(N_KEYS, c)))) for c in LEVELS]
    closed = [N_KEYS * math.exp(c) / (1 + N_KEYS * math.exp(c)) for c in LEVELS]
    err = max(abs(a - b) / b for a, b in zip(totals, closed))
    ok = err < 1e-12 and totals[0] < 1e-3
    ctx.data["give_away"] = {
        "n": N_KEYS,
        "logit": list(LEVELS),
        "softmax_total_measured": [float(np.sum(softmax(np.full(N_KEYS, c)))) for c in LEVELS],
        "softmax1_total": totals,
    }
    ctx.add(
        claim(
            "S9.2",
            N_(
                "softmax₁ (Miller 2023) can give almost nothing away: with equal logits c the total is n·e^c/(1 + n·e^c)"
            ),
            expected=lambda: _(
                "attnscale softmax₁ total = closed form (relative error < 1e-12); total < 1e-3 at c = {low:g}",
                low=LEVELS[0],
            ),
            measured=lambda: _(
                "n = {n}: total {low_total:.2e} at c = {low:g}, {high_total:.4f} at c = {high:g}; max relative error {error:.1e}",
                n=N_KEYS,
                low_total=totals[0],
                low=LEVELS[0],
                high_total=totals[-1],
                high=LEVELS[-1],
                error=err,
            ),
            verdict="holds" if ok else "fails",
            note=lambda: _("the contrast to S9.1: softmax's total is 1 at every c"),
        )
    )
    ctx.tick(N_("softmax gives its weight away"))
