"""Figures of a set of values that may hold None or non-finite entries (diverged runs): only the finite
ones count."""

from __future__ import annotations

import math
import statistics

__all__ = ["finite", "spread", "mean_or_none"]


def finite(values) -> list[float]:
    """The finite values, as floats (None and NaN/±inf left out)."""
    return [float(v) for v in values if v is not None and math.isfinite(v)]


def spread(values) -> dict:
    """Mean, min, max and count of the finite values; None for each figure when there are none."""
    kept = finite(values)
    if not kept:
        return {"mean": None, "min": None, "max": None, "n": 0}
    return {"mean": statistics.fmean(kept), "min": min(kept), "max": max(kept), "n": len(kept)}


def mean_or_none(values) -> float | None:
    kept = finite(values)
    return statistics.fmean(kept) if kept else None
