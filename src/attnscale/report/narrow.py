"""Figures for a phone's column: which variant is being drawn, and the pyplot that lays a figure
function's panels out for the narrow one.

:func:`attnscale.report.plotting.responsive_figure` draws every figure twice, for the page's column
("wide", up to 46rem) and for a phone ("narrow"); inside the narrow pass (:func:`drawing_narrow`),
:func:`attnscale.report.plotting.style` hands figure functions a :class:`NarrowPyplot` instead of
pyplot, so that one figure function draws both variants unchanged.
"""

from __future__ import annotations

import contextlib
import contextvars

import numpy as np

NARROW_WIDTH_IN = 4.4  # ≈ the 388 px column of a 420 px phone at 1.2 px per pt: text at its size
NARROW_BREAKPOINT_PX = 600  # the page switches to the narrow variant below this width (style.css)

# The variant being drawn: "wide" (the column of a desktop page) or "narrow" (a phone).
_VARIANT: contextvars.ContextVar[str] = contextvars.ContextVar("figure_variant", default="wide")


def is_narrow() -> bool:
    """Whether the figure being drawn is the phone's variant."""
    return _VARIANT.get() == "narrow"


@contextlib.contextmanager
def drawing_narrow():
    """Within it, figures are drawn for a phone's column (:func:`is_narrow` is true)."""
    token = _VARIANT.set("narrow")
    try:
        yield
    finally:
        _VARIANT.reset(token)


def legend_columns(n: int) -> int:
    """Columns of a legend below the axes: ``n`` in the page's column, at most 2 on a phone (a wider
    legend would widen the narrow figure, and the browser would shrink all of its text)."""
    return min(n, 2) if is_narrow() else n


class NarrowPyplot:
    """pyplot for a phone's column: ``subplots(r, c)`` lays the panels out in a figure
    :data:`NARROW_WIDTH_IN` wide and hands the axes back in the caller's ``(r, c)`` order, so a figure
    function draws both variants unchanged. A row of panels (r = 1) becomes a column; a column stays
    one; a grid is stacked into one column, the caller's columns one after the other, sharing axes as
    the caller asked (and :func:`label_stacked` gives each stacked panel the title and y label of
    its row and column). The text keeps its size in points, so on a phone it is as large as on a
    desktop."""

    def __init__(self, plt):
        self._plt = plt

    def __getattr__(self, name):
        return getattr(self._plt, name)

    def subplots(
        self, nrows=1, ncols=1, *, squeeze=True, sharex=False, sharey=False, gridspec_kw=None, figsize=None, **kw
    ):
        w, h = figsize or self._plt.rcParams["figure.figsize"]
        if nrows > 1:  # already a column, or a grid: one column
            fig, axes = self._stacked(nrows, ncols, sharex, sharey, h, gridspec_kw if ncols == 1 else None, **kw)
        else:
            fig, axes = self._flipped(nrows, ncols, sharex, sharey, gridspec_kw, w, h, **kw)
        if squeeze:
            axes = axes[0, 0] if axes.size == 1 else axes.ravel() if 1 in axes.shape else axes
        return fig, axes

    def _flipped(self, nrows, ncols, sharex, sharey, gridspec_kw, w, h, **kw):
        # The caller's columns become rows: ratios and spacing trade places, and so does sharing
        # "by row" and "by column" (which data axis is shared does not change).
        swap = {"row": "col", "col": "row"}
        grid = _transposed(gridspec_kw or {})
        if nrows == 1 and ncols == 1:  # one panel: keep its proportions, within reason
            size = (NARROW_WIDTH_IN, min(max(h * NARROW_WIDTH_IN / w * 1.15, 2.6), max(h, 2.6)))
        else:  # each of the ncols rows of the narrow figure
            size = (NARROW_WIDTH_IN, ncols * min(max(h / nrows, 2.4), 3.4))
        fig, axes = self._plt.subplots(
            ncols,
            nrows,
            squeeze=False,
            sharex=swap.get(sharex, sharex),
            sharey=swap.get(sharey, sharey),
            gridspec_kw=grid or None,
            figsize=size,
            **_transposed(kw),
        )
        return fig, np.asarray(axes).T  # the caller's (nrows, ncols) order

    def _stacked(self, nrows, ncols, sharex, sharey, h, gridspec_kw, **kw):
        panel_h = min(max(h / nrows, 2.4), 3.4)
        fig, column = self._plt.subplots(
            nrows * ncols,
            1,
            squeeze=False,
            gridspec_kw=gridspec_kw,
            figsize=(NARROW_WIDTH_IN, nrows * ncols * panel_h),
            **kw,
        )
        axes = column[:, 0].reshape(ncols, nrows).T  # panel (r, c) is number c·nrows + r from the top
        for share, along in ((sharex, "sharex"), (sharey, "sharey")):
            groups = (
                [axes.ravel()]
                if share in (True, "all")
                else list(axes)
                if share == "row"
                else list(axes.T)
                if share == "col"
                else []
            )
            for group in groups:
                for ax in group[1:]:
                    getattr(ax, along)(group[0])
        fig._attnscale_grid = axes  # for label_stacked
        return fig, axes


def label_stacked(fig) -> None:
    """Each panel of a grid :class:`NarrowPyplot` stacked into one column keeps what its place in
    the grid told: the title of its column's top panel and the y label of its row's first panel,
    where the figure function set them there only."""
    grid = getattr(fig, "_attnscale_grid", None)
    if grid is None:
        return
    for r in range(grid.shape[0]):
        for c in range(grid.shape[1]):
            ax = grid[r, c]
            top, first = grid[0, c].title, grid[r, 0].yaxis.label
            if not ax.get_title() and top.get_text():
                ax.set_title(top.get_text(), fontproperties=top.get_fontproperties(), color=top.get_color())
            if not ax.get_ylabel() and first.get_text():
                ax.set_ylabel(first.get_text(), fontproperties=first.get_fontproperties(), color=first.get_color())


def _transposed(options: dict) -> dict:
    """Grid options with width and height (ratios, spacing) exchanged."""
    pairs = {"width_ratios": "height_ratios", "height_ratios": "width_ratios", "wspace": "hspace", "hspace": "wspace"}
    return {pairs.get(k, k): v for k, v in options.items()}
