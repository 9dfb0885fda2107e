"""The validated problem every backend of :func:`attnscale.torch.attention` reads (:class:`Problem`),
what they share of it (which keys a row attends, key/value heads repeated for grouped-query
attention, the chunked logits and their range), and the two calls the chooser makes without a
backend: PyTorch's SDPA for an output without figures, and the empty results of a call with no
queries."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

__all__ = [
    "Problem",
    "CHUNK_ELEMENTS",
    "allowed_keys",
    "keys_per_query_head",
    "row_chunks",
    "chunk_logits",
    "range_of",
    "chunked_logit_range",
    "plain_sdpa",
    "nothing_attended",
    "dropped",
]

CHUNK_ELEMENTS = 1 << 22  # logits per block of the chunked paths (16 MiB in float32)


@dataclass(frozen=True)
class Problem:
    """Validated inputs, flattened to one batch axis: what every backend reads."""

    q: Any  # (B, H_q, L, d_k), compute dtype
    k: Any  # (B, H_kv, S, d_k)
    v: Any  # (B, H_kv, S, d_v)
    mask: Any  # (B, H_q, L, S) bool view, or None
    bias: Any  # (B, H_q, L, S) view in the compute dtype, or None
    alignment: str | None  # None, "top_left" or "bottom_right"
    scale: float
    softcap: float  # c of cap(z) = c·tanh(z/c); 0 = no cap
    lead: tuple  # the broadcast leading shape (...,)
    squeeze_heads: bool  # every input was rank 2 (L, d): drop the head axis
    out_dtype: Any
    dropout_p: float = 0.0  # each weight kept with probability 1 - p, scaled by 1/(1 - p) (SDPA's)
    generator: Any = None  # the torch.Generator the dropout draws from; None: PyTorch's default one

    @property
    def causal_offset(self) -> int:
        """Row i attends keys j ≤ i + offset."""
        L, S = self.q.shape[-2], self.k.shape[-2]
        return S - L if self.alignment == "bottom_right" else 0

    def shaped(self, x):
        """(B, H_q, L, ...) → (..., H_q, L, ...), as the inputs were given."""
        if len(self.lead) != 1:  # (B, ...) stays itself: no view (and no autograd node)
            x = x.reshape(self.lead + tuple(x.shape[1:]))
        return x[0] if self.squeeze_heads else x


def allowed_keys(p: Problem, i0: int, i1: int):
    """Bool (B, H_q, i1 − i0, S) for query rows i0..i1 (mask and causal combined), or None if all attend."""
    S = p.k.shape[-2]
    allowed = None if p.mask is None else p.mask[:, :, i0:i1]
    if p.alignment is not None:
        rows = torch.arange(i0, i1, device=p.q.device)[:, None] + p.causal_offset
        causal = torch.arange(S, device=p.q.device)[None, :] <= rows
        allowed = causal.expand(p.q.shape[0], p.q.shape[1], -1, -1) if allowed is None else allowed & causal
    return allowed


def keys_per_query_head(p: Problem):
    """k and v with their heads repeated to H_q (grouped-query attention)."""
    group = p.q.shape[1] // p.k.shape[1]
    if group == 1:
        return p.k, p.v
    return p.k.repeat_interleave(group, dim=1), p.v.repeat_interleave(group, dim=1)


def row_chunks(p: Problem):
    B, H, L = p.q.shape[:3]
    rows = max(1, CHUNK_ELEMENTS // max(1, B * H * p.k.shape[-2]))
    return ((i0, min(L, i0 + rows)) for i0 in range(0, L, rows))


def chunk_logits(p: Problem, k, i0: int, i1: int):
    """(logits with −inf where not attended, attended) for query rows i0..i1: (B, H_q, rows, S)."""
    s = p.scale * (p.q[:, :, i0:i1] @ k.transpose(-2, -1))
    if p.softcap:
        s = p.softcap * torch.tanh(s / p.softcap)
    if p.bias is not None:
        s = s + p.bias[:, :, i0:i1]
    allowed = allowed_keys(p, i0, i1)
    # != −inf, not > −inf: a NaN logit stays attended, so its row comes out NaN, not "nothing attended".
    attended = s != -math.inf if allowed is None else allowed & (s != -math.inf)
    return s.masked_fill(~attended, -math.inf), attended


def range_of(s, attended):
    hi = s.amax(-1)
    lo = s.masked_fill(~attended, math.inf).amin(-1)
    none = ~attended.any(-1)
    return hi.masked_fill(none, math.nan), lo.masked_fill(none, math.nan)


def chunked_logit_range(p: Problem):
    """The composed backend's extra pass: each row's largest and smallest attended logit."""
    k, _ = keys_per_query_head(p)
    parts = [range_of(*chunk_logits(p, k, i0, i1)) for i0, i1 in row_chunks(p)]
    return torch.cat([a for a, _ in parts], dim=-1), torch.cat([b for _, b in parts], dim=-1)


def plain_sdpa(p: Problem):
    """PyTorch's own SDPA on the same problem: the output only."""
    F = torch.nn.functional
    allowed = allowed_keys(p, 0, p.q.shape[-2]) if (p.mask is not None or p.alignment == "bottom_right") else None
    attn_mask = allowed
    if p.bias is not None:
        attn_mask = p.bias if allowed is None else p.bias.masked_fill(~allowed, -math.inf)
    is_causal = p.alignment == "top_left" and allowed is None
    q, k = (x if x.dtype == p.v.dtype else x.to(p.v.dtype) for x in (p.q, p.k))  # a rule's float32 q̂, k̂
    return F.scaled_dot_product_attention(
        q,
        k,
        p.v,
        attn_mask=attn_mask,
        dropout_p=p.dropout_p,
        is_causal=is_causal,
        scale=p.scale,
        enable_gqa=p.k.shape[1] != p.q.shape[1],
    )


def dropped(w, p: Problem):
    """Weights ``w`` (B, H_q, rows, S; normalised or not) under ``p``'s dropout, as SDPA's: each kept
    with probability 1 − p (a uniform draw from ``p.generator`` at least p) and scaled by 1/(1 − p);
    all dropped at p = 1. ``w`` itself when p = 0."""
    if not p.dropout_p:
        return w
    draw = torch.rand(w.shape, generator=p.generator, dtype=w.dtype, device=w.device)
    if p.dropout_p >= 1.0:
        return w * 0.0
    return w.masked_fill(draw < p.dropout_p, 0.0) * (1.0 / (1.0 - p.dropout_p))


def nothing_attended(p: Problem, logit_range: bool):
    """No queries (L = 0): empty results of the right shapes."""
    B, H, L = p.q.shape[:3]
    rows = torch.full((B, H, L), math.nan, dtype=p.q.dtype, device=p.q.device)
    # Zero, but from q, k and v, so that a backward gives them zero gradients (as SDPA does).
    out = (p.q.sum(-1, keepdim=True) + p.k.sum() + p.v.sum()).expand(B, H, L, p.v.shape[-1]) * 0
    return (
        out,
        torch.full_like(rows, -math.inf),
        rows,
        rows.clone() if logit_range else None,
        rows.clone() if logit_range else None,
        None,
    )
