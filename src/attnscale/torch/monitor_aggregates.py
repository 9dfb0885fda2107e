"""The monitor's running aggregates: per (layer, head) counts, sums (entropy, weight on the first
key, ‖q‖, ‖k‖) and extremes as NumPy arrays of H numbers, whatever the number of calls; and one
call's figures folded into them. Means are kept as sums and counts, so that ranks and calls add up.

A fully masked row counts in ``rows_empty`` and in no figure; a row whose logits overflowed to +inf
or are NaN counts in ``rows_broken`` and in no entropy figure (an overflowed +inf does show as the
head's max logit); a row that attends a single key (a causal model's first query) counts in
``rows_single`` and in no entropy or saturation figure — its weight is 1 and its entropy 0 whatever
the logits, so it says nothing of the attention's health — but in the logit figures (its logit is
computed, can grow and overflow as any other). A row is saturated when its largest weight,
exp(max logit − lse), free from the kernel's figures, exceeds :data:`~attnscale.softmax_rows.SATURATED_WEIGHT`.
A row attends a single key when its largest and smallest attended logits are equal and its
largest weight is above 1/2: equal logits over n keys weigh 1/n each, so only n = 1 passes.
The weight on the first key and ‖q‖ are summed over the rows the entropy is (single-key rows out:
all their weight is on their one key, a causal model's key 0, whatever the model learnt); ‖k‖ over
every key row of the calls.
"""

from __future__ import annotations

import math

import numpy as np

from attnscale.errors import require
from attnscale.softmax_rows import SATURATED_WEIGHT
from attnscale.torch.functional import FLOAT16_MAX

__all__ = ["Running", "call_figures", "numpy_call_figures", "rows_by_head"]

_LOG_SATURATED = math.log(SATURATED_WEIGHT)  # a row is saturated when its largest weight exceeds it
_LOG_HALF = math.log(0.5)  # equal logits above it: one key (see the module docstring)


class Running:
    """Running aggregates of one layer's H heads, NumPy arrays of H numbers: counts of rows with no
    entropy (empty or broken), empty, saturated and single-key rows, float16 overflows; the largest
    logit; the smallest entropy and logit; Σ entropy, Σ weight on key 0, Σ ‖q‖ (over the rows with
    an entropy), Σ ‖k‖ (over the keys). Plus the rows and the keys seen per head (ints)."""

    def __init__(self, heads: int):
        self.calls = self.total = 0
        self.population = 0  # rows of the calls, sampled or not (rows=K)
        self.counts = np.zeros((4, heads), np.int64)  # no entropy, empty, saturated, single key
        self.overflow = np.zeros(heads, np.int64)
        self.max_logit = np.full(heads, -np.inf)
        self.mins = np.full((2, heads), np.inf)  # entropy, logit
        self.entropy_sum = np.zeros(heads)
        self.entropy_squares = np.zeros(heads)  # Σ entropy²: the sample's spread (rows=K)
        self.sums = np.zeros((3, heads))  # Σ weight on key 0, Σ ‖q‖, Σ ‖k‖
        self.keys = 0  # key rows per head (Σ ‖k‖'s count)

    @property
    def heads(self) -> int:
        return self.counts.shape[1]

    def add(self, other) -> None:
        self.calls += other.calls
        self.total += other.total
        self.population += other.population
        self.entropy_squares += other.entropy_squares
        self.counts += other.counts
        self.overflow += other.overflow
        self.entropy_sum += other.entropy_sum
        self.sums += other.sums
        self.keys += other.keys
        np.maximum(self.max_logit, other.max_logit, out=self.max_logit)
        np.minimum(self.mins, other.mins, out=self.mins)

    def plain(self) -> dict:
        """Python numbers per head: {name: list of H}."""
        no_entropy, empty, saturated, single = self.counts.tolist()
        hi, (ent_min, lo) = self.max_logit.tolist(), self.mins.tolist()
        return {
            "rows": [self.total - n - s for n, s in zip(no_entropy, single)],
            "rows_empty": empty,
            "rows_single": single,
            "rows_broken": [n - e for n, e in zip(no_entropy, empty)],
            "saturated": saturated,
            "overflow": self.overflow.tolist(),
            "entropy_sum": self.entropy_sum.tolist(),
            "entropy_squares": self.entropy_squares.tolist(),
            **dict(zip(("first_key_sum", "q_norm_sum", "k_norm_sum"), self.sums.tolist())),
            "entropy_min": ent_min,
            "max_logit": hi,
            "min_logit": lo,
            # lo ≤ hi in every row, so max |logit| = max(max hi, −min lo): no per-row |·| needed.
            "max_abs_logit": [max(a, -b) for a, b in zip(hi, lo)],
        }


