"""The problem every backend of :func:`attnscale.torch.attention` reads, made from its arguments:
q, k, v flattened to one batch axis in the dtype computed in, the mask and the bias broadcast to the
rows (views), the scale's rule folded in (QK-norm's q̂, k̂; log-n's per-row factor; the soft-cap), the
non-finite values of keys no row attends zeroed, and the finiteness checks ``check_finite`` asks for."""

from __future__ import annotations

import functools
import math
from dataclasses import replace

import torch

from attnscale.errors import InputError, InputTypeError
from attnscale.scales import QKNorm
from attnscale.torch import ext
from attnscale.torch.arguments import check_tensor, signature_of
from attnscale.torch.backends.problem import Problem, allowed_keys, row_chunks

__all__ = ["prepare", "qk_normalized", "isolate_unattended_keys", "refuse_non_finite"]


def prepare(q, k, v, scale, mask, bias, causal, check_finite, backend, stats) -> tuple[Problem, str | None]:
    """The validated problem and the backend that computes it (None: plain SDPA, for an output
    without figures on backend "auto")."""
    for name, x in (("q", q), ("k", k), ("v", v)):
        check_tensor(name, x)
    sig = signature_of(q, k, v, scale, causal, bias is not None, backend, stats)
    lead, batch, target, compute = sig.shapes.lead, sig.batch, sig.target, sig.compute

    def flat(x):
        if x.dim() == 2:  # (N, d): one head
            x = x[None]
        if x.dim() != 4 or x.shape[0] != batch:  # a (B, H, N, d) input is already flat: no view nodes
            x = x.expand(lead + tuple(x.shape[-3:])).reshape((batch,) + tuple(x.shape[-3:]))
        return x if x.dtype == compute else x.to(compute)  # a no-op .to costs a call too: per call, measured

    mask4 = None
    if mask is not None:
        if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool:
            got = mask.dtype if isinstance(mask, torch.Tensor) else type(mask).__name__
            raise InputTypeError(f"mask: expected a bool torch.Tensor (True = attend), got {got}")
        mask4 = _broadcast_rows("mask", mask if mask.device == q.device else mask.to(q.device), target, batch)
    bias4 = None
    if bias is not None:
        if not isinstance(bias, torch.Tensor) or not bias.is_floating_point():
            got = bias.dtype if isinstance(bias, torch.Tensor) else type(bias).__name__
            raise InputTypeError(f"bias: expected a floating-point torch.Tensor, got {got}")
        if check_finite and bias.numel() and not bool(bias.max() < math.inf):  # max is NaN if any is
            raise InputError("bias: contains NaN or +Inf; expected finite values or -inf (masked)")
        bias4 = _broadcast_rows("bias", bias.to(device=q.device, dtype=_bias_dtype(compute, bias)), target, batch)
    p = Problem(
        q=flat(q),
        k=flat(k),
        v=flat(v),
        mask=mask4,
        bias=bias4,
        alignment=sig.alignment,
        scale=1.0 if sig.factor is None else sig.factor,
        softcap=0.0,
        lead=lead,
        squeeze_heads=sig.squeeze,
        out_dtype=q.dtype,
    )
    p = isolate_unattended_keys(p)
    return (p if sig.factor is not None else _apply_rule(p, sig.rule)), sig.chosen


def _apply_rule(p: Problem, rule) -> Problem:
    """The rule folded into what every backend takes: q̂, k̂ (QK-norm, in torch, so differentiable),
    a per-row factor multiplied into q̂ when it depends on the attended count (log-n; then scale 1),
    else one constant ``scale``; and the soft-cap value."""
    softcap = 0.0
    if rule.caps:
        if getattr(rule, "base", None) is None or rule.base.caps or not hasattr(rule, "cap_value"):
            raise InputError(
                f"scale: rule {rule.describe()['formula']!r} caps more than once; "
                "attnscale.torch.attention takes one soft-cap (use attnscale.attention, NumPy)"
            )
        softcap = float(rule.cap_value)
    q, k = p.q, p.k
    if q.shape[-1] == 0:  # no dimensions: every logit is 0 (capped 0), whatever the rule
        return replace(p, scale=1.0, softcap=softcap)
    if q.element_size() < 4:  # half precision (flex, SDPA): q̂, k̂ made in float32, rounded once for the call
        q, k = q.float(), k.float()
    if rule.normalizes:
        q, k = _normalized(rule, q), _normalized(rule, k)
    d_k = q.shape[-1]
    if rule.uses_n:
        n = _attended_counts(p).cpu().numpy()[..., None]  # (B, H_q, L, 1)
        factor = torch.as_tensor(rule.factor(d_k, n), dtype=q.dtype, device=q.device)
        return replace(p, q=q * factor, k=k, scale=1.0, softcap=softcap)
    return replace(p, q=q, k=k, scale=float(rule.factor(d_k)), softcap=softcap)


def _normalized(rule, x):
    """QK-norm's normalisation of x: (..., d_k) (:func:`qk_normalized`), the rule found through any caps."""
    while not hasattr(rule, "norm"):
        rule = rule.base
    return qk_normalized(rule, x)


