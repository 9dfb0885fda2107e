"""The backends of :func:`attnscale.torch.attention` (its module docstring says what each costs and how
exact it is), and the validated problem every one of them reads (:class:`_Problem`): ``"kernel"`` (the
fused C++ kernel of :mod:`attnscale.torch.ext`), ``"composed"`` (PyTorch's own fused kernel with [V, K]
as the values), ``"chunked"`` (plain tensor operations, rows in blocks) and ``"flex"``
(:mod:`attnscale.torch.flex`, with "auto"'s fall-back where FlexAttention fails); also the plain
SDPA call of an output without figures, and the row blocks the chunked paths share."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

_Q_BLOCK, _KV_BLOCK = 256, 512  # the kernel's tile: as PyTorch's fused CPU kernel for long sequences
_CHUNK_ELEMENTS = 1 << 22       # logits per block of the chunked paths (16 MiB in float32)


@dataclass(frozen=True)
class _Problem:
    """Validated inputs, flattened to one batch axis: what every backend reads."""

    q: Any                     # (B, H_q, L, d_k), compute dtype
    k: Any                     # (B, H_kv, S, d_k)
    v: Any                     # (B, H_kv, S, d_v)
    mask: Any                  # (B, H_q, L, S) bool view, or None
    bias: Any                  # (B, H_q, L, S) view in the compute dtype, or None
    alignment: str | None      # None, "top_left" or "bottom_right"
    scale: float
    softcap: float             # c of cap(z) = c·tanh(z/c); 0 = no cap
    lead: tuple                # the broadcast leading shape (...,)
    squeeze_heads: bool        # every input was rank 2 (L, d): drop the head axis
    out_dtype: Any

    @property
    def causal_offset(self) -> int:
        """Row i attends keys j ≤ i + offset."""
        L, S = self.q.shape[-2], self.k.shape[-2]
        return S - L if self.alignment == "bottom_right" else 0

    def shaped(self, x):
        """(B, H_q, L, ...) → (..., H_q, L, ...), as the inputs were given."""
        if len(self.lead) != 1:                     # (B, ...) stays itself: no view (and no autograd node)
            x = x.reshape(self.lead + tuple(x.shape[1:]))
        return x[0] if self.squeeze_heads else x


def _plain_sdpa(torch, p: _Problem):
    """PyTorch's own SDPA on the same problem: the output only."""
    F = torch.nn.functional
    allowed = _allowed(torch, p, 0, p.q.shape[-2]) if (p.mask is not None or p.alignment == "bottom_right") else None
    attn_mask = allowed
    if p.bias is not None:
        attn_mask = p.bias if allowed is None else p.bias.masked_fill(~allowed, -math.inf)
    is_causal = p.alignment == "top_left" and allowed is None
    return F.scaled_dot_product_attention(p.q, p.k, p.v, attn_mask=attn_mask, is_causal=is_causal, scale=p.scale,
                                          enable_gqa=p.k.shape[1] != p.q.shape[1])


def _run_kernel(torch, p: _Problem, logit_range: bool):
    from attnscale.torch.ext import load_kernel

    def blas_ready(x):
        """Rows of unit-stride numbers, one after another (a transposed (B, L, H, d) view is fine;
        a broadcast row, stride 0, is not a valid BLAS leading dimension)."""
        return x if x.stride(-1) == 1 and x.stride(-2) >= max(1, x.shape[-1]) else x.contiguous()

    out, lse, entropy, hi, lo = load_kernel()(
        blas_ready(p.q), blas_ready(p.k), blas_ready(p.v), p.mask, p.bias,
        p.alignment is not None, p.causal_offset, p.scale, p.softcap, logit_range, _Q_BLOCK, _KV_BLOCK)
    return out, lse, entropy, hi, lo


