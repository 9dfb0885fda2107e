"""Group 5: without scaling, softmax rows saturate as d_k grows (n keys fixed); scaled rows stay put.

Rows are softmax(q·k₁ … q·kₙ) for Gaussian q, kⱼ with iid N(0, 1) components. Given q, the logits
q·kⱼ are iid N(0, ‖q‖²) (rotation invariance), so a row is drawn exactly as ‖q‖·z with
‖q‖² ~ χ²(d_k) and z ~ N(0, Iₙ): n draws per row instead of n·d_k.

Every estimate has its own random stream, one per (n, d_k, mode): no draw is shared between d_k or
between the unscaled and the scaled rows, so each interval is a statement about its own estimate,
not conditional on one draw that all of them share (an atypical shared draw moved every estimate of
an n the same way, outside their intervals). Comparisons between estimates (steps in d_k, unscaled
against scaled) are then comparisons of independent intervals.

We report medians and 10%/90% quantiles as well as means: the typical row and the average row differ.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial

import numpy as np

from attnscale.claims.context import Context
from attnscale.claims.register import claim
from attnscale.claims.result import (
    by_n_note,
    clauses,
    judge_all,
    judge_at_least,
    judge_below,
    judge_falling,
    judge_rising,
    per_n,
)
from attnscale.i18n import N_, _
from attnscale.montecarlo import mean_ci, quantile_ci
from attnscale.softmax_rows import row_health

NS = (16, 128, 1024)
D_KS = (1, 4, 16, 32, 64, 128, 256, 1024, 4096)
MODES = ("unscaled", "scaled")
FIGURES = ("max_weight", "entropy", "normalized_entropy", "jacobian_frobenius")
NEARLY_ALL = 0.9  # S5.2's reading of "nearly all the attention": median max weight ≥ 0.9
NS_TEXT = ", ".join(map(str, NS))  # the n of every claim, as its expected text lists them
LAST, D64 = len(D_KS) - 1, D_KS.index(64)  # the indices of d_k = 4096 and of the seed's d_k = 64
STEPS = (0, D64, LAST)  # S5.1, S5.3 judge the steps d_k = 1 → 64 → 4096
FLAT_FROM = D_KS.index(16)  # "stays put" (S5.4, S6.2) is judged from d_k = 16 on


def _summary(x: np.ndarray, confidence: float) -> dict:
    med, med_lo, med_hi = quantile_ci(x, 0.5, confidence)
    mean = mean_ci(x, confidence)
    return {
        "median": med,
        "median_ci": [med_lo, med_hi],
        "q10": float(np.quantile(x, 0.1)),
        "q90": float(np.quantile(x, 0.9)),
        "mean": mean.value,
        "mean_ci": [mean.ci_low, mean.ci_high],
    }


def stream(n: int, d_k: int, mode: str) -> str:
    """The name of the random stream of one estimate (see ``Context.rng``)."""
    return f"rows n={n} d_k={d_k} {mode}"


def draw_logits(rng: np.random.Generator, rows: int, n: int, d_k: int, mode: str) -> np.ndarray:
    """(rows, n) logits q·kⱼ (÷√d_k when ``mode`` is "scaled") of Gaussian q, kⱼ: ‖q‖·z, exactly."""
    norm_q = np.sqrt(rng.chisquare(d_k, size=(rows, 1)))
    factor = 1.0 if mode == "unscaled" else 1.0 / math.sqrt(d_k)
    return norm_q * factor * rng.standard_normal((rows, n))


def summarise_rows(
    rng_for: Callable[[str], np.random.Generator],
    rows: int,
    ns=NS,
    d_ks=D_KS,
    confidence: float = 0.99,
    progress: Callable[[float], None] | None = None,
) -> dict:
    """{"rows", "d_k", "n", "by_n": {n: {mode: {figure: [summary per d_k]}}}}, each (n, d_k, mode)
    drawn from its own stream ``rng_for(stream(n, d_k, mode))``."""
    out = {"rows": rows, "d_k": list(d_ks), "n": list(ns), "by_n": {}, "streams": "independent, one per (n, d_k, mode)"}
    steps, done = len(ns) * len(d_ks) * len(MODES), 0
    for n in ns:
        per = {mode: {f: [] for f in FIGURES} for mode in MODES}
        for d_k in d_ks:
            for mode in MODES:
                health = row_health(draw_logits(rng_for(stream(n, d_k, mode)), rows, n, d_k, mode), spectral=False)
                for f in FIGURES:
                    per[mode][f].append(_summary(getattr(health, f), confidence))
                done += 1
                if progress is not None:
                    progress(done / steps)
        out["by_n"][str(n)] = per
    return out


def simulate_rows(ctx: Context) -> dict:
    """The rows of groups 5, 6 and 8, computed once per run."""
    rows = 300 if ctx.config.quick else 3000
    return ctx.shared(
        "softmax rows",
        lambda: summarise_rows(
            ctx.rng,
            rows,
            confidence=ctx.config.confidence,
            progress=lambda f: ctx.tick(N_("saturation: softmax rows"), f),
        ),
    )


def first_from(verdicts: list[str]) -> int | None:
    """The first index from which every verdict is "holds" (None if the last one is not)."""
    i = len(verdicts)
    while i > 0 and verdicts[i - 1] == "holds":
        i -= 1
    return i if i < len(verdicts) else None


def crossover(lower: list[dict], upper: list[dict], d_ks) -> dict:
    """Where the medians of ``lower`` drop below those of ``upper`` for good, on the grid ``d_ks``:
    {"d_k": the first grid d_k from which on the two intervals are separated that way at every larger
    d_k (None: not even at the last), "above_at": the grid d_k before it, "interpolated": where the
    difference of the medians last changes sign before "d_k" (log-linear between the two grid points
    around it; None if it never is ≥ 0 before), "per_d_k": the judge_below verdict at each d_k}."""
    per = [judge_below(ci(a), ci(b)) for a, b in zip(lower, upper)]
    i = first_from(per)
    out = {
        "d_k": None if i is None else d_ks[i],
        "above_at": None if not i else d_ks[i - 1],
        "interpolated": None,
        "per_d_k": per,
    }
    diff = [a["median"] - b["median"] for a, b in zip(lower, upper)]
    end = len(d_ks) if i is None else i
    j = max((k for k in range(end) if diff[k] >= 0), default=None)
    if j is not None and j + 1 < len(d_ks) and diff[j + 1] < 0:
        t = diff[j] / (diff[j] - diff[j + 1])
        out["interpolated"] = float(math.exp(math.log(d_ks[j]) + t * (math.log(d_ks[j + 1]) - math.log(d_ks[j]))))
    return out


def _series(sim: dict, figures: tuple[str, ...]) -> dict:
    """The report's series: per n, per mode, per figure: median/q10/q90/mean lists over d_k."""
    out = {"d_k": sim["d_k"], "rows": sim["rows"], "streams": sim["streams"], "by_n": {}}
    for n, per in sim["by_n"].items():
        out["by_n"][n] = {
            mode: {
                f: {
                    key: [s[key] for s in per[mode][f]]
                    for key in ("median", "median_ci", "q10", "q90", "mean", "mean_ci")
                }
                for f in figures
            }
            for mode in per
        }
    return out


