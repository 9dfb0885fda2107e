"""Group 6: vanishing gradients. The gradient reaching the logits is J·g with J = diag(p) − ppᵀ; its
Frobenius norm falls toward 0 as rows saturate (unscaled, d_k growing), and stays flat when scaled.

The rows are those of group 5 (``saturation.simulate_rows``). The unscaled curve is not monotone:
near-uniform rows have a small Jacobian too (‖J‖_F ≈ 1/√n), so growing logits first *raise* it above
the scaled one; it drops below the scaled one only past a crossover d_k that grows with n. S6.1 is
judged on the whole curve and reports that crossover for each n (``data["jacobian"]["crossover"]``);
S6.4 asks the question at the seed's own d_k = 64. The median (typical row) and the mean (average row)
tell different stories: a few rows with near-ties at the top keep a sizeable gradient.
"""

from __future__ import annotations

from functools import partial

from attnscale.claims.context import Context
from attnscale.claims.register import claim
from attnscale.claims.result import by_n_note, judge_all, judge_below, per_n
from attnscale.i18n import N_, _
from attnscale.claims.saturation import (
    D_KS,
    FLAT_FROM,
    LAST,
    NS,
    NS_TEXT,
    _series,
    ci,
    crossover,
    judge_stays_put,
    median_fields,
    shown_median,
    simulate_rows,
    stays_put_words,
)

SEED_D_K = 64  # "in real Transformers d_k is 64, 128 or more": the seed's example
AT_SEED_D_K = D_KS.index(SEED_D_K)


def _crossing_text(c: dict) -> str:
    if c["d_k"] is None:
        return _("not below the scaled one by d_k = {last}", last=D_KS[-1])
    if c["above_at"] is None:
        return _("below the scaled one at every d_k from {d_k}", d_k=c["d_k"])
    if c["interpolated"] is None:
        return _(
            "below the scaled one from d_k = {d_k} on (above or undecided at {above})",
            d_k=c["d_k"],
            above=c["above_at"],
        )
    return _(
        "below the scaled one from d_k = {d_k} on (above or undecided at {above}; the medians cross at d_k ≈ {cross:.0f})",
        d_k=c["d_k"],
        above=c["above_at"],
        cross=c["interpolated"],
    )


def run(ctx: Context) -> None:
    sim = simulate_rows(ctx)
    by_n = sim["by_n"]
    jac = {n: by_n[str(n)] for n in map(str, NS)}
    fro = {n: j["unscaled"]["jacobian_frobenius"] for n, j in jac.items()}
    cross = {n: crossover(f, jac[n]["scaled"]["jacobian_frobenius"], D_KS) for n, f in fro.items()}
    peaks = {n: D_KS[max(range(len(D_KS)), key=lambda i: f[i]["median"])] for n, f in fro.items()}
    ctx.data["jacobian"] = _series(sim, ("jacobian_frobenius",))
    ctx.data["jacobian"]["crossover"] = cross
    ctx.data["jacobian"]["peak_d_k"] = peaks
    _gradient_vanishes(ctx, fro, cross, peaks, sim["rows"])
    _smaller_at_seed_d_k(ctx, jac, fro, sim["rows"])
    _scaled_gradient_flat(ctx, jac, sim["rows"])
    _mean_keeps_more(ctx, jac, sim["rows"])
    ctx.tick(N_("gradients"))


def _falls_past_crossover(c: dict, fro: list[dict]) -> str:
    """S6.1's verdict for one n: past the crossover ``c`` the unscaled median lies below the scaled one
    at every larger d_k, and keeps falling from there to d_k = 4096 (intervals separated); fro: the
    unscaled ‖J‖_F summaries by d_k."""
    if c["d_k"] is None:
        return "fails" if c["per_d_k"][-1] == "fails" else "inconclusive"
    i = D_KS.index(c["d_k"])
    return "holds" if i == LAST or judge_below(ci(fro[LAST]), ci(fro[i])) == "holds" else "inconclusive"


def _gradient_vanishes(ctx: Context, fro: dict, cross: dict, peaks: dict, rows: int) -> None:
    """S6.1, on the whole curve: unscaled, the gradient through softmax vanishes past a crossover d_k;
    fro: {n: unscaled ‖J‖_F summaries by d_k}, cross and peaks: its crossover and peak d_k by n."""
    med = shown_median(ctx)
    falls = {n: _falls_past_crossover(cross[n], f) for n, f in fro.items()}
    ctx.add(
        claim(
            "S6.1",
            N_("unscaled, the gradient through softmax becomes tiny as d_k grows (vanishing gradient)"),
            expected=lambda: _(
                "on the curve d_k = {grid}: past some d_k the unscaled median ‖diag(p) − ppᵀ‖_F lies below the scaled one at every larger d_k and falls on to d_k = 4096 ({level} CIs separated), n = {ns}",
                grid=", ".join(map(str, D_KS)),
                level=ctx.level,
                ns=NS_TEXT,
            ),
            measured=lambda: per_n(
                {
                    n: _(
                        "unscaled {crossing}; peak at d_k = {peak}; 4096 {at_4096}",
                        crossing=_crossing_text(cross[n]),
                        peak=peaks[n],
                        at_4096=med(f[LAST]),
                    )
                    for n, f in fro.items()
                }
            ),
            **median_fields(fro[str(NS[-1])][LAST]),
            n_samples=rows,
            verdict=judge_all(falls.values()),
            note=lambda: _(
                "{by_n}; medians over rows. "
                "Not monotone: below the crossover the unscaled gradient is larger than the scaled one — near-uniform rows have a small Jacobian too (‖J‖_F ≈ 1/√n), so growing logits first raise it; the crossover moves to larger d_k as n grows",
                by_n=by_n_note(falls),
            ),
        )
    )