def _run_nothing_attended(torch, p: _Problem, logit_range: bool):
    """No queries (L = 0): empty results of the right shapes."""
    B, H, L = p.q.shape[:3]
    rows = torch.full((B, H, L), math.nan, dtype=p.q.dtype, device=p.q.device)
    # Zero, but from q, k and v, so that a backward gives them zero gradients (as SDPA does).
    out = (p.q.sum(-1, keepdim=True) + p.k.sum() + p.v.sum()).expand(B, H, L, p.v.shape[-1]) * 0
    return (out, torch.full_like(rows, -math.inf), rows,
            rows.clone() if logit_range else None, rows.clone() if logit_range else None)


def _allowed(torch, p: _Problem, i0: int, i1: int):
    """Bool (B, H_q, i1 − i0, S) for query rows i0..i1 (mask and causal combined), or None if all attend."""
    S = p.k.shape[-2]
    allowed = None if p.mask is None else p.mask[:, :, i0:i1]
    if p.alignment is not None:
        rows = torch.arange(i0, i1, device=p.q.device)[:, None] + p.causal_offset
        causal = torch.arange(S, device=p.q.device)[None, :] <= rows
        allowed = causal.expand(p.q.shape[0], p.q.shape[1], -1, -1) if allowed is None else allowed & causal
    return allowed


def _keys_per_query_head(p: _Problem):
    """k and v with their heads repeated to H_q (grouped-query attention)."""
    group = p.q.shape[1] // p.k.shape[1]
    if group == 1:
        return p.k, p.v
    return p.k.repeat_interleave(group, dim=1), p.v.repeat_interleave(group, dim=1)


