"""Stable softmax over rows of logits, and the health figures of those rows.

Rows are the last axis: logits (..., n). A boolean ``mask`` (True = attend) broadcasts against the
logits; entries that are masked or equal to -inf are not attended. ``n`` below is the number of
attended keys of a row. A row with nothing attended has all-zero weights and NaN figures: it holds
no distribution.

Why these figures: the gradient reaching the logits is J·g with J = diag(p) − ppᵀ, the softmax
Jacobian. When p is one-hot, J = 0 and nothing flows back (the seed's "vanishing gradient").
Entropy, max weight and effective support say how close to one-hot a row is; the saturation index
std(logits)/√(2 ln n) says whether its logits are spread enough to freeze it (≥ 1: the random-energy
model's frozen phase, Derrida 1981).
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np

from attnscale.errors import InputError, InputTypeError

__all__ = [
    "softmax",
    "logsumexp",
    "RowHealth",
    "row_health",
    "softmax_jacobian",
    "jacobian_norms",
    "SATURATED_WEIGHT",
    "FLOAT16_MAX",
]

#: A row whose largest weight exceeds this is counted as saturated (nearly one-hot), by the training
#: experiments and the monitor alike.
SATURATED_WEIGHT = 0.99
#: The largest finite float16: a logit beyond ±it overflows to ±inf before a float16 softmax
#: (PyTorch issue #119131); the monitor, the probe and the telemetry count such rows.
FLOAT16_MAX = float(np.finfo(np.float16).max)  # 65504.0


def _attended(logits: np.ndarray, mask: np.ndarray | None) -> np.ndarray:
    """Boolean (..., n): True where the row attends, broadcast to the logits' shape."""
    finite = logits > -np.inf
    if mask is None:
        return finite
    mask = np.asarray(mask)
    if mask.dtype != np.bool_:
        raise InputTypeError(f"mask: expected a boolean array (True = attend), got dtype {mask.dtype}")
    try:
        return np.logical_and(finite, np.broadcast_to(mask, logits.shape))
    except ValueError:
        raise InputError(f"mask: shape {mask.shape} cannot broadcast to the logits' shape {logits.shape}") from None


def _as_logits(logits) -> np.ndarray:
    x = np.asarray(logits)
    if x.dtype.kind not in "f":
        if x.dtype.kind in "iu":
            x = x.astype(np.float64)
        else:
            raise InputTypeError(f"logits: expected real numbers, got dtype {x.dtype}")
    if x.ndim < 1:
        raise InputError(f"logits: expected at least 1 dimension (..., n), got shape {x.shape}")
    if x.shape[-1] == 0:  # a row of no keys has no softmax: n >= 1 (n = 0 would reach max() of nothing)
        raise InputError(f"logits: expected at least one key (n >= 1) in the last axis (..., n), got shape {x.shape}")
    if np.isnan(x).any() or (x == np.inf).any():
        raise InputError(
            f"logits: expected finite numbers or -inf, got {np.isnan(x).sum()} NaN and "
            f"{(x == np.inf).sum()} +inf in shape {x.shape}"
        )
    return x


