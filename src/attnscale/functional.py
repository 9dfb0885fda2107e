"""Exact scaled dot-product attention in NumPy: forward and explicit backward.

Letters used everywhere in attnscale: ``L`` queries, ``S`` keys, ``H_q`` query heads, ``H_kv`` key/value
heads (H_q a multiple of H_kv: grouped-query and multi-query attention), ``d_k`` the query/key size,
``d_v`` the value size, ``...`` leading (batch) dimensions that broadcast.

    q: (..., H_q, L, d_k)   k: (..., H_kv, S, d_k)   v: (..., H_kv, S, d_v)   ->   out: (..., H_q, L, d_v)

Rank-2 inputs (L, d_k) mean one head. For each head::

    logits = cap(scale · q̂ k̂ᵀ) + bias       (L, S); -inf where not attended      (see attnscale.scales)
    P      = softmax(logits)                 rows sum to 1 over attended keys
    out    = P V

``scale`` multiplies q·k; ``None`` means 1/√d_k (Vaswani et al. 2017, footnote 4: with iid unit
components, Var(q·k) = d_k, and the scale brings it back to 1). A scale of 0.0 is legal.

The forward works head by head with one L×S float array, allocated once and reused by every head,
updated in place (bias, mask, max-subtraction, exp); it multiplies the L×d_k queries rather than the
L×S logits by the scale, and divides the L×d_v output rather than the L×S weights by the row sums.
A query row with no attended key gives exactly 0 output and exactly 0 gradient, never NaN.
float16 inputs are computed in float32 and cast back.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from attnscale.attention_aux import AuxOutput, AuxRequest, check_aux
from attnscale.errors import InputError, InputTypeError
from attnscale.masks import causal_alignment, causal_mask
from attnscale.scales import ScaleLike, ScaleRule, resolve_scale
from attnscale.shapes import check_qkv_shapes

__all__ = ["attention", "attention_backward", "AttentionGrads"]


@dataclass(frozen=True)
class AttentionGrads:
    """Gradients of Σ(out ⊙ dout), each of its input's shape and dtype."""

    dq: np.ndarray
    dk: np.ndarray
    dv: np.ndarray
    dbias: np.ndarray | None  # None when no bias was given


_FLOAT_DTYPES = (np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64))


def _as_float(name: str, x) -> np.ndarray:
    arr = np.asarray(x)
    if arr.dtype not in _FLOAT_DTYPES:
        raise InputTypeError(f"{name}: expected a float16, float32 or float64 array, got dtype {arr.dtype}")
    return arr


def _heads_view(name: str, x: np.ndarray) -> np.ndarray:
    """(..., H, N, d); a rank-2 array (N, d) becomes one head."""
    if x.ndim < 2:
        raise InputError(f"{name}: expected at least 2 dimensions (..., H, N, d) or (N, d), got shape {x.shape}")
    return x[None] if x.ndim == 2 else x


