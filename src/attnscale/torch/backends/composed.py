"""The ``"composed"`` backend: PyTorch's own fused kernel, called once with [V, K] as the values, so
that its output's last d_k columns are P·K and the entropy lse − scale·q·(PK) comes with the output
(CPU's flash kernel, CUDA's memory-efficient one); the logit range from the chunked logits."""

from __future__ import annotations

import math

import torch

from attnscale.torch.backends.problem import Problem, allowed_keys, keys_per_query_head, chunked_logit_range

__all__ = ["run_composed"]


def run_composed(p: Problem, logit_range: bool, first_key: bool = False):
    q = p.q
    k, v = keys_per_query_head(p)
    L, d_k, d_v = q.shape[-2], q.shape[-1], v.shape[-1]
    values = torch.cat([v, k], dim=-1)  # (B, H_q, S, d_v + d_k)
    is_causal = p.alignment == "top_left" and p.mask is None
    allowed = None if (p.alignment is None or is_causal) and p.mask is None else allowed_keys(p, 0, L)
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
            F.pad(q, (0, width - d_k)),
            F.pad(k, (0, width - d_k)),
            values,
            0.0,
            is_causal,
            attn_mask=additive,
            scale=p.scale,
        )
    else:
        both, lse, _, _ = torch.ops.aten._scaled_dot_product_efficient_attention(
            q, k, values, additive, True, 0.0, is_causal, scale=p.scale
        )
        lse = lse[..., :L]
    out, pk = both[..., :d_v], both[..., d_v:]  # P V and P K
    # A difference of two numbers of size |lse|: rounding can push a near-0 entropy below 0.
    entropy = (lse - p.scale * (q * pk).sum(-1)).clamp_min(0.0)
    # A NaN logit (in q or an attended k) makes the entropy NaN, but PyTorch's CPU kernel turns a
    # short row of them (8 keys or fewer) into a finite output with lse 0: the row is NaN, as on
    # every backend.
    nan = entropy.isnan()
    if bool(nan.any()):
        lse = lse.masked_fill(nan, math.nan)
        out = out.masked_fill(nan[..., None], math.nan)
    # PyTorch's fused kernels give a row with nothing attended lse 0 (CPU) or a huge number: ask the mask.
    empty = None if allowed is None else ~allowed.any(-1)
    if empty is not None and bool(empty.any()):
        lse = lse.masked_fill(empty, -math.inf)
        entropy = entropy.masked_fill(empty, math.nan)
        out = out.masked_fill(empty[..., None], 0.0)
    hi = lo = None
    if logit_range:
        hi, lo = chunked_logit_range(p)
    return out, lse, entropy, hi, lo, None
