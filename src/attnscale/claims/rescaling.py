"""Group 4: dividing by c divides the variance by c²; c = √d_k brings Var(q·k) to 1 at every d_k."""

from __future__ import annotations

import numpy as np

from attnscale.claims.context import Context
from attnscale.claims.iid_variance import D_KS, variance_families, widened
from attnscale.claims.result import ClaimResult
from attnscale.theory import symbolic_scaled_variance


def run(ctx: Context) -> None:
    import sympy

    lhs, rhs, diff = symbolic_scaled_variance()
    ctx.add(ClaimResult(
        id="S4.1", chapter="why_sqrt", claim_en="Var(X / c) = Var(X) / c² (not / c)",
        claim_zh="Var(X / c) = Var(X) / c²（而不是 / c）", seed_value="d_k / c^2", method="symbolic",
        expected="Var(X/c) − Var(X)/c² = 0 for symbolic values x₁, x₂, x₃ and c ≠ 0",
        measured=f"difference {diff}", verdict="holds" if diff == 0 else "fails"))
    d, c = sympy.symbols("d_k c", positive=True)
    roots = sympy.solve(sympy.Eq(d / c ** 2, 1), c)
    ok = roots == [sympy.sqrt(d)]
    ctx.add(ClaimResult(
        id="S4.2", chapter="why_sqrt", claim_en="d_k / c² = 1 has the one positive solution c = √d_k",
        claim_zh="d_k / c² = 1 的唯一正解是 c = √d_k", seed_value="c = sqrt(d_k)", method="symbolic",
        expected="[sqrt(d_k)]", measured=f"solve(d_k/c² = 1, c > 0) = {roots}", verdict="holds" if ok else "fails"))
    families = variance_families(ctx)
    n_tests = sum(len(e) for e in families.values())
    checks, worst = [], (0.0, "", 0)
    for name, est in families.items():
        for e, d_k in zip(est, D_KS):
            lo, hi = widened(e, ctx.config.confidence, n_tests)
            checks.append(lo / d_k <= 1.0 <= hi / d_k)
            dev = abs(e.value / d_k - 1.0)
            if dev > worst[0]:
                worst = (dev, name, d_k)
    values = np.array([e.value / d_k for est in families.values() for e, d_k in zip(est, D_KS)])
    widths = np.array([e.half_width / d_k for est in families.values() for e, d_k in zip(est, D_KS)])
    ctx.add(ClaimResult(
        id="S4.3", chapter="why_sqrt", claim_en="after ÷√d_k the dot product has variance 1 at every d_k (1…4096)",
        claim_zh="除以 √d_k 之后，每个 d_k（1…4096）下点积的方差都是 1", seed_value="d_k / d_k = 1",
        method="Monte Carlo",
        expected=f"1 inside every interval ({n_tests} estimates: 4 distributions × {len(D_KS)} d_k; Bonferroni level)",
        measured=(f"{sum(checks)}/{len(checks)} cover 1; Var(q·k/√d_k) from {values.min():.4f} to {values.max():.4f}; "
                  f"largest deviation {worst[0]:.4f} ({worst[1]}, d_k = {worst[2]}); {ctx.level} half-widths "
                  f"{widths.min():.4f}…{widths.max():.4f}"),
        n_samples=sum(e.n_samples for est in families.values() for e in est),
        verdict="holds" if all(checks) else "fails",
        note="the same draws as S2.4–S2.7, divided by d_k; n_samples counts all 52 estimates"))
    ctx.tick("rescaling")