def rows_by_head(figures) -> np.ndarray:
    """A tensor (F, ..., H, L) of F figures → NumPy (F, N, H, L) on the host, in one copy: per figure,
    rows of one head along axes 1 and 3; (F, N, L), from 3-D inputs without a head axis (and rank 1),
    → (F, 1, 1, N·L): one head."""
    x = figures.detach()
    x = x.reshape(x.shape[0], 1, 1, -1) if x.dim() <= 3 else x.reshape(x.shape[0], -1, *x.shape[-2:])
    return x.cpu().numpy()


def _by_head(q, k):
    """q (..., H, L, d) and k (..., H_kv, S, d) as 4-D (N, H, L, d) and (N_k, H_kv, S, d), as
    :func:`rows_by_head` lays the figures out: inputs without a head axis (q 3-D or 2-D) are one head
    of every row, and so are their keys."""
    if q.dim() > 3:
        q4 = q.reshape(-1, *q.shape[-3:])
        return q4, k.reshape(-1, *k.shape[-3:]) if k.dim() > 2 else k.reshape(1, 1, *k.shape[-2:])
    return q.reshape(1, 1, -1, q.shape[-1]), k.reshape(1, 1, -1, k.shape[-1])


def call_figures(stats, q, k, population: int | None = None, valid=None, entropies: bool = True):
    """One call's figures as a :class:`Running` of its own, and its per-row entropies (N, H, L) —
    None unless ``entropies`` — with NaN where a row counts in no entropy figure (padding, a
    single-key row: no median takes them).
    ``stats``: an AttentionStats with the logit range and the first-key weights; ``q``: the query
    rows it is of, (..., H, L, d) as its figures (‖q_i‖ is read from them); ``k``: the call's keys,
    (..., H_kv, S, d), H a multiple of H_kv (query head h reads KV head h // (H / H_kv), as
    grouped-query attention). ``population``: the rows per head of the whole call when ``stats``
    holds a sample of them. ``valid``: (N, L) bool, the rows that are real tokens (the others,
    padding, are left out of every figure and count); None: every row.

    Computed by the kernel library's ``head_sums`` (one pass, ‖q‖ and ‖k‖ included) for float32 and
    float64 CPU tensors when it is built; else by NumPy reductions over all heads at once
    (:func:`numpy_call_figures`, the reference the tests hold the C++ to).
    """
    torch = require("torch", "torch")
    q4, k4 = _by_head(q.detach(), k.detach())
    if valid is not None:
        valid = valid.detach().reshape(q4.shape[0], q4.shape[2])
    if _summed_in_cpp(torch, stats.entropy, q4, k4):
        lay = (q4.shape[0], q4.shape[1], q4.shape[2])
        figures = (stats.entropy, stats.max_logit, stats.min_logit, stats.lse, stats.first_key_weight)
        sums, ent = torch.ops.attnscale_health.head_sums(
            *(x.reshape(lay) for x in figures),
            q4,
            k4,
            valid,
            _LOG_SATURATED,
            _LOG_HALF,
            FLOAT16_MAX,
            entropies,
        )
        return _running(sums.numpy(), population, k4), ent.numpy() if entropies else None
    return numpy_call_figures(stats, q4, k4, population, valid, entropies)


def _summed_in_cpp(torch, figure, q4, k4) -> bool:
    """Whether ``head_sums`` can take the call: CPU tensors of one dtype, float32 or float64, and the
    library built (loaded here: its ops are registered from then on)."""
    from attnscale.torch.ext import load_kernel

    dtype = figure.dtype
    return (
        figure.device.type == "cpu"
        and dtype in (torch.float32, torch.float64)
        and q4.dtype == k4.dtype == dtype
        and q4.device.type == k4.device.type == "cpu"
        and load_kernel() is not None
    )


def _running(sums: np.ndarray, population: int | None, k4) -> Running:
    """A :class:`Running` of one call from ``head_sums``' rows (float64 (14, H), in the order of
    head_sums.cpp's enum Row), as views: the array is this call's own, and an aggregate adds it into
    arrays of its own (Running.add), never writing into it."""
    run = Running.__new__(Running)
    run.calls, run.total = 1, int(sums[13, 0])
    run.population = run.total if population is None else population
    run.counts = sums[0:4].astype(np.int64)
    run.overflow = sums[4].astype(np.int64)
    run.max_logit, run.mins = sums[5], sums[6:8]
    run.entropy_sum, run.entropy_squares = sums[8], sums[9]
    run.sums = sums[10:13]
    run.keys = k4.shape[0] * k4.shape[2]
    return run


