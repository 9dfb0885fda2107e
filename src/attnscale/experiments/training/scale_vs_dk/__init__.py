"""Experiment A, ``scale-vs-dk``: does unscaled attention really stop learning?

A one-layer transformer learns :class:`~attnscale.experiments.training.tasks.MarkedCount` (count the ones among
k marked positions: attention must spread evenly over k keys). The sweep crosses

* the scale rule: 1/√d_k, unscaled, 1/d_k (µP), QK-norm (learnable gain), soft-cap 50 on unscaled;
* d_k ∈ {16, 64, 256};
* the optimiser: Adam (normalises gradient sizes) and plain SGD (does not), SGD on a grid of learning
  rates wide enough that the rate tuned for 1/√d_k lies inside it (checked, not assumed: see
  :func:`tune_sgd`), so that "cannot learn" can be told from "needs another step size";
* seeds.

Every cell starts from the same weights for a given (d_k, seed) whatever its rule, so differences at
step 0 are the rule's alone. Each cell logs, every ``log_every`` steps, the loss, accuracy, the gradient
reaching W_Q and W_K, the query rows' logit standard deviation and saturated fraction, and records its
own run time. :func:`analyse` turns the cells into every figure the report shows: per (rule, d_k) the
final accuracy and steps to target with their spread over seeds, for Adam, for SGD at the learning
rate tuned for 1/√d_k and at each rule's own best rate; the verdicts (learns like 1/√d_k, slower,
fails within the budget, diverges); seed-mean curves; the saturation and gradient figures at step 0
and at the end; the findings the chapter speaks of; and the chain-rule check of the
gradient reaching W_Q and W_K at initialisation. Non-finite figures are written as None beside a
reason (``diverged``), so the result is strict JSON.

The package, by job: :mod:`.config` (the constants, the cell and the sweep's configuration),
:mod:`.train` (one cell's training run), :mod:`.chain_rule` (the chain-rule arithmetic of the gradient
at initialisation), :mod:`.stats` (spreads and means of finite values) and :mod:`.analysis` (verdicts,
the SGD tuning, the summaries, curves and findings the report shows).
"""

from attnscale.experiments.training.scale_vs_dk.analysis import analyse, steps_to_target, tune_sgd
from attnscale.experiments.training.scale_vs_dk.chain_rule import chain_rule_check, logit_jacobian
from attnscale.experiments.training.scale_vs_dk.config import (
    KIND,
    LIKE_REFERENCE_STEPS,
    LOGIT_GROWTH,
    OPTIMIZERS,
    REFERENCE_RULE,
    RULE_CHOICES,
    SATURATED_RUN,
    VERDICTS,
    ScaleCell,
    ScaleRun,
    ScaleVsDkConfig,
)
from attnscale.experiments.training.scale_vs_dk.train import train_cell

__all__ = [
    "RULE_CHOICES",
    "REFERENCE_RULE",
    "OPTIMIZERS",
    "ScaleRun",
    "ScaleCell",
    "ScaleVsDkConfig",
    "train_cell",
    "analyse",
    "tune_sgd",
    "steps_to_target",
    "chain_rule_check",
    "logit_jacobian",
    "KIND",
    "VERDICTS",
    "LIKE_REFERENCE_STEPS",
    "SATURATED_RUN",
    "LOGIT_GROWTH",
]
