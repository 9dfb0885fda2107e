"""The training experiments by name, and how one is run into its result (kind ``train/<name>``).

    >>> sorted(EXPERIMENTS)
    ['early-warning', 'lm', 'logit-growth', 'scale-vs-dk']

The result is written through :func:`attnscale.results.write` under the results root (quick runs apart
from full ones). Its data: the description, every cell with its result (final metrics and per-step
metrics) and its own time (``seconds``: ``{"wall", "cpu", "workers"}``, measured by the sweep runner
where the cell was computed; null for a cell computed by code that recorded none), the cells' time in
all (``cell_seconds``, :meth:`attnscale.results.CellSeconds.summary`), the analysis (every figure the
report shows), and of this invocation its wall time and how many cells it read instead of computing
(``wall_s``, ``cells_cached``); the configuration, random seeds and environment are in the envelope.
Non-finite figures are written as ``null`` with a ``nonfinite`` map beside them (where each was, and
whether NaN or ±inf). Cell results are cached under :func:`attnscale.results.cells_dir` by a hash of
the cell, so a rerun only computes the missing cells (and quick and full cells never collide).

``cells_from`` (``attnscale train --cells-from FILE``) takes the cells an earlier result of the same
kind holds as computed: each one whose cell equals a planned cell that the cache lacks goes into the
cache, time included, exactly as the run that computed it would have left it there (its non-finite
figures restored), and the sweep then runs as a resumed one. So a result can be rebuilt after a change
of its analysis without its cells, and ``data.cells_from`` says where they came from.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from attnscale import results
from attnscale.errors import InputError, check_choice
from attnscale.experiments.training import early_warning, lm, logit_growth, scale_vs_dk
from attnscale.experiments.sweeps.runner import Backend, Done, read_cached, run_sweep
from attnscale.store import ResultCache, config_hash, to_jsonable

__all__ = ["Experiment", "EXPERIMENTS", "make_config", "run_experiment", "kind_of", "cached"]


@dataclass(frozen=True)
class Experiment:
    name: str
    config_type: type  # dataclass with .cells(), a .quick(seeds) classmethod, .seeds
    train_cell: Callable[[Any], dict]  # module-level: pickled by name into worker processes
    analyse: Callable[[Any, list, list], dict]
    description: str
    fused_kernel: bool = True  # its cells run attnscale.torch.attention on CPU (backend "auto")


EXPERIMENTS: dict[str, Experiment] = {
    scale_vs_dk.KIND: Experiment(
        scale_vs_dk.KIND,
        scale_vs_dk.ScaleVsDkConfig,
        scale_vs_dk.train_cell,
        scale_vs_dk.analyse,
        "does unscaled attention stop learning? rules x d_k x optimiser on a spread-attention task",
        fused_kernel=False,
    ),  # its one-row attention is plain softmax over ScaledLogits
    logit_growth.KIND: Experiment(
        logit_growth.KIND,
        logit_growth.LogitGrowthConfig,
        logit_growth.train_cell,
        logit_growth.analyse,
        "attention-logit growth vs learning rate, with and without QK-layernorm (Wortsman et al. 2023)",
    ),
    lm.KIND: Experiment(
        lm.KIND,
        lm.LMConfig,
        lm.train_cell,
        lm.analyse,
        "a small GPT on real English text with each scale rule: does unscaled attention stop learning?",
    ),
    early_warning.KIND: Experiment(
        early_warning.KIND,
        early_warning.EarlyWarningConfig,
        early_warning.train_cell,
        early_warning.analyse,
        "how early attention figures warn that a run diverges, against the loss-spike detectors trainers ship",
    ),
}


def make_config(name: str, quick: bool = False, seeds: int | None = None):
    """The configuration of experiment ``name``: default, or quick; ``seeds`` overrides its seed count."""
    check_choice("experiment", name, EXPERIMENTS)
    kind = EXPERIMENTS[name].config_type
    config = kind.quick() if quick else kind()
    return config if seeds is None else dataclasses.replace(config, seeds=seeds)


def kind_of(name: str) -> str:
    """The result kind of experiment ``name``: ``train/<name>``."""
    return f"train/{name}"


def is_quick(name: str, config) -> bool:
    """Whether ``config`` is the experiment's quick configuration (at its seed count)."""
    quick = EXPERIMENTS[name].config_type.quick()
    return config == dataclasses.replace(quick, seeds=config.seeds)