def numpy_call_figures(stats, q4, k4, population: int | None = None, valid=None, entropies: bool = True):
    """:func:`call_figures` by NumPy reductions over all heads at once (a few µs each, where a torch
    call costs tens), from q4 (N, H, L, d) and k4 (N_k, H_kv, S, d) (:func:`_by_head`): the path of
    tensors ``head_sums`` does not take (CUDA, half precision), and the reference for it.

    An empty row has NaN entropy and logits and lse −inf; a broken one NaN entropy (its logits may be
    +inf): NaN-skipping reductions (fmax, fmin) leave both out of the entropy figures, and an
    overflowed +inf logit stays visible in the head's max logit."""
    # One stack and one copy to the host for the six figures (a torch call each costs more than the
    # NumPy reductions below): the norms in the figures' dtype (float32, float64 for float64 inputs).
    torch = require("torch", "torch")
    dtype = stats.entropy.dtype
    q_norms = torch.linalg.vector_norm(q4, dim=-1, dtype=dtype)
    k_norm = torch.linalg.vector_norm(k4, dim=-1, dtype=dtype).cpu().numpy()
    figures = (stats.entropy, stats.max_logit, stats.min_logit, stats.lse, stats.first_key_weight)
    ent, hi, lo, lse, first, q_norm = rows_by_head(
        torch.stack([x.to(dtype).reshape(q_norms.shape) for x in figures] + [q_norms])
    )
    shape = ent.shape
    if valid is not None:  # the real tokens' rows only: (N, H, L) → (kept, H, 1)
        keep = valid.cpu().numpy()
        ent, hi, lo, lse, first, q_norm = (
            x.transpose(0, 2, 1)[keep][:, :, None] for x in (ent, hi, lo, lse, first, q_norm)
        )
    rows = (0, 2)
    run = Running.__new__(Running)
    run.calls, run.total = 1, ent.shape[0] * ent.shape[2]
    run.population = run.total if population is None else population
    nan = np.isnan(ent)
    with np.errstate(invalid="ignore"):  # inf − inf in a broken row: NaN, not saturated
        top = hi - lse
        single = (hi == lo) & (top > _LOG_HALF) & ~nan
        saturated = np.count_nonzero((top > _LOG_SATURATED) & ~single, axis=rows)
    singles = np.count_nonzero(single, axis=rows)
    if singles.any():
        ent = np.where(single, np.nan, ent)
        nan = nan | single
    run.counts = np.stack(
        [np.count_nonzero(nan, axis=rows) - singles, np.count_nonzero(lse == -np.inf, axis=rows), saturated, singles]
    )
    run.max_logit = np.fmax.reduce(hi, axis=rows, initial=-np.inf).astype(np.float64)
    run.mins = np.stack(
        [np.fmin.reduce(ent, axis=rows, initial=np.inf), np.fmin.reduce(lo, axis=rows, initial=np.inf)]
    ).astype(np.float64)
    counted = np.where(nan, 0.0, ent).astype(np.float64)
    run.entropy_sum = counted.sum(axis=rows)
    run.entropy_squares = np.square(counted).sum(axis=rows)
    run.sums = np.stack(
        [
            np.where(nan, 0.0, first).sum(axis=rows, dtype=np.float64),
            np.where(nan, 0.0, q_norm).sum(axis=rows, dtype=np.float64),
            np.repeat(k_norm.sum(axis=(0, 2), dtype=np.float64), ent.shape[1] // k_norm.shape[1]),
        ]
    )
    run.keys = k_norm.shape[0] * k_norm.shape[2]
    # Counting float16 overflows takes four passes; most calls have none, which the extremes show.
    loud = max(run.max_logit.max(), -run.mins[1].min()) > FLOAT16_MAX
    run.overflow = (
        np.count_nonzero((hi > FLOAT16_MAX) | (lo < -FLOAT16_MAX), axis=rows)
        if loud
        else np.zeros(ent.shape[1], np.int64)
    )
    if not entropies:
        return run, None
    if valid is not None:  # back to (N, H, L), padding rows NaN
        full = np.full((shape[0], shape[2], shape[1]), np.nan, ent.dtype)
        full[keep] = ent[:, :, 0]
        ent = full.transpose(0, 2, 1)
    return run, ent
