"""The training experiments by name, and how one is run into its result (kind ``train/<name>``).

    >>> sorted(EXPERIMENTS)
    ['lm', 'logit-growth', 'scale-vs-dk']

The result is written through :func:`attnscale.results.write` under the results root (quick runs apart
from full ones). Its data: the description, every cell with its result (final metrics and per-step
metrics), the analysis (every figure the report shows) and the wall time of this invocation; the
configuration, random seeds and environment are in the envelope. Non-finite figures are written as
``null`` with a ``nonfinite`` map beside them (where each was, and whether NaN or ±inf). Cell results
are cached under :func:`attnscale.results.cells_dir` by a hash of the cell, so a rerun only computes
the missing cells (and quick and full cells never collide).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from attnscale import results
from attnscale.errors import check_choice
from attnscale.experiments.training import lm, logit_growth, scale_vs_dk
from attnscale.experiments.sweeps.runner import Backend, read_cached, run_sweep
from attnscale.store import ResultCache, to_jsonable

__all__ = ["Experiment", "EXPERIMENTS", "make_config", "run_experiment", "kind_of"]


@dataclass(frozen=True)
class Experiment:
    name: str
    config_type: type                        # dataclass with .cells(), a .quick(seeds) classmethod, .seeds
    train_cell: Callable[[Any], dict]        # module-level: pickled by name into worker processes
    analyse: Callable[[Any, list, list], dict]
    description: str
    fused_kernel: bool = True                # its cells run attnscale.torch.attention on CPU (backend "auto")


EXPERIMENTS: dict[str, Experiment] = {
    scale_vs_dk.KIND: Experiment(
        scale_vs_dk.KIND, scale_vs_dk.ScaleVsDkConfig, scale_vs_dk.train_cell, scale_vs_dk.analyse,
        "does unscaled attention stop learning? rules x d_k x optimiser on a spread-attention task",
        fused_kernel=False),                 # its one-row attention is plain softmax over ScaledLogits
    logit_growth.KIND: Experiment(
        logit_growth.KIND, logit_growth.LogitGrowthConfig, logit_growth.train_cell, logit_growth.analyse,
        "attention-logit growth vs learning rate, with and without QK-layernorm (Wortsman et al. 2023)"),
    lm.KIND: Experiment(
        lm.KIND, lm.LMConfig, lm.train_cell, lm.analyse,
        "a small GPT on real English text with each scale rule: does unscaled attention stop learning?"),
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


def run_experiment(name: str, config, root: str | Path = results.DEFAULT_ROOT, backend: Backend | None = None,
                   progress: Callable[[int, int, str], None] | None = None,
                   quick: bool | None = None) -> results.Envelope:
    """Run (or resume) every cell of ``config``, analyse, write the ``train/<name>`` result under
    ``root`` atomically and return its envelope. ``quick`` (default: whether ``config`` is the
    experiment's quick configuration) says which of quick.json / result.json it is."""
    experiment = EXPERIMENTS[name]
    kind = kind_of(name)
    quick = is_quick(name, config) if quick is None else bool(quick)
    cells = config.cells()
    start = time.monotonic()
    cache = ResultCache(results.cells_dir(kind, root))
    known = read_cached(name, cells, cache)
    cached = sum(r is not None for r in known)
    done = run_sweep(name, cells, experiment.train_cell, cache, backend, progress, cached=known)
    data, nonfinite = results.nulled_nonfinite({
        "description": experiment.description,
        "cells": [{"cell": to_jsonable(c), "result": r} for c, r in zip(cells, done)],
        "analysis": experiment.analyse(config, cells, done),
    })
    data["wall_s"] = time.monotonic() - start      # of this invocation: cached cells cost nothing,
    data["cells_cached"] = cached                  # so faces say how many were read from the cache
    if nonfinite:
        data["nonfinite"] = nonfinite
    return results.write(kind, data, config=to_jsonable(config), seed=0, quick=quick, root=root)
