"""The per-head summary of attention calls (the monitor's; the one home of these figures): running
aggregates per (layer, head) — counts, sums (entropy, weight on the first key, ‖q‖, ‖k‖) and
extremes — as NumPy arrays of H numbers, whatever the number of calls; and one
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
every key row of the calls here — the monitor then keeps the real ones, each once, where padding or
a KV cache makes them fewer (:mod:`attnscale.torch.monitor.tokens`).
"""

from __future__ import annotations

import math

import numpy as np
import torch

from attnscale.softmax_rows import FLOAT16_MAX
from attnscale.torch.head_table import ROWS, THRESHOLDS

__all__ = ["Running", "call_figures", "numpy_call_figures", "rows_by_head"]

_LOG_SATURATED, _LOG_HALF, _ = THRESHOLDS
# The table's rows (head_table.ROWS): the additive ones, the largest logit, the two smallest figures.
_MAX = ROWS.index("max_logit")
_ADDED, _MINS = slice(0, _MAX), slice(_MAX + 1, len(ROWS))
_START = np.array([0.0] * _MAX + [-np.inf, np.inf, np.inf])[:, None]  # each row's identity


class Running:
    """Running aggregates of one layer's H heads: one float64 table (len(ROWS), H), a row per
    figure of :data:`ROWS` — counts, sums and extremes — so that adding a call or a step is three
    array operations (a count is exact in float64 up to 2^53). Plus ints: the calls, the rows of
    the calls (``population``, sampled or not: rows=K) and the keys seen per head (Σ ‖k‖'s count).
    ``table``: None starts empty; else an array the Running owns from then on (adds write into it),
    or a CPU tensor, read as NumPy when first used (:attr:`table`)."""

    def __init__(self, heads: int, table=None, calls: int = 0, population: int = 0, keys: int = 0):
        self._table = np.repeat(_START, heads, axis=1) if table is None else table
        self.calls, self.population, self.keys = calls, population, keys

    @property
    def table(self) -> np.ndarray:
        """The float64 table (len(ROWS), H). A call's, as the kernel made it, is a tensor until read:
        its ``.numpy()`` took 20 µs a call between a forward's GEMMs (cold; measured on MiniLM), and
        a step reads its layers' one after another."""
        if not isinstance(self._table, np.ndarray):
            self._table = self._table.numpy()
        return self._table

    @property
    def heads(self) -> int:
        return self._table.shape[1]

    @property
    def total(self) -> int:
        """Rows read per head (every head reads the same rows)."""
        return int(self.table[10, 0]) if self.heads else 0

    @property
    def counts(self) -> np.ndarray:
        """(4, H): rows with no entropy, empty, saturated, single-key."""
        return self.table[0:4]

    @property
    def sums(self) -> np.ndarray:
        """(3, H): Σ weight on key 0, Σ ‖q‖, Σ ‖k‖."""
        return self.table[7:10]

    @property
    def mins(self) -> np.ndarray:
        """(2, H): the smallest entropy and logit."""
        return self.table[_MINS]

    @property
    def overflow(self) -> np.ndarray:
        return self.table[4]

    @property
    def entropy_sum(self) -> np.ndarray:
        return self.table[5]

    @property
    def entropy_squares(self) -> np.ndarray:
        return self.table[6]

    @property
    def max_logit(self) -> np.ndarray:
        return self.table[_MAX]

    def add(self, other: Running) -> None:
        a, b = self.table, other.table
        a[_ADDED] += b[_ADDED]
        np.maximum(a[_MAX], b[_MAX], out=a[_MAX])
        np.minimum(a[_MINS], b[_MINS], out=a[_MINS])
        self.calls += other.calls
        self.population += other.population
        self.keys += other.keys


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
    of every row, and so are their keys. Keys broadcast over the batch (fewer leading dimensions, or
    expanded: stride 0) are N_k = 1, read once."""
    if q.dim() > 3:  # the batch's size spelt out: −1 is ambiguous for a tensor of no elements (S = 0)
        q4 = q.reshape(math.prod(q.shape[:-3]), *q.shape[-3:])
        k4 = k.reshape(math.prod(k.shape[:-3]), *k.shape[-3:]) if k.dim() > 2 else k.reshape(1, 1, *k.shape[-2:])
        return q4, k4[:1] if k4.shape[0] > 1 and k4.stride(0) == 0 else k4  # keys broadcast over the batch: once
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

    Figures the kernel summed itself as it made them (``stats.head_table``: attention's
    ``head_table=True``, asked with ``counted`` = ``valid``, q (B, H, L, d)) are taken as they are:
    no pass at all. Else computed by the kernel library's ``head_sums`` (one pass, ‖q‖ and ‖k‖
    included) for float32 and float64 CPU tensors when it is built; else by NumPy reductions over
    all heads at once (:func:`numpy_call_figures`, the reference the tests hold the C++ to).
    """
    if stats.head_table is not None:
        run = _running(stats.head_table, population, _key_rows(k))
        return run, stats.counted_entropy.numpy() if entropies else None
    q4, k4 = _by_head(q.detach(), k.detach())
    if valid is not None:
        valid = valid.detach().reshape(q4.shape[0], q4.shape[2])
    if _summed_in_cpp(stats.entropy, q4, k4):
        lay = (q4.shape[0], q4.shape[1], q4.shape[2])
        figures = (stats.entropy, stats.max_logit, stats.min_logit, stats.lse, stats.first_key_weight)
        sums, ent = torch.ops.attnscale_health.head_sums(
            *(x.reshape(lay) for x in figures),
            q4,
            k4,
            valid,
            *THRESHOLDS,
            entropies,
        )
        return _running(sums.numpy(), population, k4.shape[0] * k4.shape[2]), ent.numpy() if entropies else None
    return numpy_call_figures(stats, q4, k4, population, valid, entropies)


