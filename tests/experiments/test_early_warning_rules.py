"""early-warning's yardsticks on synthetic series with known answers: the divergence rule, the lead
time, and each peer rule against its definition (OLMo-core's by an independent NumPy reading of it,
Lightning's against Lightning's own SpikeDetection, installed)."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest

from attnscale.experiments.training.early_warning import rules


def test_divergence_after_warmup_at_twice_the_running_minimum():
    losses = [5.0, 4.0, 3.0, 2.0, 1.0, 1.5, 1.99, 2.01]
    assert rules.divergence_step(losses, warmup=2) == 8  # 2.01 > 2 × 1.0; 1.99 is not
    assert rules.divergence_step(losses[:7], warmup=2) is None


def test_divergence_not_judged_in_warmup_and_non_finite_is_divergence():
    assert rules.divergence_step([1.0, 3.0, 1.0], warmup=2) is None  # step 2's rise is inside warm-up
    assert rules.divergence_step([1.0, 3.0, 1.0], warmup=1) == 2
    assert rules.divergence_step([3.0, 2.0, math.nan, 1.0], warmup=1) == 3
    assert rules.divergence_step([3.0, 2.0, math.inf], warmup=1) == 3


def test_divergence_watch_is_the_rule_one_step_at_a_time():
    rng = np.random.default_rng(0)
    losses = list(np.exp(rng.normal(0, 0.4, 300)))
    watch = rules.DivergenceWatch(10)
    online = next((i + 1 for i, x in enumerate(losses) if watch.update(x)), None)
    assert online == rules.divergence_step(losses, 10) is not None


def test_lead_time_sign():
    assert rules.lead_time(80, 100) == 20  # warned 20 steps before
    assert rules.lead_time(110, 100) == -10  # after
    assert rules.lead_time(None, 100) is None and rules.lead_time(5, None) is None


def _olmo_reference(values, window=128, k=6.0):
    """OLMo-core's rule as its docstring states it, in NumPy: a step is a spike when the previous
    ``window`` values (all of them, spikes included) are there and the value exceeds their mean + k ×
    their population std, a std below 1e-10 excepted."""
    v = np.asarray(values, float)
    out = []
    for t in range(window, len(v)):
        h = v[t - window : t]
        std = h.std()
        if std >= 1e-10 and v[t] > h.mean() + k * std:
            out.append(t + 1)
    return out


def test_olmo_rule_against_its_definition():
    rng = np.random.default_rng(1)
    values = list(rng.normal(1.0, 0.05, 600))
    for t in (200, 201, 350, 500):  # spikes, one right after another (it enters the history)
        values[t] = 1.0 + 0.05 * (8 + t % 3)
    spikes = rules.olmo_spikes(values)
    assert spikes == _olmo_reference(values)
    assert {201, 351, 501} <= set(spikes)


def test_olmo_rule_known_answers():
    flat = [1.0 + 0.01 * (-1) ** i for i in range(128)]  # mean 1, population std 0.01: threshold 1.06
    assert rules.olmo_spikes(flat + [1.059]) == []
    assert rules.olmo_spikes(flat + [1.061]) == [129]
    assert rules.olmo_spikes(flat[:127] + [100.0]) == []  # fewer than 128 values before it: not judged
    assert rules.olmo_spikes([1.0] * 128 + [100.0]) == []  # a constant history (std 0) never spikes
    grad = flat + [1.0, 5.0]
    assert rules.olmo_first_alert(flat + [1.0, 1.0, 9.0], grad) == 130  # the grad norm's spike came first


def _lightning_reference(losses, **kwargs):
    """Lightning's own SpikeDetection, fed loss by loss as its callback is: the step of its first spike."""
    from lightning.fabric.utilities.spike import SpikeDetection, TrainingSpikeException

    import torch

    strategy = SimpleNamespace(
        root_device=torch.device("cpu"), barrier=lambda: None, reduce_boolean_decision=lambda d, all=True: d
    )
    fabric = SimpleNamespace(strategy=strategy, global_rank=1)  # rank 1: writes no skip file
    detector = SpikeDetection(exclude_batches_path="unused.json", **kwargs)
    for i, loss in enumerate(losses):
        try:
            detector.on_train_batch_end(fabric, torch.tensor(loss), None, i)
        except TrainingSpikeException:
            return i + 1
    return None


@pytest.mark.parametrize(
    "losses",
    [
        [3.0, 2.5, 2.0, 1.8, 1.7, 1.6, 1.5, 1.5, 1.4, 1.4, 1.3, 1.3, 4.1, 5.0],  # 4.1 ≥ 3 × the mean of 10
        [3.0, 2.5, 2.0, 1.8, 1.7, 1.6, 1.5, 1.5, 1.4, 1.4, 1.3, 1.3, 3.9, 5.5],  # 3.9 is not; 5.5 is
        [2.0, 1.0, 1.0, float("nan"), 1.0],  # a non-finite loss is a spike
        [1.0, 0.5, 0.4, 0.3, 0.2, 0.1],  # every step an improvement: never
        list(np.exp(np.random.default_rng(2).normal(0, 0.5, 80))),
    ],
)
def test_lightning_rule_against_lightning(losses):
    pytest.importorskip("lightning")
    pytest.importorskip("torchmetrics")
    assert rules.lightning_first_spike(losses) == _lightning_reference(losses)


def test_lightning_rule_known_answers():
    base = [1.0] * 10
    assert rules.lightning_first_spike(base + [2.99]) is None
    assert rules.lightning_first_spike(base + [3.0]) == 11  # |3 − 1| ≥ 2 × 1
    assert rules.lightning_first_spike([100.0, 1.0]) is None  # the first batch is warm-up; then a fall
    assert rules.lightning_first_spike([1.0, math.inf]) == 2
