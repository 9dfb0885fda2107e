"""Group 10: claims no computation here can settle alone, judged from the project's own results and
from the paper the seed cites.

* "learning stops" and "without it the Transformer can hardly learn effectively, especially when d_k
  is large": from the training experiments' verdicts (``analysis["verdicts"]`` of the kinds in
  :data:`TRAIN_KINDS`), the unscaled rule against 1/√d_k at large d_k;
* "inputs are normalised to mean 0, variance 1 — the standard assumption": from the real models'
  q and k moments per head (the probes, :data:`PROBE_KINDS`);
* "in real Transformers d_k is 64, 128 or more": from the configurations of the models probed;
* "the paper's authors chose √d_k for this reason": a statement about the authors' reasons, not
  checkable by computation; what the paper says is cited.

Results are read with :func:`attnscale.results.read_preferred` under ``VerifyConfig.results_root``: the
full result when there is one, else the quick one, which the row then says. When there is none, the
verdict is "inconclusive" and the row names the command that makes it.
"""

from __future__ import annotations

import math
import statistics

from attnscale import results
from attnscale.claims.context import Context
from attnscale.claims.register import claim
from attnscale.claims.result import judge_all

TRAIN_KINDS = ("train/scale-vs-dk", "train/lm")
PROBE_KINDS = ("probe/minilm", "probe/smollm2")
UNSCALED, SCALED = "unscaled", "inverse_sqrt_dk"
LARGE_D_K = 64            # the seed's "large": "in real Transformers d_k is 64, 128 or more"
MEAN_TOLERANCE = 0.1      # |mean of the components| ≤ this counts as "mean 0"
VARIANCE_FACTOR = 1.25    # variance within [1/1.25, 1.25] counts as "variance 1"
TRAINING_VERDICTS = ("faster", "learns", "slower", "fails", "diverges")   # lm judges "faster" too
HEAD_FIELDS = ("q_mean", "q_var", "k_mean", "k_var")            # of data["heads"] entries, as read
VERDICT_FIELDS = ("rule", "d_k", "optimiser", "lr", "verdict")   # of analysis["verdicts"] entries, as read


def _read(ctx: Context, kinds) -> tuple[list[results.Envelope], list[str]]:
    """(the envelopes found, one line per kind not usable: missing, with its command, or broken)."""
    found, missing = [], []
    for kind in kinds:
        try:
            found.append(results.read_preferred(kind, ctx.config.results_root))
        except results.ResultMissing:
            missing.append(f"no {kind} result under {ctx.config.results_root} (run {results.KINDS[kind].description})")
        except results.ResultError as err:
            missing.append(f"{kind}: {err}")
    return found, missing


def _sources(envs: list[results.Envelope]) -> list[dict] | None:
    return [{"kind": e.kind, "quick": e.quick, "created": e.created, "path": str(e.path)} for e in envs] or None


def _provenance(envs: list[results.Envelope]) -> str:
    """"train/scale-vs-dk (full, 2026-…); train/lm (quick — only a quick result exists, 2026-…)"."""
    return "; ".join(f"{e.kind} ({'quick — only a quick result exists' if e.quick else 'full'}, {e.created})"
                     for e in envs)


# ---- training -------------------------------------------------------------------------------

def training_cells(envs: list[results.Envelope]) -> tuple[list[dict], list[str]]:
    """The evidence: each unscaled verdict at d_k ≥ LARGE_D_K whose setting (d_k, optimiser, lr) lets
    1/√d_k learn (a setting where the scaled rule does not learn either says nothing about scaling),
    as {"kind", "quick", **verdict}; and one line per result without usable verdicts."""
    cells, unusable = [], []
    for env in envs:
        verdicts = (env.data.get("analysis") or {}).get("verdicts")
        if not isinstance(verdicts, list):
            unusable.append(f"{env.path}: no analysis.verdicts (written by an older attnscale? rerun "
                            f"{results.KINDS[env.kind].description})")
            continue
        bad = [v for v in verdicts if not isinstance(v, dict) or v.get("verdict") not in TRAINING_VERDICTS
               or any(key not in v for key in VERDICT_FIELDS)]
        if bad:
            unusable.append(f"{env.path}: analysis.verdicts needs {VERDICT_FIELDS} with a verdict among "
                            f"{TRAINING_VERDICTS} in every entry, e.g. not {bad[0]!r}")
            continue
        reference = {(v["d_k"], v["optimiser"], v["lr"]): v["verdict"] for v in verdicts if v.get("rule") == SCALED}
        for v in verdicts:
            if v.get("rule") != UNSCALED or v["d_k"] < LARGE_D_K:
                continue
            ref = reference.get((v["d_k"], v["optimiser"], v["lr"]))
            cells.append({"kind": env.kind, "quick": env.quick, "reference": ref, **v})
    return cells, unusable


