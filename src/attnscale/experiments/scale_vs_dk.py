"""Experiment A, ``scale-vs-dk``: does unscaled attention really stop learning?

A one-layer transformer learns :class:`~attnscale.experiments.tasks.MarkedCount` (count the ones among
k marked positions: attention must spread evenly over k keys). The sweep crosses

* the scale rule: 1/√d_k, unscaled, 1/d_k (µP), QK-norm (learnable gain), soft-cap 50 on unscaled;
* d_k ∈ {16, 64, 256};
* the optimiser: Adam (normalises gradient sizes) and plain SGD (does not), SGD on a grid of learning
  rates wide enough that the rate tuned for 1/√d_k lies inside it (checked, not assumed: see
  :func:`tune_sgd`), so that "cannot learn" can be told from "needs another step size";
* seeds.

Every cell starts from the same weights for a given (d_k, seed) whatever its rule, so differences at
step 0 are the rule's alone. Each cell logs, every ``log_every`` steps, the loss, accuracy, the gradient
reaching W_Q and W_K, the query rows' logit standard deviation and saturated fraction, and records its
own run time. :func:`analyse` turns the cells into every figure the report shows: per (rule, d_k) the
final accuracy and steps to target with their spread over seeds, for Adam, for SGD at the learning
rate tuned for 1/√d_k and at each rule's own best rate; the verdicts (learns like 1/√d_k, slower,
fails within the budget, diverges); seed-mean curves; the saturation and gradient figures at step 0
and at the end; the findings the chapter's sentences are chosen by; and the chain-rule check of the
gradient reaching W_Q and W_K at initialisation. Non-finite figures are written as None beside a
reason (``diverged``), so the result is strict JSON.
"""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from attnscale.errors import InputError, check_count, check_positive
from attnscale.experiments.cells import RuleRun, rule_grid, shared_settings
from attnscale.experiments.tasks import MarkedCount
from attnscale.softmax_rows import SATURATED_WEIGHT
from attnscale.results import finite_or_none
from attnscale.scales import RULES, ScaleRule, SoftCap

__all__ = ["RULE_CHOICES", "ScaleCell", "ScaleVsDkConfig", "train_cell", "analyse", "tune_sgd", "verdict_of_seeds",
           "steps_to_target", "chain_rule_check", "KIND", "VERDICTS", "LIKE_REFERENCE_STEPS", "SATURATED_RUN",
           "LOGIT_GROWTH"]

KIND = "scale-vs-dk"

#: The verdicts of a (rule, d_k, optimiser, lr) against 1/√d_k, mildest first.
VERDICTS = ("learns", "slower", "fails", "diverges")
#: A run "learns like 1/√d_k" when it reaches the target within this many times the steps the
#: 1/√d_k run of the same seed, optimiser and learning rate needs; beyond it, "slower".
LIKE_REFERENCE_STEPS = 1.5
#: A run "is saturated" at a logged step when at least this fraction of its query rows are (largest
#: weight above softmax_rows.SATURATED_WEIGHT).
SATURATED_RUN = 0.5
#: The logits "grow" (or "shrink") when the median over runs of last-logged / step-0 logit standard
#: deviation is at least this factor (at most its inverse); otherwise they stay about the same.
LOGIT_GROWTH = 2.0

#: The rules of the sweep, by the name used in cells and tables.
RULE_CHOICES: dict[str, ScaleRule] = {
    "inverse_sqrt_dk": RULES["inverse_sqrt_dk"],
    "unscaled": RULES["unscaled"],
    "inverse_dk": RULES["inverse_dk"],
    "qknorm": RULES["qknorm"],
    "softcap_unscaled": RULES["softcap_unscaled"],
}
REFERENCE_RULE = "inverse_sqrt_dk"
OPTIMIZERS = ("adam", "sgd")


