"""lm's judgement of one run against the 1/√d_k run of the same seed and optimiser, and how far a
verdict holds: a run that collapsed to the uniform prediction (:func:`as_judged`), the verdict
(:func:`judge`), the verdict of the seeds (:func:`seeds_verdict_at`), the range of targets it holds
for (:func:`target_holds`) and whether a longer run could turn it (:func:`steps_beyond`).

A result here is one cell's result as ``train_cell`` records it: ``log`` (a dict per logged step,
``valid_bpb`` in bits per byte), ``final_bpb`` (None when it diverged), ``diverged`` (None, or
``{"step", "reason"}``).
"""

from __future__ import annotations

import math

from attnscale.experiments.training.common import seeds_verdict
from attnscale.experiments.training.lm.config import LIKE_RATIO, TARGET_FACTOR
from attnscale.results import finite_or_none

__all__ = [
    "UNIFORM_BPB",
    "COLLAPSE_TOL",
    "TARGET_BAND",
    "collapsed_at",
    "as_judged",
    "judge",
    "seeds_verdict_at",
    "target_holds",
    "steps_beyond",
]

#: The loss of the uniform prediction over the 256 byte values: log2(256) bits per byte.
UNIFORM_BPB = 8.0
#: How close to UNIFORM_BPB a validation loss is "at" it (the two collapsed runs of the shipped sweep
#: sit 2e-6 above it; a model still learning is never within a thousandth of it past step 0).
COLLAPSE_TOL = 1e-3
#: The targets a verdict is checked against besides TARGET_FACTOR: its margin over the reference's
#: final loss halved and doubled (×1.05 and ×1.2 around ×1.1).
TARGET_BAND = (1 + (TARGET_FACTOR - 1) / 2, 1 + 2 * (TARGET_FACTOR - 1))


def collapsed_at(log: list[dict]) -> int | None:
    """The logged step from which every validation loss is the uniform prediction's (within
    :data:`COLLAPSE_TOL` of :data:`UNIFORM_BPB`) to the end; None when the last one is not. Step 0
    (the initial model, near uniform by construction) never counts."""
    step = None
    for e in reversed(log[1:]):
        if e["valid_bpb"] is None or abs(e["valid_bpb"] - UNIFORM_BPB) > COLLAPSE_TOL:
            break
        step = e["step"]
    return step


def as_judged(result: dict) -> dict:
    """``result`` as the analysis judges it. A run that collapsed to the uniform prediction (a finite
    loss, so training did not stop it) has lost all it learnt: it diverged at the step it collapsed,
    like a run whose loss became NaN (its log ends before that step, it has no final loss)."""
    step = None if result["diverged"] is not None else collapsed_at(result["log"])
    if step is None:
        return result
    reason = (
        f"validation loss is {UNIFORM_BPB:g} bits per byte (the uniform prediction over 256 bytes) from step {step} on"
    )
    return {
        **result,
        "log": [e for e in result["log"] if e["step"] < step],
        "final_bpb": None,
        "final_bpb_reason": "diverged",
        "diverged": {"step": step, "reason": reason, "collapsed": True},
    }


def _steps_to(log: list[dict], target: float) -> int | None:
    """The first logged step whose validation loss is at most ``target``; None if none is."""
    return next((e["step"] for e in log if e["valid_bpb"] is not None and e["valid_bpb"] <= target), None)


def _until(result: dict, step: int | None) -> tuple[list[dict], float | None]:
    """(the log up to ``step``, the last validation loss in it; None if it diverged by then)."""
    if step is None:
        return result["log"], result["final_bpb"]
    log = [e for e in result["log"] if e["step"] <= step]
    gone = result["diverged"] is not None and result["diverged"]["step"] <= step
    return log, None if gone or not log else log[-1]["valid_bpb"]


