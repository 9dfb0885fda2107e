"""lm's analysis: from the runs to every figure the chapter and the table show (see :func:`analyse`):
the learning-rate grids and each rule's best rate, the LR sensitivity (:func:`lr_score`,
``training.lr_sensitivity``), the verdicts against 1/√d_k (:mod:`.judging`) and how far each holds, the
curves, the samples. Every run is judged as :func:`~.judging.as_judged` gives it (a collapse to the
uniform prediction is a divergence)."""

from __future__ import annotations

import math
import statistics

from attnscale.experiments.training.lm.ngram_baselines import baselines, beaten
from attnscale.experiments.training.lm.config import (
    LIKE_RATIO,
    REFERENCE_RULE,
    RULE_CHOICES,
    TARGET_FACTOR,
    LMCell,
    LMConfig,
)
from attnscale.experiments.training.lm.judging import (
    COLLAPSE_TOL,
    TARGET_BAND,
    UNIFORM_BPB,
    as_judged,
    judge,
    steps_beyond,
    target_holds,
)
from attnscale.experiments.training.common import capped_loss, lr_sensitivity, seeds_verdict, spread
from attnscale.results import finite_or_none

__all__ = ["analyse", "lr_score"]


def lr_score(result: dict) -> float:
    """An lm run's :func:`~attnscale.experiments.training.common.capped_loss` in bits per byte (a run
    without an initial loss is capped by nothing)."""
    return capped_loss(result["final_bpb"], result["init_bpb"] if result["init_bpb"] is not None else math.inf)


def _robustness(verdict: str | None, runs: dict, refs: dict, verdict_half: str | None, steps: int) -> dict:
    """How far a verdict holds: the targets it holds for (:func:`~.judging.target_holds`), whether
    that covers :data:`~.judging.TARGET_BAND`, and whether it holds with half the steps and, for a
    fail, with as many again (no failing seed reaching the target within ``steps`` more at the rate
    of its last quarter, :func:`~.judging.steps_beyond`). A seed's ``steps_beyond`` is None when its
    loss did not fall in that quarter (it would not get there at that rate)."""
    if verdict is None:
        return {"target_holds": None, "robust_to_target": None, "steps_beyond": [], "robust_to_budget": None}
    holds = target_holds(runs, refs)
    lo, hi = TARGET_BAND
    beyond = [
        {"seed": s, "steps": finite_or_none(b)}
        for s, run in sorted(runs.items())
        if s in refs and (b := steps_beyond(run, refs[s])) is not None
    ]
    longer = verdict != "fails" or all(b["steps"] is None or b["steps"] > steps for b in beyond)
    return {
        "target_holds": holds,
        "robust_to_target": (holds["from"] is None or holds["from"] <= lo)
        and (holds["to"] is None or holds["to"] > hi),
        "steps_beyond": beyond,
        "robust_to_budget": verdict_half == verdict and longer,
    }


def _verdict(
    rule: str, d_k: int, optimiser: str, lr: float, runs: dict, refs: dict, steps: int, rows: list[dict]
) -> dict:
    """One row of ``analysis["verdicts"]``: runs and refs map seed -> result; ``steps``: the budget."""
    halfway = steps // 2
    judged = {seed: judge(run, refs[seed]) for seed, run in runs.items() if seed in refs}
    verdict, top = seeds_verdict([v for v, _ in judged.values() if v is not None])
    half = {seed: judge(run, refs[seed], halfway) for seed, run in runs.items() if seed in refs}
    verdict_half, top_half = seeds_verdict([v for v, _ in half.values() if v is not None])
    ratios = [r for v, r in judged.values() if r is not None]
    final = spread([run["final_bpb"] for run in runs.values()])
    return {
        "rule": rule,
        "d_k": d_k,
        "optimiser": optimiser,
        "lr": lr,
        "verdict": verdict,
        "verdict_reason": None if verdict else "the 1/√d_k reference diverged on every seed",
        "seeds": sum(v is not None for v, _ in judged.values()),
        "seeds_agreeing": top,
        "steps_ratio": statistics.median(ratios) if ratios else None,
        "steps_ratio_spread": spread(ratios),
        "per_seed": [
            {"seed": s, "verdict": v, "steps_ratio": r, "verdict_halfway": half[s][0]}
            for s, (v, r) in sorted(judged.items())
        ],
        "verdict_halfway": verdict_half,
        "seeds_agreeing_halfway": top_half,
        **_robustness(verdict, runs, refs, verdict_half, steps),
        "final_bpb": final,
        "beats": beaten(final["mean"], rows),
        "diverged": sum(bool(run["diverged"]) for run in runs.values()),
        "collapsed": sum(bool(run["diverged"] and run["diverged"].get("collapsed")) for run in runs.values()),
    }


