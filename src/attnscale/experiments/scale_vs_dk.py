"""Experiment A, ``scale-vs-dk``: does unscaled attention really stop learning?

A one-layer transformer learns :class:`~attnscale.experiments.tasks.MarkedCount` (count the ones among
k marked positions: attention must spread evenly over k keys). The sweep crosses

* the scale rule: 1/√d_k, unscaled, 1/d_k (µP), QK-norm (learnable gain), soft-cap 50 on unscaled;
* d_k ∈ {16, 64, 256};
* the optimiser: Adam (normalises gradient sizes) and plain SGD (does not), SGD on a small grid of
  learning rates so that "cannot learn" can be told from "needs another step size";
* seeds.

Every cell starts from the same weights for a given (d_k, seed) whatever its rule, so differences at
step 0 are the rule's alone. :func:`analyse` then turns the cells into the tables of the report:
steps to a target accuracy and final accuracy with their spread over seeds, for Adam, for SGD at the
learning rate tuned for 1/√d_k, and for SGD at each rule's best learning rate; and the chain-rule
check of the gradient reaching W_Q and W_K at initialisation.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field

import numpy as np

from attnscale.errors import InputError
from attnscale.experiments.tasks import MarkedCount
from attnscale.scales import RULES, ScaleRule, SoftCap, Unscaled

__all__ = ["RULE_CHOICES", "ScaleCell", "ScaleVsDkConfig", "train_cell", "analyse", "KIND"]

KIND = "scale-vs-dk"

#: The rules of the sweep, by the name used in cells and tables.
RULE_CHOICES: dict[str, ScaleRule] = {
    "inverse_sqrt_dk": RULES["inverse_sqrt_dk"],
    "unscaled": RULES["unscaled"],
    "inverse_dk": RULES["inverse_dk"],
    "qknorm": RULES["qknorm"],
    "softcap_unscaled": SoftCap(50.0, Unscaled()),
}
REFERENCE_RULE = "inverse_sqrt_dk"


@dataclass(frozen=True)
class ScaleCell:
    """One training run. Its hash is its cache key: every field that changes the numbers is here."""

    rule: str                 # a key of RULE_CHOICES
    d_k: int                  # query/key size per head
    optimizer: str            # "adam" or "sgd"
    lr: float
    seed: int
    steps: int = 500
    batch: int = 64
    log_every: int = 10       # steps between logged metrics (and the window of the running accuracy)
    final_eval: int = 2048    # fresh samples for the final accuracy
    d_model: int = 32
    n_heads: int = 2
    task: MarkedCount = field(default_factory=MarkedCount)
    code_version: int = 3     # bump when training code changes: old cached results then miss

    def __post_init__(self):
        if self.rule not in RULE_CHOICES:
            raise InputError(f"rule: expected one of {sorted(RULE_CHOICES)}, got {self.rule!r}")
        if self.optimizer not in ("adam", "sgd"):
            raise InputError(f"optimizer: expected 'adam' or 'sgd', got {self.optimizer!r}")
        if not (self.lr > 0 and math.isfinite(self.lr)):
            raise InputError(f"lr: expected a finite number > 0, got {self.lr!r}")
        for name in ("d_k", "steps", "batch", "log_every", "final_eval"):
            if getattr(self, name) < 1:
                raise InputError(f"{name}: expected an integer >= 1, got {getattr(self, name)!r}")

    @property
    def label(self) -> str:
        return f"{self.rule} d_k={self.d_k} {self.optimizer} lr={self.lr:g} seed={self.seed}"


@dataclass(frozen=True)
class ScaleVsDkConfig:
    """The sweep. Default: 180 cells of 500 steps, sized for under 3 minutes on 2 cores (about 0.85
    CPU-seconds per 300-step cell measured; see :meth:`quick` for the tests)."""

    rules: tuple[str, ...] = tuple(RULE_CHOICES)
    d_ks: tuple[int, ...] = (16, 64, 256)
    seeds: int = 3
    adam_lr: float = 3e-3
    sgd_lrs: tuple[float, ...] = (0.1, 0.3, 0.9)
    steps: int = 500
    batch: int = 64
    log_every: int = 10
    final_eval: int = 2048
    target_accuracy: float = 0.9
    task: MarkedCount = field(default_factory=MarkedCount)

    def __post_init__(self):
        unknown = [r for r in self.rules if r not in RULE_CHOICES]
        if unknown or REFERENCE_RULE not in self.rules:
            raise InputError(f"rules: expected names among {sorted(RULE_CHOICES)} including {REFERENCE_RULE!r}, "
                             f"got {list(self.rules)}")
        if self.seeds < 1:
            raise InputError(f"seeds: expected an integer >= 1, got {self.seeds!r}")
        if not 0 < self.target_accuracy <= 1:
            raise InputError(f"target_accuracy: expected a number in (0, 1], got {self.target_accuracy!r}")

    @classmethod
    def quick(cls, seeds: int = 1) -> "ScaleVsDkConfig":
        """Seconds, not minutes: every rule, two d_k, two SGD rates, few steps."""
        return cls(d_ks=(16, 64), seeds=seeds, sgd_lrs=(0.1, 1.0), steps=40, log_every=10, final_eval=256)

    def cells(self) -> list[ScaleCell]:
        common = dict(steps=self.steps, batch=self.batch, log_every=self.log_every,
                      final_eval=self.final_eval, task=self.task)
        out = []
        for seed in range(self.seeds):
            for d_k in self.d_ks:
                for rule in self.rules:
                    out.append(ScaleCell(rule, d_k, "adam", self.adam_lr, seed, **common))
                    out.extend(ScaleCell(rule, d_k, "sgd", lr, seed, **common) for lr in self.sgd_lrs)
        return out


# --- one cell --------------------------------------------------------------------------------------

def logit_jacobian(z: np.ndarray, rule: ScaleRule) -> np.ndarray:
    """J with dL/dy = J · dL/dp for y = s·q̂·k̂ᵀ (before the cap), from the logits z = cap(y) of rows
    (..., S): J = diag(cap'(y)) · (diag(p) − p pᵀ), p = softmax(z). Returns (..., S, S)."""
    from attnscale.softmax import softmax, softmax_jacobian

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
    from attnscale.softmax import row_health

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


def train_cell(cell: ScaleCell) -> dict:
    """Train one cell; returns plain data: final metrics, per-step loss/accuracy, logged metrics and
    the chain-rule factors at initialisation."""
    import torch

    from attnscale.experiments.models import ReadoutTransformer
    from attnscale.experiments.training import attention_metrics, grad_norm, make_optimizer, seed_everything

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
                     "grad_wq": gq, "grad_wk": gk, "grad_zero": zero_q and zero_k}
            entry.update(attention_metrics(rows_z, rows_p))
            log.append(entry)
            if step == 0:
                init = {"grad_wq": gq, "grad_wk": gk, **_init_chain_rule(attn.record, rule, attn.logits.factor())}
        opt.step()
    final = _final_eval(model, cell) if diverged_at is None else {"accuracy": float("nan"), "loss": float("nan")}
    return {
        "final_accuracy": final["accuracy"],
        "final_loss": final["loss"],
        "diverged_at": diverged_at,
        "grad_zero_ever": any(e["grad_zero"] for e in log),
        "init": init,
        "loss": losses,
        "accuracy": correct,
        "log": log,
    }


