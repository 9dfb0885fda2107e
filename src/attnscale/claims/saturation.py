"""Group 5: without scaling, softmax rows saturate as d_k grows (n keys fixed); scaled rows stay put.

Rows are softmax(q·k₁ … q·kₙ) for Gaussian q, kⱼ with iid N(0, 1) components. Given q, the logits
q·kⱼ are iid N(0, ‖q‖²) (rotation invariance), so a row is drawn exactly as ‖q‖·z with
‖q‖² ~ χ²(d_k) and z ~ N(0, Iₙ): n draws per row instead of n·d_k. The same z serve the unscaled
row and the scaled one (÷√d_k) and every d_k, so differences between them are not sampling noise.

We report medians and 10%/90% quantiles as well as means: the typical row and the average row differ.
"""

from __future__ import annotations

import numpy as np

from attnscale.claims.context import Context
from attnscale.claims.result import ClaimResult, judge_all, judge_at_least, judge_below
from attnscale.montecarlo import mean_ci, quantile_ci
from attnscale.softmax import row_health

NS = (16, 128, 1024)
D_KS = (1, 4, 16, 64, 256, 1024, 4096)
FIGURES = ("max_weight", "entropy", "normalized_entropy", "jacobian_frobenius")


def _summary(x: np.ndarray, confidence: float) -> dict:
    med, med_lo, med_hi = quantile_ci(x, 0.5, confidence)
    mean = mean_ci(x, confidence)
    return {"median": med, "median_ci": [med_lo, med_hi], "q10": float(np.quantile(x, 0.1)),
            "q90": float(np.quantile(x, 0.9)), "mean": mean.value, "mean_ci": [mean.ci_low, mean.ci_high]}


def simulate_rows(ctx: Context) -> dict:
    """{n: {"unscaled"|"scaled": {figure: [summary per d_k]}}, "rows": R} — computed once per run."""
    def compute():
        rows = 300 if ctx.config.quick else 3000
        out = {"rows": rows, "d_k": list(D_KS), "n": list(NS), "by_n": {}}
        for n in NS:
            rng = ctx.rng(f"rows n={n}")
            z = rng.standard_normal((rows, n))
            per = {"unscaled": {f: [] for f in FIGURES}, "scaled": {f: [] for f in FIGURES}}
            for d_k in D_KS:
                norm_q = np.sqrt(rng.chisquare(d_k, size=(rows, 1)))
                for mode, factor in (("unscaled", 1.0), ("scaled", 1.0 / np.sqrt(d_k))):
                    health = row_health(norm_q * factor * z, spectral=False)
                    for f in FIGURES:
                        per[mode][f].append(_summary(getattr(health, f), ctx.config.confidence))
            out["by_n"][str(n)] = per
        return out

    return ctx.shared("softmax rows", compute)


def _series(sim: dict, figures: tuple[str, ...]) -> dict:
    """The report's series: per n, per mode, per figure: median/q10/q90/mean lists over d_k."""
    out = {"d_k": sim["d_k"], "rows": sim["rows"], "by_n": {}}
    for n, per in sim["by_n"].items():
        out["by_n"][n] = {mode: {f: {key: [s[key] for s in per[mode][f]]
                                     for key in ("median", "median_ci", "q10", "q90", "mean", "mean_ci")}
                                 for f in figures} for mode in per}
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


def by_n_note(parts: dict, what: str) -> str:
    """Which n a per-n verdict holds, fails, or stays undecided for: "holds for n = 16; inconclusive for …"."""
    groups = [(v, [str(n) for n, x in parts.items() if x == v]) for v in ("holds", "fails", "inconclusive")]
    undecided = "inconclusive" in parts.values() and what
    return "; ".join(f"{v} for n = {', '.join(ns)}" for v, ns in groups if ns) + (f" ({what})" if undecided else "")


def _fmt(s: dict) -> str:
    return f"{s['median']:.3g} [{s['q10']:.3g}–{s['q90']:.3g}]"