def _key_rows(k) -> int:
    """The key rows per head a call's Σ ‖k‖ reads, k (..., H_kv, S, d) of a 4-D q: its batch's, or
    S once when the keys are broadcast over the batch (as :func:`_by_head` and the C++ read them)."""
    once = k.dim() < 4 or k.shape[0] == 1 or k.stride(0) == 0
    return k.shape[-2] * (1 if once else k.shape[0])


def _summed_in_cpp(figure, q4, k4) -> bool:
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


def _running(table, population: int | None, keys: int) -> Running:
    """A :class:`Running` of one call from its table (float64 (len(ROWS), H): an array, or the
    kernel's CPU tensor), which it owns; ``population`` None: the rows it read."""
    run = Running(table.shape[1], table, calls=1, keys=keys)
    run.population = run.total if population is None else population
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
    nan = np.isnan(ent)
    with np.errstate(invalid="ignore"):  # inf − inf in a broken row: NaN, not saturated
        top = hi - lse
        single = (hi == lo) & (top > _LOG_HALF) & ~nan
        saturated = np.count_nonzero((top > _LOG_SATURATED) & ~single, axis=rows)
    singles = np.count_nonzero(single, axis=rows)
    if singles.any():
        ent = np.where(single, np.nan, ent)
        nan = nan | single
    counted = np.where(nan, 0.0, ent).astype(np.float64)
    max_logit = np.fmax.reduce(hi, axis=rows, initial=-np.inf)
    min_logit = np.fmin.reduce(lo, axis=rows, initial=np.inf)
    # Counting float16 overflows takes four passes; most calls have none, which the extremes show.
    loud = max(max_logit.max(), -min_logit.min()) > FLOAT16_MAX
    H = ent.shape[1]
    table = np.stack(  # in the order of ROWS
        [
            np.count_nonzero(nan, axis=rows) - singles,
            np.count_nonzero(lse == -np.inf, axis=rows),
            saturated,
            singles,
            np.count_nonzero((hi > FLOAT16_MAX) | (lo < -FLOAT16_MAX), axis=rows) if loud else np.zeros(H),
            counted.sum(axis=rows),
            np.square(counted).sum(axis=rows),
            np.where(nan, 0.0, first).sum(axis=rows, dtype=np.float64),
            np.where(nan, 0.0, q_norm).sum(axis=rows, dtype=np.float64),
            np.repeat(k_norm.sum(axis=(0, 2), dtype=np.float64), H // k_norm.shape[1]),
            np.full(H, ent.shape[0] * ent.shape[2]),
            max_logit,
            np.fmin.reduce(ent, axis=rows, initial=np.inf),
            min_logit,
        ]
    ).astype(np.float64)
    run = _running(table, population, k_norm.shape[0] * k_norm.shape[2])
    if not entropies:
        return run, None
    if valid is not None:  # back to (N, H, L), padding rows NaN
        full = np.full((shape[0], shape[2], shape[1]), np.nan, ent.dtype)
        full[keep] = ent[:, :, 0]
        ent = full.transpose(0, 2, 1)
    return run, ent