def _sum_to(x: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """Undo broadcasting: sum x down to ``shape``."""
    extra = x.ndim - len(shape)
    x = x.sum(axis=tuple(range(extra))) if extra > 0 else x
    axes = tuple(i for i, n in enumerate(shape) if n == 1 and x.shape[i] != 1)
    return x.sum(axis=axes, keepdims=True) if axes else x


@dataclass(frozen=True)
class _Problem:
    """Validated inputs, broadcast (as views) to the shapes the per-head loop reads."""

    q: np.ndarray  # (*lead, H_q, L, d_k)
    k: np.ndarray  # (*lead, H_kv, S, d_k)
    v: np.ndarray  # (*lead, H_kv, S, d_v)
    blocked_mask: np.ndarray | None  # (*lead, H_q, L, S) bool view, True = NOT attended, or None
    blocked_causal: np.ndarray | None  # (L, S) bool, True = NOT attended, or None
    bias: np.ndarray | None  # (*lead, H_q, L, S) view, or None
    rule: ScaleRule
    dropout_p: float
    seed: int | None
    compute: np.dtype
    check_finite: bool
    squeeze_heads: bool  # every input was rank 2: drop the head axis of the output

    @property
    def lead(self):
        return self.q.shape[:-3]

    @property
    def group(self) -> int:
        return self.q.shape[-3] // self.k.shape[-3]

    def blocked(self, idx) -> np.ndarray | None:
        """(L, S) bool for head ``idx`` = (*lead, h), True where NOT attended; None when everything
        is attended. Masks are stored inverted once, so no head pays for an L×S inversion."""
        if self.blocked_mask is None:
            return self.blocked_causal
        if self.blocked_causal is None:
            return self.blocked_mask[idx]
        return self.blocked_mask[idx] | self.blocked_causal


def _prepare(q, k, v, scale, mask, bias, causal, dropout_p, seed, check_finite) -> _Problem:
    q, k, v = _as_float("q", q), _as_float("k", k), _as_float("v", v)
    squeeze = max(q.ndim, k.ndim, v.ndim) == 2
    q4, k4, v4 = _heads_view("q", q), _heads_view("k", k), _heads_view("v", v)
    sh = check_qkv_shapes(q4.shape, k4.shape, v4.shape, q.shape, k.shape, v.shape)
    H_q, L, S, lead = sh.H_q, sh.L, sh.S, sh.lead
    if check_finite:
        for name, x in (("q", q), ("k", k), ("v", v)):
            if not np.isfinite(x).all():
                raise InputError(
                    f"{name}: expected finite values, got {np.isnan(x).sum()} NaN and "
                    f"{np.isinf(x).sum()} Inf in shape {x.shape} (check_finite=False skips this check)"
                )
    rule = resolve_scale(scale)
    if isinstance(dropout_p, (bool, np.bool_)) or not isinstance(dropout_p, (int, float, np.integer, np.floating)):
        raise InputTypeError(f"dropout_p: expected a number in [0, 1), got {type(dropout_p).__name__} {dropout_p!r}")
    if not 0.0 <= dropout_p < 1.0:
        raise InputError(f"dropout_p: expected a number in [0, 1), got {dropout_p!r}")
    if seed is not None and (isinstance(seed, (bool, np.bool_)) or not isinstance(seed, (int, np.integer))):
        raise InputTypeError(f"seed: expected None or an int >= 0, got {type(seed).__name__} {seed!r}")
    if seed is not None and seed < 0:
        raise InputError(f"seed: expected None or an int >= 0, got {seed!r}")
    if dropout_p > 0 and seed is None:
        raise InputError(
            "seed: required when dropout_p > 0, so that the dropout mask can be drawn again "
            "(backward, reruns); got None"
        )
    compute = np.result_type(q, k, v)
    target = lead + (H_q, L, S)
    mask_view = None
    if mask is not None:
        mask = np.asarray(mask)
        if mask.dtype != np.bool_:
            raise InputTypeError(f"mask: expected a boolean array (True = attend), got dtype {mask.dtype}")
        try:
            mask_view = np.broadcast_to(~mask, target)  # inverted at the user's size
        except ValueError:
            raise InputError(f"mask: shape {mask.shape} cannot broadcast to (..., H_q, L, S) = {target}") from None
    bias_view = None
    if bias is not None:
        bias = _as_float("bias", bias)
        if check_finite and (np.isnan(bias).any() or (bias == np.inf).any()):
            raise InputError(
                f"bias: expected finite values or -inf (not attended), got {np.isnan(bias).sum()} NaN "
                f"and {(bias == np.inf).sum()} +Inf in shape {bias.shape}"
            )
        compute = np.result_type(compute, bias)
        try:
            bias_view = np.broadcast_to(bias, target)
        except ValueError:
            raise InputError(f"bias: shape {bias.shape} cannot broadcast to (..., H_q, L, S) = {target}") from None
    if compute == np.float16:
        compute = np.dtype(np.float32)
    alignment = causal_alignment(causal, L, S)
    return _Problem(
        q=np.broadcast_to(q4, lead + q4.shape[-3:]),
        k=np.broadcast_to(k4, lead + k4.shape[-3:]),
        v=np.broadcast_to(v4, lead + v4.shape[-3:]),
        blocked_mask=mask_view,
        blocked_causal=None if alignment is None else ~causal_mask(L, S, alignment),
        bias=bias_view,
        rule=rule,
        dropout_p=float(dropout_p),
        seed=None if seed is None else int(seed),  # an np.integer too, checked above
        compute=compute,
        check_finite=check_finite,
        squeeze_heads=squeeze,
    )


def _head_logits(prob: _Problem, idx, qn: np.ndarray, kn: np.ndarray, blocked, out=None):
    """Logits (L, S) of one head, -inf where not attended, and the factor and pre-cap logits z.
    ``out``: an (L, S) array of the compute dtype to write into (the forward reuses one per call)."""
    (L, d_k), S = qn.shape, kn.shape[0]
    n = None
    if prob.rule.uses_n:  # n counts attended keys: a -inf bias blocks a key too
        off = blocked
        if prob.bias is not None:
            minus_inf = prob.bias[idx] == -np.inf
            off = minus_inf if off is None else off | minus_inf
        n = np.full((L, 1), S) if off is None else S - off.sum(-1, keepdims=True)
    factor = prob.rule.factor(d_k, n)
    # Scaling the L×d_k queries rather than the L×S logits saves a pass over the largest array.
    with np.errstate(over="ignore", invalid="ignore"):  # an overflow is caught in _exp_rows
        s = np.matmul(qn * np.asarray(factor, dtype=prob.compute), kn.T, out=out)  # (L, S)
    z = None
    if prob.rule.caps:
        z = s
        s = prob.rule.cap(z, out=out)  # the forward needs no z: it caps in place
    if prob.bias is not None:
        s += prob.bias[idx]
    if blocked is not None:
        np.copyto(s, -np.inf, where=blocked)
    return s, factor, z


def _exp_rows(s: np.ndarray, check_finite: bool = True):
    """In place: s ← exp(s − rowmax). Returns (row sums (L, 1), row max (L, 1)); an all -inf row
    stays all 0 with sum 0. A +inf or NaN logit (finite inputs whose product overflowed) makes its
    row sum NaN: refused when ``check_finite``, so no NaN output appears silently."""
    m = s.max(axis=-1, keepdims=True)
    m[m == -np.inf] = 0.0
    with np.errstate(invalid="ignore"):  # +inf − +inf: the NaN check below reports it
        s -= m
        np.exp(s, out=s)
        total = s.sum(axis=-1, keepdims=True)
    if check_finite and np.isnan(total).any():
        raise InputError(
            f"scale: the logits overflowed to +inf or NaN in {int(np.isnan(total).sum())} row(s); "
            "expected q·k times the scale to stay finite (lower the scale or the inputs' size; "
            "check_finite=False skips this check)"
        )
    return total, m


def _dropout_keep(rng: np.random.Generator, shape, dropout_p: float) -> np.ndarray:
    """Bool (L, S), True = kept. Forward and backward draw it alike, head by head, from the same seed;
    float32 draws keep the temporary at half the size of float64 ones."""
    return rng.random(shape, dtype=np.float32) >= dropout_p


def _normalized(prob: _Problem, x: np.ndarray) -> np.ndarray:
    return (
        prob.rule.normalize(x.astype(prob.compute, copy=False))
        if prob.rule.normalizes
        else x.astype(prob.compute, copy=False)
    )


def attention(
    q,
    k,
    v,
    *,
    scale: ScaleLike = None,
    mask=None,
    bias=None,
    causal=False,
    dropout_p: float = 0.0,
    seed: int | None = None,
    check_finite: bool = True,
    aux: AuxRequest | None = None,
):
    """Scaled dot-product attention, exactly.

    Args:
        q: (..., H_q, L, d_k) queries. k: (..., H_kv, S, d_k) keys. v: (..., H_kv, S, d_v) values.
            float16/32/64; H_q a multiple of H_kv; leading dimensions broadcast.
        scale: multiplies q·k. ``None`` = 1/√d_k; a number (0.0 is legal); a rule name
            ("inverse_sqrt_dk", "inverse_dk", "unscaled", "logn", "qknorm", "softcap") or a
            :class:`~attnscale.scales.ScaleRule`.
        mask: boolean, True = attend, broadcastable to (..., H_q, L, S).
        bias: additive float, broadcastable to (..., H_q, L, S), added after the scale and cap;
            -inf entries are not attended.
        causal: False; "top_left" (PyTorch ``is_causal``); "bottom_right" (KV-cache decoding);
            True only when L == S. See :mod:`attnscale.masks` for pictures.
        dropout_p: probability of dropping a weight, in [0, 1); survivors are scaled by 1/(1 − p).
        seed: seeds the dropout mask (required when dropout_p > 0).
        check_finite: refuse NaN/Inf in q, k, v and NaN/+Inf in bias; False skips the scan.
        aux: an :class:`~attnscale.AuxRequest` of what to return beside the output: per row
            ``lse``, ``entropy``, ``logit_range`` (max_logit, min_logit), ``first_key_weight``; the
            (..., H_q, L, S) ``logits`` and ``weights`` (the softmax before dropout). The same request
            and figures as :func:`attnscale.torch.attention`'s (:mod:`attnscale.attention_aux`).

    Returns:
        out (..., H_q, L, d_v) in the inputs' dtype; with ``aux``, ``(out, figures)``, figures an
        :class:`~attnscale.AuxOutput` in the inputs' dtype whose fields not asked for are None
        (``backend`` "numpy").

    >>> q = np.array([[1.0, 0.0, 1.0, 0.0]]); k = np.array([[0.0, 1.0, 1.0, 1.0]])
    >>> _, figures = attention(q, k, np.ones((1, 1)), aux=AuxRequest(logits=True))
    >>> float(figures.logits[0, 0])  # 1 / √4
    0.5
    """
    request = check_aux(aux)
    prob = _prepare(q, k, v, scale, mask, bias, causal, dropout_p, seed, check_finite)
    *lead, H_q, L, _ = prob.q.shape
    S, d_v = prob.v.shape[-2:]
    out = np.empty(tuple(lead) + (H_q, L, d_v), dtype=prob.compute)
    kept = None if request is None else _Kept.empty(request, tuple(lead) + (H_q, L), S, prob.compute)
    rng = np.random.default_rng(prob.seed) if prob.dropout_p > 0 else None
    scores = np.empty((L, S), dtype=prob.compute)  # the one L×S float array, reused by every head
    for idx in np.ndindex(*lead, H_q):
        kv = idx[:-1] + (idx[-1] // prob.group,)
        s, _, _ = _head_logits(
            prob, idx, _normalized(prob, prob.q[idx]), _normalized(prob, prob.k[kv]), prob.blocked(idx), out=scores
        )
        logits = s if kept is None else s.copy()  # s becomes exp(logits − max) below
        total, m = _exp_rows(s, prob.check_finite)
        if kept is not None:
            kept.add(idx, logits, s, total, m)
        if rng is not None:
            np.multiply(s, _dropout_keep(rng, s.shape, prob.dropout_p), out=s)
            total = total * (1.0 - prob.dropout_p)  # survivors scaled by 1/(1 − p)
        np.divide(s @ prob.v[kv].astype(prob.compute, copy=False), total, out=out[idx], where=total != 0)
        out[idx][(total == 0)[:, 0]] = 0.0
    result_dtype = np.result_type(*(np.asarray(x).dtype for x in (q, k, v)))
    finish = lambda a: (a[..., 0, :, :] if a.ndim >= 3 and prob.squeeze_heads else a).astype(result_dtype, copy=False)  # noqa: E731
    if kept is None:
        return finish(out)
    return finish(out), kept.output(prob.squeeze_heads, result_dtype)


class _Kept:
    """The figures an :class:`AuxRequest` asks of :func:`attention`, filled head by head."""

    def __init__(self, arrays: dict[str, np.ndarray]):
        self.arrays = arrays  # name -> (..., H_q, L) or (..., H_q, L, S), filled head by head

    @classmethod
    def empty(cls, request: AuxRequest, rows: tuple, S: int, dtype) -> _Kept:
        """Arrays for what ``request`` asks: (*rows) per row figure, (*rows, S) for logits and weights."""
        names = [n for n in _ROW_FIGURES if getattr(request, _ASKED_BY.get(n, n))]
        arrays = {n: np.empty(rows, dtype=dtype) for n in names}
        arrays |= {n: np.empty(rows + (S,), dtype=dtype) for n in ("logits", "weights") if getattr(request, n)}
        return cls(arrays)

    def add(self, idx, logits: np.ndarray, e: np.ndarray, total: np.ndarray, m: np.ndarray) -> None:
        """Head ``idx``'s figures from its logits (L, S) and exp(logits − m) with row sums ``total`` (L, 1)."""
        weights = np.divide(e, total, out=np.zeros_like(e), where=total != 0)  # 0 in a row with nothing attended
        with np.errstate(divide="ignore"):
            lse = (m + np.log(total))[:, 0]  # −inf for a row with nothing attended
        with np.errstate(invalid="ignore"):  # 0 · inf where not attended (not summed); NaN rows stay NaN
            for name, array in self.arrays.items():
                array[idx] = _head_figure(name, logits, weights, lse)

    def output(self, squeeze_heads: bool, dtype) -> AuxOutput:
        """The :class:`AuxOutput`, in ``dtype``; the head axis dropped when every input was rank 2."""
        shaped = {n: (a[0] if squeeze_heads else a).astype(dtype, copy=False) for n, a in self.arrays.items()}
        return AuxOutput(**shaped, backend="numpy")


def _head_figure(name: str, logits: np.ndarray, weights: np.ndarray, lse: np.ndarray) -> np.ndarray:
    """The figure ``name`` of one head, from its logits and weights (L, S) and its lse (L,); a row
    figure is NaN in a row with nothing attended (lse −inf)."""
    if name in ("logits", "weights", "lse"):
        return {"logits": logits, "weights": weights, "lse": lse}[name]
    if name == "entropy":  # −Σ p ln p as Σ p (lse − s) over the weights not 0: a sum of terms ≥ 0
        x = np.where(weights > 0, weights * (lse[:, None] - logits), 0.0).sum(-1)
    elif name == "max_logit":
        x = logits.max(-1)
    elif name == "min_logit":
        x = np.where(logits > -np.inf, logits, np.inf).min(-1)
    else:  # first_key_weight
        x = weights[:, 0]
    return np.where(lse == -np.inf, np.nan, x)


# The per-row figures, and the request field that asks for each where its name differs.
_ROW_FIGURES = ("lse", "entropy", "max_logit", "min_logit", "first_key_weight")
_ASKED_BY = {"max_logit": "logit_range", "min_logit": "logit_range"}


def attention_backward(
    q,
    k,
    v,
    dout,
    *,
    scale: ScaleLike = None,
    mask=None,
    bias=None,
    causal=False,
    dropout_p: float = 0.0,
    seed: int | None = None,
    check_finite: bool = True,
) -> AttentionGrads:
    """Vector–Jacobian product of :func:`attention`: gradients of Σ(out ⊙ dout).

    Takes the same arguments as :func:`attention` plus dout: (..., H_q, L, d_v), and recomputes the
    forward head by head. The step that matters for the blog post's argument is the softmax's::

        dS = P ⊙ (dP − rowsum(dP ⊙ P))

    When a row of P is one-hot, P ⊙ (dP − dP_top) is zero everywhere: nothing reaches q and k.
    """
    prob = _prepare(q, k, v, scale, mask, bias, causal, dropout_p, seed, check_finite)
    lead = tuple(prob.q.shape[:-3])
    H_q, L, d_k = prob.q.shape[-3:]
    S, d_v = prob.v.shape[-2:]
    dout = _as_float("dout", dout)
    expected = (L, d_v) if prob.squeeze_heads else lead + (H_q, L, d_v)
    try:
        fits = np.broadcast_shapes(dout.shape, expected) == expected
    except ValueError:
        fits = False
    if not fits:
        raise InputError(f"dout: expected the output's shape {expected}, got {dout.shape}")
    dout = np.broadcast_to(dout, expected).astype(prob.compute, copy=False)
    dout = dout[None] if prob.squeeze_heads else dout
    dq_all = np.zeros(prob.q.shape, dtype=prob.compute)
    dk_all = np.zeros(prob.k.shape, dtype=prob.compute)
    dv_all = np.zeros(prob.v.shape, dtype=prob.compute)
    dbias_all = np.zeros(lead + (H_q, L, S), dtype=prob.compute) if prob.bias is not None else None
    rng = np.random.default_rng(prob.seed) if prob.dropout_p > 0 else None
    rule = prob.rule
    for idx in np.ndindex(*lead, H_q):
        kv = idx[:-1] + (idx[-1] // prob.group,)
        q_h = prob.q[idx].astype(prob.compute, copy=False)
        k_h = prob.k[kv].astype(prob.compute, copy=False)
        v_h = prob.v[kv].astype(prob.compute, copy=False)
        qn, kn = _normalized(prob, q_h), _normalized(prob, k_h)
        s, factor, z = _head_logits(prob, idx, qn, kn, prob.blocked(idx))
        total, _ = _exp_rows(s, prob.check_finite)
        P = np.divide(s, total, out=np.zeros_like(s), where=total != 0)  # (L, S)
        if rng is not None:
            keep = _dropout_keep(rng, s.shape, prob.dropout_p) / (1.0 - prob.dropout_p)
            dv_all[kv] += (P * keep).T @ dout[idx]
            dP = (dout[idx] @ v_h.T) * keep
        else:
            dv_all[kv] += P.T @ dout[idx]
            dP = dout[idx] @ v_h.T  # (L, S)
        dS = P * (dP - np.sum(dP * P, axis=-1, keepdims=True))  # softmax VJP
        if dbias_all is not None:
            dbias_all[idx] = dS
        dz = dS * rule.cap_derivative(z) if rule.caps else dS
        dA = dz * factor  # A = q̂ k̂ᵀ
        dqn, dkn = dA @ kn, dA.T @ qn
        dq_all[idx] += rule.normalize_backward(q_h, dqn) if rule.normalizes else dqn
        dk_all[kv] += rule.normalize_backward(k_h, dkn) if rule.normalizes else dkn

    def reduce(grad, original):
        original = np.asarray(original)
        dtype = original.dtype
        return _sum_to(grad, original.shape).reshape(original.shape).astype(dtype, copy=False)

    return AttentionGrads(
        dq=reduce(dq_all, q),
        dk=reduce(dk_all, k),
        dv=reduce(dv_all, v),
        dbias=None if dbias_all is None else reduce(dbias_all, bias),
    )
