"""Group 7: the seed's FAQ. (a) For small d_k scaling is "not very important": softmax "behaves well"
(表现良好) either way. (b) Var(q·k) = d_k is exact, not approximate: the Monte Carlo error around the
exact value shrinks as 1/√samples.

(a) is two claims, each with its own verdict. S7.2 checks the seed's own words: at d_k = 4 neither
the unscaled nor the scaled rows saturate (median max weight below S5.2's "nearly all" line, each mode
from its own random stream). S7.4 asks the stronger question the English rendering "behaves about
the same" raises: how much does scaling change the distribution? Measured on the same rows with and
without ÷√d_k (paired: the change itself is the quantity), by the total-variation distance
½Σ|p − p'| (the share of attention that moves) and the change of entropy ÷ ln n. S7.1 compares that
change at d_k = 4 and 64.
"""

from __future__ import annotations

import math

import numpy as np

from attnscale.claims.context import Context
from attnscale.claims.register import claim
from attnscale.claims.result import (
    bracketed,
    by_n_note,
    clauses,
    interval_text,
    judge_all,
    judge_at_most,
    judge_below,
    per_n,
)
from attnscale.i18n import N_, _
from attnscale.claims.saturation import MODES, NEARLY_ALL, draw_logits
from attnscale.montecarlo import quantile_ci
from attnscale.softmax_rows import row_health, softmax
from attnscale.theory import COMPONENTS, dot_square_variance

NS = (3, 16, 128)
NS_TEXT = ", ".join(map(str, NS))  # the n of every claim, as its expected text lists them
SMALL_D_K = 4
BARELY = 0.1  # "barely changes": at most 10% of the attention moves, entropy moves by ≤ 0.1·ln n (median row)
MODE_NAME = {"unscaled": N_("unscaled", "mode"), "scaled": N_("scaled", "mode")}  # saturation.MODES, as said


def _paired_change(ctx: Context, d_k: int, n: int, rows: int) -> tuple[np.ndarray, np.ndarray]:
    """Per row: TV distance between softmax(s) and softmax(s/√d_k), and |ΔH| / ln n, for the same s."""
    rng = ctx.rng(f"faq rows d_k={d_k} n={n}")
    logits = np.sqrt(rng.chisquare(d_k, size=(rows, 1))) * rng.standard_normal((rows, n))
    tv = 0.5 * np.sum(np.abs(softmax(logits) - softmax(logits / math.sqrt(d_k))), axis=-1)
    dh = np.abs(
        row_health(logits, spectral=False).normalized_entropy
        - row_health(logits / math.sqrt(d_k), spectral=False).normalized_entropy
    )
    return tv, dh


def run(ctx: Context) -> None:
    rows = 2000 if ctx.config.quick else 20000
    conf = ctx.config.confidence
    change = {(d, n): _paired_change(ctx, d, n, rows) for d in (SMALL_D_K, 64) for n in NS}
    tv = {key: quantile_ci(v[0], 0.5, conf) for key, v in change.items()}
    dh = {key: quantile_ci(v[1], 0.5, conf) for key, v in change.items()}
    _matters_less_at_small_d_k(ctx, tv, rows)
    _behaves_well(ctx, rows)
    _about_the_same(ctx, tv, dh, rows)
    ctx.tick(N_("small d_k"))
    _error_shrinks(ctx)
    ctx.tick(N_("1/√samples"))


