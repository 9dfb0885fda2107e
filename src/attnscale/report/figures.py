"""The blog post's chapters' figures: measured data in, a matplotlib Figure out (the beyond chapter's:
:mod:`.figures_beyond` and :mod:`.figures_qk`; their shared parts: :mod:`.figure_parts`).

Every function here only *draws*: it takes a block of ``VerifyReport.data`` (plain lists and dicts,
already holding estimates, intervals and quantiles) and returns a figure, drawn inside the report's
one style (:func:`attnscale.report.plotting.style`). None of them draws a random number or estimates
anything; the tests feed them hand-made data and read the plotted values back. Each data block's
name is its figure function's name (:data:`attnscale.report.seed.CHAPTER_FIGURES`).
"""

from __future__ import annotations

from matplotlib.ticker import FuncFormatter

from attnscale.i18n import N_, _
from attnscale.report.figure_parts import MODE, MODE_N, dk_axis, errorbars, int_formatter, quantile_band, shades
from attnscale.report.narrow import legend_columns
from attnscale.report.plotting import NEUTRAL, REFERENCE, SCALED, SERIES, UNSCALED, style

# The component laws of the variance figure's legend, by their names in attnscale.theory.COMPONENTS.
FAMILY = {
    "gaussian": N_("Gaussian"),
    "uniform": N_("uniform"),
    "rademacher": N_("Rademacher ±1"),
    "student_t5": N_("Student-t(5)"),
}


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
            errorbars(
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
            errorbars(
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
            dk_axis(ax, dks)
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
        warm, cool = shades(UNSCALED, len(ns)), shades(SCALED, len(ns))
        for i, n in enumerate(ns):
            per = data["by_n"][n]
            for mode, colors, ls in (("unscaled", warm, "-"), ("scaled", cool, "--")):
                name = _(MODE_N[mode], n=n)
                quantile_band(axes[0], data["d_k"], per[mode]["max_weight"], colors[i], name, ls)
                quantile_band(axes[1], data["d_k"], per[mode]["normalized_entropy"], colors[i], name, ls)
        for ax, ylabel in ((axes[0], N_("median max weight")), (axes[1], N_("median entropy / ln n"))):
            dk_axis(ax, data["d_k"])
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
        warm, cool = shades(UNSCALED, len(ns)), shades(SCALED, len(ns))
        lowest = []
        for i, n in enumerate(ns):
            per = data["by_n"][n]
            for mode, colors, ls in (("unscaled", warm, "-"), ("scaled", cool, "--")):
                s = per[mode]["jacobian_frobenius"]
                quantile_band(ax, data["d_k"], s, colors[i], _(MODE_N[mode], n=n), ls)
                lowest += [v for v in s["q10"] + s["median"] if v > 0]
            ax.plot(data["d_k"], per["unscaled"]["jacobian_frobenius"]["mean"], color=warm[i], lw=1.1, ls=":")
        ax.plot([], [], color=NEUTRAL, lw=1.1, ls=":", label=_("mean over rows (unscaled)"))
        ax.set_yscale("log")
        if lowest:
            ax.set_ylim(bottom=max(min(lowest) / 3, 1e-18))  # a frozen row's exact 0 would sink the axis
        dk_axis(ax, data["d_k"])
        ax.set_ylabel(_("‖∂softmax/∂z‖ (Frobenius)"))
        fig.legend(loc="outside lower center", ncols=legend_columns(3), fontsize=8)
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
        ax.xaxis.set_major_formatter(int_formatter())
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:g}"))
        # label the minor ticks 2, 3, 5 (× 10ᵏ) only: a readable log axis without crowding
        ax.yaxis.set_minor_formatter(FuncFormatter(lambda v, _pos: f"{v:g}" if f"{v:.0e}"[0] in "235" else ""))
        ax.set_xlabel(_("samples N"))
        ax.set_ylabel(_("RMS error of Var at dₖ = {d}", d=data["d_k"]))
        ax.legend(loc="upper right", fontsize=8.5)
        return fig


# --------------------------------------------------------------------------------------------------
