"""The blog post's chapters' figures: measured data in, a matplotlib Figure out.

Every function here only *draws*: it takes a block of ``VerifyReport.data`` (plain lists and dicts,
already holding estimates, intervals and quantiles) and returns a figure, drawn inside the report's
one style (:func:`attnscale.report.plotting.style`). None of them draws a random number or estimates
anything; the tests feed them hand-made data and read the plotted values back. Each data block's
name is its figure function's name (:data:`attnscale.report.seed.CHAPTER_FIGURES`).
"""

from __future__ import annotations

import math

from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter, NullLocator

from attnscale.i18n import N_, _
from attnscale.report.narrow import legend_columns
from attnscale.report.plotting import NEUTRAL, REFERENCE, SCALED, SERIES, UNSCALED, style

# The two ways of a panel or a curve: the logits as they are, and divided by √d_k.
MODE = {"unscaled": N_("unscaled"), "scaled": N_("÷ √dₖ")}
MODE_N = {"unscaled": N_("unscaled, n = {n}"), "scaled": N_("÷ √dₖ, n = {n}")}
# The component laws of the variance figure's legend, by their names in attnscale.theory.COMPONENTS.
FAMILY = {
    "gaussian": N_("Gaussian"),
    "uniform": N_("uniform"),
    "rademacher": N_("Rademacher ±1"),
    "student_t5": N_("Student-t(5)"),
}

# The broken-assumption cases, by the English name the verification writes (:func:`case_label`).
CASES = {
    "non-zero means": N_("non-zero means"),
    "variances ≠ 1": N_("variances ≠ 1"),
    "correlated q and k": N_("correlated q and k"),
    "all three": N_("all three"),
}


def _dk_axis(ax, values) -> None:
    """Log₂ axis labelled with the d_k values themselves (4, 64, 512 read better than 2²)."""
    ax.set_xscale("log", base=2)
    ticks = [v for v in values if v > 0 and math.log2(v).is_integer() and int(math.log2(v)) % 2 == 0] or list(values)
    ax.xaxis.set_major_locator(FixedLocator(ticks))
    # a d_k is a dimension, written as the page's text writes it (d_k = 4096), without the thousands
    # separator of counts (_IntFormatter: 4,096 samples)
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _pos: f"{x:.0f}" if x >= 1 else f"{x:g}"))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel("dₖ")


def _IntFormatter():
    return FuncFormatter(lambda x, _pos: f"{x:,.0f}" if x >= 1 else f"{x:g}")


def _errorbars(ax, x, est, lo, hi, color, name, marker="o"):
    yerr = [[e - low for e, low in zip(est, lo)], [h - e for e, h in zip(est, hi)]]
    return ax.errorbar(
        x,
        est,
        yerr=yerr,
        fmt=marker,
        ms=4.5,
        color=color,
        ecolor=color,
        elinewidth=1.2,
        capsize=2.5,
        label=name,
        zorder=3,
    )


# --------------------------------------------------------------------------------------------------
# 1. Var(q·k) against d_k, unscaled and scaled
# --------------------------------------------------------------------------------------------------