def _run_composed(torch, p: _Problem, logit_range: bool):
    q = p.q
    k, v = _keys_per_query_head(p)
    L, d_k, d_v = q.shape[-2], q.shape[-1], v.shape[-1]
    values = torch.cat([v, k], dim=-1)                                         # (B, H_q, S, d_v + d_k)
    is_causal = p.alignment == "top_left" and p.mask is None
    allowed = None if (p.alignment is None or is_causal) and p.mask is None else _allowed(torch, p, 0, L)
    additive = None
    if allowed is not None:
        # Rows padded to a multiple of 16 numbers: PyTorch's CUDA kernel wants its bias aligned so.
        S = allowed.shape[-1]
        additive = torch.zeros(allowed.shape[:-1] + (-(-S // 16) * 16,), dtype=q.dtype, device=q.device)
        additive = additive[..., :S].masked_fill_(~allowed, -math.inf)
    if q.device.type == "cpu":
        width = d_v + d_k  # the fused CPU kernel wants one head size; zero columns add nothing to q·k
        F = torch.nn.functional
        both, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
            F.pad(q, (0, width - d_k)), F.pad(k, (0, width - d_k)), values, 0.0, is_causal,
            attn_mask=additive, scale=p.scale)
    else:
        both, lse, _, _ = torch.ops.aten._scaled_dot_product_efficient_attention(
            q, k, values, additive, True, 0.0, is_causal, scale=p.scale)
        lse = lse[..., :L]
    out, pk = both[..., :d_v], both[..., d_v:]                                  # P V and P K
    # A difference of two numbers of size |lse|: rounding can push a near-0 entropy below 0.
    entropy = (lse - p.scale * (q * pk).sum(-1)).clamp_min(0.0)
    # PyTorch's fused kernels give a row with nothing attended lse 0 (CPU) or a huge number: ask the mask.
    empty = None if allowed is None else ~allowed.any(-1)
    if empty is not None and bool(empty.any()):
        lse = lse.masked_fill(empty, -math.inf)
        entropy = entropy.masked_fill(empty, math.nan)
        out = out.masked_fill(empty[..., None], 0.0)
    hi = lo = None
    if logit_range:
        hi, lo = _logit_range(torch, p)
    return out, lse, entropy, hi, lo


def _row_chunks(p: _Problem):
    B, H, L = p.q.shape[:3]
    rows = max(1, _CHUNK_ELEMENTS // max(1, B * H * p.k.shape[-2]))
    return ((i0, min(L, i0 + rows)) for i0 in range(0, L, rows))


def _chunk_logits(torch, p: _Problem, k, i0: int, i1: int):
    """(logits with −inf where not attended, attended) for query rows i0..i1: (B, H_q, rows, S)."""
    s = p.scale * (p.q[:, :, i0:i1] @ k.transpose(-2, -1))
    if p.softcap:
        s = p.softcap * torch.tanh(s / p.softcap)
    if p.bias is not None:
        s = s + p.bias[:, :, i0:i1]
    allowed = _allowed(torch, p, i0, i1)
    # != −inf, not > −inf: a NaN logit stays attended, so its row comes out NaN, not "nothing attended".
    attended = s != -math.inf if allowed is None else allowed & (s != -math.inf)
    return s.masked_fill(~attended, -math.inf), attended


def _range_of(torch, s, attended):
    hi = s.amax(-1)
    lo = s.masked_fill(~attended, math.inf).amin(-1)
    none = ~attended.any(-1)
    return hi.masked_fill(none, math.nan), lo.masked_fill(none, math.nan)


def _logit_range(torch, p: _Problem):
    """The composed backend's extra pass: each row's largest and smallest attended logit."""
    k, _ = _keys_per_query_head(p)
    parts = [_range_of(torch, *_chunk_logits(torch, p, k, i0, i1)) for i0, i1 in _row_chunks(p)]
    return torch.cat([a for a, _ in parts], dim=-1), torch.cat([b for _, b in parts], dim=-1)


def _run_chunked(torch, p: _Problem, logit_range: bool):
    k, v = _keys_per_query_head(p)
    outs, lses, ents, his, los = [], [], [], [], []
    for i0, i1 in _row_chunks(p):
        s, attended = _chunk_logits(torch, p, k, i0, i1)
        top = s.amax(-1, keepdim=True)
        z = s - torch.where(torch.isfinite(top), top, torch.zeros_like(top))
        e = torch.exp(z)                                                       # 0 where not attended
        total = e.sum(-1)
        empty = total == 0
        safe = torch.where(empty, torch.ones_like(total), total)
        log_total = torch.log(safe)
        outs.append((e @ v) / safe[..., None])
        lses.append((top[..., 0] + log_total).masked_fill(empty, -math.inf))
        # −ln p = ln Σe − z: the entropy is a sum of non-negative terms, as in the kernel.
        ents.append((log_total - (e * z.masked_fill(~attended, 0.0)).sum(-1) / safe).masked_fill(empty, math.nan))
        if logit_range:
            hi, lo = _range_of(torch, s, attended)
            his.append(hi)
            los.append(lo)
    cat = lambda xs: torch.cat(xs, dim=-1)  # noqa: E731
    return (torch.cat(outs, dim=-2), cat(lses), cat(ents),
            cat(his) if logit_range else None, cat(los) if logit_range else None)


def _run_flex(torch, p: _Problem, logit_range: bool):
    from attnscale.torch.flex import run_flex

    return run_flex(torch, p, logit_range)


def _run_flex_or_fall_back(torch, p: _Problem, logit_range: bool):
    """"auto"'s flex: where FlexAttention fails on the problem, composed (chunked with a bias or a
    soft-cap), half precision raised to float32 as those backends compute. Returns (figures, backend)."""
    from attnscale.torch.flex import FlexFailure, run_flex

    try:
        return run_flex(torch, p, logit_range), "flex"
    except FlexFailure:
        up = lambda x: x.to(torch.float32) if x is not None and x.element_size() < 4 else x  # noqa: E731
        p = replace(p, q=up(p.q), k=up(p.k), v=up(p.v), bias=up(p.bias))
        fallback = "chunked" if p.bias is not None or p.softcap else "composed"
        return _BACKEND_FUNCTIONS[fallback](torch, p, logit_range), fallback


_BACKEND_FUNCTIONS = {"kernel": _run_kernel, "composed": _run_composed, "chunked": _run_chunked, "flex": _run_flex}
