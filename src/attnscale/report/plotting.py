"""The report's figures as SVG, in one style: the palette, the rcParams and fonts every figure is
drawn with (:func:`style`), and a matplotlib figure turned into the page's inline ``<svg>``
(:func:`svg_of`, :func:`figure_svg`), for the page's column and a phone's (:func:`responsive_figure`).

Text is kept as SVG text (``svg.fonttype = none``), so the browser sets it, and the SVGs stay small;
the style names DejaVu Sans for Latin and then the CJK font that the page embeds
(:mod:`attnscale.report.fonts`), which matplotlib also uses to lay Chinese labels out.
"""

from __future__ import annotations

import contextlib
import io
import re
import warnings

from attnscale.report.fonts import matplotlib_families
from attnscale.report.html import esc
from attnscale.report.narrow import NarrowPyplot, drawing_narrow, is_narrow, label_stacked

# The report's palette: scaled = the page's accent, unscaled = a warm red, the rest neutral.
SCALED = "#3559c7"
UNSCALED = "#d1495b"
NEUTRAL = "#5d6677"
REFERENCE = "#1d2330"
SERIES = ("#3559c7", "#d1495b", "#2a9d8f", "#e9a23b", "#7b5ea7", "#5d6677")

RC = {
    "svg.fonttype": "none",
    "font.family": "sans-serif",
    "font.size": 10.5,
    "axes.titlesize": 11.5,
    "axes.titleweight": "bold",
    "axes.labelsize": 10.5,
    "axes.labelcolor": "#2c3342",
    "axes.edgecolor": "#c5cbd6",
    "axes.linewidth": 0.8,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "grid.color": "#e9ecf2",
    "grid.linewidth": 0.8,
    "xtick.color": "#5d6677",
    "ytick.color": "#5d6677",
    "legend.frameon": False,
    "legend.fontsize": 9.5,
    "figure.facecolor": "white",
    "axes.facecolor": "white",
}


@contextlib.contextmanager
def style(rc: dict | None = None):
    """The one figure style of the report: ``with style() as plt: fig, ax = plt.subplots(...)``.

    The report's rcParams (:data:`RC`, then ``rc`` on top), the Agg backend, and the fonts: DejaVu
    Sans, then the CJK font the page embeds (registered with matplotlib on first use), so that
    Chinese labels are measured with real glyphs and the SVG text names the embedded family.
    Inside :func:`responsive_figure`'s narrow pass, ``plt.subplots`` lays the panels out for a
    phone (see :class:`attnscale.report.narrow.NarrowPyplot`)."""
    import matplotlib  # matplotlib loads only when a figure is drawn

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    # The families themselves, not the "sans-serif" alias: a Text keeps them from its creation, so a
    # figure saved later still names the embedded CJK family. The alias gets them too, for text made
    # with family "sans-serif" and saved here (svg_of saves inside this style).
    families = matplotlib_families()
    fonts = {
        "font.family": [*families, "sans-serif"],
        "font.sans-serif": [*families, *matplotlib.rcParamsDefault["font.sans-serif"]],
    }
    with plt.rc_context({**RC, **fonts, **(rc or {})}), warnings.catch_warnings():
        # Without a CJK font on this machine, Chinese glyphs are missing: the browser sets that text.
        warnings.filterwarnings("ignore", message="Glyph .* missing from font")
        yield NarrowPyplot(plt) if is_narrow() else plt


def svg_of(fig, alt: str) -> str:
    """The figure as an inline ``<svg>`` that scales to its column, then closed."""
    import matplotlib.pyplot as plt

    buf = io.StringIO()
    # In the report's figure style (text stays SVG text, set by the browser in the fonts the page
    # embeds; tick labels made while saving get the same fonts as the rest). A fixed hash salt makes
    # the SVG's element ids a function of the figure: same results, same page.
    with style({"svg.hashsalt": "attnscale"}):
        fig.savefig(buf, format="svg", bbox_inches="tight", metadata={"Date": None})  # byte-reproducible
    plt.close(fig)
    svg = buf.getvalue()
    svg = svg[svg.index("<svg") :]  # drop the XML prolog and DOCTYPE
    svg = re.sub(r'<svg ([^>]*?)width="[^"]*" height="[^"]*"', r"<svg \1", svg, count=1)  # scale to the column
    return svg.replace("<svg ", f'<svg role="img" aria-label="{esc(alt)}" ', 1)


def figure_svg(fig, alt: str, caption: str = "") -> str:
    """A matplotlib figure as an inline ``<figure>`` with an SVG (no external files), then closed."""
    cap = f"<figcaption>{esc(caption)}</figcaption>" if caption else ""
    return f'<figure class="fig">{svg_of(fig, alt)}{cap}</figure>'


def responsive_figure(draw, alt: str, caption: str = "", px_per_inch: float | None = None) -> str:
    """A figure readable at 1280 px and at 420 px: ``draw()`` (a function that makes the figure
    inside :func:`style`) runs twice, for the page's column and for a phone's, and the page shows
    the one that fits (``.fig-wide`` / ``.fig-narrow`` in style.css, switched at
    :data:`attnscale.report.narrow.NARROW_BREAKPOINT_PX`). ``px_per_inch`` caps the wide one's width
    at that many CSS px per inch drawn (a small figure is not blown up to the column).

        html = responsive_figure(lambda: saturation(data), alt, caption)
    """
    fig = draw()
    max_px = round(fig.get_figwidth() * px_per_inch) if px_per_inch else None
    wide = svg_of(fig, alt)
    with drawing_narrow():
        narrow_fig = draw()
        label_stacked(narrow_fig)
        narrow = svg_of(narrow_fig, alt)
    cap = f"<figcaption>{esc(caption)}</figcaption>" if caption else ""
    fig_style = f' style="--fig-max:{max_px}px"' if max_px else ""
    return (
        f'<figure class="fig fig-responsive"{fig_style}><div class="fig-wide">{wide}</div>'
        f'<div class="fig-narrow">{narrow}</div>{cap}</figure>'
    )
