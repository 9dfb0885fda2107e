"""What :mod:`attnscale.torch.monitor` hands out: one record per call, figures per (layer, head)
over a context or a step, and a step's strict-JSON form for the sinks. Plain data, no tensors."""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["CallRecord", "HeadFigures", "StepHead", "Step"]


@dataclass(frozen=True)
class CallRecord:
    """One observed attention call (no tensors)."""

    index: int
    layer: str
    shape: tuple               # (B, H_q, L, S, d_k, d_v); B = product of all leading dims (1 head if 3-D)
    dtype: str
    source: str                # "sdpa", "interface", "module" (see capture) or "replaced" (replace mode)
    backend: str               # which attnscale.torch backend computed the figures
    max_abs_logit: float       # NaN when no row attends anything
    float16_overflow: bool     # some |logit| > 65504


@dataclass(frozen=True)
class HeadFigures:
    """Figures of one head of one layer, over every row of every call seen in the context."""

    layer: str
    head: int
    calls: int
    rows: int                  # rows with at least one attended key and finite logits
    rows_empty: int            # fully masked rows (no figure)
    entropy_mean: float        # nats
    entropy_median: float      # NaN with history=False
    entropy_min: float
    max_logit: float           # largest logit seen
    min_logit: float           # smallest attended logit seen
    overflow_rows: int         # rows with |logit| > 65504
    rows_broken: int = 0       # rows with a NaN or +inf logit (no entropy figure)
    saturated_rows: int = 0    # rows whose largest weight exceeds SATURATED_P


@dataclass(frozen=True)
class StepHead:
    """One head's figures over one step's calls (see :meth:`Monitor.step`). NaN where no row counted."""

    layer: str
    head: int
    calls: int
    rows: int
    rows_empty: int
    rows_broken: int
    entropy_mean: float        # nats
    entropy_min: float
    max_logit: float           # largest attended logit (what the logit guard clips)
    max_abs_logit: float       # max |logit|
    saturated_fraction: float  # of ``rows``: largest weight > SATURATED_P
    float16_overflow: int      # rows with |logit| > 65504 (broken rows included)


_STEP_FIGURES = ("entropy_mean", "entropy_min", "max_logit", "max_abs_logit", "saturated_fraction")


@dataclass(frozen=True)
class Step:
    """What :meth:`Monitor.step` closes: the calls since the previous step."""

    step: int
    calls: int                 # attention calls seen (replaced, observed and fallbacks)
    fallbacks: dict            # reason -> calls that ran on SDPA instead (replace mode)
    heads: list                # list[StepHead], layers in the order first seen

    def to_json(self) -> dict:
        """Strict JSON data: a figure that does not exist is null, with ``why_null`` beside it."""
        heads = []
        for h in self.heads:
            entry = {k: (v if not isinstance(v, float) or math.isfinite(v) else None) for k, v in vars(h).items()}
            if any(entry[k] is None for k in _STEP_FIGURES):
                entry["why_null"] = ("no row attended any key" if h.rows + h.rows_broken == 0 else
                                     "every attended row had a NaN or +inf logit" if h.rows == 0 else
                                     "a non-finite figure")
            heads.append(entry)
        return {"step": self.step, "calls": self.calls, "fallbacks": dict(self.fallbacks), "heads": heads}
