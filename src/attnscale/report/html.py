"""Small HTML building blocks shared by every chapter: escaping, paragraphs, notes, lists, error boxes,
tables. (Figures as inline SVG: :mod:`attnscale.report.plotting`; numbers: :mod:`attnscale.report.numbers`.)"""

from __future__ import annotations

import html
import traceback

from attnscale.i18n import _
from attnscale.report.text import pretty


def esc(text: object) -> str:
    """``text`` escaped for HTML, with the page's typography (:func:`~attnscale.report.text.pretty`:
    d_k → dₖ), the one place the page applies it."""
    return html.escape(pretty(str(text)), quote=True)


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


class Verbatim(str):
    """A table cell quoted as written in English (a model's text): marked ``lang="en"``, so that the
    Chinese page says what it quotes, for readers, fonts and the test that looks for English."""


class Markup(str):
    """A table cell that is HTML already, built from escaped parts by the chapter (a coloured badge
    beside a number): put in as it is."""


def _cell(c: object) -> str:
    if isinstance(c, Markup):
        return f"<td>{c}</td>"
    return f'<td lang="en">{esc(c)}</td>' if isinstance(c, Verbatim) else f"<td>{esc(c)}</td>"


def table(header: list[str], rows: list[list[object]], cls: str = "") -> str:
    head = "".join(f"<th>{esc(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(_cell(c) for c in row) + "</tr>" for row in rows)
    return f'<div class="table-wrap"><table class="{esc(cls)}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>'


def table_with_details(
    header: list[str],
    rows: list[list[object]],
    summary_rows: list[list[object]] | None = None,
    cls: str = "",
    limit: int = 8,
) -> str:
    """A big table as a short one with the full table behind a ``<details>`` ("All 30 rows").

    ``summary_rows``: what the reader needs at a glance, chosen by the chapter from its result
    (e.g. the best setting of each rule); default the first ``limit`` rows. A table of at most
    ``limit`` rows (and no summary of its own) is shown whole, with no details."""
    if summary_rows is None:
        if len(rows) <= limit:
            return table(header, rows, cls)
        summary_rows = rows[:limit]
    more = _("All {n} rows", n=len(rows))
    return (
        f'{table(header, summary_rows, cls)}<details class="table-more"><summary>{esc(more)}</summary>'
        f"{table(header, rows, cls)}</details>"
    )
