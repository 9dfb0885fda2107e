"""Group 2: under the seed's assumptions (iid components, mean 0, variance 1), q·k has mean 0 and
variance d_k — symbolically for small d_k, and by Monte Carlo from d_k = 1 to 4096 for four component
distributions (Gaussian, uniform, Rademacher, Student-t with 5 degrees of freedom, all scaled to
variance 1).

The Monte Carlo estimator of Var(q·k) is the mean of (q·k)² (the mean is known to be 0, as in the
seed's proof), over all query–key pairs of each batch (``montecarlo.dot_variance_estimates``). Its interval is valid when (q·k)² has a finite variance, i.e. E[(q·k)⁴] < ∞, which
needs E qᵢ⁴ < ∞: true for all four — Student-t(5) has finite moments of order < 5, and its 4th moment
(scaled to variance 1) is 3(ν−2)/(ν−4) = 9. Its 6th moment is infinite, so the CLT still holds but
converges more slowly (no Berry–Esseen rate); batch means (see ``attnscale.montecarlo``) keep the
interval honest, and the widths show it needs more samples.
"""

from __future__ import annotations

import math

import numpy as np

from attnscale.claims.context import Context
from attnscale.claims.register import claim
from attnscale.claims.result import bracketed, clauses, interval_text, judge_all, judge_equal, judge_rising, level_text
from attnscale.i18n import N_, _
from attnscale.montecarlo import Estimate, dot_variance_estimates, quantile_ci, t_quantile, z_quantile
from attnscale.theory import (
    COMPONENTS,
    pair_mean_variance,
    samples_for_relative_ci,
    symbolic_dot_mean,
    symbolic_dot_square,
    symbolic_dot_variance,
)

D_KS = tuple(2**i for i in range(13))  # 1 … 4096
HIST_D_KS = (4, 64, 512)
CHUNK_ELEMENTS = 2**21  # random numbers per draw call (16 MiB of float64)
# S2.4–S2.7: one per component law of attnscale.theory.COMPONENTS, in its order. The same English (the
# law is told by {how_drawn}); the Chinese names the law, so each has its claim id as its context.
VARIANCE_CLAIMS = {
    "gaussian": ("S2.4", N_("Var(q·k) = d_k for d_k = 1…{top}, {how_drawn} components", "S2.4")),
    "uniform": ("S2.5", N_("Var(q·k) = d_k for d_k = 1…{top}, {how_drawn} components", "S2.5")),
    "rademacher": ("S2.6", N_("Var(q·k) = d_k for d_k = 1…{top}, {how_drawn} components", "S2.6")),
    "student_t5": ("S2.7", N_("Var(q·k) = d_k for d_k = 1…{top}, {how_drawn} components", "S2.7")),
}


def run(ctx: Context) -> None:
    _symbolic(ctx)
    _growth(ctx)
    ctx.tick(N_("symbolic expansion; |q·k| growth"))
    families = variance_families(ctx)
    n_tests = sum(len(est) for est in families.values())
    for name, est in families.items():
        _variance_claim(ctx, name, est, ctx.config.confidence, n_tests)
    ctx.tick(N_("Var(q·k) by Monte Carlo"))