@dataclass(frozen=True, kw_only=True)
class ScaleRun:
    """What every run of the sweep shares; :class:`ScaleVsDkConfig` and :class:`ScaleCell` extend it,
    so each setting and its default is declared once."""

    steps: int = 500
    batch: int = 64
    log_every: int = 10       # steps between logged metrics (and the window of the running accuracy)
    final_eval: int = 2048    # fresh samples for the final accuracy
    task: MarkedCount = field(default_factory=MarkedCount)

    def __post_init__(self):
        for name in ("steps", "batch", "log_every", "final_eval"):
            check_count(name, getattr(self, name))


@dataclass(frozen=True)
class ScaleCell(RuleRun, ScaleRun):
    """One training run (rule, d_k, optimizer "adam" or "sgd", learning rate, seed, then the shared
    settings). Its hash is its cache key: every field that changes the numbers is here."""

    RULES: ClassVar = RULE_CHOICES
    OPTIMIZERS: ClassVar = OPTIMIZERS

    d_model: int = 32
    n_heads: int = 2
    code_version: int = 4     # bump when training code changes: old cached results then miss

    def __post_init__(self):
        super().__post_init__()
        self.check_run()


@dataclass(frozen=True)
class ScaleVsDkConfig(ScaleRun):
    """The sweep. Default: 270 cells of 500 steps; the cells at the grid's top rate diverge within a
    few steps. Each cell records its own run time, and the report states the times measured (see
    :meth:`quick` for seconds instead of minutes).

    The SGD grid runs from 0.03 to 2.7 in steps of 3: the rate tuned for 1/√d_k must lie strictly
    inside it at every d_k, which :func:`tune_sgd` checks and reports (an edge is said, never hidden).
    """

    rules: tuple[str, ...] = tuple(RULE_CHOICES)
    d_ks: tuple[int, ...] = (16, 64, 256)
    seeds: int = 3
    adam_lr: float = 3e-3
    sgd_lrs: tuple[float, ...] = (0.03, 0.1, 0.3, 0.9, 2.7)
    target_accuracy: float = 0.9

    def __post_init__(self):
        super().__post_init__()
        unknown = [r for r in self.rules if r not in RULE_CHOICES]
        if unknown or REFERENCE_RULE not in self.rules:
            raise InputError(f"rules: expected names among {sorted(RULE_CHOICES)} including {REFERENCE_RULE!r}, "
                             f"got {list(self.rules)}")
        check_count("seeds", self.seeds)
        check_positive("adam_lr", self.adam_lr)
        if not 0 < self.target_accuracy <= 1:
            raise InputError(f"target_accuracy: expected a number in (0, 1], got {self.target_accuracy!r}")
        if not self.sgd_lrs or list(self.sgd_lrs) != sorted(set(self.sgd_lrs)):
            raise InputError(f"sgd_lrs: expected increasing distinct learning rates, got {list(self.sgd_lrs)}")

    @classmethod
    def quick(cls, seeds: int = 1) -> "ScaleVsDkConfig":
        """Seconds, not minutes: every rule, two d_k, three SGD rates, few steps."""
        return cls(d_ks=(16, 64), seeds=seeds, sgd_lrs=(0.03, 0.1, 0.3), steps=40, log_every=10, final_eval=256)

    def cells(self) -> list[ScaleCell]:
        return rule_grid(ScaleCell, self.rules, self.d_ks, self.seeds, ("adam", self.adam_lr), self.sgd_lrs,
                         **shared_settings(self, ScaleRun))


# --- one cell --------------------------------------------------------------------------------------

def logit_jacobian(z: np.ndarray, rule: ScaleRule) -> np.ndarray:
    """J with dL/dy = J · dL/dp for y = s·q̂·k̂ᵀ (before the cap), from the logits z = cap(y) of rows
    (..., S): J = diag(cap'(y)) · (diag(p) − p pᵀ), p = softmax(z). Returns (..., S, S)."""
    from attnscale.softmax_rows import softmax, softmax_jacobian

    # cap'(y) = 1 − tanh²(y/cap) = 1 − (z/cap)², read off the capped logit z itself.
    slope = 1.0 - (z / rule.cap_value) ** 2 if isinstance(rule, SoftCap) else np.ones_like(z)
    return slope[..., :, None] * softmax_jacobian(softmax(z))


