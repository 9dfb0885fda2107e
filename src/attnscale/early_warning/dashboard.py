"""The dashboard of ``attnscale watch --html``: one self-contained HTML page (its data, style and
script inline, nothing fetched), per figure a layer × head heatmap over the steps with the alerts
marked on it, and the loss on the same step axis beside it when the log has one.

A log longer than :data:`MAX_COLUMNS` steps is binned: each column holds consecutive steps, reduced
to the value nearest the alarm (the largest for a figure that alerts when it rises, the smallest for
one that alerts when it falls), so a spike is never averaged away; the loss is the bin's mean."""

from __future__ import annotations

import html
import json
import math
import warnings
from importlib import resources
from pathlib import Path

import numpy as np

from attnscale.early_warning.detector import CHANGE_RULES
from attnscale.early_warning.words import FIGURE_WORDS, summary
from attnscale.i18n import _, current_lang
from attnscale.softmax_rows import FLOAT16_MAX

__all__ = ["MAX_COLUMNS", "FIGURES", "dashboard_data", "render", "write_dashboard"]

#: Columns a heatmap has at most (a step each, or a bin of steps).
MAX_COLUMNS = 600
#: The figures drawn, in order: figure -> (the alarming direction, drawn on a log colour scale).
FIGURES = {
    "max_abs_logit": ("up", True),
    "float16_headroom": ("down", True),
    "entropy_min": ("down", False),
    "saturated_fraction": ("up", False),
    "first_key_weight": ("up", False),
    "rows_broken": ("up", False),
}


def _value(head: dict, figure: str) -> float:
    """A head's figure from its JSON record (NaN where null); the headroom is FLOAT16_MAX / max |logit|."""
    if figure == "float16_headroom":
        m = head.get("max_abs_logit")
        return math.nan if m is None else (FLOAT16_MAX / m if m > 0 else math.inf)
    v = head.get(figure)
    return math.nan if v is None else float(v)


def _reduce(fn, blocks: np.ndarray) -> np.ndarray:
    """fn (np.nanmin, np.nanmax, np.nanmean) over the last axis; an all-NaN block is NaN, quietly (a
    column with no measurement)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return fn(blocks, axis=-1)


def _binned(matrix: np.ndarray, size: int, fn) -> np.ndarray:
    """(rows, steps) → (rows, ceil(steps / size)): ``fn`` over each bin of ``size`` consecutive steps."""
    rows, steps = matrix.shape
    padded = np.full((rows, -(-steps // size) * size), np.nan)
    padded[:, :steps] = matrix
    return _reduce(fn, padded.reshape(rows, -1, size))


def _json_numbers(matrix: np.ndarray) -> list:
    """Rows of numbers to 4 significant digits (a page, not an archive), null where not finite."""
    return [[float(f"{v:.4g}") if math.isfinite(v) else None for v in row] for row in matrix.tolist()]


def dashboard_data(records: list, alerts: list) -> dict:
    """What the page draws: the steps (first of each column), the (layer, head) rows, per figure its
    matrix and alerts, and the loss when any record has a finite ``loss``. Pure."""
    steps = [r["step"] for r in records]
    labels = list(dict.fromkeys((h["layer"], h["head"]) for r in records for h in r["heads"]))
    where = {k: i for i, k in enumerate(labels)}
    size = max(1, -(-len(steps) // MAX_COLUMNS))
    column = {step: i // size for i, step in enumerate(steps)}
    figures = {}
    for figure, (direction, log) in FIGURES.items():
        matrix = np.full((len(labels), len(steps)), np.nan)
        for j, r in enumerate(records):
            for h in r["heads"]:
                matrix[where[(h["layer"], h["head"])], j] = _value(h, figure)
        marks = [
            {"row": where[(a.layer, a.head)], "col": column[a.step], "text": a.sentence()}
            for a in alerts
            if a.figure == figure and (a.layer, a.head) in where and a.step in column
        ]
        figures[figure] = {
            "title": _(FIGURE_WORDS[figure]),
            "log": log,
            "watched": figure in CHANGE_RULES,
            "values": _json_numbers(_binned(matrix, size, np.nanmin if direction == "down" else np.nanmax)),
            "alerts": marks,
        }
    loss = np.array([r.get("loss") if isinstance(r.get("loss"), (int, float)) else math.nan for r in records], float)
    out = {
        "steps": steps[::size],
        "binned": size,
        "rows": [f"{layer} · {head}" for layer, head in labels],
        "layers": [layer for layer, _head in labels],
        "figures": figures,
    }
    if np.isfinite(loss).any():
        out["loss"] = _json_numbers(_binned(loss[None, :], size, np.nanmean))[0]
    return out


def _script_json(data: dict) -> str:
    """JSON safe inside a <script> element: no ``</`` can close it early."""
    return json.dumps(data, ensure_ascii=False, allow_nan=False).replace("</", "<\\/")


def render(records: list, alerts: list, config, title: str) -> str:
    """The page, in the bound language. records: the log's step records (JSON data); alerts: theirs."""
    data = dashboard_data(records, alerts)
    data["words"] = {
        "step": _("step"),
        "loss": _("loss"),
        "no_loss": _("this log has no loss"),
        "alerts_here": _("alerts on this figure"),
        "fixed_only": _("fixed thresholds only (no change detection on this figure)"),
    }
    here = resources.files(__package__)
    heading = _("Attention early warning: {log}", log=title)
    said = summary(len(alerts), len(records), len(data["rows"]))
    method = _(
        "Change detection: z = {z:g} over a window of {window} steps (warm-up {warmup}), σ ≥ {min_sigma:g}. "
        "One row per layer × head, layers in the order first seen, a white line between layers.",
        z=config.z,
        window=config.window,
        warmup=config.warmup,
        min_sigma=config.min_sigma,
    )
    binned = (
        _("each column is {n} consecutive steps, the value nearest the alarm", n=data["binned"])
        if data["binned"] > 1
        else ""
    )
    return (
        f'<!DOCTYPE html>\n<html lang="{current_lang()}">\n<head>\n<meta charset="utf-8">\n'
        f'<meta name="viewport" content="width=device-width, initial-scale=1">\n<title>{html.escape(heading)}</title>\n'
        f"<style>\n{here.joinpath('dashboard.css').read_text(encoding='utf-8')}</style>\n</head>\n<body>\n"
        f'<h1>{html.escape(heading)}</h1>\n<p id="summary">{html.escape(said)}</p>\n'
        f'<p class="note">{html.escape(method)}</p>\n'
        + (f'<p class="note">{html.escape(binned)}</p>\n' if binned else "")
        + '<main id="figures"></main>\n<div id="tip" hidden></div>\n'
        f'<script type="application/json" id="data">{_script_json(data)}</script>\n'
        f"<script>\n{here.joinpath('dashboard.js').read_text(encoding='utf-8')}</script>\n</body>\n</html>\n"
    )


def write_dashboard(path, records: list, alerts: list, config, title: str) -> Path:
    """Write the page to ``path`` atomically (a reader never sees half of it); returns the path."""
    from attnscale.store import write_bytes_atomic

    return write_bytes_atomic(path, render(records, alerts, config, title).encode("utf-8"))