def _smaller_at_seed_d_k(ctx: Context, jac: dict, fro: dict, rows: int) -> None:
    """S6.4: at the seed's own d_k = 64 unscaled attention already has the smaller gradient; jac: the
    rows' summaries by n, fro: {n: unscaled ‖J‖_F summaries by d_k}."""
    med = shown_median(ctx)
    at64 = {
        n: judge_below(ci(f[AT_SEED_D_K]), ci(jac[n]["scaled"]["jacobian_frobenius"][AT_SEED_D_K]))
        for n, f in fro.items()
    }
    ctx.add(
        claim(
            "S6.4",
            N_("at the d_k of real Transformers (64), unscaled attention already has the smaller gradient"),
            expected=lambda: _(
                "at d_k = {d_k}: unscaled median ‖J‖_F below the scaled one ({level} CIs separated), n = {ns}",
                d_k=SEED_D_K,
                level=ctx.level,
                ns=NS_TEXT,
            ),
            measured=lambda: per_n(
                {
                    n: _(
                        "unscaled {unscaled} vs scaled {scaled}",
                        unscaled=med(f[AT_SEED_D_K]),
                        scaled=med(jac[n]["scaled"]["jacobian_frobenius"][AT_SEED_D_K]),
                    )
                    for n, f in fro.items()
                }
            ),
            verdict=judge_all(at64.values()),
            n_samples=rows,
            note=lambda: _(
                "{by_n}; the blog post's 'd_k is large → gradients vanish' at its own example d_k, Gaussian q, k; 'fails' for an n means the unscaled gradient is the larger one there",
                by_n=by_n_note(at64, _("the intervals overlap")),
            ),
        )
    )


def _scaled_gradient_flat(ctx: Context, jac: dict, rows: int) -> None:
    """S6.2: after ÷√d_k the softmax Jacobian norm stays flat in d_k, judged against how far the
    unscaled one moves; jac: the rows' summaries by n."""
    med = shown_median(ctx)
    flat, verdict = judge_stays_put(
        {n: [(j["scaled"]["jacobian_frobenius"], j["unscaled"]["jacobian_frobenius"])] for n, j in jac.items()},
        FLAT_FROM,
    )
    words = partial(stays_put_words, flat, ctx.level, FLAT_FROM)
    ctx.add(
        claim(
            "S6.2",
            N_("after ÷√d_k the softmax Jacobian norm stays flat in d_k"),
            expected=lambda: words()[0],
            measured=lambda: per_n(
                {
                    n: _(
                        "d_k={d_k} {first}, 4096 {last}, drift ratio {ratio:.3f}",
                        d_k=D_KS[FLAT_FROM],
                        first=med(f[FLAT_FROM]),
                        last=med(f[LAST]),
                        ratio=flat[n][0],
                    )
                    for n, j in jac.items()
                    for f in [j["scaled"]["jacobian_frobenius"]]
                }
            ),
            verdict=verdict,
            n_samples=rows,
            note=lambda: _("{drift} (the spread of ‖q‖/√d_k at small d_k)", drift=words()[1]),
        )
    )


def _mean_keeps_more(ctx: Context, jac: dict, rows: int) -> None:
    """S6.3: unscaled at d_k = 4096, the average row keeps more gradient than the typical row (the
    mean's interval above the median's); jac: the rows' summaries by n."""
    apart = {
        n: judge_below(ci(s), ci(s, "mean_ci"))
        for n, j in jac.items()
        for s in [j["unscaled"]["jacobian_frobenius"][LAST]]
    }
    ctx.add(
        claim(
            "S6.3",
            N_(
                "the average row keeps more gradient than the typical row: near-ties hold the mean up while the median vanishes"
            ),
            expected=lambda: _(
                "unscaled, d_k = 4096: the mean's {level} CI lies above the median's, each n", level=ctx.level
            ),
            measured=lambda: per_n(
                {
                    n: _("mean {mean:.3g} vs median {median:.3g}", mean=s["mean"], median=s["median"])
                    for n, j in jac.items()
                    for s in [j["unscaled"]["jacobian_frobenius"][LAST]]
                }
            ),
            verdict=judge_all(apart.values()),
            n_samples=rows,
            note=lambda: _(
                "{by_n}; so a mean over rows understates how many rows have lost their gradient", by_n=by_n_note(apart)
            ),
        )
    )