def _cell_text(c: dict) -> str:
    agree = "" if c.get("seeds_agreeing") == c.get("seeds") else f", {c.get('seeds_agreeing')}/{c.get('seeds')} seeds agree"
    return f"d_k={c['d_k']} {c['optimiser']} lr={c['lr']:g}: {c['verdict']}{agree}"


def _training_claim(ctx: Context, cid: str, supports: set, contradicts: set, reading: str, envs, missing, cells,
                    unusable) -> None:
    kinds = ", ".join(TRAIN_KINDS)
    evidence = [c for c in cells if c["reference"] in (None, "learns")]
    excluded = len(cells) - len(evidence)
    counts = {v: sum(c["verdict"] == v for c in evidence) for v in TRAINING_VERDICTS}
    if not evidence:
        verdict = "inconclusive"
        measured = ("no training verdicts to judge from: " + "; ".join(missing + unusable)) if not envs or unusable \
            else (f"no unscaled cell at d_k ≥ {LARGE_D_K} where 1/√d_k learns "
                  f"({excluded} cells where it does not learn either)")
    else:
        verdict = judge_all("fails" if c["verdict"] in contradicts else "holds" if c["verdict"] in supports
                            else "inconclusive" for c in evidence)
        measured = (f"{len(evidence)} unscaled cells at d_k ≥ {LARGE_D_K}: "
                    + ", ".join(f"{n} {v}" for v, n in counts.items() if n)
                    + " — " + "; ".join(f"{c['kind']} {_cell_text(c)}" for c in evidence))
    quick = any(e.quick for e in envs)
    ctx.add(claim(
        cid,
        expected=f"{reading}; judged on every unscaled cell at d_k ≥ {LARGE_D_K} of {kinds} whose setting "
                 "(d_k, optimiser, learning rate) lets 1/√d_k learn",
        measured=("quick results: " if quick else "") + measured, verdict=verdict, sources=_sources(envs),
        note=(f"read from {_provenance(envs)}" if envs else "no training results")
             + (f"; {excluded} cells left out: 1/√d_k does not learn there either" if excluded else "")
             + ("; " + "; ".join(missing) if missing and envs else "")
             + ("; quick runs are short: run the full sweep before relying on this" if quick else "")))


# ---- probes ---------------------------------------------------------------------------------

def _normalised(head: dict) -> bool:
    lo, hi = 1.0 / VARIANCE_FACTOR, VARIANCE_FACTOR
    return (abs(head["q_mean"]) <= MEAN_TOLERANCE and abs(head["k_mean"]) <= MEAN_TOLERANCE
            and lo <= head["q_var"] <= hi and lo <= head["k_var"] <= hi)


def _model_name(env: results.Envelope) -> str:
    return str(env.data["model"].get("name", env.kind))


def _normalised_claim(ctx: Context, envs, missing) -> None:
    per, missing = {}, list(missing)
    for env in envs:
        heads = env.data["heads"]
        if not isinstance(heads, list) or any(not isinstance(h, dict) or any(f not in h for f in HEAD_FIELDS)
                                              for h in heads):
            missing.append(f"{env.path}: data.heads needs {HEAD_FIELDS} in every head")
            continue
        met = sum(_normalised(h) for h in heads)
        per[_model_name(env)] = (met, len(heads), env.quick,
                                 statistics.median(h["q_var"] for h in heads) if heads else math.nan,
                                 statistics.median(h["k_var"] for h in heads) if heads else math.nan)
    parts = {m: ("holds" if met / total >= 0.5 else "fails") if total else "inconclusive"
             for m, (met, total, *_) in per.items()}
    ctx.add(claim(
        "S10.3",
        expected=f"in real models, at least half of the heads have q and k with |mean| ≤ {MEAN_TOLERANCE:g} and "
                 f"variance within [{1 / VARIANCE_FACTOR:g}, {VARIANCE_FACTOR:g}] (per head, over components and "
                 "tokens), each model",
        measured="; ".join(f"{m}{' (quick)' if q else ''}: {met}/{total} heads ({met / total:.0%}) meet it; median "
                           f"Var q {qv:.3g}, Var k {kv:.3g}" for m, (met, total, q, qv, kv) in per.items() if total)
                 or "no usable probe results: " + "; ".join(missing),
        verdict=judge_all(parts.values()) if parts else "inconclusive", sources=_sources(envs),
        note=(f"read from {_provenance(envs)}; the probe's moments are pair-weighted (each token weighted by the "
              "pairs it is in)" if envs else "no probe results")
             + ("; " + "; ".join(missing) if missing and envs else "")
             + "; the seed's statement is about inputs; q and k are projections of them, where the proof needs it"))