def variance_vs_dk(data: dict):
    """Two log–log panels: Var(q·k) with the line Var = d_k (slope 1), and Var(q·k/√d_k) with Var = 1.

    data: {family: {"d_k": [...], "estimate": [...], "ci_low": [...], "ci_high": [...],
                    "scaled": {"estimate": [...], "ci_low": [...], "ci_high": [...]}}, ...}
    (``VerifyReport.data["variance_vs_dk"]``; the intervals are 99% confidence intervals.)
    """
    with style() as plt:
        fig, axes = plt.subplots(1, 2, figsize=(7.6, 3.5), constrained_layout=True)
        families = list(data.items())
        dks = families[0][1]["d_k"]
        # The claims under test, drawn as lines: Var = d_k before scaling, Var = 1 after.
        axes[0].plot(dks, dks, color=REFERENCE, lw=1.1, ls="--", label=_("Var = dₖ (slope 1)"), zorder=2)
        axes[1].plot(dks, [1.0] * len(dks), color=REFERENCE, lw=1.1, ls="--", label=_("Var = 1"), zorder=2)
        # Families side by side at each d_k, so their error bars do not hide each other.
        offsets = [2 ** ((i - (len(families) - 1) / 2) * 0.09) for i in range(len(families))]
        for i, (name, fam) in enumerate(families):
            color, marker = SERIES[i % len(SERIES)], "osD^v<"[i % 6]
            xs = [d * offsets[i] for d in fam["d_k"]]
            _errorbars(
                axes[0],
                xs,
                fam["estimate"],
                fam["ci_low"],
                fam["ci_high"],
                color,
                _(FAMILY[name]) if name in FAMILY else name,
                marker,
            )
            sc = fam["scaled"]
            _errorbars(
                axes[1],
                xs,
                sc["estimate"],
                sc["ci_low"],
                sc["ci_high"],
                color,
                _(FAMILY[name]) if name in FAMILY else name,
                marker,
            )
        for ax, which, ylabel in ((axes[0], "unscaled", N_("Var(q·k)")), (axes[1], "scaled", N_("Var(q·k / √dₖ)"))):
            ax.set_yscale("log")
            _dk_axis(ax, dks)
            ax.set_ylabel(_(ylabel))
            ax.set_title(_(MODE[which]), color=UNSCALED if which == "unscaled" else SCALED)
        axes[0].legend(loc="upper left", fontsize=8.5)
        axes[1].set_yscale("linear")
        lo = min(min(f["scaled"]["ci_low"]) for _name, f in families)
        hi = max(max(f["scaled"]["ci_high"]) for _name, f in families)
        pad = max(0.05, (hi - lo) * 0.15)
        axes[1].set_ylim(min(lo, 1.0) - pad, max(hi, 1.0) + pad)
        return fig


# --------------------------------------------------------------------------------------------------
# 2. Histograms of q·k at a few d_k, before and after scaling
# --------------------------------------------------------------------------------------------------


def _density(counts, edges, n_samples):
    """Counts per bin as a probability density (per unit of the axis), so that histograms with
    different bin widths compare; a change of units, not an estimate."""
    return [c / (n_samples * (b - a)) for c, a, b in zip(counts, edges[:-1], edges[1:])]


def dot_histograms(data: dict):
    """Step histograms (densities) of q·k: left unscaled, right ÷√d_k, one line per d_k.

    data: {"4": {"d_k": 4, "n_samples": int, "counts": [...], "edges_unscaled": [...],
                 "edges_scaled": [...]}, "64": {...}, "512": {...}}
    (``VerifyReport.data["dot_histograms"]``: one set of counts, two sets of bin edges.)
    """
    with style() as plt:
        fig, axes = plt.subplots(1, 2, figsize=(7.6, 3.2), constrained_layout=True)
        warm = ("#e9a23b", "#d1495b", "#7b2d43", "#3a0f1f")
        cool = ("#8fb3ff", "#3559c7", "#14286b", "#0b1640")
        for i, h in enumerate(data.values()):
            for ax, which, colors, ls in ((axes[0], "unscaled", warm, "-"), (axes[1], "scaled", cool, "-")):
                edges = h[f"edges_{which}"]
                ax.stairs(
                    _density(h["counts"], edges, h["n_samples"]),
                    edges,
                    color=colors[i % 4],
                    lw=1.6,
                    ls=ls,
                    label=f"dₖ = {h['d_k']}",
                )
        for ax, which in ((axes[0], "unscaled"), (axes[1], "scaled")):
            ax.set_title(_(MODE[which]), color=UNSCALED if which == "unscaled" else SCALED)
            ax.set_xlabel("q·k" if which == "unscaled" else "q·k / √dₖ")
            ax.set_ylabel(_("density"))
            ax.legend(loc="upper right")
        axes[0].set_yscale("log")
        axes[0].set_ylim(bottom=1e-4)
        return fig


# --------------------------------------------------------------------------------------------------
# 3. The blog post's softmax examples as bars
# --------------------------------------------------------------------------------------------------