def qk_normalized(rule: QKNorm, x):
    """QK-norm's x / rms(x) (``norm="rms"``) or x / ‖x‖, with its eps, of x: (..., d_k), as
    x · rsqrt(Σ or mean of x² + eps): the one torch form of the rule's normalisation, for the models
    that train with it (:mod:`attnscale.torch.scales`) and for :func:`attention`'s ``scale=QKNorm(...)``."""
    sq = x.pow(2).mean(-1, keepdim=True) if rule.norm == "rms" else x.pow(2).sum(-1, keepdim=True)
    return x * (sq + rule.eps).rsqrt()


def _attended_counts(p: Problem):
    """(B, H_q, L): keys each row attends (mask, causal limit and −inf bias), as log-n scaling counts them."""
    B, H, L = p.q.shape[:3]
    S = p.k.shape[-2]
    parts = []
    for i0, i1 in row_chunks(p):
        allowed = allowed_keys(p, i0, i1)
        if p.bias is not None:
            finite = p.bias[:, :, i0:i1] != -math.inf
            allowed = finite if allowed is None else allowed & finite
        parts.append(torch.full((B, H, i1 - i0), S, device=p.q.device) if allowed is None else allowed.sum(-1))
    return torch.cat(parts, dim=-1) if parts else torch.zeros((B, H, 0), device=p.q.device)


def _bias_dtype(compute, bias):
    """The dtype a bias is computed in: the problem's, except that a float32 (or float64) bias beside
    half-precision inputs stays float32, as PyTorch's SDPA keeps it (a causal ALiBi bias of slope 0.3
    over 1,024 keys rounded to bfloat16 moves logits by up to 1: issue 51)."""
    return compute if compute.itemsize >= 4 or bias.dtype.itemsize < 4 else torch.float32


def isolate_unattended_keys(p: Problem) -> Problem:
    """``p`` with the non-finite values (NaN, ±inf) of the keys that no query row of their KV head
    attends (a padding mask's, or those past the causal reach) zeroed in k and v: they then reach
    neither the output nor a gradient (0 × NaN in a backward's products would). Finite values are
    kept as they are, so that a head table's Σ ‖k‖ still reads the keys given: 0 × a finite value is
    0, and such keys get zero gradients either way, as SDPA gives masked keys. Finite k and v (the
    usual case) cost one finiteness scan and no copy; a copy only when there are such values."""
    L, S = p.q.shape[-2], p.k.shape[-2]
    if S == 0 or L == 0 or (p.mask is None and not (p.alignment == "top_left" and S > L)):
        return p
    if _all_finite(p.k) and _all_finite(p.v):
        return p
    if p.mask is None:  # top_left with S > L: keys j > L - 1 lie past every row's reach
        unused = (torch.arange(S, device=p.q.device) > L - 1)[None, None, :]
    else:
        B, H_q = p.q.shape[:2]
        H_kv = p.k.shape[1]
        if p.alignment is None and p.mask.stride(2) == 0:  # one row for all (a padding mask): read it once
            used = p.mask[:, :, 0]
        else:  # a block of rows at a time: no (B, H_q, L, S) temporary
            parts = (allowed_keys(p, i0, i1).any(-2) for i0, i1 in row_chunks(p))
            used = functools.reduce(torch.logical_or, parts)
        used = used.reshape(B, H_kv, H_q // H_kv, S).any(-2)
        unused = ~used
        if not bool(unused.any()):
            return p
    fill = unused[..., None]
    return replace(
        p, k=p.k.masked_fill(fill & ~torch.isfinite(p.k), 0.0), v=p.v.masked_fill(fill & ~torch.isfinite(p.v), 0.0)
    )


def _all_finite(x, kernel: bool | None = None) -> bool:
    """Whether ``x`` holds no NaN or ±Inf: with the kernel built (``kernel`` None: whether it is
    loaded), its own vectorised scan (float32/float64 CPU); else two reductions (min and max
    propagate NaN). No full-size temporary either way (isfinite().all() made one: 0.3 ms a MiniLM call)."""
    if x.numel() == 0:
        return True
    if kernel is None:
        kernel = ext.load_kernel() is not None
    if kernel and x.device.type == "cpu" and x.dtype in (torch.float32, torch.float64):
        four = x[(None,) * (4 - x.dim())] if x.dim() <= 4 else x.flatten(0, -4)
        return bool(torch.ops.attnscale_health.all_finite(four))
    lo, hi = torch.aminmax(x)
    return bool(torch.isfinite(lo) & torch.isfinite(hi))


def refuse_non_finite(given: dict, kernel: bool) -> None:
    """Refuse NaN or ±Inf in q, k, v as given, naming the first (:func:`_all_finite`)."""
    for name, x in given.items():
        if not _all_finite(x, kernel):
            raise InputError(
                f"{name}: contains NaN or Inf; expected finite values (check_finite=True asked for this check)"
            )


def _broadcast_rows(name: str, x, target: tuple, batch: int):
    """``x`` broadcast to ``target`` (..., H_q, L, S), flattened to (batch, H_q, L, S) (a view)."""
    try:
        x = x.expand(target)
    except RuntimeError:
        raise InputError(f"{name}: shape {tuple(x.shape)} cannot broadcast to (..., H_q, L, S) = {target}") from None
    return x if len(target) == 4 else x.reshape((batch,) + target[-3:])  # (B, H, L, S) is flat already
