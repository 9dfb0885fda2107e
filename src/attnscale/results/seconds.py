"""What a result records of its time and place: the seconds each cell of a sweep took
(:class:`CellSeconds`, :func:`cell_seconds`), how long the run that made a result took
(:func:`recorded_seconds`), and the environment its figures were computed in (:func:`computed_on`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeGuard

from attnscale.results.files import Envelope


def _number(x: object) -> TypeGuard[int | float]:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


@dataclass(frozen=True)
class CellSeconds:
    """What a sweep's cells took to compute, as each cell of the result records it (its
    ``seconds``: ``{"wall", "cpu", "workers"}``, measured where and when the cell was computed, so a
    cell read from a cache keeps its computation's time). A cell computed by code that recorded no
    time has none here: it counts in :attr:`cells`, not in :attr:`timed` nor in any sum."""

    each: tuple[float | None, ...]  # per entry of data["cells"], in order: its own wall-clock seconds, or None
    cpu_s: float | None  # the timed cells' CPU seconds, summed (None when none records them)
    workers: int | None  # how many cells ran at once as they were timed, when all timed cells say
    # the same number; None when they differ or do not say

    @property
    def cells(self) -> int:
        return len(self.each)

    @property
    def timed(self) -> int:
        return sum(s is not None for s in self.each)

    @property
    def wall_s(self) -> float:
        """The timed cells' own wall-clock seconds, summed (one cell after another)."""
        return float(sum(s for s in self.each if s is not None))

    @property
    def wall_s_max(self) -> float | None:
        return max((s for s in self.each if s is not None), default=None)

    def summary(self) -> dict:
        """The sweep-level field a sweep's result holds beside its cells (``data.cell_seconds``)."""
        return {
            "cells": self.cells,
            "timed": self.timed,
            "wall": self.wall_s,
            "cpu": self.cpu_s,
            "wall_max": self.wall_s_max,
            "workers": self.workers,
        }


def cell_seconds(result: Envelope | dict) -> CellSeconds | None:
    """The cells' own time of a sweep's result (its envelope, or its data), read from each cell's
    ``seconds``; None when the result holds no cells (not a sweep). The one reader of these fields:
    every face that says what a sweep's cells cost, or how long computing them would take, asks here."""
    data = result.data if isinstance(result, Envelope) else result
    cells = data.get("cells") if isinstance(data, dict) else None
    if not isinstance(cells, list):
        return None
    recorded: list[dict] = [
        c["seconds"] if isinstance(c, dict) and isinstance(c.get("seconds"), dict) else {} for c in cells
    ]
    each = tuple(float(r["wall"]) if _number(r.get("wall")) and r["wall"] >= 0 else None for r in recorded)
    timed = [r for r, wall in zip(recorded, each) if wall is not None]
    cpu = [float(r["cpu"]) for r in timed if _number(r.get("cpu"))]
    workers = {int(r["workers"]) if _number(r.get("workers")) else None for r in timed}
    return CellSeconds(
        each=each, cpu_s=float(sum(cpu)) if cpu else None, workers=workers.pop() if len(workers) == 1 else None
    )


def computed_on(env: Envelope) -> dict:
    """The environment where the figures of ``env`` were computed: for a sweep rebuilt from the cells
    of an earlier result alone (every cell taken from it: ``data.cells_from``), that result's, which
    it records; for any other result its own (``env.environment``, where it was written). A sweep
    whose cells came partly from an earlier result and partly from this run has its own."""
    data = env.data if isinstance(env.data, dict) else {}
    source = data.get("cells_from")
    if (
        isinstance(source, dict)
        and isinstance(source.get("environment"), dict)
        and source.get("cells") == len(data.get("cells") or []) > 0
    ):
        return source["environment"]
    return env.environment


def recorded_seconds(env: Envelope) -> float | None:
    """How long the run that made ``env`` took, as the result itself records it: for a sweep whose
    every cell records its time, the cells' own wall-clock seconds summed (:func:`cell_seconds`;
    run N at a time, a run takes about 1/N of it), else its ``wall_s`` (of its last invocation: cells
    read from the cache cost nothing there); a probe's or rescale's ``seconds`` (loading and
    computing), the verification's ``timings.total``; None when the result records no time."""
    data = env.data if isinstance(env.data, dict) else {}
    cells = cell_seconds(data)
    if cells is not None and cells.cells and cells.timed == cells.cells:
        return cells.wall_s
    if _number(data.get("wall_s")):
        return float(data["wall_s"])
    seconds = data.get("seconds")
    if isinstance(seconds, dict) and seconds and all(_number(v) for v in seconds.values()):
        return float(sum(seconds.values()))
    total = (data.get("timings") or {}).get("total") if isinstance(data.get("timings"), dict) else None
    return float(total) if _number(total) else None
