"""Group 6: vanishing gradients. The gradient reaching the logits is J·g with J = diag(p) − ppᵀ; its
Frobenius norm falls toward 0 as rows saturate (unscaled, d_k growing), and stays flat when scaled.

The rows are those of group 5 (``saturation.simulate_rows``). The median (typical row) and the mean
(average row) tell different stories: a few rows with near-ties at the top keep a sizeable gradient,
so the mean stays well above the median once most rows are frozen.
"""

from __future__ import annotations

from attnscale.claims.context import Context
from attnscale.claims.result import ClaimResult, judge_all, judge_below
from attnscale.claims.saturation import D_KS, NS, _flat, _fmt, _series, by_n_note, ci, drift, simulate_rows


def run(ctx: Context) -> None:
    sim = simulate_rows(ctx)
    ctx.data["jacobian"] = _series(sim, ("jacobian_frobenius",))
    by_n = sim["by_n"]
    last, d64, flat_from = len(D_KS) - 1, D_KS.index(64), D_KS.index(16)
    jac = {n: by_n[str(n)] for n in map(str, NS)}

    d256 = D_KS.index(256)
    fro = {n: j["unscaled"]["jacobian_frobenius"] for n, j in jac.items()}
    falls = {n: judge_all(judge_below(ci(f[j]), ci(f[i])) for i, j in ((d64, d256), (d256, last)))
             for n, f in fro.items()}
    peaks = {n: D_KS[max(range(len(D_KS)), key=lambda i: f[i]["median"])] for n, f in fro.items()}
    top = fro[str(NS[-1])][last]
    ctx.add(ClaimResult(
        id="S6.1", chapter="without_scaling",
        claim_en="unscaled, the gradient through softmax becomes tiny as d_k grows (vanishing gradient)",
        claim_zh="不缩放时，随 d_k 增大，经过 softmax 的梯度变得极小（梯度消失）",
        seed_value=None, method="Monte Carlo",
        expected=f"median ‖diag(p) − ppᵀ‖_F falls from d_k = 64 to 256 to 4096 ({ctx.level} CIs separated), n = 16, 128, 1024",
        measured="; ".join(f"n={n}: d_k=1 {_fmt(f[0])}, 64 {_fmt(f[d64])}, 4096 {_fmt(f[last])}" for n, f in fro.items()),
        estimate=top["median"], ci_low=top["median_ci"][0], ci_high=top["median_ci"][1], n_samples=sim["rows"],
        verdict=judge_all(falls.values()),
        note=by_n_note(falls, "") + "; median [10%–90% quantiles] over rows; not monotone from d_k = 1: on this grid the median peaks at d_k = "
             + ", ".join(f"{peaks[n]} (n={n})" for n in fro)
             + " — near-uniform rows have a small Jacobian too (‖J‖_F ≈ 1/√n), so growing logits first raise it"))

    ratios = {n: drift(j["scaled"]["jacobian_frobenius"], j["unscaled"]["jacobian_frobenius"], flat_from)
              for n, j in jac.items()}
    undetected = {n: _flat(j["scaled"]["jacobian_frobenius"], flat_from) for n, j in jac.items()}
    ctx.add(ClaimResult(
        id="S6.2", chapter="why_sqrt",
        claim_en="after ÷√d_k the softmax Jacobian norm stays flat in d_k",
        claim_zh="除以 √d_k 之后，softmax 雅可比范数不随 d_k 变化",
        seed_value=None, method="Monte Carlo",
        expected="over d_k = 16…4096 the scaled medians move by ≤ 10% of what the unscaled medians move, each n",
        measured="; ".join(f"n={n}: d_k=16 {_fmt(j['scaled']['jacobian_frobenius'][flat_from])}, "
                           f"4096 {_fmt(j['scaled']['jacobian_frobenius'][last])}, drift ratio "
                           f"{ratios[n][0] / ratios[n][1]:.3f}" for n, j in jac.items()),
        verdict="holds" if all(a <= 0.1 * b for a, b in ratios.values()) else "fails", n_samples=sim["rows"],
        note=("a residual drift is " + ("not detectable" if all(undetected.values()) else
              "detectable for n = " + ", ".join(n for n in undetected if not undetected[n]))
              + " (the spread of ‖q‖/√d_k at small d_k)")))

    apart = {n: judge_below(ci(s), ci(s, "mean_ci"))
             for n, j in jac.items() for s in [j["unscaled"]["jacobian_frobenius"][last]]}
    ctx.add(ClaimResult(
        id="S6.3", chapter="without_scaling",
        claim_en="the average row keeps more gradient than the typical row: near-ties hold the mean up while the median vanishes",
        claim_zh="平均行比典型行保留更多梯度：少数接近并列的行撑起均值，而中位数趋于 0",
        seed_value=None, method="Monte Carlo",
        expected=f"unscaled, d_k = 4096: the mean's {ctx.level} CI lies above the median's, each n",
        measured="; ".join(f"n={n}: mean {j['unscaled']['jacobian_frobenius'][last]['mean']:.3g} vs median "
                           f"{j['unscaled']['jacobian_frobenius'][last]['median']:.3g}" for n, j in jac.items()),
        verdict=judge_all(apart.values()), n_samples=sim["rows"],
        note=by_n_note(apart, "") + "; so a mean over rows understates how many rows have lost their gradient"))
    ctx.tick("gradients")
