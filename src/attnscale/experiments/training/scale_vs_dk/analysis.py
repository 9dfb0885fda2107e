"""scale-vs-dk's analysis: from the cells to every figure the report shows (see :func:`analyse`): steps to
target, the verdicts against 1/√d_k, the SGD tuning, the per-(rule, d_k) summaries and curves, the
findings, and the chain-rule check (:mod:`.chain_rule`)."""

from __future__ import annotations

import math
import statistics

from attnscale.experiments.training.scale_vs_dk.chain_rule import chain_rule_check
from attnscale.experiments.training.scale_vs_dk.config import (
    LIKE_REFERENCE_STEPS,
    LOGIT_GROWTH,
    REFERENCE_RULE,
    RULE_CHOICES,
    SATURATED_RUN,
    ScaleCell,
    ScaleVsDkConfig,
)
from attnscale.experiments.training.common import finite, mean_or_none, seeds_verdict, spread
from attnscale.softmax_rows import SATURATED_WEIGHT
from attnscale.scales import SoftCap

__all__ = ["analyse", "steps_to_target", "tune_sgd"]


def steps_to_target(result: dict, target: float, window: int) -> int | None:
    """First step at which the mean training accuracy over the last ``window`` steps reaches ``target``.
    Every batch is fresh, so the training accuracy is an unbiased estimate of the test accuracy."""
    acc = result["accuracy"]
    running = 0.0
    for t, a in enumerate(acc):
        running += a
        if t >= window:
            running -= acc[t - window]
        if t + 1 >= window and running / window >= target:
            return t
    return None


def _seed_verdict(run: dict, reference: dict | None) -> tuple[str, float | None]:
    """One seed against the 1/√d_k run of the same seed, optimiser and rate: the verdict and the ratio
    of batches seen to reach the target (None where either never reached it)."""
    if run["diverged"]:
        return "diverges", None
    t = run["steps_to_target"]
    if t is None:
        return "fails", None
    if reference is None or reference["diverged"] or reference["steps_to_target"] is None:
        return "learns", None
    ratio = (t + 1) / (reference["steps_to_target"] + 1)
    return ("learns" if ratio <= LIKE_REFERENCE_STEPS else "slower"), ratio


def _sgd_score(runs: list[dict], steps: int) -> tuple[float, float]:
    """Mean final accuracy over seeds (diverged = 0), then fewer steps to target: the LR choice."""
    accs = [r["final_accuracy"] if r["final_accuracy"] is not None else 0.0 for r in runs]
    reach = [r["steps_to_target"] if r["steps_to_target"] is not None else steps + 1 for r in runs]
    return (statistics.fmean(accs), -statistics.fmean(reach)) if runs else (-math.inf, -math.inf)


def tune_sgd(config: ScaleVsDkConfig, runs: dict, rule: str, d_k: int) -> dict:
    """The SGD rate of ``rule`` at ``d_k`` with the best score over the grid, the score of every rate, and
    whether the best lies on the grid's edge (``"low"``, ``"high"``; None: inside it), where the true
    optimum may lie beyond the grid."""
    grid = []
    for lr in config.sgd_lrs:
        group = _runs(runs, config, rule, d_k, "sgd", lr)
        acc, neg_steps = _sgd_score(group, config.steps)
        grid.append(
            {
                "lr": lr,
                "mean_final_accuracy": acc if group else None,
                "mean_steps": -neg_steps if group else None,
                "diverged": sum(r["diverged"] for r in group),
                "reached": sum(r["steps_to_target"] is not None for r in group),
                "seeds": len(group),
            }
        )
    best = max(
        range(len(grid)), key=lambda i: _sgd_score(_runs(runs, config, rule, d_k, "sgd", grid[i]["lr"]), config.steps)
    )
    edge = None
    if len(grid) > 1 and best == 0:
        edge = "low"
    elif len(grid) > 1 and best == len(grid) - 1:
        edge = "high"
    return {"rule": rule, "d_k": d_k, "lr": grid[best]["lr"], "edge": edge, "grid": grid}


def _runs(runs: dict, config: ScaleVsDkConfig, rule: str, d_k: int, optimizer: str, lr: float) -> list[dict]:
    found = (runs.get((rule, d_k, optimizer, lr, seed)) for seed in range(config.seeds))
    return [r for r in found if r is not None]