def _init_chain_rule(record, rule: ScaleRule, factor: float) -> dict[str, float]:
    """The factors of the chain rule at initialisation, from the query rows of one attention record.

    With z = s·q̂·k̂ᵀ for the query row (q̂, k̂: q, k after the rule's normalisation, identity except
    QK-norm), p = softmax(cap(z)), o = p V and δ = dL/do:

        dL/dq̂ = s · K̂ᵀ J V δ,    dL/dK̂ = s · (J V δ) q̂ᵀ,    J = diag(cap'(z)) · (diag(p) − p pᵀ),

    and QK-norm's normalisation divides what flows back to q and k by their radius r (besides a
    projection, left out). So ∇W_Q = dL/dq ⊗ x_query has the size s·‖K̂ᵀ J V δ‖/r_q·‖x‖, and
    ∇W_K = Xᵀ dL/dK the size s·‖q̂‖·‖(X/r_k)ᵀ J V δ‖ (X: the inputs the keys and values come from).
    K̂ᵀ (diag(p) − p pᵀ) V = Σ_j p_j (k̂_j − k̄)(v_j − v̄)ᵀ is the p-weighted covariance of keys and
    values: the scale s multiplies it, and a saturated row (p near one-hot) makes it vanish, however
    large the keys. Only δ, set by the read-out, is left out; it does not depend on the rule at step 0
    (every rule starts from the same weights), so ``wq_factor`` = s·RMS(‖K̂ᵀ J V‖_F / r_q) and
    ``wk_factor`` = s·RMS(‖q̂‖·‖(X/r_k)ᵀ J V‖_F) (RMS over rows and heads) should predict the gradient
    norms up to one constant each. ``jacobian_frobenius_rms`` is row_health's ‖diag(p) − p pᵀ‖_F.
    """
    from attnscale.softmax_rows import row_health

    z = record.logits.double().numpy()[:, :, -1, :]                   # (B, H, S): the query rows
    keys = record.k.double().numpy()                                   # (B, H, S, d_k)
    values = record.v.double().numpy()                                 # (B, H, S, d_v)
    q = record.q.double().numpy()[:, :, -1, :]                         # (B, H, d_k)
    x = record.context.double().numpy()                                # (B, S, D)
    q_hat, k_hat = rule.normalize(q), rule.normalize(keys)             # the core's normalisation
    r_q = np.linalg.norm(q, axis=-1) / np.linalg.norm(q_hat, axis=-1)            # (B, H)
    r_k = np.linalg.norm(keys, axis=-1) / np.linalg.norm(k_hat, axis=-1)         # (B, H, S)
    health = row_health(z, spectral=False)
    jac = logit_jacobian(z, rule)                                       # (B, H, S, S)
    jv = np.einsum("bhst,bhtv->bhsv", jac, values)                      # J V: (B, H, S, d_v)
    k_jv = np.einsum("bhsd,bhsv->bhdv", k_hat, jv)                      # K̂ᵀ J V
    x_jv = np.einsum("bhsd,bhsv->bhdv", x[:, None] / r_k[..., None], jv)  # (X/r_k)ᵀ J V
    frobenius = lambda a: np.sqrt((a ** 2).sum(axis=(-2, -1)))          # noqa: E731
    rms = lambda a: float(np.sqrt(np.mean(np.square(a))))               # noqa: E731
    return {
        "factor": factor,
        "jacobian_frobenius_rms": rms(health.jacobian_frobenius),
        "effective_jacobian_rms": rms(frobenius(jac)),
        "wq_factor": factor * rms(frobenius(k_jv) / r_q),
        "wk_factor": factor * rms(np.linalg.norm(q_hat, axis=-1) * frobenius(x_jv)),
        "logit_std": float(np.mean(np.std(z, axis=-1))),
        "max_weight_mean": float(np.mean(health.max_weight)),
    }


