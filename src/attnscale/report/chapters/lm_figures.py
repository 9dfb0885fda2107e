"""The LM chapter's figures (:mod:`.lm`), drawn from the ``train/lm`` analysis' curves and grids only:
a metric against the step per d_k and rule, and the final loss against the learning rate."""

from __future__ import annotations

from contextlib import contextmanager

from attnscale.i18n import _
from attnscale.report.chapters.lm_words import OPTIMISERS
from attnscale.report.narrow import legend_columns
from attnscale.report.plotting import SERIES, style
from attnscale.report.text import pretty, rule_label
from attnscale.stored_words import OPTIMISER_NAMES


@contextmanager
def _grid(rows: int, d_ks: list, sharey):
    """A figure of ``rows`` rows of panels, a column per d_k, in the report's style; the legend of
    the first panel's lines (one per rule) is set below it once the panels are drawn."""
    with style() as plt:
        fig, axes = plt.subplots(
            rows,
            len(d_ks),
            figsize=(3.4 * len(d_ks), 2.9 * rows),
            squeeze=False,
            sharey=sharey,
            constrained_layout=True,
        )
        yield fig, axes
        fig.legend(
            *axes[0][0].get_legend_handles_labels(), loc="outside lower center", ncol=legend_columns(3), fontsize=8.5
        )


def baseline_lines(ax, baselines: list) -> None:
    for row in baselines:
        if row["order"] >= 2:
            ax.axhline(row["bpb"], ls=":", color="#5d6677", lw=1)


def curve_panels(curves: list, d_ks: list, rules: list, rows: list[tuple[str, str, bool]], baselines=()):
    """One column per d_k, one row per (curve key, axis label, log scale); a line per rule (AdamW)."""
    with _grid(len(rows), d_ks, sharey="row") as (fig, axes):
        for col, d_k in enumerate(d_ks):
            for row, (key, ylabel, log) in enumerate(rows):
                ax = axes[row][col]
                for i, rule in enumerate(rules):
                    c = next(c for c in curves if (c["d_k"], c["rule"], c["optimiser"]) == (d_k, rule, "adamw"))
                    y = c[key]["mean"] if key == "valid_bpb" else c[key]
                    pts = [(s, v) for s, v in zip(c["step"], y) if v is not None]
                    ax.plot(
                        [s for s, v in pts],
                        [v for s, v in pts],
                        color=SERIES[i % len(SERIES)],
                        label=pretty(rule_label(rule)),
                    )
                    if key == "valid_bpb":
                        band = [
                            (s, lo, hi) for s, lo, hi in zip(c["step"], c[key]["min"], c[key]["max"]) if lo is not None
                        ]
                        ax.fill_between(
                            [b[0] for b in band],
                            [b[1] for b in band],
                            [b[2] for b in band],
                            color=SERIES[i % len(SERIES)],
                            alpha=0.15,
                            lw=0,
                        )
                if key == "valid_bpb":
                    baseline_lines(ax, baselines)
                    ax.set_ylim(top=max(5.0, min(b["bpb"] for b in baselines) + 0.5) if baselines else None)
                if log:
                    ax.set_yscale("log")
                ax.set_title(pretty(f"d_k = {d_k}") if row == 0 else "")
                if row == len(rows) - 1:
                    ax.set_xlabel(_("step"))
                if col == 0:
                    ax.set_ylabel(_(ylabel))
    return fig


def rate_panels(grid: list, own_best: list, d_ks: list, rules: list, baselines: list):
    """Final loss (the LR sensitivity's score) against the rate: a row per optimiser, a column per
    d_k, a line per rule, its own best rate circled (the figure of Wortsman et al. 2023)."""
    from matplotlib.ticker import NullFormatter  # matplotlib loads only when a figure is drawn

    with _grid(len(OPTIMISERS), d_ks, sharey=True) as (fig, axes):
        for row, optimiser in enumerate(OPTIMISERS):
            for col, d_k in enumerate(d_ks):
                ax = axes[row][col]
                for i, rule in enumerate(rules):
                    pts = sorted(
                        (g["lr"], g["score"])
                        for g in grid
                        if (g["optimiser"], g["d_k"], g["rule"]) == (optimiser, d_k, rule) and g["score"] is not None
                    )
                    color = SERIES[i % len(SERIES)]
                    ax.plot(
                        [x for x, y in pts],
                        [y for x, y in pts],
                        color=color,
                        marker=".",
                        label=pretty(rule_label(rule)),
                    )
                    best = next(
                        b["lr"] for b in own_best if (b["optimiser"], b["d_k"], b["rule"]) == (optimiser, d_k, rule)
                    )
                    ax.plot(
                        [x for x, y in pts if x == best],
                        [y for x, y in pts if x == best],
                        "o",
                        mfc="none",
                        color=color,
                        ms=9,
                    )
                baseline_lines(ax, baselines)
                ax.set_xscale("log")
                # The grid's own rates as the ticks: a log axis spanning one decade would otherwise label
                # its minor ticks (2×10⁻³, 3×10⁻³, ...) into each other.
                rates = sorted({g["lr"] for g in grid if g["optimiser"] == optimiser})
                ax.set_xticks(rates, [f"{lr:g}" for lr in rates])
                ax.xaxis.set_minor_formatter(NullFormatter())
                ax.set_title(pretty(f"{_(OPTIMISER_NAMES[optimiser])} · d_k = {d_k}"))
                if row == len(OPTIMISERS) - 1:
                    ax.set_xlabel(_("peak learning rate"))
                if col == 0:
                    ax.set_ylabel(_("final validation bits per byte"))
    return fig