def _at(log: list[dict], index: int, key: str):
    return log[index].get(key) if log else None


def _summary(
    config: ScaleVsDkConfig,
    runs: dict,
    rule: str,
    d_k: int,
    optimizer: str,
    lr: float,
    reference_lr: float,
    lr_choice: str,
) -> dict:
    """One (rule, d_k, optimiser, rate) over seeds, judged against 1/√d_k at ``reference_lr``."""
    per_seed, ratios, group = [], [], []
    for seed in range(config.seeds):
        run = runs.get((rule, d_k, optimizer, lr, seed))
        if run is None:
            continue
        verdict, ratio = _seed_verdict(run, runs.get((REFERENCE_RULE, d_k, optimizer, reference_lr, seed)))
        per_seed.append(verdict)
        group.append(run)
        if ratio is not None:
            ratios.append(ratio)
    verdict, agreeing = seeds_verdict(per_seed) if per_seed else (None, 0)
    reached = [r["steps_to_target"] for r in group if r["steps_to_target"] is not None]

    def moment(index):
        return {
            key: spread(_at(r["log"], index, key) for r in group)
            for key in ("logit_std", "saturated_frac", "max_logit", "grad_wq")
        }

    return {
        "rule": rule,
        "d_k": d_k,
        "optimiser": optimizer,
        "lr": lr,
        "lr_choice": lr_choice,
        "final_accuracy": spread(r["final_accuracy"] for r in group),
        "steps_to_target": spread(reached),
        "reached": len(reached),
        "seeds": len(group),
        "diverged": sum(r["diverged"] for r in group),
        "verdict": verdict,
        "seeds_agreeing": agreeing,
        "per_seed": per_seed,
        "steps_ratio": statistics.median(ratios) if ratios else None,
        "start": moment(0),
        "end": moment(-1),  # first and last logged step of each seed
        "grad_zero_ever": sum(r["grad_zero_ever"] for r in group),
    }


def _curves(config: ScaleVsDkConfig, runs: dict, summary: dict) -> dict:
    """Every logged step of the runs of ``summary``: per seed, and the mean over the seeds still running
    at that step (a diverged seed's log ends where it diverged)."""
    group = _runs(runs, config, summary["rule"], summary["d_k"], summary["optimiser"], summary["lr"])
    logs = [r["log"] for r in group]
    steps = max((log for log in logs), key=len, default=[])
    steps = [e["step"] for e in steps]
    out = {k: summary[k] for k in ("rule", "d_k", "optimiser", "lr", "lr_choice")}
    out["steps"] = steps
    out["per_seed"], out["mean"] = {}, {}
    for key in ("accuracy", "logit_std", "saturated_frac"):
        out["per_seed"][key] = [[e.get(key) for e in log] for log in logs]
        out["mean"][key] = [mean_or_none(log[i].get(key) for log in logs if i < len(log)) for i in range(len(steps))]
    return out


def analyse(config: ScaleVsDkConfig, cells: list[ScaleCell], results: list[dict]) -> dict:
    """Every figure the report shows, from the cells (see the module docstring); strict JSON."""
    reach = [steps_to_target(r, config.target_accuracy, config.log_every) for r in results]
    runs = {
        (c.rule, c.d_k, c.optimizer, c.lr, c.seed): {**r, "steps_to_target": t}
        for c, r, t in zip(cells, results, reach)
    }
    tuning = [tune_sgd(config, runs, REFERENCE_RULE, d_k) for d_k in config.d_ks]
    tuned = {t["d_k"]: t["lr"] for t in tuning}
    table, curves = [], []
    for d_k in config.d_ks:
        for rule in config.rules:
            own = tune_sgd(config, runs, rule, d_k)
            row = {
                "rule": rule,
                "formula": RULE_CHOICES[rule].formula,
                "d_k": d_k,
                "adam": _summary(config, runs, rule, d_k, "adam", config.adam_lr, config.adam_lr, "adam"),
                "sgd_reference_lr": _summary(
                    config, runs, rule, d_k, "sgd", tuned[d_k], tuned[d_k], "tuned_for_reference"
                ),
                "sgd_best_lr": {
                    **_summary(config, runs, rule, d_k, "sgd", own["lr"], tuned[d_k], "own_best"),
                    "edge": own["edge"],
                },
            }
            table.append(row)
            curves += [_curves(config, runs, row["adam"]), _curves(config, runs, row["sgd_reference_lr"])]
    chain = chain_rule_check(config, list(zip(cells, results)))
    return {
        "setup": _setup(config, cells),
        "target_accuracy": config.target_accuracy,
        "steps_to_target": reach,
        "prior_ceiling": config.task.prior_ceiling(),
        "single_key_ceiling": config.task.single_key_ceiling(),
        # One attended key does no better than guessing the prior's mode (true for k = 4): the chapter says
        # "the same as guessing" only then.
        "single_key_is_prior": math.isclose(
            config.task.single_key_ceiling(), config.task.prior_ceiling(), rel_tol=1e-9, abs_tol=1e-12
        ),
        "sgd_tuning": tuning,
        "sgd_lr_tuned_for_reference": {str(k): v for k, v in tuned.items()},
        "table": table,
        "verdicts": _verdicts(table),
        "curves": curves,
        "findings": _findings(config, runs, table, chain, results),
        "chain_rule": chain,
    }


