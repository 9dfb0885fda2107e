"""Group 7: the seed's FAQ. (a) For small d_k scaling barely changes the softmax. (b) Var(q·k) = d_k
is exact, not approximate: the Monte Carlo error around the exact value shrinks as 1/√samples.

(a) is quantified on random rows (Gaussian q, k, drawn exactly as in group 5) by the total-variation
distance ½Σ|p − p'| between the unscaled and the scaled weights: the share of attention that moves.
"""

from __future__ import annotations

import math

import numpy as np

from attnscale.claims.context import Context
from attnscale.claims.result import ClaimResult, judge_all, judge_at_most, judge_below
from attnscale.claims.saturation import by_n_note
from attnscale.montecarlo import quantile_ci
from attnscale.softmax import softmax
from attnscale.theory import COMPONENTS, dot_square_variance

NS = (3, 16, 128)
BARELY = 0.1   # "barely changes": at most 10% of the attention moves (median row)


def _tv_distances(ctx: Context, d_k: int, n: int, rows: int) -> np.ndarray:
    rng = ctx.rng(f"faq rows d_k={d_k} n={n}")
    logits = np.sqrt(rng.chisquare(d_k, size=(rows, 1))) * rng.standard_normal((rows, n))
    return 0.5 * np.sum(np.abs(softmax(logits) - softmax(logits / math.sqrt(d_k))), axis=-1)


def run(ctx: Context) -> None:
    rows = 2000 if ctx.config.quick else 20000
    conf = ctx.config.confidence
    tv = {(d, n): quantile_ci(_tv_distances(ctx, d, n, rows), 0.5, conf) for d in (4, 64) for n in NS}
    less = {n: judge_below(tv[(4, n)][1:], tv[(64, n)][1:]) for n in NS}
    ctx.add(ClaimResult(
        id="S7.1", chapter="faq", claim_en="scaling matters less at small d_k: at d_k = 4 it moves far less attention than at d_k = 64",
        claim_zh="d_k 小时缩放影响较小：d_k = 4 时缩放移动的注意力远少于 d_k = 64",
        seed_value=None, method="Monte Carlo",
        expected=f"median TV(softmax(s), softmax(s/√d_k)) at d_k = 4 below that at d_k = 64 ({ctx.level} CIs separated), "
                 "n = 3, 16, 128",
        measured="; ".join(f"n={n}: {tv[(4, n)][0]:.3f} vs {tv[(64, n)][0]:.3f}" for n in NS),
        verdict=judge_all(less.values()), n_samples=rows,
        note=by_n_note(less, "") + "; TV = ½Σ|p − p′|, the share of attention that moves; Gaussian q, k"))
    barely = {n: judge_at_most(*tv[(4, n)][1:], BARELY) for n in NS}
    ctx.add(ClaimResult(
        id="S7.2", chapter="faq",
        claim_en="when d_k is small (e.g. 4) scaling is not very important: softmax behaves about the same either way",
        claim_zh="d_k 较小（如 4）时缩放不太重要：无论是否缩放，softmax 都表现良好",
        seed_value="1 → 0.5", method="Monte Carlo",
        expected=f"'barely changes' read as: median TV distance ≤ {BARELY:g} ({ctx.level} CI), n = 3, 16, 128",
        measured="; ".join(f"n={n}: median TV {tv[(4, n)][0]:.3f} [{tv[(4, n)][1]:.3f}, {tv[(4, n)][2]:.3f}]" for n in NS),
        estimate=tv[(4, NS[1])][0], ci_low=tv[(4, NS[1])][1], ci_high=tv[(4, NS[1])][2], n_samples=rows,
        verdict=judge_all(barely.values()),
        note=by_n_note(barely, f"its interval straddles {BARELY:g}") + "; at d_k = 4 scaling halves the logits' spread; whether that is 'not important' depends on the tolerance: "
             "the seed's example (one score, 1 → 0.5) has no softmax to compare"))
    ctx.tick("small d_k")
    _error_shrinks(ctx)
    ctx.tick("1/√samples")


def _chi2_quantile(p: float, df: int) -> float:
    """Wilson–Hilferty approximation of the χ² quantile (relative error < 1% for df ≥ 20)."""
    from attnscale.montecarlo import z_quantile

    z = z_quantile(p)
    return df * (1 - 2 / (9 * df) + z * math.sqrt(2 / (9 * df))) ** 3


def _error_shrinks(ctx: Context) -> None:
    """RMS error of the variance estimate mean((q·k)²) over R replicates at N = N₀, 4N₀, 16N₀, 64N₀."""
    d_k = 64
    replicates, n0 = (30, 64) if ctx.config.quick else (60, 256)
    rng = ctx.rng("error shrinks")
    exact = float(d_k)
    sd_one = math.sqrt(dot_square_variance(d_k, COMPONENTS["gaussian"].fourth_moment, COMPONENTS["gaussian"].fourth_moment))
    sizes = [n0 * 4 ** i for i in range(4)]
    rms, predicted, inside = [], [], []
    conf = ctx.config.confidence
    lo_q, hi_q = _chi2_quantile((1 - conf) / 2, replicates), _chi2_quantile((1 + conf) / 2, replicates)
    series = []
    for n in sizes:
        errors = np.empty(replicates)
        for r in range(replicates):
            q, k = rng.standard_normal((n, d_k)), rng.standard_normal((n, d_k))
            errors[r] = np.mean(np.einsum("ij,ij->i", q, k) ** 2) - exact
        value = math.sqrt(np.mean(errors ** 2))
        pred = sd_one / math.sqrt(n)
        # R·RMS²/σ² ≈ χ²(R) when the errors are near-normal (CLT at these N).
        ratio2 = replicates * value ** 2 / pred ** 2
        inside.append(lo_q <= ratio2 <= hi_q)
        rms.append(value)
        predicted.append(pred)
        series.append({"n_samples": n, "rms_error": value, "predicted": pred, "mean_error": float(np.mean(errors))})
    slope = float(np.polyfit(np.log(sizes), np.log(rms), 1)[0])
    ctx.data["error_vs_samples"] = {"d_k": d_k, "replicates": replicates, "points": series, "slope": slope}
    ctx.add(ClaimResult(
        id="S7.3", chapter="faq", claim_en="Var(q·k) = d_k is exact, not approximate: the estimate's error shrinks as 1/√samples around d_k",
        claim_zh="Var(q·k) = d_k 是精确的而非近似：估计误差以 1/√样本数 的速度收敛到 d_k",
        seed_value="d_k", method="Monte Carlo",
        expected=f"RMS error = √(Var((q·k)²)/N) = {sd_one:.1f}/√N at d_k = 64 (each within its {ctx.level} χ² band), slope −0.5",
        measured="; ".join(f"N={s['n_samples']}: {s['rms_error']:.3g} (pred {s['predicted']:.3g})" for s in series)
                 + f"; fitted slope {slope:.3f}",
        verdict="holds" if all(inside) else "fails", n_samples=replicates * sum(sizes),
        note=f"{replicates} replicates per N, Gaussian components; the exactness itself is S2.1 (symbolic)"))