def seed_softmax_examples(data: dict):
    """Grouped bars, one panel per example: the weights before and after multiplying the logits by
    ``scale`` (÷8 = ×1/8, the blog post's √64).

    data: {"[14, 10, 12]": {"logits": [...], "weights": [...], "logits_scaled": [...],
                            "weights_scaled": [...], "scale": 0.125}, ...}
    """
    with style() as plt:
        n = len(data)
        fig, axes = plt.subplots(
            1, n, figsize=(max(4.2, min(2.9 * n, 8.2)), 3.2), constrained_layout=True, squeeze=False, sharey=True
        )
        for ax, (title, ex) in zip(axes[0], data.items()):
            width = 0.38
            xs = list(range(len(ex["weights"])))
            before = ax.bar([x - width / 2 for x in xs], ex["weights"], width, color=UNSCALED, label=_("before"))
            after = ax.bar(
                [x + width / 2 for x in xs],
                ex["weights_scaled"],
                width,
                color=SCALED,
                label=_("after ÷ {divisor:g}", divisor=1 / ex["scale"]),
            )
            _bar_labels(ax, before, ex["weights"])
            _bar_labels(ax, after, ex["weights_scaled"])
            ax.set_xticks(xs, [f"{z:g}" for z in ex["logits"]])
            ax.set_ylim(0, 1.15)
            ax.set_title(title)
            ax.grid(axis="x", visible=False)
            ax.set_xlabel("logits")
        axes[0][0].set_ylabel(_("softmax weight"))
        axes[0][-1].legend(loc="upper right", fontsize=8.5)
        return fig


def _bar_labels(ax, bars, values) -> None:
    for bar, v in zip(bars, values):
        ax.annotate(
            f"{v:.3f}",
            (bar.get_x() + bar.get_width() / 2, bar.get_height()),
            xytext=(0, 2),
            textcoords="offset points",
            ha="center",
            va="bottom",
            fontsize=7.5,
            color=NEUTRAL,
        )


# --------------------------------------------------------------------------------------------------
# 4. Saturation: max weight and entropy against d_k, with quantile bands
# --------------------------------------------------------------------------------------------------


def _band(ax, x, s, color, name, ls="-", marker="o"):
    """Median line and 10–90% quantile band of one summary {"median", "q10", "q90", ...}."""
    ax.fill_between(x, s["q10"], s["q90"], color=color, alpha=0.12, lw=0)
    ax.plot(x, s["median"], color=color, lw=1.8, ls=ls, label=name, marker=marker, ms=3)


def _shades(base: str, count: int) -> list[str]:
    """``count`` shades of ``base``, light to dark (n = 16 light, n = 1024 dark)."""
    return [_mix(base, i / max(count - 1, 1)) for i in range(count)]


def _mix(hex_color: str, t: float) -> str:
    r, g, b = (int(hex_color[i : i + 2], 16) for i in (1, 3, 5))
    f = 1.15 - 0.65 * t
    return "#{:02x}{:02x}{:02x}".format(*(min(255, int(c * f)) for c in (r, g, b)))


def saturation(data: dict):
    """Median (line) and 10–90% quantile band (shade) over rows, against d_k: the largest weight and
    the entropy / ln n, unscaled (solid, warm) and ÷√d_k (dashed, blue), one line per n.

    data: {"d_k": [...], "rows": R, "by_n": {"16": {"unscaled": {"max_weight": S, "normalized_entropy": S, ...},
                                                    "scaled": {...}}, ...}}
    with S = {"median": [...], "q10": [...], "q90": [...], ...} over d_k
    (``VerifyReport.data["saturation"]``).
    """
    with style() as plt:
        fig, axes = plt.subplots(1, 2, figsize=(7.6, 4.0), layout="constrained")
        ns = list(data["by_n"])
        warm, cool = _shades(UNSCALED, len(ns)), _shades(SCALED, len(ns))
        for i, n in enumerate(ns):
            per = data["by_n"][n]
            for mode, colors, ls in (("unscaled", warm, "-"), ("scaled", cool, "--")):
                name = _(MODE_N[mode], n=n)
                _band(axes[0], data["d_k"], per[mode]["max_weight"], colors[i], name, ls)
                _band(axes[1], data["d_k"], per[mode]["normalized_entropy"], colors[i], name, ls)
        for ax, ylabel in ((axes[0], N_("median max weight")), (axes[1], N_("median entropy / ln n"))):
            _dk_axis(ax, data["d_k"])
            ax.set_ylabel(_(ylabel))
            ax.set_ylim(-0.02, 1.02)
        handles, names = axes[0].get_legend_handles_labels()
        fig.legend(handles, names, loc="outside lower center", ncols=legend_columns(len(ns)), fontsize=8)
        return fig