def _setup(config: ScaleVsDkConfig, cells: list[ScaleCell]) -> dict:
    first = cells[0] if cells else ScaleCell(REFERENCE_RULE, config.d_ks[0], "adam", config.adam_lr, 0)
    return {
        "d_model": first.d_model,
        "n_heads": first.n_heads,
        "n_keys": config.task.n_keys,
        "n_marked": config.task.n_marked,
        "steps": config.steps,
        "batch": config.batch,
        "seeds": config.seeds,
        "adam_lr": config.adam_lr,
        "sgd_lrs": list(config.sgd_lrs),
        "final_eval": config.final_eval,
        "log_every": config.log_every,
        "target_accuracy": config.target_accuracy,
        "rules": list(config.rules),
        "d_ks": list(config.d_ks),
        "cells": len(cells),
        "saturated_weight": SATURATED_WEIGHT,
        "caps": {r: RULE_CHOICES[r].cap_value for r in config.rules if isinstance(RULE_CHOICES[r], SoftCap)},
        "like_reference_steps": LIKE_REFERENCE_STEPS,
        "saturated_run": SATURATED_RUN,
        "logit_growth": LOGIT_GROWTH,
    }


def _verdicts(table: list[dict]) -> list[dict]:
    """The claims' view (see common contract): one entry per (rule, d_k, optimiser, rate) judged; a rule's
    own best SGD rate only where it differs from the rate tuned for 1/√d_k."""
    keys = (
        "rule",
        "d_k",
        "optimiser",
        "lr",
        "verdict",
        "seeds",
        "seeds_agreeing",
        "steps_ratio",
        "lr_choice",
        "per_seed",
    )
    out = []
    for row in table:
        judged = [row["adam"], row["sgd_reference_lr"]]
        if row["sgd_best_lr"]["lr"] != row["sgd_reference_lr"]["lr"]:
            judged.append(row["sgd_best_lr"])
        out += [{k: s[k] for k in keys} for s in judged if s["seeds"]]
    return out


def _findings(config: ScaleVsDkConfig, runs: dict, table: list[dict], chain: dict, results: list[dict]) -> dict:
    """The figures the chapter's sentences speak of, each with the numbers the sentence shows. Their
    keys naming a case (``direction``, ``growth``, ``dominant_path``, ``falls_below_start``, …) stay so
    that results keep their contents; the chapter chooses its sentences from the numbers
    (report/chapters/training_words.py)."""
    return {
        "reference": _reference_finding(table),
        "gradient_step0": _gradient_finding(config, chain),
        "saturation_path": _saturation_finding(config, runs, table),
        "softcap": _softcap_finding(table),
        "optimiser": _optimiser_finding(table),
        "zero_gradient": _zero_finding(config, runs, results),
        "logit_sd_at_init": [
            {"d_k": r["d_k"], "predicted": math.sqrt(r["d_k"]), "measured": r["logit_std"]}
            for r in chain["rows"]
            if r["rule"] == "unscaled" and r["gradient"] == "grad_wq"
        ],
    }


