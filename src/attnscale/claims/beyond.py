"""Group 8: beyond the seed. √d_k removes the dependence on d_k, not on the number of keys n.

Softmax of n iid N(0, σ²) logits has, as n → ∞ (random-energy model, Derrida 1981), entropy
H ≈ ln n − σ²/2 while σ < σ_c = √(2 ln n), and O(1) entropy beyond (the frozen phase). Unscaled
attention on random Gaussian q, k has σ ≈ √d_k, hence is frozen once d_k > 2 ln n. Exact Monte Carlo
is the reference; the asymptote is an asymptote, off near the boundary at practical n.

Scalable-Softmax (Nakanishi 2025) multiplies the logits by s·ln n; its Figure 1 uses all logits −2
but the last +3 and s = 0.43.
"""

from __future__ import annotations

import math
from decimal import Decimal

import numpy as np

from attnscale.claims import qk_norm
from attnscale.claims.context import Context
from attnscale.claims.register import claim
from attnscale.claims.result import bracketed, clauses, interval_text, judge_below, judge_falling, judge_printed, per_n
from attnscale.i18n import N_, _
from attnscale.claims.saturation import D_KS as ROW_D_KS, NS as ROW_NS, ci, simulate_rows
from attnscale.montecarlo import mean_ci
from attnscale.scales import SSMAX_DEFAULT_S
from attnscale.softmax_rows import row_health, softmax
from attnscale.theory import phase_boundary, rem_normalized_entropy, ssmax_one_high_max_weight

PHASE_NS = (16, 128, 1024, 8192)
SIGMAS = tuple(round(0.25 * i, 2) for i in range(1, 25))  # 0.25 … 6
SSMAX_FIGURE = {10: "0.943", 100: "0.600", 1000: "0.129", 100000: "0.0015"}
SSMAX_S = SSMAX_DEFAULT_S  # Nakanishi's Figure 1 value of SSMax's s, defined with the rule in attnscale.scales


def run(ctx: Context) -> None:
    grid = _phase_grid(ctx)
    at = _at_boundary_multiples(ctx, grid)
    _asymptote_improves(ctx, at, grid["rows"])
    _frozen_beyond_boundary(ctx, at, grid["rows"])
    ctx.tick(N_("phase diagram"))
    _keys_not_dk(ctx)
    _ssmax(ctx)
    ctx.tick(N_("Scalable-Softmax"))
    qk_norm.run(ctx)


