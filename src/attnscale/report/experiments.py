"""Chapters from experiment result files (training, real-model probe, telemetry).

Each module listed in :data:`attnscale.report.chapters.EXPERIMENT_CHAPTERS` is rendered from
``<results>/<RESULT_PATH>`` when that file exists, and replaced by a note with its ``HOW_TO`` command
when it does not. A chapter that fails to import or render becomes an error box: one broken chapter
never costs the reader the rest of the report.
"""

from __future__ import annotations

import importlib
import traceback
from dataclasses import dataclass
from pathlib import Path

from attnscale.report.html import esc
from attnscale.report.text import t


@dataclass
class RenderedChapter:
    name: str          # the module name under attnscale.report.chapters
    title: str
    html: str          # the chapter's body (without its <h2>)
    status: str        # "rendered", "missing" (no result file yet) or "error"
    source: str        # the result file it was read from, or would be


def _title(module, name: str, lang: str) -> str:
    title = getattr(module, "TITLE", None) if module is not None else None
    if isinstance(title, dict):
        return title.get(lang) or title.get("en") or name
    return str(title) if title else name.replace("_", " ")


def _error_box(lang: str, err: BaseException) -> str:
    detail = "".join(traceback.format_exception_only(type(err), err)).strip()
    return (f'<div class="error-box" role="alert"><p>{esc(t("chapter_error", lang))}</p>'
            f'<pre>{esc(detail)}</pre></div>')


def render_experiment(name: str, results_dir: Path, lang: str) -> RenderedChapter:
    """One experiment chapter: rendered, a how-to note, or an error box. Never raises (except
    KeyboardInterrupt/SystemExit, which must still stop the build)."""
    from attnscale.store import read_json

    module = None
    source = ""
    try:
        module = importlib.import_module(f"attnscale.report.chapters.{name}")
        source = str(Path(results_dir) / module.RESULT_PATH)
        path = Path(source)
        if not path.exists():
            how = esc(getattr(module, "HOW_TO", ""))
            html = (f'<div class="note"><p>{esc(t("missing_result", lang))}</p>'
                    f'<pre><code>{how}</code></pre><p>{esc(t("missing_then", lang))}</p></div>')
            return RenderedChapter(name, _title(module, name, lang), html, "missing", source)
        html = module.render(read_json(path), lang)
        return RenderedChapter(name, _title(module, name, lang), html, "rendered", source)
    except Exception as err:  # a chapter's bug, its damaged result file, its missing dependency
        return RenderedChapter(name, _title(module, name, lang), _error_box(lang, err), "error", source)