def cached(name: str, cells: list, root: str | Path = results.DEFAULT_ROOT) -> list[bool]:
    """Whether the cell cache of experiment ``name`` under ``root`` holds each of ``cells`` (cells or
    their JSON data), by its files alone: cheap, for counting what a resumed sweep has left to do."""
    cache = ResultCache(results.cells_dir(kind_of(name), root))
    return [cache.path(name, to_jsonable(cell)).exists() for cell in cells]


def run_experiment(
    name: str,
    config,
    root: str | Path = results.DEFAULT_ROOT,
    backend: Backend | None = None,
    progress: Callable[[int, int, str], None] | None = None,
    quick: bool | None = None,
    cells_from: results.Envelope | None = None,
) -> results.Envelope:
    """Run (or resume) every cell of ``config``, analyse, write the ``train/<name>`` result under
    ``root`` atomically and return its envelope. ``quick`` (default: whether ``config`` is the
    experiment's quick configuration) says which of quick.json / result.json it is. ``cells_from``:
    an earlier ``train/<name>`` result whose cells are taken as computed (see the module's text)."""
    experiment = EXPERIMENTS[name]
    kind = kind_of(name)
    if cells_from is not None and cells_from.kind != kind:
        raise InputError(f"cells_from: {cells_from.path} is a {cells_from.kind} result, expected a {kind} one")
    quick = is_quick(name, config) if quick is None else bool(quick)
    cells = config.cells()
    start = time.monotonic()
    cache = ResultCache(results.cells_dir(kind, root))
    known = [_moved_older_times(d) for d in read_cached(name, cells, cache)]
    taken = 0 if cells_from is None else _take_cells(name, cells, known, cells_from, cache)
    cached = sum(d is not None for d in known)
    done = run_sweep(name, cells, experiment.train_cell, cache, backend, progress, cached=known)
    data, nonfinite = results.nulled_nonfinite(
        {
            "description": experiment.description,
            "cells": [{"cell": to_jsonable(c), "result": d.result, "seconds": d.seconds} for c, d in zip(cells, done)],
            "analysis": experiment.analyse(config, cells, [d.result for d in done]),
        }
    )
    data["cell_seconds"] = results.cell_seconds(data).summary()
    data["wall_s"] = time.monotonic() - start  # of this invocation: cached cells cost nothing,
    data["cells_cached"] = cached  # so faces say how many were read from the cache
    if cells_from is not None:
        data["cells_from"] = {
            "cells": taken,
            "created": cells_from.created,
            "version": cells_from.version,
            "environment": cells_from.environment,
        }
    if nonfinite:
        data["nonfinite"] = nonfinite
    return results.write(kind, data, config=to_jsonable(config), seed=0, quick=quick, root=root)


def _take_cells(name: str, cells: list, known: list[Done | None], source: results.Envelope, cache: ResultCache) -> int:
    """Put each cell of the earlier result ``source`` whose cell equals a planned cell missing from
    ``known`` into the cache, with its time, and into ``known`` as the cache returns it; how many."""
    data = results.restored_nonfinite(source.data, source.data.get("nonfinite") or {})
    recorded = {
        config_hash(e["cell"]): e for e in data["cells"] if isinstance(e, dict) and "cell" in e and "result" in e
    }
    taken = 0
    for i, cell in enumerate(cells):
        planned = to_jsonable(cell)
        entry = recorded.get(config_hash(planned))
        if known[i] is not None or entry is None or entry["cell"] != planned:
            continue  # computed here already, or not in the file: never a cell whose config differs
        moved = _moved_older_times(Done(entry["result"], entry.get("seconds")))
        cache.put(name, planned, moved.result, seconds=moved.seconds)
        known[i] = read_cached(name, [cell], cache)[0]
        taken += 1
    return taken


def _moved_older_times(done: Done | None) -> Done | None:
    """A cell computed before the sweep runner timed cells, with the time its experiment kept inside
    the result moved to the one field (:class:`~attnscale.experiments.sweeps.runner.Done` ``seconds``,
    workers unknown): lm's ``wall_s`` and ``cpu_s`` (cells of lm code_version 2) and scale-vs-dk's
    ``timing`` (code_version 4). The one place that knows those fields, for cells read from an older
    cache or an older result file; a cell without them (logit-growth's) keeps no time."""
    if done is None or done.seconds is not None or not isinstance(done.result, dict):
        return done
    result = dict(done.result)
    old = result.pop("timing", None) or {k: result.pop(k) for k in ("wall_s", "cpu_s") if k in result}
    if not isinstance(old, dict) or "wall_s" not in old:
        return done
    return Done(result, {"wall": old["wall_s"], "cpu": old.get("cpu_s"), "workers": None})