def train_cell(cell: ScaleCell, stop_after: int | None = None) -> dict:
    """Train one cell; returns plain data: final metrics, per-step loss/accuracy, logged metrics (every
    ``log_every`` steps: loss, accuracy, gradient norms, logit standard deviation, saturated fraction),
    the chain-rule factors at initialisation, and its own run time (``timing``: ``wall_s``, ``cpu_s``).

    A non-finite loss stops the cell: ``diverged`` is True, ``diverged_at`` its step, and the final
    figures are None (strict JSON: the reason is ``diverged``).

    ``stop_after``: end after that many updates, without the final evaluation (its figures None): the
    per-step lists are then exactly the full run's first entries (what the reproducibility test
    recomputes of a shipped result in seconds)."""
    import torch

    from attnscale.experiments.models import ReadoutTransformer
    from attnscale.experiments.training import attention_metrics, grad_norm, make_optimizer, seed_everything

    wall0, cpu0 = time.perf_counter(), time.process_time()
    data = seed_everything(cell.seed)
    rule = RULE_CHOICES[cell.rule]
    # Same weights for every rule at a given (d_k, seed): the rule adds at most a scalar gain, which
    # draws no random numbers.
    model = ReadoutTransformer(cell.task.vocab, cell.task.seq_len, cell.task.n_classes, rule, cell.d_k,
                               d_model=cell.d_model, n_heads=cell.n_heads)
    attn = model.attn
    opt = make_optimizer(cell.optimizer, model.parameters(), cell.lr)
    losses, correct, log = [], [], []
    init = None
    diverged_at = None
    for step in range(cell.steps + 1):
        tokens, labels = cell.task.sample(cell.batch, data)
        attn.keep_record = step % cell.log_every == 0
        logits = model(tokens)
        loss = torch.nn.functional.cross_entropy(logits, labels)
        if not torch.isfinite(loss):
            diverged_at = step
            break
        losses.append(float(f"{float(loss.detach()):.6g}"))   # 6 digits: the summary stays small
        correct.append(float((logits.argmax(-1) == labels).double().mean()))
        if step == cell.steps:
            break                                   # the last batch is measured, not trained on
        opt.zero_grad(set_to_none=False)
        loss.backward()
        if attn.keep_record:
            rows_z, rows_p = attn.record.logits, attn.record.weights   # (B, H, 1, S): the query's row
            gq, zero_q = grad_norm(attn.w_q.weight)
            gk, zero_k = grad_norm(attn.w_k.weight)
            window = slice(max(0, step - cell.log_every + 1), step + 1)
            entry = {"step": step, "loss": _mean(losses[window]), "accuracy": _mean(correct[window]),
                     "grad_wq": finite_or_none(gq), "grad_wk": finite_or_none(gk), "grad_zero": zero_q and zero_k}
            entry.update(attention_metrics(rows_z, rows_p))
            log.append(entry)
            if step == 0:
                init = {"grad_wq": gq, "grad_wk": gk, **_init_chain_rule(attn.record, rule, attn.logits.factor())}
                init = {k: finite_or_none(v) for k, v in init.items()}
        opt.step()
        if stop_after is not None and step + 1 >= stop_after:
            break
    stopped = stop_after is not None and stop_after < cell.steps
    final = _final_eval(model, cell) if diverged_at is None and not stopped else {"accuracy": None, "loss": None}
    if diverged_at is None and not stopped and final["loss"] is None:   # finite while training, not held out
        diverged_at = cell.steps
    return {
        "final_accuracy": final["accuracy"],
        "final_loss": final["loss"],
        "diverged": diverged_at is not None,
        "diverged_at": diverged_at,
        "grad_zero_ever": any(e["grad_zero"] for e in log),
        "init": init,
        "loss": losses,
        "accuracy": correct,
        "log": log,
        # The one part of a result that differs between two runs of the same cell.
        "timing": {"wall_s": time.perf_counter() - wall0, "cpu_s": time.process_time() - cpu0},
    }


