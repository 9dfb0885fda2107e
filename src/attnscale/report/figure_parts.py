"""The parts the report's figures share (:mod:`.figures`, :mod:`.figures_beyond`, :mod:`.figures_qk`):
the d_k axis, error bars of an estimate and its interval, quantile bands, shades of a colour for a
family of curves, and the names of the two ways of a panel (unscaled, ÷ √d_k)."""

from __future__ import annotations

import math

from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter, NullLocator

from attnscale.i18n import N_

# The two ways of a panel or a curve: the logits as they are, and divided by √d_k.
MODE = {"unscaled": N_("unscaled"), "scaled": N_("÷ √dₖ")}
MODE_N = {"unscaled": N_("unscaled, n = {n}"), "scaled": N_("÷ √dₖ, n = {n}")}


def dk_axis(ax, values) -> None:
    """Log₂ axis labelled with the d_k values themselves (4, 64, 512 read better than 2²)."""
    ax.set_xscale("log", base=2)
    ticks = [v for v in values if v > 0 and math.log2(v).is_integer() and int(math.log2(v)) % 2 == 0] or list(values)
    ax.xaxis.set_major_locator(FixedLocator(ticks))
    # a d_k is a dimension, written as the page's text writes it (d_k = 4096), without the thousands
    # separator of counts (int_formatter: 4,096 samples)
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _pos: f"{x:.0f}" if x >= 1 else f"{x:g}"))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel("dₖ")


def int_formatter():
    return FuncFormatter(lambda x, _pos: f"{x:,.0f}" if x >= 1 else f"{x:g}")


def errorbars(ax, x, est, lo, hi, color, name, marker="o"):
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


def quantile_band(ax, x, s, color, name, ls="-", marker="o"):
    """Median line and 10–90% quantile band of one summary {"median", "q10", "q90", ...}."""
    ax.fill_between(x, s["q10"], s["q90"], color=color, alpha=0.12, lw=0)
    ax.plot(x, s["median"], color=color, lw=1.8, ls=ls, label=name, marker=marker, ms=3)


def shades(base: str, count: int) -> list[str]:
    """``count`` shades of ``base``, light to dark (n = 16 light, n = 1024 dark)."""
    return [_mix(base, i / max(count - 1, 1)) for i in range(count)]


def _mix(hex_color: str, t: float) -> str:
    r, g, b = (int(hex_color[i : i + 2], 16) for i in (1, 3, 5))
    f = 1.15 - 0.65 * t
    return "#{:02x}{:02x}{:02x}".format(*(min(255, int(c * f)) for c in (r, g, b)))