def _shifted(x: np.ndarray, attended: np.ndarray):
    """(z − max, max) with non-attended entries at -inf; the max of an empty row is 0."""
    z = np.where(attended, x, -np.inf)
    m = np.max(z, axis=-1, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    return z - m, m


def logsumexp(logits, mask=None) -> np.ndarray:
    """log Σ exp(logits) over attended entries, shape (...,); -inf for a row with nothing attended."""
    x = _as_logits(logits)
    att = _attended(x, mask)
    z, m = _shifted(x, att)
    with np.errstate(divide="ignore"):
        return (m + np.log(np.sum(np.exp(z), axis=-1, keepdims=True)))[..., 0]


def softmax(logits, mask=None) -> np.ndarray:
    """Weights (..., n): sum to 1 over attended entries, exactly 0 elsewhere; all 0 in an empty row.

    >>> softmax([5.0, 1.0, 0.5]).round(3)
    array([0.971, 0.018, 0.011])
    """
    x = _as_logits(logits)
    att = _attended(x, mask)
    z, _ = _shifted(x, att)
    e = np.exp(z)
    total = np.sum(e, axis=-1, keepdims=True)
    return np.divide(e, total, out=np.zeros_like(e), where=total > 0)


def softmax_jacobian(p) -> np.ndarray:
    """J = diag(p) − ppᵀ, shape (..., n, n): the derivative of the weights with respect to the logits."""
    p = np.asarray(p, dtype=float)
    return p[..., :, None] * np.eye(p.shape[-1]) - p[..., :, None] * p[..., None, :]


@dataclass(frozen=True)
class RowHealth:
    """Per-row figures, each an array of the rows' shape (...,)."""

    n: np.ndarray  # attended keys
    entropy: np.ndarray  # −Σ p ln p, nats
    normalized_entropy: np.ndarray  # entropy / ln n ∈ [0, 1]; NaN when n < 2
    max_weight: np.ndarray  # max p
    effective_support: np.ndarray  # 1 / Σ p²  ∈ [1, n]
    jacobian_frobenius: np.ndarray  # ‖diag(p) − ppᵀ‖_F
    jacobian_spectral: np.ndarray  # ‖diag(p) − ppᵀ‖_2 (largest eigenvalue); NaN if not requested
    saturation_index: np.ndarray  # std(logits) / √(2 ln n); NaN when n < 2

    def as_dict(self) -> dict[str, np.ndarray]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


def jacobian_norms(p, spectral: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """Frobenius and spectral norms of diag(p) − ppᵀ for weight rows p: (..., n).

    Computed without forming the n×n matrix, and accurately near one-hot, where the norms are tiny
    differences of numbers near 1 (the regime the seed is about): the mass off the top weight,
    ``rest = 1 − p_top``, is summed directly rather than subtracted.
    """
    return _jacobian_norms(np.asarray(p, dtype=np.float64), None, spectral)


def _jacobian_norms(p, rest, spectral):
    """``rest`` (the mass off the top weight) is passed when the caller has it more accurately than
    summing p can give it (row_health sums it from the logits); None sums it here."""
    top_idx = np.argmax(p, axis=-1)[..., None]
    p_top = np.take_along_axis(p, top_idx, axis=-1)[..., 0]
    others = p.copy()
    np.put_along_axis(others, top_idx, 0.0, axis=-1)
    if rest is None:
        rest = np.sum(others, axis=-1)
    rest2 = np.sum(others**2, axis=-1)
    # ‖J‖_F² = Σ_i p_i²(1 − p_i)² + Σ_{i≠j} p_i² p_j², split at the top weight (1 − p_top = rest).
    fro2 = (
        np.sum(others**2 * (1.0 - others) ** 2, axis=-1)
        + p_top**2 * rest**2
        + 2.0 * p_top**2 * rest2
        + rest2**2
        - np.sum(others**4, axis=-1)
    )
    fro = np.sqrt(np.maximum(fro2, 0.0))
    if not spectral:
        return fro, np.full_like(fro, np.nan)
    return fro, _largest_eigenvalue(p_top, others, rest)


def _largest_eigenvalue(p_top, others, rest, iterations: int = 80):
    """Largest eigenvalue of diag(p) − ppᵀ, by geometric bisection on the secular equation.

    The eigenvalues of a diagonal matrix minus a rank-one term interlace its diagonal, so the largest
    lies in [p_2, p_1] and solves f(λ) = 1 − Σ p_i²/(p_i − λ) = 0, f decreasing there. The top term is
    rewritten (p_1·rest − λ)/(p_1 − λ) to stay accurate when p_1 ≈ 1. Ties p_1 = p_2 give λ = p_1; a
    one-hot row (p_2 = 0) gives 0.
    """
    shape = np.shape(p_top)
    p_top, rest = np.atleast_1d(p_top), np.atleast_1d(rest)
    others = others.reshape(p_top.shape + others.shape[-1:])
    p2 = np.max(others, axis=-1)
    lo, hi = p2.copy(), p_top.copy()
    solve = (p2 > 0) & (p_top > p2)
    if np.any(solve):
        o, pt, r = others[solve], p_top[solve], rest[solve]
        a, b = lo[solve], hi[solve]
        for _ in range(iterations):
            mid = np.sqrt(a * b)
            with np.errstate(divide="ignore", invalid="ignore"):
                terms = np.where(o > 0, o**2 / (o - mid[:, None]), 0.0)
                f = (pt * r - mid) / (pt - mid) - np.sum(terms, axis=-1)
            positive = f > 0
            a = np.where(positive, mid, a)
            b = np.where(positive, b, mid)
        lo[solve] = np.sqrt(a * b)
    result = np.where(p_top > p2, lo, p_top)
    return np.where(p2 > 0, result, 0.0).reshape(shape)


def row_health(logits, mask=None, spectral: bool = True) -> RowHealth:
    """Health figures of softmax rows. logits: (..., n); mask: bool, broadcastable, True = attend.

    ``spectral=False`` skips the spectral norm (an iterative solve) and leaves it NaN.

    >>> h = row_health([14.0, 10.0, 12.0])
    >>> float(h.max_weight.round(3)), float(h.entropy.round(3))
    (0.867, 0.441)
    """
    x = _as_logits(logits).astype(np.float64, copy=False)
    att = _attended(x, mask)
    n = np.sum(att, axis=-1)
    z, _ = _shifted(x, att)
    e = np.exp(z)
    total = np.sum(e, axis=-1, keepdims=True)
    empty = n == 0
    safe_total = np.where(total > 0, total, 1.0)
    p = e / safe_total
    log_total = np.log(safe_total)
    # −ln p = ln Σe − z per entry: no cancellation of huge logits against a huge log-sum-exp.
    neg_log_p = np.where(att, log_total - np.where(att, z, 0.0), 0.0)
    entropy = np.sum(p * neg_log_p, axis=-1)
    max_weight = np.max(p, axis=-1)
    rest = np.sum(np.where(att & (z < 0), p, 0.0), axis=-1)  # mass off the (shifted-to-0) top entry
    ties_at_top = np.sum(att & (z == 0), axis=-1)
    # With ties at the top, all but one tied entry count as "rest".
    rest = rest + (ties_at_top - 1).clip(min=0) * max_weight
    with np.errstate(divide="ignore"):
        eff = 1.0 / np.sum(p * p, axis=-1)
    fro, spec = _jacobian_norms(p, rest, spectral)
    with np.errstate(divide="ignore", invalid="ignore"):
        ln_n = np.log(np.maximum(n, 1))
        normalized = np.where(n >= 2, entropy / np.where(n >= 2, ln_n, 1.0), np.nan)
        mean = np.sum(np.where(att, x, 0.0), axis=-1) / np.maximum(n, 1)
        var = np.sum(np.where(att, (x - mean[..., None]) ** 2, 0.0), axis=-1) / np.maximum(n, 1)
        sat = np.where(n >= 2, np.sqrt(var) / np.sqrt(2.0 * np.where(n >= 2, ln_n, 1.0)), np.nan)
    nan_if_empty = lambda a: np.where(empty, np.nan, a)  # noqa: E731
    return RowHealth(
        n=n,
        entropy=nan_if_empty(entropy),
        normalized_entropy=nan_if_empty(normalized),
        max_weight=nan_if_empty(max_weight),
        effective_support=nan_if_empty(eff),
        jacobian_frobenius=nan_if_empty(fro),
        jacobian_spectral=nan_if_empty(spec),
        saturation_index=nan_if_empty(sat),
    )
