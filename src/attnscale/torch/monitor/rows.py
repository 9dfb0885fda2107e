"""``rows=K``: the query rows a monitor reads of a call — K per sequence, the same for every head,
drawn without replacement from a seed of the step and the call — and the figures, tensors and
problem of those rows alone."""

from __future__ import annotations

from dataclasses import replace

import torch

__all__ = ["ROW_SEED", "sampled_rows", "take_rows", "sampled_problem"]

# The seed of rows=K's choice of query rows, with the step's ordinal and the call's number in it.
ROW_SEED = 20_240_917


def sampled_rows(q, rows: int | None, step: int, call: int):
    """``rows`` sampled query rows of a call on q (..., [H,] L, d): int64 (..., K), the same for every
    head (lead: q's dimensions before the head axis; (N,) for 3-D q, () for 2-D), sorted, on q's
    device; None when every row is read (``rows`` None or ≥ L). Seeded by :data:`ROW_SEED`, the
    ``step``'s ordinal and the ``call``'s number within it: the same rows run to run, in either mode."""
    if rows is None or rows >= q.shape[-2]:
        return None
    L = q.shape[-2]
    lead = q.shape[:-3] if q.dim() > 3 else q.shape[:-2]
    g = torch.Generator().manual_seed(ROW_SEED + 1_000_003 * step + call)
    keys = torch.rand((*lead, L), generator=g)
    return keys.topk(rows, dim=-1).indices.sort(dim=-1).values.to(q.device)


def take_rows(x, picked, along: int = -1):
    """The rows ``picked`` (..., K) of ``x``: an :class:`AttentionStats` (figures (..., [H,] L),
    ``along=-1``) or a tensor (..., [H,] L, d) (``along=-2``), the same rows in every head."""
    if not hasattr(x, "dim"):  # a head table is of every row: the rows taken are summed anew
        return replace(
            x,
            head_table=None,
            counted_entropy=None,
            **{
                f: take_rows(getattr(x, f), picked)
                for f in ("lse", "entropy", "max_logit", "min_logit", "first_key_weight")
            },
        )
    heads = x.dim() - picked.dim() - (0 if along == -1 else 1)  # a head axis (1) or none (0)
    index = picked.reshape(picked.shape[:-1] + (1,) * heads + picked.shape[-1:] + (1,) * (-1 - along))
    return x.gather(
        along, index.expand(x.shape[: along % x.dim()] + (picked.shape[-1],) + x.shape[along % x.dim() + 1 :])
    )


def sampled_problem(q, k, mask, bias, is_causal: bool, picked):
    """q's sampled rows (..., [H,] K, d), with the mask and bias rows they read; a top-left causal
    limit (row i attends keys j ≤ i) becomes part of the mask, since the rows are no longer 0..L−1."""
    S, L = k.shape[-2], q.shape[-2]
    rows = q.shape[:-1] + (S,)  # (..., [H,] L, S)

    def take(m):
        return None if m is None else take_rows(m.expand(rows) if m.dim() <= len(rows) else m, picked, along=-2)

    mask, bias = take(mask), take(bias)
    if is_causal:
        limit = (
            torch.arange(S, device=q.device)
            <= take_rows(torch.arange(L, device=q.device).expand(q.shape[:-1]), picked)[..., None]
        )
        mask = limit if mask is None else mask & limit
    return take_rows(q, picked, along=-2), mask, bias