def _phase_grid(ctx: Context) -> dict:
    """The phase diagram (``ctx.data["phase"]``): H/ln n by Monte Carlo and its asymptote on the σ grid,
    the boundary σ_c and the rows drawn, for each n."""
    budget = 2**15 if ctx.config.quick else 2**17
    conf = ctx.config.confidence
    grid = {
        "sigma": list(SIGMAS),
        "n": list(PHASE_NS),
        "boundary": {},
        "mc": {},
        "mc_ci": {},
        "asymptote": {},
        "rows": {},
    }
    for n in PHASE_NS:
        rows = max(64, budget // n)
        z = ctx.rng(f"phase n={n}").standard_normal((rows, n))
        mc, ci = [], []
        for sigma in SIGMAS:
            est = mean_ci(row_health(sigma * z, spectral=False).normalized_entropy, conf)
            mc.append(est.value)
            ci.append([est.ci_low, est.ci_high])
        grid["mc"][str(n)], grid["mc_ci"][str(n)] = mc, ci
        grid["asymptote"][str(n)] = [rem_normalized_entropy(s, n) for s in SIGMAS]
        grid["boundary"][str(n)] = phase_boundary(n)
        grid["rows"][str(n)] = rows
    ctx.data["phase"] = grid
    return grid


def _at_boundary_multiples(ctx: Context, grid: dict) -> dict:
    """{n: {σ/σ_c: (H/ln n, its gap to the asymptote, the asymptote)}} at σ = σ_c/2, σ_c and 2σ_c
    exactly (not at the nearest grid point): where the claims are judged; also put in ``grid``."""
    conf = ctx.config.confidence
    at: dict[int, dict] = {n: {} for n in PHASE_NS}
    for n in PHASE_NS:
        z = ctx.rng(f"phase n={n}").standard_normal((grid["rows"][str(n)], n))
        for ratio in (0.5, 1.0, 2.0):
            sigma = ratio * phase_boundary(n)
            h = row_health(sigma * z, spectral=False).normalized_entropy
            asym = rem_normalized_entropy(sigma, n)
            at[n][ratio] = (mean_ci(h, conf), mean_ci(h - asym, conf), asym)
    grid["at_boundary_multiples"] = {
        str(n): {
            str(r): {"mc": e.value, "mc_ci": [e.ci_low, e.ci_high], "asymptote": a} for r, (e, _gap, a) in at[n].items()
        }
        for n in PHASE_NS
    }
    return at


def _asymptote_improves(ctx: Context, at: dict, rows: dict) -> None:
    """S8.1: the gap to the asymptote ln n − σ²/2 shrinks with n at σ = σ_c/2 (and is large at σ_c);
    at: :func:`_at_boundary_multiples`, rows: the rows drawn by str(n)."""
    small, large = at[PHASE_NS[0]][0.5][1], at[PHASE_NS[-1]][0.5][1]
    ctx.add(
        claim(
            "S8.1",
            N_("softmax of n iid logits of spread σ: entropy ≈ ln n − σ²/2 below σ_c = √(2 ln n) (an asymptote in n)"),
            expected=lambda: _(
                "at σ = σ_c/2 the gap MC − asymptote of H/ln n is smaller at n = {large} than at n = {small} ({level} CIs of |gap| separated)",
                large=PHASE_NS[-1],
                small=PHASE_NS[0],
                level=ctx.level,
            ),
            measured=lambda: clauses(
                (
                    f"σ={where}: "
                    + per_n(
                        {
                            n: _("{mc:.3f} vs {asymptote:.3f}", mc=at[n][r][0].value, asymptote=at[n][r][2])
                            for n in PHASE_NS
                        },
                        ",",
                    )
                    for where, r in (("σ_c/2", 0.5), ("σ_c", 1.0))
                )
            ),
            estimate=large.value,
            ci_low=large.ci_low,
            ci_high=large.ci_high,
            n_samples=rows[str(PHASE_NS[-1])],
            verdict=judge_below(_abs_interval(large.ci_low, large.ci_high), _abs_interval(small.ci_low, small.ci_high)),
            note=lambda: _(
                "H/ln n, mean over rows; near the boundary the asymptote (0 at σ_c) is far off at practical n: its O(1) corrections are not small against ln n"
            ),
        )
    )


def _frozen_beyond_boundary(ctx: Context, at: dict, rows: dict) -> None:
    """S8.2: beyond the boundary the softmax is frozen, H/ln n at σ = 2σ_c falling toward 0 as n
    grows; at: :func:`_at_boundary_multiples`, rows: the rows drawn by str(n)."""
    frozen = [at[n][2.0][0] for n in PHASE_NS]
    falls = judge_below((frozen[-1].ci_low, frozen[-1].ci_high), (frozen[0].ci_low, frozen[0].ci_high))
    d_frozen = {n: math.floor(2 * math.log(n)) + 1 for n in ROW_NS}
    ctx.add(
        claim(
            "S8.2",
            N_(
                "beyond σ_c = √(2 ln n) the softmax is frozen: unscaled attention on random inputs freezes once d_k > 2 ln n"
            ),
            expected=lambda: _(
                "H/ln n at σ = 2σ_c is lower at n = {large} than at n = {small} ({level} CIs separated): the entropy stays O(1) nats while ln n grows",
                large=PHASE_NS[-1],
                small=PHASE_NS[0],
                level=ctx.level,
            ),
            measured=lambda: bracketed(
                _(
                    "{intervals}; d_k > 2 ln n means d_k ≥ {frozen}",
                    intervals=per_n(
                        {n: interval_text(e.value, e.ci_low, e.ci_high) for n, e in zip(PHASE_NS, frozen)}, ","
                    ),
                    frozen=clauses((_("{d_k} (n={n})", d_k=d, n=n) for n, d in d_frozen.items()), ","),
                ),
                ctx.level,
            ),
            estimate=frozen[-1].value,
            ci_low=frozen[-1].ci_low,
            ci_high=frozen[-1].ci_high,
            n_samples=rows[str(PHASE_NS[-1])],
            verdict=falls,
            note=lambda: _(
                "σ ≈ √d_k for unscaled logits of Gaussian q, k: every practical d_k (64, 128) is deep in the frozen phase"
            ),
        )
    )


def _abs_interval(lo: float, hi: float) -> tuple[float, float]:
    """The interval of |x| when x lies in [lo, hi]."""
    if lo <= 0 <= hi:
        return 0.0, max(-lo, hi)
    return min(abs(lo), abs(hi)), max(abs(lo), abs(hi))


def _ssmax(ctx: Context) -> None:
    ns = [int(round(10**e)) for e in np.arange(1, 5.01, 0.25)]
    series = {"n": ns, "softmax": [], "ssmax": [], "s": SSMAX_S}
    for n in ns:
        logits = np.full(n, -2.0)
        logits[-1] = 3.0
        series["softmax"].append(float(softmax(logits)[-1]))
        series["ssmax"].append(float(softmax(SSMAX_S * math.log(n) * logits)[-1]))
    ctx.data["ssmax"] = series
    verdicts, measured = [], {}
    import sympy

    for n, text in SSMAX_FIGURE.items():
        value = sympy.exp(3) / (sympy.exp(3) + (n - 1) * sympy.exp(-2))
        e = Decimal(str(value.evalf(40)))
        logits = np.full(n, -2.0)
        logits[-1] = 3.0
        float_value = float(softmax(logits)[-1])
        verdicts.append(judge_printed(text, e)[0] == "holds" and abs(float_value - float(e)) < 1e-12)
        measured[n] = f"{float(e):.6g}"
    ctx.add(
        claim(
            "S8.4",
            N_(
                "Scalable-Softmax Fig. 1: logits all −2 but one +3; softmax max weight {weights[0]}, {weights[1]}, {weights[2]}, {weights[3]} at n = 10, 100, 1000, 10⁵"
            ),
            weights=list(SSMAX_FIGURE.values()),
            expected=lambda: _("e³/(e³ + (n − 1)e⁻²) rounds to the printed values"),
            measured=lambda: _("{values} (attnscale.softmax agrees to 1e-12)", values=per_n(measured)),
            verdict="holds" if all(verdicts) else "fails",
            note=lambda: _("numbers from Nakanishi 2025, not from the blog post"),
        )
    )
    ss = {n: ssmax_one_high_max_weight(n, SSMAX_S) for n in SSMAX_FIGURE}
    ss_lib = [series["ssmax"][ns.index(n)] for n in SSMAX_FIGURE if n in ns]
    # "does not decay": non-decreasing over the whole grid n = 10 … 10⁵ (17 points), not only ≥ 0.9
    curve = [ssmax_one_high_max_weight(n, SSMAX_S) for n in ns]
    steps = [b - a for a, b in zip(curve, curve[1:])]
    ok = (
        all(v >= 0.9 for v in curve)
        and min(steps) >= 0
        and all(
            abs(a - ssmax_one_high_max_weight(n, SSMAX_S)) < 1e-12
            for a, n in zip(ss_lib, [n for n in SSMAX_FIGURE if n in ns])
        )
    )
    ctx.add(
        claim(
            "S8.5",
            N_("with SSMax (logits × s·ln n, s = {s}) the max weight stays near 1 as n grows"),
            s=f"{SSMAX_S:g}",
            expected=lambda: _(
                "max weight ≥ 0.9 at n = 10 … 10⁵, and it does not decay (non-decreasing over {count} n)", count=len(ns)
            ),
            measured=lambda: _(
                "{values}; minimum {minimum:.4f}; smallest step between neighbouring n {step:+.2e}",
                values=per_n({n: f"{v:.4f}" for n, v in ss.items()}),
                minimum=min(curve),
                step=min(steps),
            ),
            verdict="holds" if ok else "fails",
        )
    )


def _keys_not_dk(ctx: Context) -> None:
    sim = simulate_rows(ctx)
    last = len(ROW_D_KS) - 1
    med = [sim["by_n"][str(n)]["scaled"]["max_weight"][last] for n in ROW_NS]
    falls = judge_falling(ci(m) for m in med)
    ent = [sim["by_n"][str(n)]["scaled"]["normalized_entropy"][last]["median"] for n in ROW_NS]
    ctx.add(
        claim(
            "S8.3",
            N_("√d_k removes the dependence on d_k, not on the number of keys n: scaled rows still change with n"),
            expected=lambda: _(
                "scaled, d_k = 4096: median max weight falls as n grows ({level} CIs separated); H/ln n ≈ 1 − 1/(2 ln n)",
                level=ctx.level,
            ),
            measured=lambda: per_n(
                {
                    n: _(
                        "max weight {max_weight:.4f}, H/ln n {entropy:.3f} (asymptote {asymptote:.3f})",
                        max_weight=m["median"],
                        entropy=h,
                        asymptote=rem_normalized_entropy(1.0, n),
                    )
                    for n, m, h in zip(ROW_NS, med, ent)
                }
            ),
            verdict=falls,
            n_samples=sim["rows"],
        )
    )