def judge(
    run: dict, reference: dict, until: int | None = None, factor: float = TARGET_FACTOR
) -> tuple[str | None, float | None]:
    """(verdict, steps ratio) of one run against the 1/√d_k run of the same seed and optimiser, on
    the logs up to step ``until`` (default: all), the target being ``factor`` × the reference's last
    validation loss; the verdict is None when the reference itself diverged (nothing to compare with)."""
    ref_log, ref_final = _until(reference, until)
    if ref_final is None:
        return None, None
    log, final = _until(run, until)
    if final is None and run["diverged"] is not None:
        return "diverges", None
    target = factor * ref_final
    mine, theirs = _steps_to(log, target), _steps_to(ref_log, target)
    if mine is None:
        return "fails", None
    ratio = mine / theirs if theirs else (1.0 if mine == 0 else math.inf)
    verdict = "faster" if ratio <= 1 / LIKE_RATIO else "learns" if ratio <= LIKE_RATIO else "slower"
    return verdict, finite_or_none(ratio)


def seeds_verdict_at(runs: dict, refs: dict, until: int | None = None, factor: float = TARGET_FACTOR) -> str | None:
    """The seeds' verdict (:func:`~attnscale.experiments.training.common.seeds_verdict`) of ``runs``
    against ``refs`` (both seed -> result)."""
    judged = [judge(run, refs[s], until, factor)[0] for s, run in runs.items() if s in refs]
    return seeds_verdict([v for v in judged if v is not None])[0]


def _breakpoints(runs: dict, refs: dict) -> list[float]:
    """The target factors at which the seeds' verdict can change, ascending: where factor × a
    reference's final loss equals a logged validation loss of that seed's run or reference (between
    two of them no run's steps to the target change)."""
    points = set()
    for s, run in runs.items():
        final = refs[s]["final_bpb"] if s in refs else None
        if final:
            points.update(
                e["valid_bpb"] / final for r in (run, refs[s]) for e in r["log"] if e["valid_bpb"] is not None
            )
    return sorted(points)


def target_holds(runs: dict, refs: dict, factor: float = TARGET_FACTOR) -> dict:
    """The target factors for which the seeds' verdict is the one at ``factor``: ``{"from", "to"}``,
    the verdict holding between them; None for no bound (below every logged loss nobody reaches the
    target; above every one everybody does). Exact: the verdict is constant between two
    :func:`_breakpoints`, so each stretch is judged at its middle (at a breakpoint itself the
    rounding of factor × loss decides, so it is never judged there)."""
    verdict = seeds_verdict_at(runs, refs, factor=factor)
    points = _breakpoints(runs, refs)
    at = lambda f: seeds_verdict_at(runs, refs, factor=f)  # noqa: E731
    stretches = list(zip(points, [*points[1:], 2 * points[-1]])) if points else []
    to = next((lo for lo, hi in stretches if lo > factor and at((lo + hi) / 2) != verdict), None)
    below = [(lo, hi) for lo, hi in zip([points[0] / 2, *points[:-1]], points) if hi < factor] if points else []
    start = next((hi for lo, hi in reversed(below) if at((lo + hi) / 2) != verdict), None)
    return {"from": start, "to": to}


def steps_beyond(run: dict, reference: dict, factor: float = TARGET_FACTOR) -> float | None:
    """For a run that never reached the target: the steps past its last logged one it would need at
    the rate its validation loss fell over the last quarter of its steps (a linear extrapolation, an
    estimate only); inf when it did not fall then; None when the run reached the target, diverged or
    the reference diverged."""
    if run["final_bpb"] is None or reference["final_bpb"] is None:
        return None
    target, log = factor * reference["final_bpb"], [e for e in run["log"] if e["valid_bpb"] is not None]
    if _steps_to(log, target) is not None:
        return None
    last = log[-1]
    start = min(log, key=lambda e: abs(e["step"] - 0.75 * last["step"]))
    rate = (start["valid_bpb"] - last["valid_bpb"]) / max(last["step"] - start["step"], 1)
    return (last["valid_bpb"] - target) / rate if rate > 0 else math.inf