def _flat(summaries: list[dict], start: int) -> bool:
    """The medians' intervals from index ``start`` on share a common value: no detectable drift."""
    lows = [s["median_ci"][0] for s in summaries[start:]]
    highs = [s["median_ci"][1] for s in summaries[start:]]
    return max(lows) <= min(highs)


def drift(scaled: list[dict], unscaled: list[dict], start: int) -> tuple[float, float]:
    """(range of the scaled medians, range of the unscaled medians) over d_k from index ``start`` on."""
    a = [s["median"] for s in scaled[start:]]
    b = [s["median"] for s in unscaled[start:]]
    return max(a) - min(a), max(b) - min(b)


def ci(s: dict, key: str = "median_ci") -> tuple[float, float]:
    """A summary's interval as (lo, hi), for the judges of ``attnscale.claims.result``."""
    return s[key][0], s[key][1]


def median_fields(s: dict) -> dict:
    """A summary's median and its interval as the ClaimResult fields that show them."""
    return {"estimate": s["median"], "ci_low": s["median_ci"][0], "ci_high": s["median_ci"][1]}


STAYS_PUT = 0.1  # S5.4, S6.2: "barely move" = the scaled medians move ≤ 10% of what the unscaled ones move


def stays_put(ratio: float, undetectable: bool) -> str:
    """S5.4/S6.2 for one n: "holds" when the drift ratio is at most STAYS_PUT; above it "fails" only when
    the scaled medians' drift is detectable (their intervals share no common value), else it may be
    sampling noise: "inconclusive"."""
    if ratio <= STAYS_PUT:
        return "holds"
    return "inconclusive" if undetectable else "fails"