def _final_eval(model, cell: ScaleCell) -> dict[str, float]:
    import torch

    gen = torch.Generator().manual_seed(20_000 + cell.seed)   # a held-out stream, same for every rule
    tokens, labels = cell.task.sample(cell.final_eval, gen)
    with torch.no_grad():
        logits = model(tokens)
    return {"accuracy": float((logits.argmax(-1) == labels).double().mean()),
            "loss": float(torch.nn.functional.cross_entropy(logits, labels))}


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


def _spread(values: list[float]) -> dict[str, float]:
    finite = [v for v in values if v is not None and math.isfinite(v)]
    if not finite:
        return {"mean": float("nan"), "min": float("nan"), "max": float("nan"), "n": 0}
    return {"mean": statistics.fmean(finite), "min": min(finite), "max": max(finite), "n": len(finite)}


def analyse(config: ScaleVsDkConfig, cells: list[ScaleCell], results: list[dict]) -> dict:
    """Tables from the cells: per (rule, d_k) for Adam, SGD at the reference LR, SGD at each rule's best
    LR; the learning rates chosen; and the chain-rule check at initialisation."""
    reach = [steps_to_target(r, config.target_accuracy, config.log_every) for r in results]
    # Each result with the step at which it reached the target (None: never), without touching it.
    rows = [(cell, {**res, "steps_to_target": t}) for cell, res, t in zip(cells, results, reach)]

    def group(rule, d_k, optimizer, lr):
        return [res for cell, res in rows
                if (cell.rule, cell.d_k, cell.optimizer) == (rule, d_k, optimizer) and cell.lr == lr]

    def score(results_):
        """Mean final accuracy over seeds (diverged = 0), then fewer steps to target: the LR choice."""
        accs = [r["final_accuracy"] if math.isfinite(r["final_accuracy"]) else 0.0 for r in results_]
        steps = [r["steps_to_target"] if r["steps_to_target"] is not None else config.steps + 1 for r in results_]
        return (statistics.fmean(accs), -statistics.fmean(steps))

    def summarise(results_, lr):
        reached = [r["steps_to_target"] for r in results_ if r["steps_to_target"] is not None]
        return {
            "lr": lr,
            "final_accuracy": _spread([r["final_accuracy"] for r in results_]),
            "steps_to_target": _spread(reached),
            "reached": len(reached),
            "seeds": len(results_),
            "diverged": sum(r["diverged_at"] is not None for r in results_),
            "final_max_logit": _spread([r["log"][-1]["max_logit"] for r in results_ if r["log"]]),
            "final_saturated_frac": _spread([r["log"][-1]["saturated_frac"] for r in results_ if r["log"]]),
            "grad_zero_ever": sum(r["grad_zero_ever"] for r in results_),
        }

    tuned_lr = {}
    for d_k in config.d_ks:
        tuned_lr[d_k] = max(config.sgd_lrs, key=lambda lr: score(group(REFERENCE_RULE, d_k, "sgd", lr)))
    table = []
    for d_k in config.d_ks:
        for rule in config.rules:
            best = max(config.sgd_lrs, key=lambda lr: score(group(rule, d_k, "sgd", lr)))
            table.append({
                "rule": rule, "formula": RULE_CHOICES[rule].formula, "d_k": d_k,
                "adam": summarise(group(rule, d_k, "adam", config.adam_lr), config.adam_lr),
                "sgd_reference_lr": summarise(group(rule, d_k, "sgd", tuned_lr[d_k]), tuned_lr[d_k]),
                "sgd_best_lr": summarise(group(rule, d_k, "sgd", best), best),
            })
    return {
        "target_accuracy": config.target_accuracy,
        "steps_to_target": reach,
        "prior_ceiling": config.task.prior_ceiling(),
        "single_key_ceiling": config.task.single_key_ceiling(),
        "sgd_lr_tuned_for_reference": {str(k): v for k, v in tuned_lr.items()},
        "table": table,
        "chain_rule": chain_rule_check(config, rows),
    }