def _reference_finding(table: list[dict]) -> dict:
    rows = [
        {"d_k": r["d_k"], "optimiser": s["optimiser"], "lr": s["lr"], "reached": s["reached"], "seeds": s["seeds"]}
        for r in table
        if r["rule"] == REFERENCE_RULE
        for s in (r["adam"], r["sgd_reference_lr"])
    ]
    return {
        "rows": rows,
        "reached_everywhere": all(r["reached"] == r["seeds"] for r in rows),
        "reached_nowhere": all(r["reached"] == 0 for r in rows),
    }


def _gradient_finding(config: ScaleVsDkConfig, chain: dict) -> dict:
    """Unscaled vs 1/√d_k, the gradient reaching W_Q and W_K at step 0 (seed means), and what the scale
    alone would make of the ratio (s_unscaled / s_ref = √d_k): "larger", "smaller" or "mixed" over d_k."""
    out = {}
    for which in ("grad_wq", "grad_wk"):
        by = {(r["rule"], r["d_k"]): r for r in chain["rows"] if r["gradient"] == which}
        rows = []
        for d_k in config.d_ks:
            un, ref = by.get(("unscaled", d_k)), by.get((REFERENCE_RULE, d_k))
            if un is None or ref is None or not ref["measured"]:
                continue
            rows.append(
                {
                    "d_k": d_k,
                    "unscaled": un["measured"],
                    "reference": ref["measured"],
                    "ratio": un["measured"] / ref["measured"],
                    "scale_alone": un["factor"] / ref["factor"],
                }
            )
        larger = [r["d_k"] for r in rows if r["ratio"] > 1]
        smaller = [r["d_k"] for r in rows if r["ratio"] <= 1]
        direction = None if not rows else "larger" if not smaller else "smaller" if not larger else "mixed"
        out[which] = {"rows": rows, "direction": direction, "larger_at": larger, "smaller_at": smaller}
    return out


def _saturation_finding(config: ScaleVsDkConfig, runs: dict, table: list[dict]) -> dict:
    """The runs of Adam and of SGD at the rate tuned for 1/√d_k, split by outcome (fails within the budget,
    or reaches the target): whether each starts saturated (at least SATURATED_RUN of its query rows at
    step 0), becomes so, leaves saturation, or never is; and how its logit standard deviation moves from
    step 0 to the last logged step."""
    split = {"fails": [], "reaches": []}
    for row in table:
        for s in (row["adam"], row["sgd_reference_lr"]):
            for seed in range(config.seeds):
                run = runs.get((s["rule"], s["d_k"], s["optimiser"], s["lr"], seed))
                if run is None or run["diverged"] or not run["log"]:
                    continue
                split["fails" if run["steps_to_target"] is None else "reaches"].append(run["log"])
    out = {}
    for outcome, logs in split.items():
        start = [log[0]["saturated_frac"] >= SATURATED_RUN for log in logs]
        end = [log[-1]["saturated_frac"] >= SATURATED_RUN for log in logs]
        growth = finite(
            log[-1]["logit_std"] / log[0]["logit_std"]
            for log in logs
            if log[0].get("logit_std") and log[-1].get("logit_std") is not None
        )
        median = statistics.median(growth) if growth else None
        trend = (
            None
            if median is None
            else ("grows" if median >= LOGIT_GROWTH else "shrinks" if median <= 1 / LOGIT_GROWTH else "steady")
        )
        pairs = list(zip(start, end))
        paths = {
            "stayed": pairs.count((True, True)),
            "became": pairs.count((False, True)),
            "left": pairs.count((True, False)),
            "never": pairs.count((False, False)),
        }
        out[outcome] = {
            "runs": len(logs),
            "stayed_saturated": paths["stayed"],
            "became_saturated": paths["became"],
            "left_saturation": paths["left"],
            "never_saturated": paths["never"],
            # The path most of them take (a tie: the first of stayed, became, left, never).
            "dominant_path": max(paths, key=paths.get) if logs else None,
            "saturated_start": spread(log[0]["saturated_frac"] for log in logs),
            "saturated_end": spread(log[-1]["saturated_frac"] for log in logs),
            "logit_std_start": spread(log[0].get("logit_std") for log in logs),
            "logit_std_end": spread(log[-1].get("logit_std") for log in logs),
            "growth_median": median,
            "growth": trend,
        }
    return out


