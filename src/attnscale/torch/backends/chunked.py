"""The ``"chunked"`` backend: plain tensor operations on blocks of query rows (O(rows·S) memory), any
rule and bias, exact to rounding (the entropy a sum of non-negative terms); the one backend with
dropout (:func:`.problem.dropped` on each block's weights; the figures are the softmax's before it)."""

from __future__ import annotations

import math

import torch

from attnscale.torch.backends.problem import Problem, chunk_logits, dropped, keys_per_query_head, range_of, row_chunks

__all__ = ["run_chunked"]


def run_chunked(p: Problem, logit_range: bool, first_key: bool = False):
    k, v = keys_per_query_head(p)
    outs, lses, ents, his, los = [], [], [], [], []
    for i0, i1 in row_chunks(p):
        s, attended = chunk_logits(p, k, i0, i1)
        top = s.amax(-1, keepdim=True)
        z = s - torch.where(torch.isfinite(top), top, torch.zeros_like(top))
        e = torch.exp(z)  # 0 where not attended
        total = e.sum(-1)
        empty = total == 0
        safe = torch.where(empty, torch.ones_like(total), total)
        log_total = torch.log(safe)
        outs.append((dropped(e, p) @ v) / safe[..., None])
        lses.append((top[..., 0] + log_total).masked_fill(empty, -math.inf))
        # −ln p = ln Σe − z: the entropy is a sum of non-negative terms, as in the kernel.
        ents.append((log_total - (e * z.masked_fill(~attended, 0.0)).sum(-1) / safe).masked_fill(empty, math.nan))
        if logit_range:
            hi, lo = range_of(s, attended)
            his.append(hi)
            los.append(lo)
    cat = lambda xs: torch.cat(xs, dim=-1)  # noqa: E731
    return (
        torch.cat(outs, dim=-2),
        cat(lses),
        cat(ents),
        cat(his) if logit_range else None,
        cat(los) if logit_range else None,
        None,
    )