def _dk_claim(ctx: Context, envs, missing) -> None:
    missing = list(missing) + [f"{e.path}: data.model has no integer d_k" for e in envs
                               if not isinstance(e.data["model"].get("d_k"), int)]
    models = {_model_name(e): e.data["model"]["d_k"] for e in envs if isinstance(e.data["model"].get("d_k"), int)}
    small = {m: d for m, d in models.items() if d < LARGE_D_K}
    verdict = "inconclusive" if not models else "fails" if small else "holds"
    ctx.add(claim(
        "S10.4",
        expected=f"d_k ≥ {LARGE_D_K} in every real model this project loads",
        measured="; ".join(f"{m}: d_k = {d}" for m, d in models.items())
                 or "no usable probe results: " + "; ".join(missing),
        verdict=verdict, sources=_sources(envs),
        note=(f"{len(small)} of {len(models)} loaded models below {LARGE_D_K}: "
              + ", ".join(f"{m} ({d})" for m, d in small.items()) if small else
              f"all {len(models)} loaded models at or above {LARGE_D_K}" if models else "no probe results")
             + ("; the models probed are a sample, not a census of real Transformers" if models else "")
             + ("; " + "; ".join(missing) if missing and envs else "")))


# ---- the paper --------------------------------------------------------------------------------

def _citation_claim(ctx: Context) -> None:
    ctx.add(claim(
        "S10.5",
        expected="not checkable by computation: a statement about the authors' reasons; compared with what the "
                 "paper says",
        measured="Vaswani et al. 2017, §3.2.1: \"We suspect that for large values of d_k, the dot products grow "
                 "large in magnitude, pushing the softmax function into regions where it has extremely small "
                 "gradients. To counteract this effect, we scale the dot products by 1/√d_k.\" Footnote 4: "
                 "assume the components of q and k are independent with mean 0 and variance 1; then q·k has "
                 "mean 0 and variance d_k",
        verdict="inconclusive",
        note="verdict 'inconclusive' stands for 'not checkable by computation' (the nearest verdict there is). "
             "The paper gives a suspected mechanism (small softmax gradients) and the variance argument as an "
             "illustration in a footnote; it does not say √d_k was chosen as 'the mathematically right value'. "
             "The computable parts are S2 (variance d_k), S4 (÷√d_k gives variance 1) and S6 (gradients)"))


def run(ctx: Context) -> None:
    train, train_missing = _read(ctx, TRAIN_KINDS)
    cells, unusable = training_cells(train)
    common = dict(envs=train, missing=train_missing, cells=cells, unusable=unusable)
    _training_claim(ctx, "S10.1", supports={"fails"}, contradicts={"faster", "learns", "slower"},
                    reading="'learning stops' read as: the unscaled rule fails to learn (a 'fails' verdict) where "
                            "1/√d_k learns; 'faster', 'learns' or 'slower' contradicts it, 'diverges' is another failure "
                            "(undecided)", **common)
    _training_claim(ctx, "S10.2", supports={"fails", "slower", "diverges"}, contradicts={"faster", "learns"},
                    reading="'can hardly learn effectively' read as: at large d_k the unscaled rule does not learn "
                            "as 1/√d_k does (verdict 'fails', 'diverges' or 'slower'); a 'learns' or 'faster' contradicts it",
                    **common)
    probes, probe_missing = _read(ctx, PROBE_KINDS)
    _normalised_claim(ctx, probes, probe_missing)
    _dk_claim(ctx, probes, probe_missing)
    _citation_claim(ctx)
    ctx.tick("training and probe results; the paper")