def judge_stays_put(figures_by_n: dict, start: int) -> tuple[dict, str]:
    """S5.4, S6.2: do the scaled medians stay put over d_k from index ``start`` of D_KS on, measured
    against how far the unscaled ones move? ``figures_by_n`` maps each n to its figures, each a pair
    (scaled, unscaled) of summary lists over D_KS. Returns ({n: (drift ratio, undetectable)}, the
    verdict over all n): an n's drift ratio is the largest over its figures of the scaled medians'
    range over the unscaled medians' range; its drift is undetectable when, in every figure, the
    scaled medians' intervals share a common value."""
    per = {}
    for n, figures in figures_by_n.items():
        ratios = [a / b for a, b in (drift(scaled, unscaled, start) for scaled, unscaled in figures)]
        per[n] = (max(ratios), all(_flat(scaled, start) for scaled, _unscaled in figures))
    return per, judge_all(stays_put(ratio, undetectable) for ratio, undetectable in per.values())


def stays_put_words(per: dict, level: str, start: int) -> tuple[str, str]:
    """The criterion of :func:`judge_stays_put` as a claim's ``expected`` says it, and the opening of
    its note: whether, and for which n, a residual drift of the scaled medians is detectable."""
    expected = _(
        "over d_k = {first}…{last} the scaled medians move by ≤ {share:.0%} of what the unscaled medians move, each n (a larger move fails only when detectable: the {level} CIs share no common value)",
        first=D_KS[start],
        last=D_KS[-1],
        share=STAYS_PUT,
        level=level,
    )
    detectable = [str(n) for n, (_drift, undetectable) in per.items() if not undetectable]
    if not detectable:
        return expected, _("a residual drift is not detectable")
    return expected, _(
        "a residual drift is detectable ({level} CIs of the medians share no common value) for n = {ns}",
        level=level,
        ns=", ".join(detectable),
    )


def median_text(s: dict, level: str) -> str:
    """A summary's median with the interval its verdicts rest on, labelled: "0.236 (99% CI 0.228–0.256)".
    (The rows' own spread, the 10%–90% quantiles, is in the report's figures.)"""
    lo, hi = s["median_ci"]
    return _(
        "{median} ({level} CI {low}–{high})",
        median=f"{s['median']:.3g}",
        level=level,
        low=f"{lo:.3g}",
        high=f"{hi:.3g}",
    )


def run(ctx: Context) -> None:
    sim = simulate_rows(ctx)
    ctx.data["saturation"] = _series(sim, ("max_weight", "entropy", "normalized_entropy"))
    by_n = sim["by_n"]
    unscaled = {f: {n: by_n[str(n)]["unscaled"][f] for n in NS} for f in ("max_weight", "entropy")}
    _max_weight_rises(ctx, unscaled["max_weight"], sim["rows"])
    _nearly_all_at_64(ctx, unscaled["max_weight"], sim["rows"])
    _entropy_collapses(ctx, unscaled["entropy"], sim["rows"])
    _scaled_rows_stay_put(ctx, by_n, sim["rows"])
    ctx.tick(N_("saturation"))


def shown_median(ctx: Context) -> Callable[[dict], str]:
    """How every measured text shows a median, at the configured level: shown_median(ctx)(s)."""
    return partial(median_text, level=ctx.level)


def _max_weight_rises(ctx: Context, max_weight: dict, rows: int) -> None:
    """S5.1: unscaled, the median max weight rises toward 1; max_weight: {n: summaries by d_k}."""
    med = shown_median(ctx)
    # each step separated: lo(4096) > hi(64) and lo(64) > hi(1)
    rising = {n: judge_rising(ci(mw[i]) for i in STEPS) for n, mw in max_weight.items()}
    ctx.add(
        claim(
            "S5.1",
            N_("unscaled, one key takes more and more of the attention as d_k grows (median max weight → 1)"),
            expected=lambda: _(
                "median max weight at d_k = 4096 > at d_k = 64 > at d_k = 1 ({level} CIs of each step separated), for n = {ns}",
                level=ctx.level,
                ns=NS_TEXT,
            ),
            measured=lambda: per_n(
                {
                    n: _(
                        "d_k=1 {at_1}, 64 {at_64}, 4096 {at_4096}",
                        at_1=med(mw[0]),
                        at_64=med(mw[D64]),
                        at_4096=med(mw[LAST]),
                    )
                    for n, mw in max_weight.items()
                }
            ),
            **median_fields(max_weight[NS[-1]][LAST]),
            n_samples=rows,
            verdict=judge_all(rising.values()),
            note=lambda: _("{by_n}; medians over rows; Gaussian q, k", by_n=by_n_note(rising)),
        )
    )


