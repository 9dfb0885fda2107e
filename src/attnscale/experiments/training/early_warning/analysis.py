"""early-warning's figures from its cells' results: each run's divergence and each detector's first
alert, the lead times and false alarms per detector, and the attention detector's settings that the
measurement supports (every figure replayed from the recorded series: no retraining)."""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict, replace

from attnscale.experiments.training.early_warning import rules
from attnscale.experiments.training.early_warning.config import ARMS, EarlyWarningConfig, WarnCell

__all__ = [
    "DETECTORS",
    "REPLAYED_FIGURES",
    "analyse",
    "replay_records",
    "attention_first_alert",
    "detector_row",
    "proposal",
]

#: The detectors compared, in the table's order.
DETECTORS = ("attention", "attention_online", "olmo", "lightning")
#: The change rules replayed: the figures the runs record (train.LAYER_FIGURES; not the first-key weight).
REPLAYED_FIGURES = ("max_abs_logit", "entropy_min", "saturated_fraction")


def _floats(xs: list) -> list[float]:
    return [math.nan if x is None else float(x) for x in xs]


def replay_records(result: dict) -> list[dict]:
    """The run's per-step records as the attention detector reads them (``Step.to_json``'s shape):
    each layer one head (0), its figures the layer's heads reduced as the run recorded them."""
    layers = result["layers"]
    n = len(result["loss"])
    return [
        {
            "step": i + 1,
            "heads": [
                {"layer": name, "head": 0, **{f: v[i] for f, v in figs.items()}} for name, figs in layers.items()
            ],
        }
        for i in range(n)
    ]


def attention_first_alert(records: list[dict], config) -> tuple[int | None, str | None]:
    """(step, figure) of the first alert of the attention detector with ``config`` over ``records``."""
    from attnscale.early_warning import Detector

    detector = Detector(config)
    for record in records:
        alerts = detector.update(record)
        if alerts:
            return alerts[0].step, alerts[0].figure
    return None, None


def _run_alerts(result: dict, warmup: int, config) -> dict:
    """One run's divergence step and every detector's first alert step."""
    loss, grad = _floats(result["loss"]), _floats(result["grad_norm"])
    first, figure = attention_first_alert(replay_records(result), config)
    online = result["online"]["alerts"]
    return {
        "diverged_at": rules.divergence_step(loss, warmup),
        "attention": first,
        "attention_figure": figure,
        "attention_online": online[0]["step"] if online else None,
        "attention_online_figure": online[0]["figure"] if online else None,
        "olmo": rules.olmo_first_alert(loss, grad),
        "lightning": rules.lightning_first_spike(loss),
    }


def _median(xs: list) -> float | None:
    return statistics.median(xs) if xs else None


def detector_row(runs: list[dict], detector: str) -> dict:
    """Lead times over the runs that diverged (whatever they were built for) and false alarms over
    the runs built healthy that stayed so, of one detector (``runs``: dicts with ``diverged_at``,
    ``built_to`` and the detector's first alert step). A run built to diverge that did not is in
    neither count: it is no divergence to warn of, nor a healthy run."""
    diverged = [r for r in runs if r["diverged_at"] is not None]
    healthy = [r for r in runs if r["diverged_at"] is None and r["built_to"] == "healthy"]
    leads = [rules.lead_time(r[detector], r["diverged_at"]) for r in diverged]
    fired = [x for x in leads if x is not None]
    return {
        "detector": detector,
        "diverged_runs": len(diverged),
        "fired_before": sum(x > 0 for x in fired),
        "fired_after": sum(x <= 0 for x in fired),
        "missed": len(leads) - len(fired),
        "lead_median": _median(fired),
        "lead_min": min(fired, default=None),
        "healthy_runs": len(healthy),
        "false_alarm_runs": sum(r[detector] is not None for r in healthy),
    }