def _final_eval(model, cell: ScaleCell) -> dict[str, float]:
    import torch

    gen = torch.Generator().manual_seed(20_000 + cell.seed)   # a held-out stream, same for every rule
    tokens, labels = cell.task.sample(cell.final_eval, gen)
    with torch.no_grad():
        logits = model(tokens)
    loss = finite_or_none(torch.nn.functional.cross_entropy(logits, labels))
    accuracy = float((logits.argmax(-1) == labels).double().mean())
    return {"accuracy": accuracy if loss is not None else None, "loss": loss}


def _mean(xs) -> float:
    return float(sum(xs) / len(xs))


# --- the analysis ------------------------------------------------------------------------------------

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


def _finite(values) -> list[float]:
    return [float(v) for v in values if v is not None and math.isfinite(v)]


def _spread(values) -> dict:
    """Mean, min, max and count of the finite values; None for each figure when there are none."""
    finite = _finite(values)
    if not finite:
        return {"mean": None, "min": None, "max": None, "n": 0}
    return {"mean": statistics.fmean(finite), "min": min(finite), "max": max(finite), "n": len(finite)}


def _mean_or_none(values) -> float | None:
    finite = _finite(values)
    return statistics.fmean(finite) if finite else None


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


def verdict_of_seeds(per_seed: list[str]) -> tuple[str, int]:
    """The verdict most seeds share and how many do; a tie goes to the more severe verdict, so that
    "learns" is never said of a split it does not win."""
    counts = {v: per_seed.count(v) for v in VERDICTS}
    top = max(counts.values())
    verdict = [v for v in VERDICTS if counts[v] == top][-1]
    return verdict, top


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
        grid.append({"lr": lr, "mean_final_accuracy": acc if group else None,
                     "mean_steps": -neg_steps if group else None, "diverged": sum(r["diverged"] for r in group),
                     "reached": sum(r["steps_to_target"] is not None for r in group), "seeds": len(group)})
    best = max(range(len(grid)), key=lambda i: _sgd_score(_runs(runs, config, rule, d_k, "sgd", grid[i]["lr"]),
                                                          config.steps))
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


def _summary(config: ScaleVsDkConfig, runs: dict, rule: str, d_k: int, optimizer: str, lr: float,
             reference_lr: float, lr_choice: str) -> dict:
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
    verdict, agreeing = verdict_of_seeds(per_seed) if per_seed else (None, 0)
    reached = [r["steps_to_target"] for r in group if r["steps_to_target"] is not None]
    moment = lambda index: {key: _spread(_at(r["log"], index, key) for r in group)  # noqa: E731
                            for key in ("logit_std", "saturated_frac", "max_logit", "grad_wq")}
    return {
        "rule": rule, "d_k": d_k, "optimiser": optimizer, "lr": lr, "lr_choice": lr_choice,
        "final_accuracy": _spread(r["final_accuracy"] for r in group),
        "steps_to_target": _spread(reached),
        "reached": len(reached), "seeds": len(group), "diverged": sum(r["diverged"] for r in group),
        "verdict": verdict, "seeds_agreeing": agreeing, "per_seed": per_seed,
        "steps_ratio": statistics.median(ratios) if ratios else None,
        "start": moment(0), "end": moment(-1),        # first and last logged step of each seed
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
        out["mean"][key] = [_mean_or_none(log[i].get(key) for log in logs if i < len(log)) for i in range(len(steps))]
    return out


def analyse(config: ScaleVsDkConfig, cells: list[ScaleCell], results: list[dict]) -> dict:
    """Every figure the report shows, from the cells (see the module docstring); strict JSON."""
    reach = [steps_to_target(r, config.target_accuracy, config.log_every) for r in results]
    runs = {(c.rule, c.d_k, c.optimizer, c.lr, c.seed): {**r, "steps_to_target": t}
            for c, r, t in zip(cells, results, reach)}
    tuning = [tune_sgd(config, runs, REFERENCE_RULE, d_k) for d_k in config.d_ks]
    tuned = {t["d_k"]: t["lr"] for t in tuning}
    table, curves = [], []
    for d_k in config.d_ks:
        for rule in config.rules:
            own = tune_sgd(config, runs, rule, d_k)
            row = {"rule": rule, "formula": RULE_CHOICES[rule].formula, "d_k": d_k,
                   "adam": _summary(config, runs, rule, d_k, "adam", config.adam_lr, config.adam_lr, "adam"),
                   "sgd_reference_lr": _summary(config, runs, rule, d_k, "sgd", tuned[d_k], tuned[d_k],
                                                "tuned_for_reference"),
                   "sgd_best_lr": {**_summary(config, runs, rule, d_k, "sgd", own["lr"], tuned[d_k], "own_best"),
                                   "edge": own["edge"]}}
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
        "single_key_is_prior": math.isclose(config.task.single_key_ceiling(), config.task.prior_ceiling(),
                                            rel_tol=1e-9, abs_tol=1e-12),
        "sgd_tuning": tuning,
        "sgd_lr_tuned_for_reference": {str(k): v for k, v in tuned.items()},
        "table": table,
        "verdicts": _verdicts(table),
        "curves": curves,
        "findings": _findings(config, runs, table, chain, results),
        "chain_rule": chain,
        "timing": _timing(results),
    }