def _symbolic(ctx: Context) -> None:
    rows = []
    for d in range(1, 9):
        expectation, n_terms, unit, zero = symbolic_dot_square(d)
        rows.append((d, expectation, n_terms, unit, zero))
    ok = all(e == d and n == d * d and g == d and c == d * d - d for d, e, n, g, c in rows)
    ctx.add(
        claim(
            "S2.1",
            N_("E[(Σᵢ qᵢkᵢ)²] = d_k: d_k diagonal terms of mean 1, d_k² − d_k cross terms of mean 0"),
            expected=lambda: _("E = d_k, terms = d_k + (d_k² − d_k), for d_k = 1…8"),
            measured=lambda: _(
                "{rows} (all {count} checked)",
                count=len(rows),
                rows=clauses((f"d_k={d}: E={e}, {n}={g}+{c}" for d, e, n, g, c in rows[::3])),
            ),
            verdict="holds" if ok else "fails",
            note=lambda: _(
                "sympy expands the square; each product of the expansion is counted by its expectation (1 or 0) under the moment rules E x = 0, E x² = 1 — the counts come from the expansion, not from an index grid"
            ),
        )
    )
    variance, _formula, _difference = symbolic_dot_variance(1)
    mean = symbolic_dot_mean(1)
    import sympy

    mq, mk = sympy.symbols("mu_q mu_k", real=True)
    vq, vk = sympy.symbols("sigma_q2 sigma_k2", positive=True)
    seed = {mq: 0, mk: 0, vq: 1, vk: 1}
    seed_case = sympy.simplify(variance.subs(seed))
    seed_mean = sympy.simplify(mean.subs(seed))
    ctx.add(
        claim(
            "S2.2",
            N_("a single product qᵢkᵢ of independent mean-0, variance-1 numbers has mean 0 and variance 1 × 1 = 1"),
            expected=lambda: _(
                "E[qᵢkᵢ] = μ_qμ_k → 0 and Var(qᵢkᵢ) = σ_q²σ_k² + μ_q²σ_k² + μ_k²σ_q² → 1 at μ = 0, σ² = 1"
            ),
            measured=lambda: _(
                "E[qᵢkᵢ] = {mean}, Var(qᵢkᵢ) = {variance}; at the blog post's assumptions: mean {seed_mean}, variance {seed_variance}",
                mean=mean,
                variance=variance,
                seed_mean=seed_mean,
                seed_variance=seed_case,
            ),
            verdict="holds" if seed_case == 1 and seed_mean == 0 else "fails",
        )
    )