def _softcap_finding(table: list[dict]) -> dict:
    """Soft-cap 50 on unscaled logits against unscaled, with Adam, per d_k: how saturated each starts
    (seed mean of the saturated fraction at step 0), how many seeds reach the target, and the last
    logged logit standard deviation. ``saturated_yet_learns``: the d_k at which soft-cap starts saturated
    (mean ≥ SATURATED_RUN) and most seeds reach the target."""
    by = {(r["rule"], r["d_k"]): r["adam"] for r in table}
    rows = []
    for (rule, d_k), cap in by.items():
        un = by.get(("unscaled", d_k))
        if rule != "softcap_unscaled" or un is None:
            continue
        rows.append(
            {
                "d_k": d_k,
                "softcap_saturated_start": cap["start"]["saturated_frac"]["mean"],
                "unscaled_saturated_start": un["start"]["saturated_frac"]["mean"],
                "softcap_reached": cap["reached"],
                "unscaled_reached": un["reached"],
                "seeds": cap["seeds"],
                "softcap_logit_std_end": cap["end"]["logit_std"]["mean"],
                "unscaled_logit_std_end": un["end"]["logit_std"]["mean"],
            }
        )
    saturated = [r for r in rows if (r["softcap_saturated_start"] or 0) >= SATURATED_RUN]
    learns = [r["d_k"] for r in saturated if 2 * r["softcap_reached"] > r["seeds"]]
    lower = [
        r["d_k"]
        for r in rows
        if None not in (r["softcap_logit_std_end"], r["unscaled_logit_std_end"])
        and r["softcap_logit_std_end"] < r["unscaled_logit_std_end"]
    ]
    return {
        "rows": rows,
        "saturated_yet_learns": learns,
        "saturated_and_fails": [r["d_k"] for r in saturated if 2 * r["softcap_reached"] <= r["seeds"]],
        "lower_logits_at_end": lower,
        # Where it starts saturated, learns, and ends with smaller logits than unscaled: the d_k at which
        # the chapter offers (as a hypothesis) that the cap is what lets it learn.
        "learns_with_lower_logits": [d for d in learns if d in lower],
    }


def _optimiser_finding(table: list[dict]) -> dict:
    """(rule, d_k) that reach the target with Adam but fail or diverge with SGD at both the rate tuned
    for 1/√d_k and their own best rate (``adam_only``), and the reverse (``sgd_only``)."""
    learned = ("learns", "slower")
    adam_only, sgd_only = [], []
    for r in table:
        if r["rule"] == REFERENCE_RULE:
            continue
        adam = r["adam"]["verdict"] in learned
        sgd = r["sgd_reference_lr"]["verdict"] in learned or r["sgd_best_lr"]["verdict"] in learned
        if adam and not sgd:
            adam_only.append({"rule": r["rule"], "d_k": r["d_k"]})
        elif sgd and not adam:
            sgd_only.append({"rule": r["rule"], "d_k": r["d_k"]})
    return {"adam_only": adam_only, "sgd_only": sgd_only}


def _zero_finding(config: ScaleVsDkConfig, runs: dict, results: list[dict]) -> dict:
    """Cells whose W_Q/W_K gradient was exactly zero at a logged step (and how many of them diverged
    afterwards); and for unscaled attention with Adam at the largest d_k, how many seeds had a zero
    gradient and the smallest logged ‖∇W_Q‖ against its step-0 value (seed mean)."""
    big = max(config.d_ks)
    group = _runs(runs, config, "unscaled", big, "adam", config.adam_lr)
    logs = [r["log"] for r in group if r["log"]]
    smallest = min(finite(e["grad_wq"] for log in logs for e in log), default=None)
    first = mean_or_none(log[0]["grad_wq"] for log in logs)
    zero = [r for r in results if r["grad_zero_ever"]]
    return {
        "cells": len(zero),
        "total": len(results),
        "cells_then_diverged": sum(r["diverged"] for r in zero),
        "d_k": big,
        "group_zero": sum(bool(r["grad_zero_ever"]) for r in group),
        "group_seeds": len(group),
        "smallest_grad_wq": smallest,
        "step0_grad_wq": first,
        "falls_below_start": None if None in (smallest, first) else smallest < first,
    }