def proposal(grid_rows: list[dict]) -> dict | None:
    """The settings the measurement supports: no false alarm on a healthy run, and an alert before the
    divergence in at least one diverged run; of those, the most divergences alerted before, then the
    largest median lead time, then the largest z (the least sensitive of equals). None when no
    setting qualifies."""
    ok = [r for r in grid_rows if r["false_alarm_runs"] == 0 and r["fired_before"] > 0]
    if not ok:
        return None
    return max(ok, key=lambda r: (r["fired_before"], r["lead_median"], r["config"]["z"]))


def _grid(config: EarlyWarningConfig, runs: list[dict], results: list[dict], base) -> list[dict]:
    """Every setting of the configuration's grid replayed over every run: its row
    (:func:`detector_row`), detector configuration and first alert step in each run (None: none)."""
    out = []
    records = [replay_records(r) for r in results]
    for z in config.grid_z:
        for window in config.grid_window:
            for share in config.grid_share:
                detector = replace(base, z=z, window=window, warmup=min(base.warmup, window), saturated_share=share)
                rows = [
                    {**run, "attention": attention_first_alert(rec, detector)[0]} for run, rec in zip(runs, records)
                ]
                first = [r["attention"] for r in rows]
                out.append({**detector_row(rows, "attention"), "config": asdict(detector), "first_alerts": first})
    return out


def analyse(config: EarlyWarningConfig, cells: list[WarnCell], results: list[dict]) -> dict:
    """Every figure the chapter shows (strict JSON: a missing figure is None).

    ``runs``: per run its arm, seed, steps run and each detector's first alert step (and the attention
    detector's figure); ``table``: per detector (:data:`DETECTORS`) the lead times over the runs that
    diverged and the false alarms over those that did not; ``arms``: per arm how many runs diverged;
    ``grid``: the attention detector replayed at every setting of the configuration's grid; ``proposal``: the one
    the measurement supports (:func:`proposal`); ``timeline``: the runs the figure draws (seed 0 of
    each arm); ``setup``: the rules' parameters and the sweep's shape."""
    from attnscale.early_warning import DetectorConfig

    base = replace(DetectorConfig(), figures=REPLAYED_FIGURES)
    runs = [
        {
            "arm": c.arm,
            "seed": c.seed,
            "built_to": ARMS[c.arm].built_to,
            "steps_run": r["steps_run"],
            **_run_alerts(r, c.warmup, base),
        }
        for c, r in zip(cells, results)
    ]
    grid = _grid(config, runs, results, base)
    return {
        "runs": runs,
        "table": [detector_row(runs, d) for d in DETECTORS],
        "arms": [
            {
                "arm": a,
                "built_to": ARMS[a].built_to,
                "qk_layernorm": ARMS[a].qk_layernorm,
                "unscaled": ARMS[a].unscaled,
                "peak_lr": ARMS[a].peak_lr,
                "runs": sum(r["arm"] == a for r in runs),
                "diverged": sum(r["arm"] == a and r["diverged_at"] is not None for r in runs),
            }
            for a in config.arms
        ],
        "grid": grid,
        "proposal": proposal(grid),
        "default_config": asdict(base),
        "online_configs": sorted({repr(r["online"]["config"]) for r in results}),
        "timeline": [i for i, c in enumerate(cells) if c.seed == 0],
        "setup": {
            "n_layers": cells[0].n_layers,
            "n_heads": cells[0].n_heads,
            "steps": config.steps,
            "warmup": config.warmup,
            "tail": config.tail,
            "seeds": config.seeds,
            "batch": config.batch,
            "divergence_factor": rules.DIVERGENCE_FACTOR,
            "olmo": {"window": rules.OLMO_WINDOW, "threshold_std": rules.OLMO_THRESHOLD_STD},
            "lightning": {
                "window": rules.LIGHTNING_WINDOW,
                "rtol": rules.LIGHTNING_RTOL,
                "warmup": rules.LIGHTNING_WARMUP,
            },
        },
    }
