"""The monitor's per-head table of one call's row figures: its rows, in the order the kernel library
writes them (``ext/head_tally.h``'s enum Row), and the constants its rules compare with. Shared by the
kernel's callers (``attnscale.torch.ext``, ``backends.kernel``) and the aggregates that read it
(:mod:`attnscale.torch.monitor_aggregates`, whose module docstring says what each row counts)."""

from __future__ import annotations

import math

from attnscale.softmax_rows import FLOAT16_MAX, SATURATED_WEIGHT

__all__ = ["ROWS", "THRESHOLDS"]

# The additive rows first, then the largest logit, then the two smallest figures.
ROWS = (
    "no_entropy",  # rows with no entropy: empty or broken (NaN entropy), single-key rows not among them
    "empty",  # lse = −inf: nothing attended
    "saturated",  # largest weight above SATURATED_WEIGHT, single-key rows excepted
    "single",  # one key attended
    "overflow",  # a logit beyond ±float16's largest number
    "entropy_sum",  # over the rows with an entropy (single-key rows out)
    "entropy_squares",  # Σ entropy²: the sample's spread (rows=K)
    "first_key_sum",  # Σ weight on key 0, over the same rows
    "q_norm_sum",  # Σ ‖q_i‖, over the same rows
    "k_norm_sum",  # Σ ‖k_j‖ over every key of the query head's KV head (the monitor: the counted ones)
    "rows",  # rows read (real tokens)
    "max_logit",  # NaN-skipping max of the rows' max logits (−inf: none)
    "entropy_min",  # NaN-skipping min of the counted rows' entropies (inf: none)
    "min_logit",  # NaN-skipping min of the rows' min logits (inf: none)
)

# log SATURATED_WEIGHT (a row is saturated when its largest weight exceeds it), log 1/2 (equal
# logits above it: one key), float16's largest number: head_tally.h's Thresholds, in this order.
THRESHOLDS = (math.log(SATURATED_WEIGHT), math.log(0.5), FLOAT16_MAX)