def _matters_less_at_small_d_k(ctx: Context, tv: dict, rows: int) -> None:
    """S7.1: scaling moves less attention at d_k = 4 than at 64; tv: {(d_k, n): median TV distance
    between the rows with and without ÷√d_k, as (value, low, high)}."""
    less = {n: judge_below(tv[(SMALL_D_K, n)][1:], tv[(64, n)][1:]) for n in NS}
    ctx.add(
        claim(
            "S7.1",
            N_("scaling matters less at small d_k: at d_k = 4 it moves far less attention than at d_k = 64"),
            expected=lambda: _(
                "median TV(softmax(s), softmax(s/√d_k)) at d_k = 4 below that at d_k = 64 ({level} CIs separated), n = {ns}",
                level=ctx.level,
                ns=NS_TEXT,
            ),
            measured=lambda: per_n(
                {n: _("{small:.3f} vs {large:.3f}", small=tv[(SMALL_D_K, n)][0], large=tv[(64, n)][0]) for n in NS}
            ),
            verdict=judge_all(less.values()),
            n_samples=rows,
            note=lambda: _(
                "{by_n}; TV = ½Σ|p − p′|, the share of attention that moves; Gaussian q, k", by_n=by_n_note(less)
            ),
        )
    )


def _behaves_well(ctx: Context, rows: int) -> None:
    """S7.2, the seed's words: at d_k = 4 neither the unscaled nor the scaled rows saturate (each mode
    from its own random stream)."""
    conf = ctx.config.confidence
    health = {
        (n, mode): row_health(
            draw_logits(ctx.rng(f"faq behaves well n={n} {mode}"), rows, n, SMALL_D_K, mode), spectral=False
        )
        for n in NS
        for mode in MODES
    }
    top = {key: quantile_ci(h.max_weight, 0.5, conf) for key, h in health.items()}
    ent = {key: quantile_ci(h.normalized_entropy, 0.5, conf) for key, h in health.items()}
    well = {n: judge_all(judge_at_most(*top[(n, mode)][1:], NEARLY_ALL) for mode in MODES) for n in NS}
    worst = max(top, key=lambda key: top[key][0])
    ctx.add(
        claim(
            "S7.2",
            N_(
                "when d_k is small (e.g. 4) scaling is not very important: softmax behaves well either way (no saturation)"
            ),
            expected=lambda: _(
                "'behaves well' read as: not saturated — median max weight ≤ {line:g} ({level} CI at or below S5.2's 'nearly all' line), unscaled and scaled, at d_k = {d_k}, n = {ns}",
                line=NEARLY_ALL,
                level=ctx.level,
                d_k=SMALL_D_K,
                ns=NS_TEXT,
            ),
            measured=lambda: bracketed(
                per_n(
                    {
                        n: _(
                            "max weight unscaled {unscaled}, scaled {scaled}; H/ln n {entropy_unscaled:.3f} / {entropy_scaled:.3f}",
                            unscaled=interval_text(*top[(n, "unscaled")]),
                            scaled=interval_text(*top[(n, "scaled")]),
                            entropy_unscaled=ent[(n, "unscaled")][0],
                            entropy_scaled=ent[(n, "scaled")][0],
                        )
                        for n in NS
                    }
                ),
                ctx.level,
            ),
            estimate=top[worst][0],
            ci_low=top[worst][1],
            ci_high=top[worst][2],
            n_samples=rows,
            verdict=judge_all(well.values()),
            note=lambda: _(
                "{by_n}; the interval shown is the largest median (n = {n}, {mode}); each mode its own rows; the blog post's example (one score, 1 → 0.5) has no softmax to compare; how much scaling changes the rows is S7.4",
                n=worst[0],
                mode=_(MODE_NAME[worst[1]]),
                by_n=by_n_note(well, _("an interval straddles {line:g}", line=NEARLY_ALL)),
            ),
        )
    )