def _setup(config: ScaleVsDkConfig, cells: list[ScaleCell]) -> dict:
    first = cells[0] if cells else ScaleCell(REFERENCE_RULE, config.d_ks[0], "adam", config.adam_lr, 0)
    return {"d_model": first.d_model, "n_heads": first.n_heads, "n_keys": config.task.n_keys,
            "n_marked": config.task.n_marked, "steps": config.steps, "batch": config.batch, "seeds": config.seeds,
            "adam_lr": config.adam_lr, "sgd_lrs": list(config.sgd_lrs), "final_eval": config.final_eval,
            "log_every": config.log_every, "target_accuracy": config.target_accuracy, "rules": list(config.rules),
            "d_ks": list(config.d_ks), "cells": len(cells), "saturated_weight": SATURATED_WEIGHT,
            "caps": {r: RULE_CHOICES[r].cap_value for r in config.rules if isinstance(RULE_CHOICES[r], SoftCap)},
            "like_reference_steps": LIKE_REFERENCE_STEPS, "saturated_run": SATURATED_RUN,
            "logit_growth": LOGIT_GROWTH}


def _verdicts(table: list[dict]) -> list[dict]:
    """The claims' view (see common contract): one entry per (rule, d_k, optimiser, rate) judged; a rule's
    own best SGD rate only where it differs from the rate tuned for 1/√d_k."""
    keys = ("rule", "d_k", "optimiser", "lr", "verdict", "seeds", "seeds_agreeing", "steps_ratio", "lr_choice",
            "per_seed")
    out = []
    for row in table:
        judged = [row["adam"], row["sgd_reference_lr"]]
        if row["sgd_best_lr"]["lr"] != row["sgd_reference_lr"]["lr"]:
            judged.append(row["sgd_best_lr"])
        out += [{k: s[k] for k in keys} for s in judged if s["seeds"]]
    return out


def _timing(results: list[dict]) -> dict:
    timed = [r["timing"] for r in results if r.get("timing")]
    return {"cells": len(results), "timed": len(timed),
            "cpu_s": sum(t["cpu_s"] for t in timed), "wall_s": sum(t["wall_s"] for t in timed),
            "wall_s_per_cell": _mean_or_none(t["wall_s"] for t in timed),
            "wall_s_max": max((t["wall_s"] for t in timed), default=None)}


def _findings(config: ScaleVsDkConfig, runs: dict, table: list[dict], chain: dict, results: list[dict]) -> dict:
    """The figures the chapter's sentences are chosen by, each with the numbers the sentence shows."""
    return {
        "reference": _reference_finding(table),
        "gradient_step0": _gradient_finding(config, chain),
        "saturation_path": _saturation_finding(config, runs, table),
        "softcap": _softcap_finding(table),
        "optimiser": _optimiser_finding(table),
        "zero_gradient": _zero_finding(config, runs, results),
        "logit_sd_at_init": [{"d_k": r["d_k"], "predicted": math.sqrt(r["d_k"]), "measured": r["logit_std"]}
                             for r in chain["rows"] if r["rule"] == "unscaled" and r["gradient"] == "grad_wq"],
    }


