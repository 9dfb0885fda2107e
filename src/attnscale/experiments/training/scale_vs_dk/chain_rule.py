"""The chain rule of the gradient reaching W_Q and W_K at initialisation: the Jacobian of the logits
(:func:`logit_jacobian`), the factors one cell records at step 0 (:func:`init_chain_rule`), and the
check of predicted against measured gradient norms over the sweep (:func:`chain_rule_check`)."""

from __future__ import annotations

import numpy as np

from attnscale.experiments.training.scale_vs_dk.config import REFERENCE_RULE, RULE_CHOICES, ScaleVsDkConfig
from attnscale.experiments.training.common import finite, mean_or_none
from attnscale.scales import ScaleRule, SoftCap

__all__ = ["logit_jacobian", "init_chain_rule", "chain_rule_check"]


def logit_jacobian(z: np.ndarray, rule: ScaleRule) -> np.ndarray:
    """J with dL/dy = J · dL/dp for y = s·q̂·k̂ᵀ (before the cap), from the logits z = cap(y) of rows
    (..., S): J = diag(cap'(y)) · (diag(p) − p pᵀ), p = softmax(z). Returns (..., S, S)."""
    from attnscale.softmax_rows import softmax, softmax_jacobian

    # cap'(y) = 1 − tanh²(y/cap) = 1 − (z/cap)², read off the capped logit z itself.
    slope = 1.0 - (z / rule.cap_value) ** 2 if isinstance(rule, SoftCap) else np.ones_like(z)
    return slope[..., :, None] * softmax_jacobian(softmax(z))


def init_chain_rule(record, rule: ScaleRule, factor: float) -> dict[str, float]:
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

    z = record.logits.double().numpy()[:, :, -1, :]  # (B, H, S): the query rows
    keys = record.k.double().numpy()  # (B, H, S, d_k)
    values = record.v.double().numpy()  # (B, H, S, d_v)
    q = record.q.double().numpy()[:, :, -1, :]  # (B, H, d_k)
    x = record.context.double().numpy()  # (B, S, D)
    q_hat, k_hat = rule.normalize(q), rule.normalize(keys)  # the core's normalisation
    r_q = np.linalg.norm(q, axis=-1) / np.linalg.norm(q_hat, axis=-1)  # (B, H)
    r_k = np.linalg.norm(keys, axis=-1) / np.linalg.norm(k_hat, axis=-1)  # (B, H, S)
    health = row_health(z, spectral=False)
    jac = logit_jacobian(z, rule)  # (B, H, S, S)
    jv = np.einsum("bhst,bhtv->bhsv", jac, values)  # J V: (B, H, S, d_v)
    k_jv = np.einsum("bhsd,bhsv->bhdv", k_hat, jv)  # K̂ᵀ J V
    x_jv = np.einsum("bhsd,bhsv->bhdv", x[:, None] / r_k[..., None], jv)  # (X/r_k)ᵀ J V
    frobenius = lambda a: np.sqrt((a**2).sum(axis=(-2, -1)))  # noqa: E731
    rms = lambda a: float(np.sqrt(np.mean(np.square(a))))  # noqa: E731
    return {
        "factor": factor,
        "jacobian_frobenius_rms": rms(health.jacobian_frobenius),
        "effective_jacobian_rms": rms(frobenius(jac)),
        "wq_factor": factor * rms(frobenius(k_jv) / r_q),
        "wk_factor": factor * rms(np.linalg.norm(q_hat, axis=-1) * frobenius(x_jv)),
        "logit_std": float(np.mean(np.std(z, axis=-1))),
        "max_weight_mean": float(np.mean(health.max_weight)),
    }


def chain_rule_check(config: ScaleVsDkConfig, rows) -> dict:
    """Predicted vs measured gradient norm reaching W_Q and W_K at step 0 (see :func:`init_chain_rule`).

    Prediction: ‖∇W_Q‖ ≈ C_Q · wq_factor and ‖∇W_K‖ ≈ C_K · wk_factor (see :func:`init_chain_rule`), one
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
        return mean_or_none(i.get(key) for i in items)

    def ratio(a, b):
        return a / b if a is not None and b else None

    anchor = (REFERENCE_RULE, min(config.d_ks))
    order = sorted(init, key=lambda key: (key[1], list(RULE_CHOICES).index(key[0])))
    out = []
    for which, factor in (("grad_wq", "wq_factor"), ("grad_wk", "wk_factor")):
        constant = ratio(mean(which, init[anchor]), mean(factor, init[anchor])) if anchor in init else None
        for rule, d_k in order:
            items = init[(rule, d_k)]
            predicted = (
                constant * mean(factor, items) if constant is not None and mean(factor, items) is not None else None
            )
            measured = mean(which, items)
            # The scale alone: the reference rule's measured gradient at this d_k, times s / s_ref.
            ref = init.get((REFERENCE_RULE, d_k))
            scale_only = (mean(which, ref) * mean("factor", items) / mean("factor", ref)) if ref else None
            out.append(
                {
                    "gradient": which,
                    "rule": rule,
                    "d_k": d_k,
                    "factor": mean("factor", items),
                    "logit_std": mean("logit_std", items),
                    "max_weight_mean": mean("max_weight_mean", items),
                    "jacobian_frobenius_rms": mean("jacobian_frobenius_rms", items),
                    "effective_jacobian_rms": mean("effective_jacobian_rms", items),
                    "predicted": predicted,
                    "measured": measured,
                    "scale_only": scale_only,
                    "ratio": ratio(measured, predicted),
                }
            )
    predicted_rows = [r for r in out if (r["rule"], r["d_k"]) != anchor and r["ratio"] is not None]
    factors = finite(r["factor"] for r in out)
    big = max(r["d_k"] for r in out)
    quoted = next((r for r in out if r["rule"] == "unscaled" and r["d_k"] == big and r["gradient"] == "grad_wq"), None)
    summary = {
        "ratio_min": min((r["ratio"] for r in predicted_rows), default=None),
        "ratio_max": max((r["ratio"] for r in predicted_rows), default=None),
        "pairs": len({(r["rule"], r["d_k"]) for r in predicted_rows}),
        "factor_span": max(factors) / min(factors) if factors and min(factors) > 0 else None,
        "quoted": quoted and {k: quoted[k] for k in ("rule", "d_k", "scale_only", "predicted", "measured")},
    }
    return {"anchor": {"rule": anchor[0], "d_k": anchor[1]}, "rows": out, "summary": summary}