def _curve(runs: list[dict]) -> dict:
    """Over seeds, per logged step: validation bits per byte (mean, min, max), the largest |logit|
    over layers and heads (mean), and the mean row entropy over layers and heads (mean). A diverged
    seed drops out from its divergence on; ``seeds`` says how many are left at each step."""
    steps = sorted({e["step"] for run in runs for e in run["log"]})
    at = lambda run, s: next((e for e in run["log"] if e["step"] == s), None)  # noqa: E731
    out = {
        "step": steps,
        "valid_bpb": {"mean": [], "min": [], "max": []},
        "max_abs_logit": [],
        "entropy_mean": [],
        "saturated_frac": [],
        "seeds": [],
    }
    for s in steps:
        entries = [e for e in (at(run, s) for run in runs) if e is not None]
        bpb = spread([e["valid_bpb"] for e in entries])
        for key in ("mean", "min", "max"):
            out["valid_bpb"][key].append(bpb[key])
        flat = lambda e, k: [v for layer in e["heads"] for v in layer[k] if v is not None]  # noqa: E731
        out["max_abs_logit"].append(spread([max(flat(e, "max_abs_logit"), default=None) for e in entries])["mean"])
        out["entropy_mean"].append(
            spread([statistics.fmean(flat(e, "entropy_mean")) if flat(e, "entropy_mean") else None for e in entries])[
                "mean"
            ]
        )
        out["saturated_frac"].append(
            spread(
                [statistics.fmean(flat(e, "saturated_frac")) if flat(e, "saturated_frac") else None for e in entries]
            )["mean"]
        )
        out["seeds"].append(bpb["n"])
    return out


def _edge(lr: float, grid) -> str | None:
    """Where ``lr`` sits on the grid: "low" or "high" edge, or None when inside it."""
    lrs = sorted(grid)
    return "low" if lr == lrs[0] else "high" if lr == lrs[-1] else None


def _runs_by_setting(cells: list[LMCell], results: list[dict]):
    """A function of (rule, d_k, optimiser, lr) giving that setting's results by seed."""
    index: dict[tuple, dict] = {}
    for c, r in zip(cells, results):
        index.setdefault((c.rule, c.d_k, c.optimizer, c.lr), {})[c.seed] = r
    return lambda rule, d_k, optimizer, lr: index.get((rule, d_k, optimizer, lr), {})


def _lr_grids(config: LMConfig, runs, grids: dict, base: dict) -> tuple[list, dict, list]:
    """Per optimiser, d_k and rule: each rate's final loss over the seeds (``grid``), the rule's own
    best rate (``best``, keyed (optimiser, rule, d_k)) and its LR sensitivity."""
    grid, best, sensitivity = [], {}, []
    for optimizer, lrs in grids.items():
        for d_k in config.d_ks:
            for rule in config.rules:
                groups = {lr: runs(rule, d_k, optimizer, lr) for lr in lrs}
                scores = {lr: statistics.fmean(lr_score(r) for r in g.values()) for lr, g in groups.items()}
                best[optimizer, rule, d_k] = min(lrs, key=lambda lr: scores[lr])
                for lr, group in groups.items():
                    final = spread([r["final_bpb"] for r in group.values()])
                    grid.append(
                        {
                            "optimiser": optimizer,
                            "rule": rule,
                            "d_k": d_k,
                            "lr": lr,
                            "final_bpb": final,
                            "score": finite_or_none(scores[lr]),
                            "beats": beaten(final["mean"], base["rows"]),
                            "diverged": sum(bool(r["diverged"]) for r in group.values()),
                            "worse_than_init": sum(
                                r["final_bpb"] is not None
                                and r["init_bpb"] is not None
                                and r["final_bpb"] > r["init_bpb"]
                                for r in group.values()
                            ),
                            "seeds": len(group),
                        }
                    )
                per_seed = [
                    lr_sensitivity([lr_score(groups[lr][s]) for lr in lrs])
                    for s in sorted(groups[lrs[0]])
                    if all(s in g for g in groups.values())
                ]
                sensitivity.append(
                    {
                        "optimiser": optimizer,
                        "rule": rule,
                        "d_k": d_k,
                        "lr_sensitivity": finite_or_none(statistics.fmean(per_seed)) if per_seed else None,
                        "spread": spread(per_seed),
                    }
                )
    return grid, best, sensitivity