def _reference_finding(table: list[dict]) -> dict:
    rows = [{"d_k": r["d_k"], "optimiser": s["optimiser"], "lr": s["lr"], "reached": s["reached"], "seeds": s["seeds"]}
            for r in table if r["rule"] == REFERENCE_RULE for s in (r["adam"], r["sgd_reference_lr"])]
    return {"rows": rows, "reached_everywhere": all(r["reached"] == r["seeds"] for r in rows),
            "reached_nowhere": all(r["reached"] == 0 for r in rows)}


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
            rows.append({"d_k": d_k, "unscaled": un["measured"], "reference": ref["measured"],
                         "ratio": un["measured"] / ref["measured"], "scale_alone": un["factor"] / ref["factor"]})
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
        growth = _finite(log[-1]["logit_std"] / log[0]["logit_std"] for log in logs
                         if log[0].get("logit_std") and log[-1].get("logit_std") is not None)
        median = statistics.median(growth) if growth else None
        trend = None if median is None else ("grows" if median >= LOGIT_GROWTH else
                                             "shrinks" if median <= 1 / LOGIT_GROWTH else "steady")
        pairs = list(zip(start, end))
        paths = {"stayed": pairs.count((True, True)), "became": pairs.count((False, True)),
                 "left": pairs.count((True, False)), "never": pairs.count((False, False))}
        out[outcome] = {
            "runs": len(logs),
            "stayed_saturated": paths["stayed"], "became_saturated": paths["became"],
            "left_saturation": paths["left"], "never_saturated": paths["never"],
            # The path most of them take (a tie: the first of stayed, became, left, never).
            "dominant_path": max(paths, key=paths.get) if logs else None,
            "saturated_start": _spread(log[0]["saturated_frac"] for log in logs),
            "saturated_end": _spread(log[-1]["saturated_frac"] for log in logs),
            "logit_std_start": _spread(log[0].get("logit_std") for log in logs),
            "logit_std_end": _spread(log[-1].get("logit_std") for log in logs),
            "growth_median": median, "growth": trend,
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
        rows.append({"d_k": d_k, "softcap_saturated_start": cap["start"]["saturated_frac"]["mean"],
                     "unscaled_saturated_start": un["start"]["saturated_frac"]["mean"],
                     "softcap_reached": cap["reached"], "unscaled_reached": un["reached"], "seeds": cap["seeds"],
                     "softcap_logit_std_end": cap["end"]["logit_std"]["mean"],
                     "unscaled_logit_std_end": un["end"]["logit_std"]["mean"]})
    saturated = [r for r in rows if (r["softcap_saturated_start"] or 0) >= SATURATED_RUN]
    learns = [r["d_k"] for r in saturated if 2 * r["softcap_reached"] > r["seeds"]]
    lower = [r["d_k"] for r in rows if None not in (r["softcap_logit_std_end"], r["unscaled_logit_std_end"])
             and r["softcap_logit_std_end"] < r["unscaled_logit_std_end"]]
    return {"rows": rows, "saturated_yet_learns": learns,
            "saturated_and_fails": [r["d_k"] for r in saturated if 2 * r["softcap_reached"] <= r["seeds"]],
            "lower_logits_at_end": lower,
            # Where it starts saturated, learns, and ends with smaller logits than unscaled: the d_k at which
            # the chapter offers (as a hypothesis) that the cap is what lets it learn.
            "learns_with_lower_logits": [d for d in learns if d in lower]}


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
    smallest = min(_finite(e["grad_wq"] for log in logs for e in log), default=None)
    first = _mean_or_none(log[0]["grad_wq"] for log in logs)
    zero = [r for r in results if r["grad_zero_ever"]]
    return {"cells": len(zero), "total": len(results), "cells_then_diverged": sum(r["diverged"] for r in zero),
            "d_k": big, "group_zero": sum(bool(r["grad_zero_ever"]) for r in group), "group_seeds": len(group),
            "smallest_grad_wq": smallest, "step0_grad_wq": first,
            "falls_below_start": None if None in (smallest, first) else smallest < first}


def chain_rule_check(config: ScaleVsDkConfig, rows) -> dict:
    """Predicted vs measured gradient norm reaching W_Q and W_K at step 0 (see :func:`_init_chain_rule`).

    Prediction: ‖∇W_Q‖ ≈ C_Q · wq_factor and ‖∇W_K‖ ≈ C_K · wk_factor (see :func:`_init_chain_rule`), one
    constant each fitted on the reference rule at the smallest d_k (seed-averaged); every other
    (rule, d_k) is a prediction. ``scale_only`` is what the scale alone predicts: the reference rule's
    measured gradient at the same d_k times s / s_ref, blind to saturation. The gradient at step 0
    does not depend on the optimiser or learning rate, so the Adam cells are used. ``summary``: the
    range of measured / predicted over the predicted pairs, the span of s, and the unscaled row at the
    largest d_k (the one the report quotes).
    """
    init = {}
    for cell, res in rows:
        if cell.optimizer == "adam" and res["init"] is not None:
            init.setdefault((cell.rule, cell.d_k), []).append(res["init"])
    if not init:
        return {"rows": [], "summary": None}

    def mean(key, items):
        return _mean_or_none(i.get(key) for i in items)

    def ratio(a, b):
        return a / b if a is not None and b else None

    anchor = (REFERENCE_RULE, min(config.d_ks))
    order = sorted(init, key=lambda key: (key[1], list(RULE_CHOICES).index(key[0])))
    out = []
    for which, factor in (("grad_wq", "wq_factor"), ("grad_wk", "wk_factor")):
        constant = ratio(mean(which, init[anchor]), mean(factor, init[anchor])) if anchor in init else None
        for rule, d_k in order:
            items = init[(rule, d_k)]
            predicted = constant * mean(factor, items) if constant is not None and mean(factor, items) is not None \
                else None
            measured = mean(which, items)
            # The scale alone: the reference rule's measured gradient at this d_k, times s / s_ref.
            ref = init.get((REFERENCE_RULE, d_k))
            scale_only = (mean(which, ref) * mean("factor", items) / mean("factor", ref)) if ref else None
            out.append({
                "gradient": which, "rule": rule, "d_k": d_k,
                "factor": mean("factor", items), "logit_std": mean("logit_std", items),
                "max_weight_mean": mean("max_weight_mean", items),
                "jacobian_frobenius_rms": mean("jacobian_frobenius_rms", items),
                "effective_jacobian_rms": mean("effective_jacobian_rms", items),
                "predicted": predicted, "measured": measured, "scale_only": scale_only,
                "ratio": ratio(measured, predicted),
            })
    predicted_rows = [r for r in out if (r["rule"], r["d_k"]) != anchor and r["ratio"] is not None]
    factors = _finite(r["factor"] for r in out)
    big = max(r["d_k"] for r in out)
    quoted = next((r for r in out if r["rule"] == "unscaled" and r["d_k"] == big and r["gradient"] == "grad_wq"), None)
    summary = {"ratio_min": min((r["ratio"] for r in predicted_rows), default=None),
               "ratio_max": max((r["ratio"] for r in predicted_rows), default=None),
               "pairs": len({(r["rule"], r["d_k"]) for r in predicted_rows}),
               "factor_span": max(factors) / min(factors) if factors and min(factors) > 0 else None,
               "quoted": quoted and {k: quoted[k] for k in ("rule", "d_k", "scale_only", "predicted", "measured")}}
    return {"anchor": {"rule": anchor[0], "d_k": anchor[1]}, "rows": out, "summary": summary}