def _growth(ctx: Context) -> None:
    """|q·k| grows with d_k (Gaussian components); the histograms before and after ÷√d_k."""
    rng = ctx.rng("dot histograms")
    n = 4000 if ctx.config.quick else 40000
    medians, hist = {}, {}
    for d in HIST_D_KS:
        dots = np.empty(n)
        rows = max(1, CHUNK_ELEMENTS // (2 * d))
        for start in range(0, n, rows):
            m = min(rows, n - start)
            q, k = rng.standard_normal((m, d)), rng.standard_normal((m, d))
            dots[start : start + m] = np.einsum("ij,ij->i", q, k)
        medians[d] = quantile_ci(np.abs(dots), 0.5, ctx.config.confidence)
        edges = np.linspace(-5 * math.sqrt(d), 5 * math.sqrt(d), 81)
        counts, _edges = np.histogram(dots, edges)
        hist[str(d)] = {
            "d_k": d,
            "n_samples": n,
            "edges_unscaled": edges,
            "edges_scaled": edges / math.sqrt(d),
            "counts": counts,
            "outside": int(n - counts.sum()),
            "std_unscaled": float(np.std(dots)),
            "std_scaled": float(np.std(dots / math.sqrt(d))),
        }
    ctx.data["dot_histograms"] = hist
    grows = judge_rising(medians[d][1:] for d in HIST_D_KS)
    small, large = HIST_D_KS[0], HIST_D_KS[-1]
    ratio = medians[large][0] / medians[small][0]
    ctx.add(
        claim(
            "S2.3",
            N_("adding more terms makes |q·k| larger: d_k = 512 gives much larger dot products than d_k = 4"),
            expected=lambda: _(
                "median |q·k| increases with d_k ({level} CIs separated), roughly ∝ √d_k", level=ctx.level
            ),
            measured=lambda: bracketed(
                _(
                    "{medians}; ratio {large}/{small} = {ratio:.2f} (√{quotient} = {root:.2f})",
                    ratio=ratio,
                    large=large,
                    small=small,
                    quotient=large // small,
                    root=math.sqrt(large / small),
                    medians=clauses((f"d_k={d}: {interval_text(*medians[d], spec='.3g')}" for d in HIST_D_KS), ","),
                ),
                ctx.level,
            ),
            estimate=medians[large][0],
            ci_low=medians[large][1],
            ci_high=medians[large][2],
            n_samples=n,
            verdict=grows,
            note=lambda: _("Gaussian components; median of |q·k| with a distribution-free order-statistic interval"),
        )
    )


def variance_families(ctx: Context) -> dict[str, list[Estimate]]:
    """E[(q·k)²] at every d_k of D_KS for every component distribution (computed once per run); also
    stores the ``variance_vs_dk`` series."""

    def compute():
        families = {}
        for i, name in enumerate(COMPONENTS):

            def within(done, total, _, i=i, name=name):
                ctx.tick(f"Var(q·k), {name}", (i + (done / total if total else 0.0)) / len(COMPONENTS))

            families[name] = _variance_family(ctx, name, within)
        ctx.data["variance_vs_dk"] = {name: _series(est) for name, est in families.items()}
        return families

    return ctx.shared("variance families", compute)


def _variance_family(ctx: Context, name: str, progress=None) -> list[Estimate]:
    """E[(q·k)²] at every d_k of D_KS; the family draws about ``draw_cap`` random numbers in all."""
    cfg = ctx.config
    return dot_variance_estimates(
        name,
        D_KS,
        rng=ctx.rng(f"variance {name}"),
        max_samples=[max(cfg.draw_cap // (4 * d), 1) for d in D_KS],
        rel_ci_target=cfg.rel_ci_target,
        confidence=cfg.confidence,
        chunk_elements=CHUNK_ELEMENTS,
        progress=progress,
    )


def bonferroni_level(confidence: float, family_size: int) -> float:
    """1 − (1 − confidence)/family_size: the level at which each of a family's intervals is judged."""
    return 1.0 - (1.0 - confidence) / family_size


def widened(est: Estimate, confidence: float, family_size: int) -> tuple[float, float]:
    """The interval at the Bonferroni level 1 − (1 − confidence)/family_size: every interval of a family
    of ``family_size`` then covers its truth at once with probability ≥ confidence."""
    if est.n_batches < 2:
        return -math.inf, math.inf
    level = bonferroni_level(confidence, family_size)
    factor = t_quantile(0.5 + level / 2.0, est.n_batches - 1) / t_quantile(0.5 + confidence / 2.0, est.n_batches - 1)
    return est.value - est.half_width * factor, est.value + est.half_width * factor


def standard_error(est: Estimate, confidence: float) -> float:
    """The standard error behind an interval: its half-width over the t quantile it used."""
    if est.n_batches < 2:
        return math.inf
    return est.half_width / t_quantile(0.5 + confidence / 2.0, est.n_batches - 1)


def _series(est: list[Estimate]) -> dict:
    return {
        "d_k": list(D_KS),
        "estimate": [e.value for e in est],
        "ci_low": [e.ci_low for e in est],
        "ci_high": [e.ci_high for e in est],
        "n_samples": [e.n_samples for e in est],
        "converged": [e.converged for e in est],
        "scaled": {
            "estimate": [e.value / d for e, d in zip(est, D_KS)],
            "ci_low": [e.ci_low / d for e, d in zip(est, D_KS)],
            "ci_high": [e.ci_high / d for e, d in zip(est, D_KS)],
        },
    }


def equality_verdicts(intervals: list[tuple[float, float]], values, margin: float) -> list[str]:
    """judge_equal for each (interval, claimed value)."""
    return [judge_equal(lo, hi, v, margin) for (lo, hi), v in zip(intervals, values)]


def widest(intervals: list[tuple[float, float]], values) -> tuple[float, int]:
    """(largest relative half-width of the intervals around their claimed values, its index)."""
    rel = [max(v - lo, hi - v) / abs(v) for (lo, hi), v in zip(intervals, values)]
    i = int(np.argmax(rel))
    return rel[i], i


def margin_text(verdicts: list[str], intervals, values, labels, margin: float) -> str:
    """'13/13 inside ±5%' or '12/13 inside ±5%; widest ±5.4% at d_k = 4096' (what decides the verdict)."""
    inside = sum(v == "holds" for v in verdicts)
    rel, i = widest(intervals, values)
    out = _("{inside}/{count} judged intervals inside ±{margin:.0%}", inside=inside, count=len(verdicts), margin=margin)
    if inside == len(verdicts):
        return out
    return _("{inside_text}; widest ±{widest:.1%} at {where}", inside_text=out, widest=rel, where=labels[i])


def _variance_claim(ctx: Context, name: str, est: list[Estimate], confidence: float, n_tests: int) -> None:
    comp = COMPONENTS[name]
    margin = ctx.config.margin
    cover99 = [e.covers(d) for e, d in zip(est, D_KS)]
    wide = [widened(e, confidence, n_tests) for e in est]
    verdicts = equality_verdicts(wide, D_KS, margin)
    se = [standard_error(e, confidence) for e in est]
    z = [(e.value - d) / s if s > 0 else 0.0 for e, d, s in zip(est, D_KS, se)]
    worst = int(np.argmax(np.abs(z)))
    converged = sum(e.converged for e in est)
    top = est[-1]
    batch = top.n_samples // top.n_batches
    sd_theory = math.sqrt(pair_mean_variance(D_KS[-1], comp.fourth_moment, comp.fourth_moment, batch) / top.n_batches)
    judged_at = bonferroni_level(confidence, n_tests)
    needed = samples_for_relative_ci(
        D_KS[-1], comp.fourth_moment, ctx.config.rel_ci_target, z_quantile(0.5 + confidence / 2), batch
    )

    def note() -> str:
        text = _(
            "inconclusive = every interval covers d_k but not all are inside ±{margin:.0%}: more samples needed to say 'equal' at that precision; each batch of {batch} draws of q and of k averages (qᵢ·kⱼ)² over all {batch}² pairs; worst d_k = {worst} at {z:+.2f} standard errors; at d_k = 4096 the closed-form standard error is {closed_form:.1f} vs the batch-means {batch_means:.1f}; ±{target:.0%} at d_k = 4096 needs ≈ {needed:,} draws (closed form); E qᵢ⁴ = {fourth:g}",
            margin=margin,
            batch=batch,
            worst=D_KS[worst],
            z=z[worst],
            closed_form=sd_theory,
            batch_means=se[-1],
            target=ctx.config.rel_ci_target,
            needed=needed,
            fourth=comp.fourth_moment,
        )
        if not math.isfinite(comp.finite_moments_below):
            return text
        return _(
            "{note}; moments finite only below order {order:g}: the interval is valid (4th moment finite) but the CLT converges slowly (no 6th moment)",
            note=text,
            order=comp.finite_moments_below,
        )

    cid, statement = VARIANCE_CLAIMS[name]
    ctx.add(
        claim(
            cid,
            statement,
            top=D_KS[-1],
            how_drawn=lambda: _(comp.how_drawn),
            expected=lambda: _(
                "every interval covers d_k and lies within d_k·(1 ± {margin:.0%}) (equivalence margin; {count} d_k values, judged at the Bonferroni level {judged_at} over all {n_tests})",
                margin=margin,
                count=len(D_KS),
                judged_at=level_text(judged_at),
                n_tests=n_tests,
            ),
            measured=lambda: _(
                "{covered}/{count} per-estimate {level} CIs cover d_k; {margin_text}; d_k=4096: Var/d_k = {ratio} ({level}), n = {draws:,} draws ({pairs:,} pairs); {converged}/{count} reached ±{target:.0%}",
                covered=sum(cover99),
                count=len(est),
                level=ctx.level,
                margin_text=margin_text(verdicts, wide, D_KS, [f"d_k = {d}" for d in D_KS], margin),
                ratio=interval_text(top.value / D_KS[-1], top.ci_low / D_KS[-1], top.ci_high / D_KS[-1], ".4f"),
                draws=top.n_samples,
                pairs=top.n_samples * batch,
                converged=converged,
                target=ctx.config.rel_ci_target,
            ),
            # the interval stored is the one judged: d_k = 4096's at the Bonferroni level
            estimate=top.value,
            ci_low=wide[-1][0],
            ci_high=wide[-1][1],
            ci_level=judged_at,
            n_samples=top.n_samples,
            verdict=judge_all(verdicts),
            margin=margin,
            note=note,
        )
    )
