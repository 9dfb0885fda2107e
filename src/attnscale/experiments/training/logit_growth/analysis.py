"""logit-growth's figures from its cells' results: the table per variant and rate, the LR
sensitivity, the best rates, and the guard's figures."""

from __future__ import annotations

import statistics

from attnscale.experiments.training.common import capped_loss, lr_sensitivity, mean_or_none
from attnscale.experiments.training.logit_growth.config import VARIANTS, LogitCell, LogitGrowthConfig

__all__ = ["analyse"]


def analyse(config: LogitGrowthConfig, cells: list[LogitCell], results: list[dict]) -> dict:
    """Every figure the chapter shows, computed here (strict JSON: a missing figure is None).

    ``table``: per (variant, lr), over seeds: final loss (mean, min, max over the runs that did not
    diverge; None with ``final_loss_reason`` when all did), divergences, the loss and the layer-0
    max logit at initialisation, the peak and final layer-0 max logit (validation), the peak
    max logit of any layer on the training batches, QK-layernorm's gains, the guard's clips.
    ``lr_sensitivity`` per variant and seed; ``best`` (lowest mean final loss and its lr) per
    variant; ``low_lr_gap``: how far every variant's loss at the lowest rate is above its best;
    ``collapsed``: the rates where QK-layernorm's final max logit ended below its value at
    initialisation; ``guard``: τ and the training-batch peak over the guarded runs against the
    unguarded; ``setup``: the model and schedule.
    """
    rows = list(zip(cells, results))
    variants = [v for v in VARIANTS if any(c.variant == v for c in cells)]
    table, sensitivity, best = [], {}, {}
    for v in variants:
        per_seed = []
        for seed in range(config.seeds):
            runs = [r for c, r in rows if c.variant == v and c.seed == seed]
            init_loss = statistics.fmean(r["init_loss"] for r in runs)
            per_seed.append(lr_sensitivity([capped_loss(r["final_loss"], init_loss) for r in runs]))
        sensitivity[v] = {"per_seed": per_seed, "mean": statistics.fmean(per_seed)}
        for lr in config.lrs:
            runs = [r for c, r in rows if c.variant == v and c.lr == lr]
            finite = [r["final_loss"] for r in runs if r["final_loss"] is not None]
            diverged = sum(r["diverged_at"] is not None for r in runs)
            table.append(
                {
                    "variant": v,
                    "lr": lr,
                    "qk_layernorm": v == "qk_layernorm",
                    "final_loss_mean": mean_or_none(finite),
                    "final_loss_min": min(finite, default=None),
                    "final_loss_max": max(finite, default=None),
                    "final_loss_reason": None if finite else f"all {len(runs)} runs diverged",
                    "diverged": diverged,
                    "seeds": len(runs),
                    "init_loss": statistics.fmean(r["init_loss"] for r in runs),
                    "max_logit_init_mean": mean_or_none(r["log"][0]["max_logit_layer0"] for r in runs),
                    "max_logit_peak_mean": mean_or_none(r["max_logit_layer0_peak"] for r in runs),
                    "max_logit_final_mean": mean_or_none(r["max_logit_layer0_final"] for r in runs),
                    "max_logit_train_peak_mean": mean_or_none(r["max_logit_train_peak"] for r in runs),
                    "qk_gain_init_mean": mean_or_none(r["log"][0]["qk_gain_layer0"] for r in runs),
                    "qk_gain_final_mean": mean_or_none(r["log"][-1]["qk_gain_layer0"] for r in runs),
                    "clipped_heads_mean": statistics.fmean(r["clipped_heads"] for r in runs),
                }
            )
        done = [r for r in table if r["variant"] == v and r["final_loss_mean"] is not None]
        top = min(done, key=lambda r: r["final_loss_mean"]) if done else None
        best[v] = {"final_loss": top["final_loss_mean"] if top else None, "lr": top["lr"] if top else None}
    row = {(r["variant"], r["lr"]): r for r in table}
    lo, hi = min(config.lrs), max(config.lrs)
    gaps = [
        row[v, lo]["final_loss_mean"] - best[v]["final_loss"]
        for v in variants
        if row[v, lo]["final_loss_mean"] is not None and best[v]["final_loss"] is not None
    ]
    collapsed = [
        lr
        for lr in config.lrs
        if "qk_layernorm" in variants
        and None
        not in (row["qk_layernorm", lr]["max_logit_final_mean"], row["qk_layernorm", lr]["max_logit_init_mean"])
        and row["qk_layernorm", lr]["max_logit_final_mean"] < row["qk_layernorm", lr]["max_logit_init_mean"]
    ]
    return {
        "table": table,
        "lr_sensitivity": sensitivity,
        "best": best,
        "low_lr_gap": {"lr": lo, "gap": min(gaps) if len(gaps) == len(variants) else None},
        "collapsed": {"lrs": collapsed, "highest": max(collapsed) if collapsed else None},
        "lr_low": lo,
        "lr_high": hi,
        "guard": _guard_figures(config, rows, variants),
        "setup": _setup(config, cells, results),
    }


def _guard_figures(config: LogitGrowthConfig, rows, variants) -> dict | None:
    """τ; over the guarded runs, the largest training-batch max logit (any layer, any step: measured
    before that step's clip, so it holds one update's growth) and its ratio to τ; the same peak for
    the unguarded baseline; and the guarded runs' clips."""
    if "qk_clip" not in variants:
        return None

    def peak(v):
        return max(
            (r["max_logit_train_peak"] for c, r in rows if c.variant == v and r["max_logit_train_peak"] is not None),
            default=None,
        )

    guarded, base = peak("qk_clip"), peak("baseline") if "baseline" in variants else None
    return {
        "tau": config.tau,
        "train_peak": guarded,
        "train_peak_over_tau": None if guarded is None else guarded / config.tau,
        "baseline_train_peak": base,
        "runs": sum(c.variant == "qk_clip" for c, _ in rows),
        "clipped_heads": sum(r["clipped_heads"] for c, r in rows if c.variant == "qk_clip"),
    }


def _setup(config: LogitGrowthConfig, cells: list[LogitCell], results: list[dict]) -> dict:
    c, r = cells[0], results[0]
    return {
        "n_layers": c.n_layers,
        "d_model": c.d_model,
        "n_heads": c.n_heads,
        "context": c.context,
        "parameters": r["parameters"],
        "corpus_chars": c.corpus_chars,
        "vocab": r["vocab"],
        "warmup": config.warmup,
        "steps": config.steps,
        "batch": config.batch,
        "seeds": config.seeds,
        "log_every": config.log_every,
        "lrs": list(config.lrs),
        "tau": config.tau,
    }