# --------------------------------------------------------------------------------------------------
# 5. Jacobian norm quantiles against d_k
# --------------------------------------------------------------------------------------------------


def jacobian(data: dict):
    """Median and 10–90% band of ‖J‖_F, J = diag(p) − ppᵀ, per n; unscaled rows also show their mean
    (dotted): near-ties keep the average row's gradient up while the typical row's vanishes.

    data: {"d_k": [...], "rows": R, "by_n": {"16": {"unscaled": {"jacobian_frobenius": S}, "scaled": {...}}}}
    with S = {"median", "q10", "q90", "mean", ...} lists over d_k (``VerifyReport.data["jacobian"]``).
    """
    with style() as plt:
        fig, ax = plt.subplots(figsize=(6.8, 4.2), layout="constrained")
        ns = list(data["by_n"])
        warm, cool = _shades(UNSCALED, len(ns)), _shades(SCALED, len(ns))
        lowest = []
        for i, n in enumerate(ns):
            per = data["by_n"][n]
            for mode, colors, ls in (("unscaled", warm, "-"), ("scaled", cool, "--")):
                s = per[mode]["jacobian_frobenius"]
                _band(ax, data["d_k"], s, colors[i], _(MODE_N[mode], n=n), ls)
                lowest += [v for v in s["q10"] + s["median"] if v > 0]
            ax.plot(data["d_k"], per["unscaled"]["jacobian_frobenius"]["mean"], color=warm[i], lw=1.1, ls=":")
        ax.plot([], [], color=NEUTRAL, lw=1.1, ls=":", label=_("mean over rows (unscaled)"))
        ax.set_yscale("log")
        if lowest:
            ax.set_ylim(bottom=max(min(lowest) / 3, 1e-18))  # a frozen row's exact 0 would sink the axis
        _dk_axis(ax, data["d_k"])
        ax.set_ylabel(_("‖∂softmax/∂z‖ (Frobenius)"))
        fig.legend(loc="outside lower center", ncols=legend_columns(3), fontsize=8)
        return fig


# --------------------------------------------------------------------------------------------------
# 6. The phase diagram: spread σ of the logits against the number of keys n
# --------------------------------------------------------------------------------------------------


