"""The training experiments by name, and how one is run into ``<out>/summary.json``.

    >>> sorted(EXPERIMENTS)
    ['lm', 'logit-growth', 'scale-vs-dk']

A summary holds the experiment's configuration, its seeds, the environment, every cell with its
result (final metrics and per-step metrics), and the analysis (the numbers of the report's text).
Cell results are cached under ``<out>/cells/`` by a hash of the cell, so a rerun only computes the
missing cells.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from attnscale.errors import InputError
from attnscale.experiments import lm, logit_growth, scale_vs_dk
from attnscale.experiments.runner import Backend, run_sweep
from attnscale.provenance import environment
from attnscale.store import ResultCache, to_jsonable, write_json_atomic

__all__ = ["Experiment", "EXPERIMENTS", "make_config", "run_experiment", "DEFAULT_OUT"]

DEFAULT_OUT = Path("attnscale-results") / "train"


@dataclass(frozen=True)
class Experiment:
    name: str
    config_type: type                        # dataclass with .cells(), a .quick(seeds) classmethod, .seeds
    train_cell: Callable[[Any], dict]        # module-level: pickled by name into worker processes
    analyse: Callable[[Any, list, list], dict]
    description: str


EXPERIMENTS: dict[str, Experiment] = {
    scale_vs_dk.KIND: Experiment(
        scale_vs_dk.KIND, scale_vs_dk.ScaleVsDkConfig, scale_vs_dk.train_cell, scale_vs_dk.analyse,
        "does unscaled attention stop learning? rules x d_k x optimiser on a spread-attention task"),
    logit_growth.KIND: Experiment(
        logit_growth.KIND, logit_growth.LogitGrowthConfig, logit_growth.train_cell, logit_growth.analyse,
        "attention-logit growth vs learning rate, with and without QK-layernorm (Wortsman et al. 2023)"),
    lm.KIND: Experiment(
        lm.KIND, lm.LMConfig, lm.train_cell, lm.analyse,
        "a small GPT on real English text with each scale rule: does unscaled attention stop learning?"),
}


def make_config(name: str, quick: bool = False, seeds: int | None = None):
    """The configuration of experiment ``name``: default, or quick; ``seeds`` overrides its seed count."""
    if name not in EXPERIMENTS:
        raise InputError(f"experiment: expected one of {sorted(EXPERIMENTS)}, got {name!r}")
    kind = EXPERIMENTS[name].config_type
    config = kind.quick() if quick else kind()
    return config if seeds is None else dataclasses.replace(config, seeds=seeds)


def run_experiment(name: str, config, out: str | Path, backend: Backend | None = None,
                   progress: Callable[[int, int, str], None] | None = None) -> dict:
    """Run (or resume) every cell of ``config``, analyse, write ``<out>/summary.json`` atomically and
    return the summary."""
    experiment = EXPERIMENTS[name]
    out = Path(out)
    cells = config.cells()
    start = time.monotonic()
    results = run_sweep(name, cells, experiment.train_cell, ResultCache(out / "cells"), backend, progress)
    summary = {
        "experiment": name,
        "description": experiment.description,
        "config": to_jsonable(config),
        "seeds": list(range(config.seeds)),
        "environment": environment(),
        "cells": [{"cell": to_jsonable(c), "result": r} for c, r in zip(cells, results)],
        "analysis": experiment.analyse(config, cells, results),
        "wall_s": time.monotonic() - start,   # of this invocation: cached cells cost nothing
    }
    write_json_atomic(out / "summary.json", summary)
    return summary
