"""The per-row figures of :func:`attnscale.torch.attention`, shaped as the rows: from a backend's
tuple to the :class:`~attnscale.AuxOutput` a request gets, or to the monitor's
:class:`AttentionStats` (every figure, and the head table the kernel sums); and each row's weight on
key 0 for the backends that do not make it themselves."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

from attnscale.attention_aux import AuxOutput, AuxRequest
from attnscale.torch.backends.problem import Problem

__all__ = ["AttentionStats", "stats_of", "aux_output", "first_key_weight"]


@dataclass(frozen=True)
class AttentionStats(AuxOutput):
    """The monitor's figures (``attention_figures`` of :mod:`attnscale.torch.functional`): an
    :class:`~attnscale.AuxOutput` with lse and entropy always, the logit range with
    ``logit_range=True``, ``first_key_weight`` with ``first_key=True`` (``logits`` and ``weights``
    None), float32 (float64 for float64 inputs), detached, shaped like the rows: (..., H_q, L).

    With head_table=True on the kernel (else None): the monitor's per-head table of these figures,
    float64 (len(head_table.ROWS), H_q) over the rows ``counted``, and each row's entropy as it
    counts there, (..., H_q, L), NaN for a row in no entropy figure or not counted."""

    head_table: Any = None
    counted_entropy: Any = None


def stats_of(p: Problem, figures: tuple, backend: str, logit_range: bool, first_key: bool) -> AttentionStats:
    """The :class:`AttentionStats` of a backend's figures (``choice.run_backend``), shaped as the rows."""
    _, lse, entropy, hi, lo, first, *table = figures

    def figure(x):  # detached: the kernel's figures are already (non-differentiable outputs)
        return None if x is None else p.shaped(x if not x.requires_grad else x.detach())

    return AttentionStats(
        lse=figure(lse),
        entropy=figure(entropy),
        max_logit=figure(hi) if logit_range else None,
        min_logit=figure(lo) if logit_range else None,
        backend=backend,
        first_key_weight=figure(first_key_weight(p, lse) if first is None else first) if first_key else None,
        head_table=table[0] if table else None,
        counted_entropy=figure(table[1]) if table else None,
    )


def aux_output(stats: AttentionStats, request: AuxRequest) -> AuxOutput:
    """What ``request`` asked for of ``stats``, the rest None."""
    return AuxOutput(
        lse=stats.lse if request.lse else None,
        entropy=stats.entropy if request.entropy else None,
        max_logit=stats.max_logit if request.logit_range else None,
        min_logit=stats.min_logit if request.logit_range else None,
        first_key_weight=stats.first_key_weight if request.first_key_weight else None,
        backend=stats.backend,
    )


def first_key_weight(p: Problem, lse):
    """(B, H_q, L): each row's weight on key 0, p_i0 = exp(s_i0 − lse_i), in lse's dtype, with s_i0
    the row's logit on key 0 as every backend forms it (q̂ and k̂, the scale or log-n's per-row factor
    already in q̂, the soft-cap, then the bias): one product of q̂ with k̂_0 per head, O(L·d_k), so no
    backend needs a figure of its own. 0 where key 0 is not attended (mask, causal limit, bias −inf);
    NaN for a row with nothing attended (lse −inf − (−inf)), as its entropy. Detached."""
    B, H, L = p.q.shape[:3]
    if p.k.shape[-2] == 0:  # no key 0: every row attends nothing
        return torch.full((B, H, L), math.nan, dtype=lse.dtype, device=lse.device)
    with torch.no_grad():
        # q̂ · k̂_0 as a product and a sum over d_k, each query head against its KV head by
        # broadcasting (no repeated keys, no batched matmul: a few small ops, as the monitor calls it
        # on every attention call).
        H_kv, d = p.k.shape[1], p.q.shape[-1]
        q = p.q if p.q.dtype == lse.dtype else p.q.to(lse.dtype)
        k0 = p.k[:, :, 0].to(lse.dtype) * p.scale  # (B, H_kv, d_k), small
        s = (q.reshape(B, H_kv, H // H_kv, L, d) * k0[:, :, None, None]).sum(-1).reshape(B, H, L)
        if p.softcap:
            s = p.softcap * torch.tanh(s / p.softcap)
        if p.bias is not None:
            s = s + p.bias[:, :, :, 0]
        attended = None if p.mask is None else p.mask[:, :, :, 0]
        if p.alignment is not None and p.causal_offset < 0:  # row i attends key 0 when 0 ≤ i + offset
            reach = torch.arange(L, device=s.device) + p.causal_offset >= 0
            attended = reach if attended is None else attended & reach
        if attended is not None:
            s = s.masked_fill(~attended, -math.inf)
        return (s - lse).exp_()