def phase(data: dict):
    """Left: mean entropy / ln n over (σ, n) with the boundary σ = √(2 ln n); the top axis reads σ as
    the d_k of unscaled attention (σ = √d_k). Right: the same Monte Carlo curves with the
    random-energy-model asymptote (dashed), which is only an asymptote.

    data: {"sigma": [...], "n": [...], "mc": {"16": [...] per σ}, "mc_ci": {...},
           "asymptote": {"16": [...]}, "boundary": {"16": σ_c}, "rows": {...}}
    (``VerifyReport.data["phase"]``).
    """
    with style() as plt:
        fig, (ax, curves) = plt.subplots(
            1, 2, figsize=(7.8, 3.6), layout="constrained", gridspec_kw={"width_ratios": [1.15, 1]}
        )
        fig.get_layout_engine().set(wspace=0.12)
        ns = [int(n) for n in data["n"]]
        grid = [data["mc"][str(n)] for n in ns]
        rows = list(range(len(ns)))
        mesh = ax.pcolormesh(data["sigma"], rows, grid, cmap="viridis", vmin=0, vmax=1, shading="nearest")
        ax.set_yticks(rows, [f"{n:,}" for n in ns])
        boundary = [data["boundary"][str(n)] for n in ns]
        ax.plot(boundary, rows, color="white", lw=3.2)
        ax.plot(boundary, rows, color=UNSCALED, lw=1.6, ls="--", marker="o", ms=4, label=_("σ = √(2 ln n)"))
        ax.grid(False)
        ax.set_xlabel(_("spread σ of the logits"))
        ax.set_ylabel(_("number of keys n"))
        top = ax.secondary_xaxis("top", functions=(lambda x: x**2, lambda d: d**0.5))
        top.set_xlabel(_("unscaled: dₖ = σ²"), fontsize=9)
        top.set_xticks([1, 4, 9, 16, 25, 36])
        ax.legend(loc="lower left", fontsize=8, labelcolor="white", handlelength=1.6)
        cb = fig.colorbar(mesh, ax=ax, pad=0.02, shrink=0.9)
        cb.set_label(_("mean entropy / ln n"))
        cool = _shades(SCALED, len(ns))
        for i, n in enumerate(ns):
            key = str(n)
            lo = [c[0] for c in data["mc_ci"][key]]
            hi = [c[1] for c in data["mc_ci"][key]]
            curves.fill_between(data["sigma"], lo, hi, color=cool[i], alpha=0.25, lw=0)
            curves.plot(data["sigma"], data["mc"][key], color=cool[i], lw=1.8, label=f"n = {n:,}")
            curves.plot(data["sigma"], data["asymptote"][key], color=cool[i], lw=1.1, ls="--")
            curves.axvline(data["boundary"][key], color=cool[i], lw=0.8, ls=":")
        curves.plot([], [], color=NEUTRAL, lw=1.1, ls="--", label=_("asymptote ln n − σ²/2"))
        curves.set_ylim(-0.02, 1.02)
        curves.set_xlabel(_("spread σ of the logits"))
        curves.set_ylabel(_("mean entropy / ln n"))
        curves.legend(loc="upper right", fontsize=7.5)
        return fig


# --------------------------------------------------------------------------------------------------
# 7. Variance under broken assumptions vs the general formula
# --------------------------------------------------------------------------------------------------


def broken_assumptions(data: list):
    """Per case and d_k: the measured variance after ÷√d_k, Var(q·k)/d_k (dot, 99% CI) against the
    general formula's value (bar) and the blog post's promise, 1 (dotted line).

    data: [{"case": str, "d_k": int, "estimate", "ci_low", "ci_high", "formula", ...}, ...]
    (``VerifyReport.data["broken_assumptions"]``; dividing by d_k only changes the unit.)
    """
    with style() as plt:
        fig, ax = plt.subplots(figsize=(6.8, 0.42 * len(data) + 1.8), layout="constrained")
        ys = list(range(len(data)))[::-1]
        per_dk = [
            (r["estimate"] / r["d_k"], r["ci_low"] / r["d_k"], r["ci_high"] / r["d_k"], r["formula"] / r["d_k"])
            for r in data
        ]
        ax.scatter(
            [f for *_rest, f in per_dk],
            ys,
            marker="|",
            s=280,
            color=REFERENCE,
            lw=2.2,
            label=_("general formula"),
            zorder=2,
        )
        ax.errorbar(
            [e for e, *_rest in per_dk],
            ys,
            xerr=[[e - lo for e, lo, _hi, _f in per_dk], [hi - e for e, _lo, hi, _f in per_dk]],
            fmt="o",
            color=SCALED,
            ms=4.5,
            capsize=3,
            label=_("measured (99% CI)"),
            zorder=3,
        )
        ax.axvline(1.0, color=UNSCALED, lw=1.2, ls=":", zorder=1, label=_("1: the blog post's assumptions"))
        ax.set_yticks(ys, [_("{case}, dₖ = {d_k}", case=case_label(r["case"]), d_k=r["d_k"]) for r in data])
        ax.set_xlabel(_("Var(q·k / √dₖ)"))
        ax.grid(axis="y", visible=False)
        fig.legend(loc="outside lower center", ncols=legend_columns(3), fontsize=8.5)
        return fig


def case_label(name: str) -> str:
    """A broken-assumption case by the English name the verification writes (:data:`CASES`); a name
    the table lacks is shown as written."""
    return _(CASES[name]) if name in CASES else name


