"""Group 4: dividing by c divides the variance by c²; c = √d_k brings Var(q·k) to 1 at every d_k."""

from __future__ import annotations

import numpy as np

from attnscale.claims.context import Context
from attnscale.claims.iid_variance import D_KS, equality_verdicts, margin_text, variance_families, widened
from attnscale.claims.register import claim
from attnscale.claims.result import judge_all
from attnscale.i18n import N_, _
from attnscale.theory import symbolic_scaled_variance


def run(ctx: Context) -> None:
    import sympy

    lhs, rhs, diff = symbolic_scaled_variance()
    ctx.add(
        claim(
            "S4.1",
            N_("Var(X / c) = Var(X) / c² (not / c)"),
            expected=lambda: _("Var(X/c) − Var(X)/c² = 0 for symbolic values x₁, x₂, x₃ and c ≠ 0"),
            measured=lambda: _("difference {difference}", difference=diff),
            verdict="holds" if diff == 0 else "fails",
        )
    )
    d, c = sympy.symbols("d_k c", positive=True)
    roots = sympy.solve(sympy.Eq(d / c**2, 1), c)
    ok = roots == [sympy.sqrt(d)]
    ctx.add(
        claim(
            "S4.2",
            N_("d_k / c² = 1 has the one positive solution c = √d_k"),
            expected="[sqrt(d_k)]",
            measured=f"solve(d_k/c² = 1, c > 0) = {roots}",
            verdict="holds" if ok else "fails",
        )
    )
    families = variance_families(ctx)
    n_tests = sum(len(e) for e in families.values())
    margin = ctx.config.margin
    # Var(q·k/√d_k) = Var(q·k)/d_k: the judged intervals divided by d_k, against 1
    scaled = [
        (lo / d_k, hi / d_k)
        for est in families.values()
        for e, d_k in zip(est, D_KS)
        for lo, hi in [widened(e, ctx.config.confidence, n_tests)]
    ]
    labels = [f"{name}, d_k = {d_k}" for name in families for d_k in D_KS]
    verdicts = equality_verdicts(scaled, [1.0] * len(scaled), margin)
    values = np.array([e.value / d_k for est in families.values() for e, d_k in zip(est, D_KS)])
    dev = np.abs(values - 1.0)
    worst = int(np.argmax(dev))
    widths = np.array([e.half_width / d_k for est in families.values() for e, d_k in zip(est, D_KS)])
    ctx.add(
        claim(
            "S4.3",
            N_("after ÷√d_k the dot product has variance 1 at every d_k (1…{top})"),
            top=D_KS[-1],
            expected=lambda: _(
                "1 inside every interval, each within 1 ± {margin:.0%} (equivalence margin; {n_tests} estimates: {families} distributions × {d_ks} d_k; Bonferroni level)",
                margin=margin,
                n_tests=n_tests,
                families=len(families),
                d_ks=len(D_KS),
            ),
            measured=lambda: _(
                "{covered}/{count} cover 1; {margin_text}; Var(q·k/√d_k) from {low:.4f} to {high:.4f}; largest deviation {deviation:.4f} ({where}); {level} half-widths {narrowest:.4f}…{widest:.4f}",
                covered=sum(lo <= 1.0 <= hi for lo, hi in scaled),
                count=len(scaled),
                margin_text=margin_text(verdicts, scaled, [1.0] * len(scaled), labels, margin),
                low=values.min(),
                high=values.max(),
                deviation=dev[worst],
                where=labels[worst],
                level=ctx.level,
                narrowest=widths.min(),
                widest=widths.max(),
            ),
            n_samples=sum(e.n_samples for est in families.values() for e in est),
            verdict=judge_all(verdicts),
            margin=margin,
            note=lambda: _(
                "the same draws as S2.4–S2.7, divided by d_k; n_samples counts all {n_tests} estimates", n_tests=n_tests
            ),
        )
    )
    ctx.tick(N_("rescaling"))