def _about_the_same(ctx: Context, tv: dict, dh: dict, rows: int) -> None:
    """S7.4, the stronger reading: at d_k = 4 the rows barely change with ÷√d_k; tv, dh: {(d_k, n):
    median TV distance and |ΔH| / ln n between the same rows with and without it, (value, low, high)}."""
    barely = {
        n: judge_all([judge_at_most(*tv[(SMALL_D_K, n)][1:], BARELY), judge_at_most(*dh[(SMALL_D_K, n)][1:], BARELY)])
        for n in NS
    }
    ctx.add(
        claim(
            "S7.4",
            N_(
                "a stronger reading of the FAQ: at small d_k (4) softmax behaves about the same with or without scaling"
            ),
            expected=lambda: _(
                "'about the same' read as: median TV distance ≤ {line:g} and median |ΔH|/ln n ≤ {line:g} ({level} CIs), the same rows with and without ÷√{d_k}, n = {ns}",
                d_k=SMALL_D_K,
                line=BARELY,
                level=ctx.level,
                ns=NS_TEXT,
            ),
            measured=lambda: bracketed(
                per_n(
                    {
                        n: _(
                            "TV {tv}, |ΔH|/ln n {dh}",
                            tv=interval_text(*tv[(SMALL_D_K, n)]),
                            dh=interval_text(*dh[(SMALL_D_K, n)]),
                        )
                        for n in NS
                    }
                ),
                ctx.level,
            ),
            estimate=tv[(SMALL_D_K, NS[1])][0],
            ci_low=tv[(SMALL_D_K, NS[1])][1],
            ci_high=tv[(SMALL_D_K, NS[1])][2],
            n_samples=rows,
            verdict=judge_all(barely.values()),
            note=lambda: _(
                "{by_n}; the interval shown is the TV distance at n = {n}; at d_k = 4 scaling halves the logits' spread. "
                "Not the blog post's words (表现良好, 'behaves well', is S7.2): the English 'about the same' says more",
                n=NS[1],
                by_n=by_n_note(barely, _("an interval straddles {line:g}", line=BARELY)),
            ),
        )
    )


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
    sd_one = math.sqrt(
        dot_square_variance(d_k, COMPONENTS["gaussian"].fourth_moment, COMPONENTS["gaussian"].fourth_moment)
    )
    sizes = [n0 * 4**i for i in range(4)]
    rms, predicted, inside = [], [], []
    conf = ctx.config.confidence
    lo_q, hi_q = _chi2_quantile((1 - conf) / 2, replicates), _chi2_quantile((1 + conf) / 2, replicates)
    series = []
    for n in sizes:
        errors = np.empty(replicates)
        for r in range(replicates):
            q, k = rng.standard_normal((n, d_k)), rng.standard_normal((n, d_k))
            errors[r] = np.mean(np.einsum("ij,ij->i", q, k) ** 2) - exact
        value = math.sqrt(np.mean(errors**2))
        pred = sd_one / math.sqrt(n)
        # R·RMS²/σ² ≈ χ²(R) when the errors are near-normal (CLT at these N).
        ratio2 = replicates * value**2 / pred**2
        inside.append(lo_q <= ratio2 <= hi_q)
        rms.append(value)
        predicted.append(pred)
        series.append({"n_samples": n, "rms_error": value, "predicted": pred, "mean_error": float(np.mean(errors))})
    slope = float(np.polyfit(np.log(sizes), np.log(rms), 1)[0])
    ctx.data["error_vs_samples"] = {"d_k": d_k, "replicates": replicates, "points": series, "slope": slope}
    ctx.add(
        claim(
            "S7.3",
            N_("Var(q·k) = d_k is exact, not approximate: the estimate's error shrinks as 1/√samples around d_k"),
            expected=lambda: _(
                "RMS error = √(Var((q·k)²)/N) = {sd:.1f}/√N at d_k = 64 (each within its {level} χ² band), slope −0.5",
                sd=sd_one,
                level=ctx.level,
            ),
            measured=lambda: _(
                "{points}; fitted slope {slope:.3f}",
                slope=slope,
                points=clauses(
                    _(
                        "N={n}: {rms:.3g} (pred {predicted:.3g})",
                        n=s["n_samples"],
                        rms=s["rms_error"],
                        predicted=s["predicted"],
                    )
                    for s in series
                ),
            ),
            verdict="holds" if all(inside) else "fails",
            n_samples=replicates * sum(sizes),
            note=lambda: _(
                "{replicates} replicates per N, Gaussian components; the exactness itself is S2.1 (symbolic)",
                replicates=replicates,
            ),
        )
    )
