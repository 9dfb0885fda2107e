"""The training sweeps' cells: shared settings declared once, one run's identity checked once."""

import dataclasses

import pytest

from attnscale.errors import InputError
from attnscale.experiments.training import lm, logit_growth, scale_vs_dk
from attnscale.experiments.training.cells import shared_settings
from attnscale.store import config_hash, to_jsonable


@pytest.mark.parametrize(
    "config, settings",
    [
        (scale_vs_dk.ScaleVsDkConfig.quick(), scale_vs_dk.ScaleRun),
        (logit_growth.LogitGrowthConfig.quick(), logit_growth.LogitRun),
        (lm.LMConfig.quick(), lm.LMRun),
    ],
)
def test_every_cell_carries_the_sweeps_settings(config, settings):
    values = shared_settings(config, settings)
    assert values and set(values) == {f.name for f in dataclasses.fields(settings)}
    assert all(shared_settings(cell, settings) == values for cell in config.cells())


def test_a_changed_sweep_setting_reaches_every_cell():
    config = dataclasses.replace(scale_vs_dk.ScaleVsDkConfig.quick(), steps=7, batch=3)
    assert {(c.steps, c.batch) for c in config.cells()} == {(7, 3)}


def test_a_cell_serialises_its_fields_and_not_its_class_choices():
    cell = scale_vs_dk.ScaleCell("unscaled", 16, "sgd", 0.1, 0)
    data = to_jsonable(cell)
    assert "RULES" not in data and "OPTIMIZERS" not in data
    assert {"rule", "d_k", "optimizer", "lr", "seed", "steps", "task"} <= set(data)
    assert config_hash(cell) != config_hash(dataclasses.replace(cell, seed=1))


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: scale_vs_dk.ScaleCell("sqrt", 16, "adam", 1e-3, 0), "rule: expected one of"),
        (lambda: lm.LMCell("unscaled", 16, "adam", 1e-3, 0), r"optimizer: expected one of \('adamw', 'sgd'\)"),
        (lambda: scale_vs_dk.ScaleCell("unscaled", 0, "adam", 1e-3, 0), "d_k: expected an integer >= 1"),
        (lambda: lm.LMCell("unscaled", 16, "sgd", float("nan"), 0), "lr: expected a finite number > 0"),
        (lambda: scale_vs_dk.ScaleCell("unscaled", 16, "sgd", 0.1, -1), "seed: expected an integer >= 0"),
        (lambda: lm.LMCell("unscaled", 24, "sgd", 0.1, 0), "d_k: expected a divisor of d_model=128"),
        (lambda: scale_vs_dk.ScaleCell("unscaled", 16, "sgd", 0.1, 0, steps=0), "steps: expected an integer >= 1"),
        (lambda: logit_growth.LogitGrowthConfig(steps=10, warmup=10), "warmup: expected 0 <= warmup < steps=10"),
    ],
)
def test_bad_cells_are_refused_naming_the_field(make, message):
    with pytest.raises(InputError, match=message):
        make()
