"""What SDPA's ``attn_mask`` means, said once: which keys a query attends, and what bias it adds.

``torch.nn.functional.scaled_dot_product_attention`` takes ``attn_mask`` as None, a bool tensor
(True = attend) or a float tensor added to the logits. Models use the float form for two things at
once: masking (a huge negative entry: Hugging Face writes the dtype's most negative number, old
BERT −10000, others −inf) and a real additive bias (ALiBi, relative positions). This module is the
one place that tells them apart; :mod:`attnscale.torch.capture`, :mod:`attnscale.torch.monitor`
and the probes read masks through it.

    split_attn_mask(attn_mask) -> (mask, bias)     # bool (True = attend) or None; float bias or None
    attended(attn_mask, is_causal, q, k)           # bool (..., H_q, L, S), mask and causal flag combined

An additive entry at or below :data:`MASKED_BELOW` masks its key: exp(−10⁴) is 0 even in float64,
so such an entry carries no weight whether it is kept as a bias or dropped as a mask.

    >>> import torch
    >>> m = torch.tensor([[0.0, -1e9, 0.5]])
    >>> mask, bias = split_attn_mask(m)
    >>> mask.tolist(), bias.tolist()
    ([[True, False, True]], [[0.0, 0.0, 0.5]])
    >>> split_attn_mask(torch.tensor([[0.0, float("-inf")]]))[1] is None   # a pure mask has no bias
    True
"""

from __future__ import annotations

import torch

__all__ = ["MASKED_BELOW", "split_attn_mask", "attended"]

MASKED_BELOW = -1.0e4


def split_attn_mask(attn_mask):
    """SDPA's ``attn_mask`` as ``(mask, bias)``.

    attn_mask: None, bool (True = attend) or float, broadcastable to (..., H_q, L, S).
    Returns mask: bool of attn_mask's shape (True = attend) or None when everything is attended by
    it; bias: the additive part on the attended entries (0 elsewhere), in attn_mask's dtype, or
    None when it is all zero. Differentiable in the bias (a learned mask keeps its gradient).
    """
    if attn_mask is None or attn_mask.dtype == torch.bool:
        return attn_mask, None
    mask = attn_mask > MASKED_BELOW
    bias = attn_mask.masked_fill(~mask, 0.0)
    return mask, (bias if bool(bias.ne(0).any()) else None)


def attended(attn_mask, is_causal: bool, q, k):
    """Bool (..., H_q, L, S): True where a query of ``q`` (..., H_q, L, d_k) attends a key of ``k``
    (..., H_kv, S, d_k), with ``attn_mask`` read as :func:`split_attn_mask` does and ``is_causal``
    as SDPA's (top-left aligned: row i attends keys j ≤ i)."""
    L, S = q.shape[-2], k.shape[-2]
    out = torch.ones((*q.shape[:-2], L, S), dtype=torch.bool, device=q.device)
    mask, _ = split_attn_mask(attn_mask)
    if mask is not None:
        out = out & mask
    if is_causal:
        out = out & torch.ones(L, S, dtype=torch.bool, device=q.device).tril()
    return out
