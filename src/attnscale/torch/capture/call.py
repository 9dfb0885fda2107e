"""What a capture hands on: one attention call as SDPA's typed arguments (:class:`SDPAArguments`,
the same for every interception path), the call seen (:class:`SDPACall`, with its output), and a
replacing function's word that it left a call to the model (:class:`Fallback`)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

from attnscale.torch.sdpa_mask import attended, split_attn_mask

__all__ = ["SDPAArguments", "SDPACall", "Fallback"]


@dataclass(frozen=True)
class SDPAArguments:
    """One attention call as ``F.scaled_dot_product_attention``'s arguments, as the model passed them
    (tensors not detached), whichever path it came by: q (..., H_q, L, d_k), k (..., H_kv, S, d_k),
    v (..., H_kv, S, d_v); ``attn_mask`` None, bool (True = attend) or additive float, broadcastable
    to (..., H_q, L, S); ``scale`` None = 1/√d_k. Beyond SDPA's: ``softcap`` (Gemma 2's c of
    c·tanh(logit / c) before the mask, 0.0 = none; eager interface calls) and ``need_weights``
    (``nn.MultiheadAttention``'s caller wants the probabilities back)."""

    query: Any
    key: Any
    value: Any
    attn_mask: Any = None
    dropout_p: float = 0.0
    is_causal: bool = False
    scale: float | None = None
    enable_gqa: bool = False
    softcap: float = 0.0
    need_weights: bool = False

    @property
    def resolved_scale(self) -> float:
        """The factor that multiplies q·kᵀ: ``scale``, or 1/√d_k for None."""
        return 1.0 / math.sqrt(self.query.shape[-1]) if self.scale is None else float(self.scale)

    @classmethod
    def of(cls, args, kwargs) -> SDPAArguments:
        """An SDPA call's ``(args, kwargs)``, as it was called."""
        return cls(**dict(zip(_SDPA_PARAMS, args)), **(kwargs or {}))


_SDPA_PARAMS = ("query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale", "enable_gqa")


@dataclass(frozen=True)
class Fallback:
    """A replacing function's answer for a call it leaves to the model's own attention: why
    (``reason``), and whether the call's figures can still be computed from it (``figures``)."""

    reason: str
    figures: bool = True


@dataclass
class SDPACall:
    """One attention call, in PyTorch SDPA layout (:mod:`attnscale.torch.capture` says each field)."""

    index: int
    name: str
    q: Any  # (..., H_q, L, d_k) as passed (attnscale.torch.capture says which layouts)
    k: Any  # (..., H_k, S, d_k)
    v: Any  # (..., H_k, S, d_v)
    attn_mask: Any  # None | bool (True = attend) | additive float, broadcastable to (..., H_q, L, S)
    is_causal: bool
    scale: float  # resolved: multiplies q·kᵀ
    dropout_p: float
    enable_gqa: bool
    output: Any  # (..., H_q, L, d_v); None for source "module"
    source: str = "sdpa"  # "sdpa" | "interface" | "module"
    weights: Any = None  # the model's own probabilities (B, H_q, L, S), when it computed them
    softcap: float = 0.0  # c of c·tanh(scale·q·kᵀ / c) before the mask; 0.0 = none
    fallback: Fallback | None = None  # replace's word, when it left this call to the model

    @classmethod
    def of(cls, index: int, name: str, a: SDPAArguments, output, source: str, weights=None, fallback=None) -> SDPACall:
        """The call of arguments ``a`` (tensors detached here)."""
        detach = lambda x: None if x is None else x.detach()  # noqa: E731
        return cls(
            index=index,
            name=name,
            q=a.query.detach(),
            k=a.key.detach(),
            v=a.value.detach(),
            attn_mask=detach(a.attn_mask),
            is_causal=bool(a.is_causal),
            scale=a.resolved_scale,
            dropout_p=float(a.dropout_p),
            enable_gqa=bool(a.enable_gqa),
            output=detach(output),
            source=source,
            weights=detach(weights),
            softcap=float(a.softcap),
            fallback=fallback,
        )

    def keys_for_queries(self):
        """k as float64, with its heads repeated to match q's under grouped-query attention."""
        k = self.k.double()
        groups = self.q.shape[-3] // k.shape[-3]
        return k.repeat_interleave(groups, dim=-3) if groups > 1 else k

    def attended(self):
        """Bool (B, H_q, L, S): True where a query attends a key (mask and causal flag combined,
        read by :func:`attnscale.torch.sdpa_mask.attended`)."""
        return attended(self.attn_mask, self.is_causal, self.q, self.k)

    def logits(self):
        """float64 (B, H_q, L, S): the capped scale·q·kᵀ plus any additive mask; −inf where not attended."""
        x = self.scale * (self.q.double() @ self.keys_for_queries().transpose(-2, -1))
        if self.softcap:
            x = self.softcap * torch.tanh(x / self.softcap)
        _, bias = split_attn_mask(self.attn_mask)
        if bias is not None:
            x = x + bias.double()
        return x.masked_fill(~self.attended(), -math.inf)

    def probabilities(self):
        """float64 (B, H_q, L, S): softmax of :meth:`logits` per row; all 0 in a row with nothing attended."""
        x = self.logits()
        top = x.amax(dim=-1, keepdim=True)
        e = torch.exp(x - torch.where(torch.isfinite(top), top, torch.zeros_like(top)))
        total = e.sum(dim=-1, keepdim=True)
        return torch.where(total > 0, e / torch.where(total > 0, total, torch.ones_like(total)), torch.zeros_like(e))
