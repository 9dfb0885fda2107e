"""The beyond chapter's figures (the QK-norm one: :mod:`.figures_qk`): the phase diagram of the logits'
spread against the number of keys, the variance under broken assumptions, Scalable-Softmax's fading
maximum, and softmax that must give all its weight away. As :mod:`.figures`: measured data in, a
matplotlib Figure out, nothing estimated here."""

from __future__ import annotations

from attnscale.i18n import N_, _
from attnscale.report.figure_parts import int_formatter, shades
from attnscale.report.narrow import legend_columns
from attnscale.report.plotting import NEUTRAL, REFERENCE, SCALED, UNSCALED, style

# The broken-assumption cases, by the English name the verification writes (:func:`case_label`).
CASES = {
    "non-zero means": N_("non-zero means"),
    "variances ≠ 1": N_("variances ≠ 1"),
    "correlated q and k": N_("correlated q and k"),
    "all three": N_("all three"),
}


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
        cool = shades(SCALED, len(ns))
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


def _against_softmax(ax, x, softmax, other, label: str) -> None:
    """Softmax's curve and another's (``label``) against the same ``x``, as the beyond chapter sets
    two ways of normalising side by side."""
    ax.plot(x, softmax, color=UNSCALED, lw=2, marker="o", ms=3.5, label="softmax")
    ax.plot(x, other, color=SCALED, lw=2, marker="s", ms=3.5, label=label)


def ssmax(data: dict):
    """The largest weight against n for fixed logits (all −2, the last +3), softmax vs SSMax.

    data: {"n": [...], "softmax": [...], "ssmax": [...], "s": float}  (``VerifyReport.data["ssmax"]``)
    """
    with style() as plt:
        fig, ax = plt.subplots(figsize=(6.4, 3.2), constrained_layout=True)
        _against_softmax(
            ax, data["n"], data["softmax"], data["ssmax"], _("Scalable-Softmax (s·ln n), s = {s:g}", s=data["s"])
        )
        ax.set_xscale("log")
        ax.xaxis.set_major_formatter(int_formatter())
        ax.set_xlabel(_("number of keys n"))
        ax.set_ylabel(_("largest weight"))
        ax.set_ylim(-0.02, 1.05)
        ax.legend(loc="center left")
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
        _against_softmax(
            ax, data["logit"], data["softmax_total_measured"], data["softmax1_total"], "softmax₁ (Miller 2023)"
        )
        ax.set_ylim(-0.03, 1.08)
        ax.set_xlabel(_("the common logit c"))
        ax.set_ylabel(_("total weight (n = {n})", n=data["n"]))
        ax.legend(loc="center right")
        return fig
