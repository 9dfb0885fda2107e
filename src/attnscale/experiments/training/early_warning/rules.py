"""early-warning's yardsticks, each a pure function of a run's per-step series (step 1 first): when it
diverged, when each loss-spike detector that trainers ship would have fired, and the lead time.

Every series is a list of floats, index i holding step i + 1, non-finite values (a NaN loss) allowed.
A function returns the first step (1-based) where its condition holds, or None where it never does.

* **Divergence** (:func:`divergence_step`): the first step after ``warmup`` whose training loss is not
  finite or is above ``factor`` (2) × the smallest loss of the steps before it (its running minimum).
  The lm experiment's "as judged" rule (a run whose loss sits at the uniform prediction diverged:
  :func:`attnscale.experiments.training.lm.judging.as_judged`) is the case of a model that had learnt
  to below half the uniform loss and lost it; here it needs no rule of its own.
* **OLMo-core** (:func:`olmo_spikes`): ``StabilityMonitorCallback``
  (``olmo_core/train/callbacks/stability_monitor.py``) with its defaults. A value is a spike when the
  history holds ``window_size`` = 128 values and the value is above mean + ``threshold_std`` (6) ×
  std of them, std the population standard deviation (÷ n) and a std below 1e-10 never a spike; every
  value enters the history after it is judged (spikes too), the oldest leaving beyond 128. It runs on
  the loss and on the gradient norm alike, and a step is a spike when either is
  (:func:`olmo_first_alert`). A NaN judged is never above the threshold, and once one is in the
  history its mean is NaN, so it never fires again: that is the callback's arithmetic, kept.
* **Lightning** (:func:`lightning_first_spike`): ``lightning.pytorch.callbacks.SpikeDetection``
  (``lightning_fabric/utilities/spike.py``) with its defaults ``mode="min"``, ``window=10``,
  ``warmup=1``, ``atol=None``, ``rtol=2``, ``finite_only=True``. At batch index b ≥ warmup (b = step − 1)
  the loss is a spike when it is not finite, or when it is not lower than the last loss that entered
  the statistics and |loss − m| ≥ rtol · |m|, m the mean of the last ``window`` losses that entered
  them (so a rise to three times m, for a positive loss). A loss enters the statistics when it is not a
  spike. Lightning then stops training (``TrainingSpikeException``): only its first spike exists.

The lead time of a detector on a diverging run is the divergence step minus its first alert step
(:func:`lead_time`): positive when it warned before, negative when after, None when it never fired.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence

__all__ = [
    "DIVERGENCE_FACTOR",
    "OLMO_WINDOW",
    "OLMO_THRESHOLD_STD",
    "LIGHTNING_WINDOW",
    "LIGHTNING_RTOL",
    "LIGHTNING_WARMUP",
    "DivergenceWatch",
    "divergence_step",
    "olmo_spikes",
    "olmo_first_alert",
    "lightning_first_spike",
    "lead_time",
]

DIVERGENCE_FACTOR = 2.0
OLMO_WINDOW = 128
OLMO_THRESHOLD_STD = 6.0
LIGHTNING_WINDOW = 10
LIGHTNING_RTOL = 2.0
LIGHTNING_WARMUP = 1


class DivergenceWatch:
    """The divergence rule fed one loss at a time (a training loop's form of :func:`divergence_step`):
    :meth:`update` says whether this step's loss is the divergence; call it on every step in order."""

    def __init__(self, warmup: int, factor: float = DIVERGENCE_FACTOR):
        self.warmup, self.factor = warmup, factor
        self.step, self.low = 0, math.inf

    def update(self, loss: float) -> bool:
        self.step += 1
        diverged = self.step > self.warmup and (not math.isfinite(loss) or loss > self.factor * self.low)
        if math.isfinite(loss):
            self.low = min(self.low, loss)
        return diverged


def divergence_step(losses: Sequence[float], warmup: int, factor: float = DIVERGENCE_FACTOR) -> int | None:
    """The first step s > ``warmup`` whose loss is not finite or above ``factor`` × min(losses before s)."""
    watch = DivergenceWatch(warmup, factor)
    return next((i + 1 for i, loss in enumerate(losses) if watch.update(loss)), None)


def olmo_spikes(
    values: Sequence[float], window: int = OLMO_WINDOW, threshold_std: float = OLMO_THRESHOLD_STD
) -> list[int]:
    """Every step OLMo-core's rule calls a spike of ``values`` (the module's text), in order."""
    history: deque[float] = deque(maxlen=window)
    spikes = []
    for i, value in enumerate(values):
        if len(history) >= window:
            mean = sum(history) / len(history)
            std = math.sqrt(sum((x - mean) ** 2 for x in history) / len(history))
            if not std < 1e-10 and value > mean + threshold_std * std:
                spikes.append(i + 1)
        history.append(value)
    return spikes


def olmo_first_alert(losses: Sequence[float], grad_norms: Sequence[float], **rule) -> int | None:
    """The first step where OLMo-core's rule calls the loss or the gradient norm a spike."""
    firsts = [s[0] for s in (olmo_spikes(losses, **rule), olmo_spikes(grad_norms, **rule)) if s]
    return min(firsts, default=None)


def lightning_first_spike(
    losses: Sequence[float],
    window: int = LIGHTNING_WINDOW,
    rtol: float | None = LIGHTNING_RTOL,
    atol: float | None = None,
    warmup: int = LIGHTNING_WARMUP,
) -> int | None:
    """The step of Lightning's first spike of ``losses`` (the module's text), None if none."""
    recent: deque[float] = deque(maxlen=window)
    last = 0.0
    for i, loss in enumerate(losses):
        if i >= warmup and _lightning_spike(loss, last, recent, rtol, atol):
            return i + 1
        recent.append(loss)  # finite_only=True: every value that is not a spike enters
        last = loss
    return None


def _lightning_spike(loss: float, last: float, recent: deque, rtol: float | None, atol: float | None) -> bool:
    if not math.isfinite(loss):
        return True
    if loss - last <= 0.0:  # an improvement on the last value is never a spike
        return False
    mean = sum(recent) / len(recent) if recent else math.nan  # torchmetrics' mean of no value: NaN
    ok_atol = atol is None or abs(loss - mean) >= abs(atol)
    ok_rtol = rtol is None or abs(loss - mean) >= abs(rtol * mean)
    return ok_atol and ok_rtol


def lead_time(alert_step: int | None, diverged_step: int | None) -> int | None:
    """Steps from the first alert to the divergence (negative: the alert came after); None when
    either is missing."""
    if alert_step is None or diverged_step is None:
        return None
    return diverged_step - alert_step