# --------------------------------------------------------------------------------------------------
# 8. Scalable-Softmax: the fading maximum
# --------------------------------------------------------------------------------------------------


def ssmax(data: dict):
    """The largest weight against n for fixed logits (all −2, the last +3), softmax vs SSMax.

    data: {"n": [...], "softmax": [...], "ssmax": [...], "s": float}  (``VerifyReport.data["ssmax"]``)
    """
    with style() as plt:
        fig, ax = plt.subplots(figsize=(6.4, 3.2), constrained_layout=True)
        ax.plot(data["n"], data["softmax"], color=UNSCALED, lw=2, marker="o", ms=3.5, label="softmax")
        ax.plot(
            data["n"],
            data["ssmax"],
            color=SCALED,
            lw=2,
            marker="s",
            ms=3.5,
            label=_("Scalable-Softmax (s·ln n), s = {s:g}", s=data["s"]),
        )
        ax.set_xscale("log")
        ax.xaxis.set_major_formatter(_IntFormatter())
        ax.set_xlabel(_("number of keys n"))
        ax.set_ylabel(_("largest weight"))
        ax.set_ylim(-0.02, 1.05)
        ax.legend(loc="center left")
        return fig


# --------------------------------------------------------------------------------------------------
# 9. FAQ: the error of the variance estimate shrinks as 1/√N around the exact d_k
# --------------------------------------------------------------------------------------------------


def error_vs_samples(data: dict):
    """RMS error of the Monte Carlo variance estimate against the sample count N (log–log), with the
    predicted σ/√N line (slope −1/2).

    data: {"d_k": int, "replicates": R, "slope": float,
           "points": [{"n_samples", "rms_error", "predicted", "mean_error"}, ...]}
    (``VerifyReport.data["error_vs_samples"]``)
    """
    with style() as plt:
        fig, ax = plt.subplots(figsize=(6.0, 3.2), constrained_layout=True)
        n = [p["n_samples"] for p in data["points"]]
        ax.plot(
            n,
            [p["predicted"] for p in data["points"]],
            color=REFERENCE,
            lw=1.1,
            ls="--",
            label=_("predicted σ/√N (slope −½)"),
        )
        ax.plot(
            n,
            [p["rms_error"] for p in data["points"]],
            color=SCALED,
            lw=0,
            marker="o",
            ms=6,
            label=_("measured ({replicates} ×), slope {slope:.2f}", replicates=data["replicates"], slope=data["slope"]),
        )
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.xaxis.set_major_formatter(_IntFormatter())
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:g}"))
        # label the minor ticks 2, 3, 5 (× 10ᵏ) only: a readable log axis without crowding
        ax.yaxis.set_minor_formatter(FuncFormatter(lambda v, _pos: f"{v:g}" if f"{v:.0e}"[0] in "235" else ""))
        ax.set_xlabel(_("samples N"))
        ax.set_ylabel(_("RMS error of Var at dₖ = {d}", d=data["d_k"]))
        ax.legend(loc="upper right", fontsize=8.5)
        return fig


# --------------------------------------------------------------------------------------------------
# 10. Softmax must give all its weight away; softmax₁ need not
# --------------------------------------------------------------------------------------------------


def give_away(data: dict):
    """Total attention weight of n equal logits c against c: softmax (always 1) vs softmax₁.

    data: {"n": int, "logit": [...], "softmax_total_measured": [...], "softmax1_total": [...]}
    (``VerifyReport.data["give_away"]``)
    """
    with style() as plt:
        fig, ax = plt.subplots(figsize=(6.0, 3.0), constrained_layout=True)
        ax.plot(
            data["logit"], data["softmax_total_measured"], color=UNSCALED, lw=2, marker="o", ms=3.5, label="softmax"
        )
        ax.plot(
            data["logit"],
            data["softmax1_total"],
            color=SCALED,
            lw=2,
            marker="s",
            ms=3.5,
            label="softmax₁ (Miller 2023)",
        )
        ax.set_ylim(-0.03, 1.08)
        ax.set_xlabel(_("the common logit c"))
        ax.set_ylabel(_("total weight (n = {n})", n=data["n"]))
        ax.legend(loc="center right")
        return fig
