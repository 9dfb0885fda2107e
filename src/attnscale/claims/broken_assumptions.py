"""Group 3: where the seed's assumptions break, Var(q·k) follows the general formula, and ÷√d_k no
longer brings it to 1.

With pairs (qᵢ, kᵢ) independent across i, Var(q·k) = d_k·Var(qᵢkᵢ), and (``attnscale.theory``):
  independent qᵢ, kᵢ, any laws:  Var(qᵢkᵢ) = σ_q²σ_k² + μ_q²σ_k² + μ_k²σ_q²
  jointly Gaussian, Cov = c:     Var(qᵢkᵢ) = σ_q²σ_k² + c² + μ_q²σ_k² + μ_k²σ_q² + 2μ_qμ_k c
Both are derived symbolically here (sympy) and measured by Monte Carlo with Gaussian components. The
variance is estimated without assuming the mean (each batch gives an unbiased sample variance), since
the mean of q·k is now d_k(μ_qμ_k + c) ≠ 0: after ÷√d_k that mean still grows as √d_k.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np

from attnscale.claims.context import Context
from attnscale.claims.iid_variance import CHUNK_ELEMENTS, bonferroni_level, margin_text, widened
from attnscale.claims.register import claim
from attnscale.claims.result import ClaimResult, clauses, interval_text, judge_all, judge_equal, level_text
from attnscale.i18n import N_, _
from attnscale.montecarlo import adaptive_means, batch_plan, prefix_dots
from attnscale.theory import dot_mean, dot_variance, symbolic_dot_variance, symbolic_gaussian_product_variance

D_KS = (64, 512)


@dataclass(frozen=True)
class Case:
    name: str  # an N_ message: translated where shown
    mu_q: float = 0.0
    var_q: float = 1.0
    mu_k: float = 0.0
    var_k: float = 1.0
    cov: float = 0.0

    def describe(self) -> str:
        return f"μ_q={self.mu_q:g}, σ_q²={self.var_q:g}, μ_k={self.mu_k:g}, σ_k²={self.var_k:g}, Cov={self.cov:g}"


CASES = (
    Case(N_("non-zero means"), mu_q=0.5, mu_k=0.5),
    Case(N_("variances ≠ 1"), var_q=4.0, var_k=0.5),
    Case(N_("correlated q and k"), cov=0.5),
    Case(N_("all three"), mu_q=0.5, var_q=2.0, mu_k=-0.5, var_k=1.0, cov=0.5),
)
# S3.3–S3.6: one per case of CASES, in its order
CASE_CLAIM = N_("{case} ({params}): Var(q·k) follows the general formula, not d_k")


def run(ctx: Context) -> None:
    _symbolic(ctx)
    ctx.tick(N_("general variance formulas"))
    rows = []
    n_tests = len(CASES) * len(D_KS)
    judged_at = bonferroni_level(ctx.config.confidence, n_tests)
    for case in CASES:
        for d, e in zip(D_KS, _measure(ctx, case)):
            formula = dot_variance(d, case.mu_q, case.var_q, case.mu_k, case.var_k, case.cov)
            lo, hi = widened(e, ctx.config.confidence, n_tests)
            rows.append(
                {
                    "case": case.name,
                    "params": asdict(case),
                    "d_k": d,
                    "estimate": e.value,
                    "ci_low": e.ci_low,
                    "ci_high": e.ci_high,
                    "n_samples": e.n_samples,
                    "judged_ci": [lo, hi],
                    "verdict": judge_equal(lo, hi, formula, ctx.config.margin),
                    "formula": formula,
                    "iid_prediction": float(d),
                    "covers_formula": lo <= formula <= hi,
                    "excludes_iid": not (e.ci_low <= d <= e.ci_high),
                    "scaled_variance": e.value / d,
                    "scaled_variance_formula": formula / d,
                    "scaled_mean": dot_mean(d, case.mu_q, case.mu_k, case.cov) / math.sqrt(d),
                }
            )
    ctx.data["broken_assumptions"] = rows
    for i, case in enumerate(CASES, start=3):
        ctx.add(_case_claim(ctx, f"S3.{i}", case, [r for r in rows if r["case"] == case.name], n_tests, judged_at))
    ctx.tick(N_("broken assumptions by Monte Carlo"))


def _case_claim(ctx: Context, cid: str, case: Case, mine: list[dict], n_tests: int, judged_at: float) -> ClaimResult:
    """Claim ``cid`` of one case of CASES from its rows ``mine`` (one per d_k of D_KS)."""
    verdicts = [r["verdict"] for r in mine]
    big = mine[-1]
    margin = ctx.config.margin
    mean_grows = case.mu_q * case.mu_k + case.cov != 0  # a non-zero mean of q·k survives ÷√d_k

    def note() -> str:
        text = (
            _("the iid value d_k is outside the {level} intervals", level=ctx.level)
            if all(r["excludes_iid"] for r in mine)
            else _("the iid value d_k is not excluded by the {level} intervals", level=ctx.level)
        )
        if not mean_grows:
            return text
        return _(
            "{note}; mean of q·k/√d_k at d_k={d_k}: {mean:g} (grows as √d_k)",
            note=text,
            d_k=big["d_k"],
            mean=big["scaled_mean"],
        )

    return claim(
        cid,
        CASE_CLAIM,
        case=lambda: _(case.name),
        params=case.describe(),
        expected=lambda: _(
            "{formulas} inside the interval at the Bonferroni level {judged_at} over all {n_tests}, the interval within formula·(1 ± {margin:.0%}) (equivalence margin)",
            formulas=clauses(
                _("d_k={d_k}: {formula:g} (iid: {iid})", d_k=r["d_k"], formula=r["formula"], iid=r["d_k"]) for r in mine
            ),
            judged_at=level_text(judged_at),
            n_tests=n_tests,
            margin=margin,
        ),
        measured=lambda: _(
            "{estimates}; after ÷√d_k: {scaled:.3f} (formula {formula:g}, not 1); {margin_text}",
            estimates=clauses(
                _(
                    "d_k={d_k}: {interval} ({level})",
                    d_k=r["d_k"],
                    level=ctx.level,
                    interval=interval_text(r["estimate"], r["ci_low"], r["ci_high"], ".4g"),
                )
                for r in mine
            ),
            scaled=big["scaled_variance"],
            formula=big["scaled_variance_formula"],
            margin_text=margin_text(
                verdicts,
                [r["judged_ci"] for r in mine],
                [r["formula"] for r in mine],
                [f"d_k = {r['d_k']}" for r in mine],
                margin,
            ),
        ),
        # the interval stored is the one judged: d_k = 512's at the Bonferroni level
        estimate=big["estimate"],
        ci_low=big["judged_ci"][0],
        ci_high=big["judged_ci"][1],
        ci_level=judged_at,
        n_samples=big["n_samples"],
        verdict=judge_all(verdicts),
        margin=margin,
        note=note,
    )


def _symbolic(ctx: Context) -> None:
    var3, formula3, diff3 = symbolic_dot_variance(3)
    ctx.add(
        claim(
            "S3.1",
            N_("independent components with means μ, variances σ²: Var(q·k) = d_k(σ_q²σ_k² + μ_q²σ_k² + μ_k²σ_q²)"),
            expected=lambda: _("E[S²] − (E S)² − formula = 0 (d_k = 3, symbols)"),
            measured=lambda: _("Var = {variance}; difference {difference}", variance=var3, difference=diff3),
            verdict="holds" if diff3 == 0 else "fails",
        )
    )
    var, formula, diff = symbolic_gaussian_product_variance()
    ctx.add(
        claim(
            "S3.2",
            N_(
                "jointly Gaussian qᵢ, kᵢ with covariance c: Var(qᵢkᵢ) = σ_q²σ_k² + c² + μ_q²σ_k² + μ_k²σ_q² + 2μ_qμ_k c"
            ),
            expected=lambda: _("from the moment generating function; difference 0"),
            measured=lambda: _("Var = {variance}; difference {difference}", variance=var, difference=diff),
            verdict="holds" if diff == 0 else "fails",
            note=lambda: _("pairs (qᵢ, kᵢ) independent across i, so Var(q·k) = d_k·Var(qᵢkᵢ)"),
        )
    )


def _measure(ctx: Context, case: Case):
    cfg = ctx.config
    min_batches = 30
    batch_size, caps = batch_plan(
        [max(cfg.draw_cap // (8 * d), 1) for d in D_KS],
        len(D_KS),
        D_KS[-1],
        min_batches=min_batches,
        chunk_elements=CHUNK_ELEMENTS,
        min_batch_size=2,
    )
    rho = case.cov / math.sqrt(case.var_q * case.var_k)

    def draw(rng, n_batches, active):
        grid = D_KS[: int(np.flatnonzero(active).max()) + 1]
        m = n_batches * batch_size
        z1 = rng.standard_normal((m, grid[-1]))
        z2 = rng.standard_normal((m, grid[-1]))
        q = case.mu_q + math.sqrt(case.var_q) * z1
        k = case.mu_k + math.sqrt(case.var_k) * (rho * z1 + math.sqrt(1 - rho * rho) * z2)
        dots = prefix_dots(q, k, grid).reshape(n_batches, batch_size, len(grid))
        stats = np.full((n_batches, len(D_KS)), np.nan)
        stats[:, : len(grid)] = np.var(dots, axis=1, ddof=1)  # unbiased, whatever the mean
        return stats

    return adaptive_means(
        draw,
        len(D_KS),
        batch_size=batch_size,
        cost=[2 * d for d in D_KS],
        rng=ctx.rng(f"broken {case.name}"),
        max_samples=caps,
        rel_ci_target=cfg.rel_ci_target,
        confidence=cfg.confidence,
        min_batches=min_batches,
        chunk_elements=CHUNK_ELEMENTS,
    )