def chain_rule_check(config: ScaleVsDkConfig, rows) -> dict:
    """Predicted vs measured gradient norm reaching W_Q and W_K at step 0 (see :func:`_init_chain_rule`).

    Prediction: ‖∇W_Q‖ ≈ C_Q · wq_factor and ‖∇W_K‖ ≈ C_K · wk_factor (see :func:`_init_chain_rule`), one
    constant each fitted on the reference rule at the smallest d_k (seed-averaged); every other
    (rule, d_k) is a prediction. ``scale_only`` is what the scale alone predicts: the reference rule's
    measured gradient at the same d_k times s / s_ref, blind to saturation. The gradient at step 0
    does not depend on the optimiser or learning rate, so the Adam cells are used.
    """
    init = {}
    for cell, res in rows:
        if cell.optimizer == "adam" and res["init"] is not None:
            init.setdefault((cell.rule, cell.d_k), []).append(res["init"])
    if not init:
        return {"rows": []}

    def mean(key, items):
        return statistics.fmean(i[key] for i in items)

    anchor = (REFERENCE_RULE, min(config.d_ks))
    order = sorted(init, key=lambda key: (key[1], list(RULE_CHOICES).index(key[0])))
    out = []
    for which, factor in (("grad_wq", "wq_factor"), ("grad_wk", "wk_factor")):
        constant = mean(which, init[anchor]) / mean(factor, init[anchor])
        for rule, d_k in order:
            items = init[(rule, d_k)]
            predicted = constant * mean(factor, items)
            measured = mean(which, items)
            # The scale alone: the reference rule's measured gradient at this d_k, times s / s_ref.
            ref = init.get((REFERENCE_RULE, d_k))
            scale_only = (mean(which, ref) * mean("factor", items) / mean("factor", ref)) if ref else float("nan")
            out.append({
                "gradient": which, "rule": rule, "d_k": d_k,
                "factor": mean("factor", items), "logit_std": mean("logit_std", items),
                "max_weight_mean": mean("max_weight_mean", items),
                "jacobian_frobenius_rms": mean("jacobian_frobenius_rms", items),
                "effective_jacobian_rms": mean("effective_jacobian_rms", items),
                "predicted": predicted, "measured": measured, "scale_only": scale_only,
                "ratio": measured / predicted if predicted > 0 else float("nan"),
            })
    return {"anchor": {"rule": anchor[0], "d_k": anchor[1]}, "rows": out}