def _nearly_all_at_64(ctx: Context, max_weight: dict, rows: int) -> None:
    """S5.2: the seed's "at d_k = 64 one word gets nearly all the attention (close to 1.0)", and the d_k
    from which it would hold; max_weight: {n: unscaled summaries by d_k}."""
    med = shown_median(ctx)
    near_one = {n: judge_at_least(*ci(mw[D64]), NEARLY_ALL) for n, mw in max_weight.items()}
    # the d_k from which it would hold: the median's interval at or above the line there and beyond
    from_dk = {n: first_from([judge_at_least(*ci(s), NEARLY_ALL) for s in mw]) for n, mw in max_weight.items()}
    ctx.data["saturation"]["nearly_all"] = {
        "threshold": NEARLY_ALL,
        "at_d_k": 64,
        "holds_from_d_k": {str(n): None if i is None else D_KS[i] for n, i in from_dk.items()},
    }
    ctx.add(
        claim(
            "S5.2",
            N_("at d_k = 64 unscaled, one word gets nearly all the attention (close to 1.0), the others close to 0"),
            expected=lambda: _(
                "'nearly all' read as: median max weight ≥ {line:g} ({level} CI at or above {line:g}), for n = {ns} keys",
                line=NEARLY_ALL,
                level=ctx.level,
                ns=NS_TEXT,
            ),
            measured=lambda: per_n({n: med(mw[D64]) for n, mw in max_weight.items()}),
            **median_fields(max_weight[NS[-1]][D64]),
            n_samples=rows,
            verdict=judge_all(near_one.values()),
            note=lambda: _(
                "{by_n}; on the grid d_k = {grid} it would hold from d_k = {from_d_k}; the more keys, the less extreme the top weight (see S8.3)",
                grid=", ".join(map(str, D_KS)),
                by_n=by_n_note(near_one, _("its interval straddles {line:g}", line=NEARLY_ALL)),
                from_d_k=clauses(
                    (
                        _("{d_k} (n={n})", n=n, d_k=_("none", msgctxt="d_k") if i is None else D_KS[i])
                        for n, i in from_dk.items()
                    ),
                    ",",
                ),
            ),
        )
    )


def _entropy_collapses(ctx: Context, entropy: dict, rows: int) -> None:
    """S5.3: unscaled, the median row entropy falls toward 0; entropy: {n: summaries by d_k}."""
    med = shown_median(ctx)
    # each step separated: hi(4096) < lo(64) and hi(64) < lo(1)
    falling = {n: judge_falling(ci(h[i]) for i in STEPS) for n, h in entropy.items()}
    ctx.add(
        claim(
            "S5.3",
            N_("unscaled, the attention entropy collapses toward 0 as d_k grows (near one-hot rows)"),
            expected=lambda: _(
                "median entropy at d_k = 4096 < at 64 < at 1 ({level} CIs of each step separated), for n = {ns}",
                level=ctx.level,
                ns=NS_TEXT,
            ),
            measured=lambda: per_n(
                {
                    n: _(
                        "ln n={ln_n:.2f}, d_k=1 {at_1}, 4096 {at_4096} nats",
                        ln_n=np.log(n),
                        at_1=med(h[0]),
                        at_4096=med(h[LAST]),
                    )
                    for n, h in entropy.items()
                }
            ),
            verdict=judge_all(falling.values()),
            n_samples=rows,
            note=lambda: by_n_note(falling),
        )
    )


def _scaled_rows_stay_put(ctx: Context, by_n: dict, rows: int) -> None:
    """S5.4: scaled rows stay put, judged against how far the unscaled rows move over the same d_k;
    by_n: simulate_rows' summaries {str(n): {mode: {figure: by d_k}}}."""
    med = shown_median(ctx)
    flat, verdict = judge_stays_put(
        {n: [(by_n[str(n)]["scaled"][f], by_n[str(n)]["unscaled"][f]) for f in ("max_weight", "entropy")] for n in NS},
        FLAT_FROM,
    )
    words = partial(stays_put_words, flat, ctx.level, FLAT_FROM)
    ctx.add(
        claim(
            "S5.4",
            N_("after ÷√d_k the rows stay put: max weight and entropy barely move with d_k"),
            expected=lambda: words()[0],
            measured=lambda: per_n(
                {
                    n: _(
                        "max weight {first} → {last}, drift ratio {ratio:.3f}",
                        first=med(mw[FLAT_FROM]),
                        last=med(mw[LAST]),
                        ratio=flat[n][0],
                    )
                    for n in NS
                    for mw in [by_n[str(n)]["scaled"]["max_weight"]]
                }
            ),
            verdict=verdict,
            n_samples=rows,
            note=lambda: _(
                "{drift}: the scaled logits are (‖q‖/√d_k)·z and ‖q‖/√d_k spreads by ≈ 1/√(2d_k) around 1, so rows at small d_k are a mixture of temperatures",
                drift=words()[1],
            ),
        )
    )
