"""Small HTML building blocks shared by every chapter: figures as inline SVG, tables, escaping."""

from __future__ import annotations

import html
import io
import math
import re
import traceback

from attnscale.report.text import t
from attnscale.i18n import _


def esc(text: object) -> str:
    return html.escape(str(text), quote=True)


def para(text: str) -> str:
    """A paragraph of prose, escaped."""
    return f"<p>{esc(text)}</p>"


def note(text: str) -> str:
    """A paragraph set as a note (smaller, muted), escaped."""
    return f'<p class="note">{esc(text)}</p>'


def bullets(items) -> str:
    """A list of sentences, each escaped."""
    return "<ul>" + "".join(f"<li>{esc(s)}</li>" for s in items) + "</ul>"


def error_box(message: str, code: str = "", err: BaseException | None = None) -> str:
    """A red box in place of what could not be shown: ``message``, then ``code`` (what failed, e.g.
    a data block's name), then the error ``err`` as Python prints its last line."""
    named = f" <code>{esc(code)}</code>" if code else ""
    detail = f"<pre>{esc(''.join(traceback.format_exception_only(type(err), err)).strip())}</pre>" if err else ""
    return f'<div class="error-box" role="alert"><p>{esc(message)}{named}</p>{detail}</div>'


def number(x, spec: str = ".3g", *, digits: int | None = None) -> str:
    """A figure from a result file as text; a missing or non-finite value (None, NaN, ±inf) is "—".

    ``spec`` is a format spec; with ``digits`` the figure is set for reading instead: integers with
    thousands separators, floats to ``digits`` significant digits, scientific below 10⁻³ and from 10⁶.
    A value that is not a number (a label) is shown as it is.

    >>> number(0.12345), number(None), number(float("nan")), number(4050.2, digits=4), number(12345678)
    ('0.123', '—', '—', '4,050', '1.23e+07')
    >>> number(1387386, digits=4), number(2.5e-5, digits=3), number(0.8, digits=2)
    ('1,387,386', '2.50e-05', '0.8')
    """
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "—"
    if digits is None:
        return format(x, spec)
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return str(x)
    if isinstance(x, int):
        return f"{x:,}"
    if x != 0 and (abs(x) < 1e-3 or abs(x) >= 1e6):
        return f"{x:.{digits - 1}e}"
    if abs(x) >= 1000:
        return f"{x:,.0f}"            # 4,050 rather than 4050 or 4.05e+03
    return f"{x:.{digits}g}"


def percent(fraction: float) -> str:
    """A level or a share as a percentage, as many digits as it has: 0.99 → "99%", 0.995 → "99.5%"."""
    return f"{fraction * 100:.6g}%"


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
    # embeds; tick labels made while saving get the same fonts as the rest). A fixed hash salt makes
    # the SVG's element ids a function of the figure: same results, same page.
    with style({"svg.hashsalt": "attnscale"}):
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
    more = _("All {n} rows", lang, n=len(rows))
    return (f'{table(header, summary_rows, cls)}<details class="table-more"><summary>{esc(more)}</summary>'
            f'{table(header, rows, cls)}</details>')
