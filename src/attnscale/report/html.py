"""Small HTML building blocks shared by every chapter: figures as inline SVG, tables, escaping."""

from __future__ import annotations

import html
import io
import math
import re


def esc(text: object) -> str:
    return html.escape(str(text), quote=True)


def number(x, spec: str = ".3g") -> str:
    """A figure from a result file as text; a missing or non-finite value (None, NaN, ±inf) is "—"."""
    return "—" if x is None or (isinstance(x, float) and not math.isfinite(x)) else format(x, spec)


def figure_svg(fig, alt: str, caption: str = "") -> str:
    """A matplotlib figure as an inline ``<figure>`` with an SVG (no external files), then closed."""
    cap = f"<figcaption>{esc(caption)}</figcaption>" if caption else ""
    return f'<figure class="fig">{svg_of(fig, alt)}{cap}</figure>'


def svg_of(fig, alt: str) -> str:
    """The figure as an inline ``<svg>`` that scales to its column, then closed."""
    import matplotlib.pyplot as plt

    from attnscale.report.figures import style

    buf = io.StringIO()
    # In the report's figure style (text stays SVG text, set by the browser in the fonts the page
    # embeds; tick labels made while saving get the same fonts as the rest).
    with style():
        fig.savefig(buf, format="svg", bbox_inches="tight", metadata={"Date": None})  # byte-reproducible
    plt.close(fig)
    svg = buf.getvalue()
    svg = svg[svg.index("<svg"):]                       # drop the XML prolog and DOCTYPE
    svg = re.sub(r'<svg ([^>]*?)width="[^"]*" height="[^"]*"', r'<svg \1', svg, count=1)  # scale to the column
    return svg.replace("<svg ", f'<svg role="img" aria-label="{esc(alt)}" ', 1)


def table(header: list[str], rows: list[list[object]], cls: str = "") -> str:
    head = "".join(f"<th>{esc(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{esc(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f'<div class="table-wrap"><table class="{esc(cls)}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>'


MORE_ROWS = {"en": "All {n} rows", "zh": "全部 {n} 行"}


def table_with_details(header: list[str], rows: list[list[object]], summary_rows: list[list[object]] | None = None,
                       lang: str = "en", cls: str = "", limit: int = 8) -> str:
    """A big table as a short one with the full table behind a ``<details>`` ("All 30 rows").

    ``summary_rows``: what the reader needs at a glance, chosen by the chapter from its result
    (e.g. the best setting of each rule); default the first ``limit`` rows. A table of at most
    ``limit`` rows (and no summary of its own) is shown whole, with no details."""
    if summary_rows is None:
        if len(rows) <= limit:
            return table(header, rows, cls)
        summary_rows = rows[:limit]
    more = MORE_ROWS.get(lang, MORE_ROWS["en"]).format(n=len(rows))
    return (f'{table(header, summary_rows, cls)}<details class="table-more"><summary>{esc(more)}</summary>'
            f'{table(header, rows, cls)}</details>')