def run(ctx: Context) -> None:
    sim = simulate_rows(ctx)
    ctx.data["saturation"] = _series(sim, ("max_weight", "entropy", "normalized_entropy"))
    last, d64 = len(D_KS) - 1, D_KS.index(64)
    by_n = sim["by_n"]
    flat_from = D_KS.index(16)

    # S5.1: median max weight rises toward 1 unscaled.
    # each step separated: lo(4096) > hi(64) and lo(64) > hi(1)
    rising = {n: judge_all(judge_below(ci(mw[i]), ci(mw[j])) for i, j in ((0, d64), (d64, last)))
              for n in NS for mw in [by_n[str(n)]["unscaled"]["max_weight"]]}
    ctx.add(ClaimResult(
        id="S5.1", chapter="without_scaling",
        claim_en="unscaled, one key takes more and more of the attention as d_k grows (median max weight → 1)",
        claim_zh="不缩放时，随 d_k 增大，一个词获得越来越多的注意力（最大权重中位数 → 1）",
        seed_value=None, method="Monte Carlo",
        expected=f"median max weight at d_k = 4096 > at d_k = 64 > at d_k = 1 ({ctx.level} CIs of each step separated), "
                 "for n = 16, 128, 1024",
        measured="; ".join(f"n={n}: d_k=1 {_fmt(by_n[str(n)]['unscaled']['max_weight'][0])}, "
                           f"64 {_fmt(by_n[str(n)]['unscaled']['max_weight'][d64])}, "
                           f"4096 {_fmt(by_n[str(n)]['unscaled']['max_weight'][last])}" for n in NS),
        estimate=by_n[str(NS[-1])]["unscaled"]["max_weight"][last]["median"],
        ci_low=by_n[str(NS[-1])]["unscaled"]["max_weight"][last]["median_ci"][0],
        ci_high=by_n[str(NS[-1])]["unscaled"]["max_weight"][last]["median_ci"][1], n_samples=sim["rows"],
        verdict=judge_all(rising.values()),
        note=by_n_note(rising, "") + "; median [10%–90% quantiles] over rows; Gaussian q, k"))

    # S5.2: the seed's "at d_k = 64 one word gets nearly all the attention (close to 1.0)".
    near_one = {n: judge_at_least(*ci(by_n[str(n)]["unscaled"]["max_weight"][d64]), 0.9) for n in NS}
    ctx.add(ClaimResult(
        id="S5.2", chapter="without_scaling",
        claim_en="at d_k = 64 unscaled, one word gets nearly all the attention (close to 1.0), the others close to 0",
        claim_zh="d_k = 64 不缩放时，一个词几乎获得全部注意力（接近 1.0），其他词接近 0",
        seed_value="1.0", method="Monte Carlo",
        expected=f"'nearly all' read as: median max weight ≥ 0.9 ({ctx.level} CI at or above 0.9), for n = 16, 128, 1024 keys",
        measured="; ".join(f"n={n}: {_fmt(by_n[str(n)]['unscaled']['max_weight'][d64])}" for n in NS),
        estimate=by_n[str(NS[-1])]["unscaled"]["max_weight"][d64]["median"],
        ci_low=by_n[str(NS[-1])]["unscaled"]["max_weight"][d64]["median_ci"][0],
        ci_high=by_n[str(NS[-1])]["unscaled"]["max_weight"][d64]["median_ci"][1], n_samples=sim["rows"],
        verdict=judge_all(near_one.values()),
        note=by_n_note(near_one, "its interval straddles 0.9")
             + "; the more keys, the less extreme the top weight (see S8.3)"))

    # S5.3: entropy → 0 unscaled.
    # each step separated: hi(4096) < lo(64) and hi(64) < lo(1)
    falling = {n: judge_all(judge_below(ci(h[j]), ci(h[i])) for i, j in ((0, d64), (d64, last)))
               for n in NS for h in [by_n[str(n)]["unscaled"]["entropy"]]}
    ctx.add(ClaimResult(
        id="S5.3", chapter="without_scaling",
        claim_en="unscaled, the attention entropy collapses toward 0 as d_k grows (near one-hot rows)",
        claim_zh="不缩放时，随 d_k 增大注意力熵趋向 0（接近 one-hot）",
        seed_value=None, method="Monte Carlo",
        expected=f"median entropy at d_k = 4096 < at 64 < at 1 ({ctx.level} CIs of each step separated), for n = 16, 128, 1024",
        measured="; ".join(f"n={n}: ln n={np.log(n):.2f}, d_k=1 {_fmt(by_n[str(n)]['unscaled']['entropy'][0])}, "
                           f"4096 {_fmt(by_n[str(n)]['unscaled']['entropy'][last])} nats" for n in NS),
        verdict=judge_all(falling.values()), n_samples=sim["rows"], note=by_n_note(falling, "")))

    # S5.4: scaled rows stay put — judged against how far the unscaled rows move over the same d_k.
    ratios, undetected = {}, {}
    for n in NS:
        per = by_n[str(n)]
        ratios[n] = max(drift(per["scaled"][f], per["unscaled"][f], flat_from)[0]
                        / drift(per["scaled"][f], per["unscaled"][f], flat_from)[1] for f in ("max_weight", "entropy"))
        undetected[n] = all(_flat(per["scaled"][f], flat_from) for f in ("max_weight", "entropy"))
    ctx.add(ClaimResult(
        id="S5.4", chapter="why_sqrt",
        claim_en="after ÷√d_k the rows stay put: max weight and entropy barely move with d_k",
        claim_zh="除以 √d_k 之后，行的最大权重和熵几乎不随 d_k 变化",
        seed_value=None, method="Monte Carlo",
        expected="over d_k = 16…4096 the scaled medians move by ≤ 10% of what the unscaled medians move, each n",
        measured="; ".join(f"n={n}: max weight {_fmt(by_n[str(n)]['scaled']['max_weight'][flat_from])} → "
                           f"{_fmt(by_n[str(n)]['scaled']['max_weight'][last])}, drift ratio {ratios[n]:.3f}" for n in NS),
        verdict="holds" if all(r <= 0.1 for r in ratios.values()) else "fails", n_samples=sim["rows"],
        note=("a residual drift is " + ("not detectable" if all(undetected.values()) else
              f"detectable ({ctx.level} CIs of the medians share no common value) for n = "
              + ", ".join(str(n) for n in NS if not undetected[n]))
              + ": the scaled logits are (‖q‖/√d_k)·z and ‖q‖/√d_k spreads by ≈ 1/√(2d_k) around 1, "
                "so rows at small d_k are a mixture of temperatures")))
    ctx.tick("saturation")
