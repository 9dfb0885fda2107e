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

__all__ = ["Running", "call_figures", "rows_by_head"]

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


def call_figures(stats, q_norms, k_norms, population: int | None = None, valid=None) -> tuple[Running, np.ndarray]:
    """One call's figures as a :class:`Running` of its own — NumPy reductions over all heads at
    once (a few µs each, where a torch call costs tens) — and its per-row entropies (N, H, L).
    ``stats``: an AttentionStats with the logit range and the first-key weights; ``q_norms``: ‖q_i‖
    of its rows, (..., H, L) as its figures; ``k_norms``: ‖k_j‖ of the call's keys, (N, H_kv, S), H a
    multiple of H_kv (query head h reads KV head h // (H / H_kv), as grouped-query attention).
    ``population``: the rows per head of the whole call when ``stats`` holds a sample of them.
    ``valid``: (N, L) bool, the rows that are real tokens (the others, padding, are left out of every
    figure and count; the returned entropies are then (rows kept, H, 1)); None: every row.

    An empty row has NaN entropy and logits and lse −inf; a broken one NaN entropy (its logits may be
    +inf): NaN-skipping reductions (fmax, fmin) leave both out of the entropy figures, and an
    overflowed +inf logit stays visible in the head's max logit. A single-key row's entropy is made
    NaN in the returned entropies (no median takes it); its logits stay."""
    # One stack and one copy to the host for the six figures (a torch call each costs more than the
    # NumPy reductions below): q_norms has the figures' dtype (float32, float64 for float64 inputs).
    torch = require("torch", "torch")
    figures = (stats.entropy, stats.max_logit, stats.min_logit, stats.lse, stats.first_key_weight, q_norms)
    ent, hi, lo, lse, first, q_norm = rows_by_head(torch.stack([x.to(stats.entropy.dtype) for x in figures]))
    if valid is not None:  # the real tokens' rows only: (N, H, L) → (kept, H, 1)
        keep = valid.detach().cpu().numpy().reshape(ent.shape[0], ent.shape[2])
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
    valid = np.where(nan, 0.0, ent).astype(np.float64)
    run.entropy_sum = valid.sum(axis=rows)
    run.entropy_squares = np.square(valid).sum(axis=rows)
    k_norm = k_norms.detach().cpu().numpy()
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
    return run, ent