def _verdicts_and_curves(config: LMConfig, runs, grids: dict, best: dict, base: dict) -> tuple[list, list]:
    """Each rule's verdicts against the reference at the reference's best rate and at its own, and
    its curves at the reference's rate."""
    verdicts, curves = [], []
    for d_k in config.d_ks:
        for optimizer in grids:
            ref_lr = best[optimizer, REFERENCE_RULE, d_k]
            refs = runs(REFERENCE_RULE, d_k, optimizer, ref_lr)
            for rule in config.rules:
                own_lr = best[optimizer, rule, d_k]
                at_ref = runs(rule, d_k, optimizer, ref_lr)
                verdicts.append(_verdict(rule, d_k, optimizer, ref_lr, at_ref, refs, config.steps, base["rows"]))
                verdicts.append(
                    _verdict(
                        rule,
                        d_k,
                        f"{optimizer}-own-best",
                        own_lr,
                        runs(rule, d_k, optimizer, own_lr),
                        refs,
                        config.steps,
                        base["rows"],
                    )
                )
                curves.append(
                    {
                        "rule": rule,
                        "d_k": d_k,
                        "optimiser": optimizer,
                        "lr": ref_lr,
                        **_curve([at_ref[s] for s in sorted(at_ref)]),
                    }
                )
    return verdicts, curves


def analyse(config: LMConfig, cells: list[LMCell], results: list[dict]) -> dict:
    """Everything the chapter and the table show: per optimiser the learning-rate grid (each rule's
    final loss at each rate, its own best rate, its LR sensitivity), the reference's best rate and
    whether it is inside the grid, the verdicts at the reference's best rate and at each rule's own,
    the n-gram baselines and where each run ends against them, the curves, the samples."""
    results = [as_judged(r) for r in results]
    runs = _runs_by_setting(cells, results)
    base = baselines(config)
    grids = {"adamw": config.adamw_lrs, "sgd": config.sgd_lrs}
    grid, best, sensitivity = _lr_grids(config, runs, grids, base)
    own_best = [
        {"optimiser": o, "rule": r, "d_k": d, "lr": lr, "edge": _edge(lr, grids[o])} for (o, r, d), lr in best.items()
    ]
    reference_best = {o: {str(d): best[o, REFERENCE_RULE, d] for d in config.d_ks} for o in grids}
    interior = {
        o: {str(d): len(lrs) >= 3 and _edge(best[o, REFERENCE_RULE, d], lrs) is None for d in config.d_ks}
        for o, lrs in grids.items()
    }
    verdicts, curves = _verdicts_and_curves(config, runs, grids, best, base)
    reference = {
        d_k: spread(
            [r["final_bpb"] for r in runs(REFERENCE_RULE, d_k, "adamw", best["adamw", REFERENCE_RULE, d_k]).values()]
        )["mean"]
        for d_k in config.d_ks
    }
    first = results[0]
    seed0 = lambda rule, d_k: runs(rule, d_k, "adamw", best["adamw", REFERENCE_RULE, d_k]).get(0)  # noqa: E731
    samples = [
        {
            "rule": rule,
            "texts": [(seed0(rule, d_k) or {}).get("sample") for d_k in config.d_ks],
            "final_bpb": [(seed0(rule, d_k) or {}).get("final_bpb") for d_k in config.d_ks],
        }
        for rule in config.rules
    ]
    return {
        "reference_rule": REFERENCE_RULE,
        "rule_choices": list(RULE_CHOICES),
        "target_factor": TARGET_FACTOR,
        "like_ratio": LIKE_RATIO,
        "target_band": list(TARGET_BAND),
        "collapse": {
            "uniform_bpb": UNIFORM_BPB,
            "tol": COLLAPSE_TOL,
            "runs": sum(bool(r["diverged"] and r["diverged"].get("collapsed")) for r in results),
        },
        "halfway_step": config.steps // 2,
        "baselines": base,
        "unigram_bpb": first["unigram_bpb"],
        "init_bpb": spread([r["init_bpb"] for r in results]),
        "model": {
            "d_model": config.d_model,
            "n_layers": config.n_layers,
            "context": config.context,
            "parameters": first["parameters"],
            "heads": {str(d_k): config.d_model // d_k for d_k in config.d_ks},
        },
        "text": {"source": config.text, "train_bytes": first["train_bytes"], "valid_bytes": first["valid_bytes"]},
        "lr_grids": {o: list(lrs) for o, lrs in grids.items()},
        "grid": grid,
        "own_best_lr": own_best,
        "reference_best_lr": reference_best,
        "reference_best_interior": interior,
        "lr_sensitivity": sensitivity,
        "reference_final": {
            "bpb": {str(d): v for d, v in reference.items()},
            "beats": {str(d): beaten(v, base["rows"]) for d, v in reference.items()},
        },
        "verdicts": verdicts,
        "curves": curves,
        "samples": {
            "prompt": cells[0].prompt,
            "d_ks": list(config.d_ks),
            "optimiser": "adamw",
            "seed": 0,
            "lr": {str(d): best["adamw", REFERENCE_RULE, d] for d in config.d_ks},
            "rows": samples,
        },
    }
