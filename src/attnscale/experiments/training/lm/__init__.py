"""Experiment ``lm``: a real small GPT on real English text, with each scale rule. Does unscaled
attention stop learning?

The model is :class:`~attnscale.experiments.training.gpt.GPT` (nanoGPT's shape: pre-LN blocks of causal
multi-head attention and MLP, tied head), width ``d_model`` fixed and heads = d_model ÷ d_k, on the
bytes of :mod:`~attnscale.experiments.training.text_data` (the standard library's documentation unless
``text`` names a file). Every attention call goes through the project's attention with the rule
(:meth:`attnscale.torch.scales.ScaledLogits.attend`), so the per-head figures logged below are those
of the attention the model trains with. For a given (d_k, seed) every rule starts from the same
weights (the rules draw no random numbers) and sees the same batches.

Optimisers: AdamW (β 0.9/0.95, weight decay 0.1 on matrices, clipping at norm 1, nanoGPT's) at one
rate tuned for 1/√d_k; plain SGD (no momentum, no decay, no clipping, so that it can diverge) over a
grid of rates. Both: linear warm-up over the first tenth, then cosine decay to a tenth of the rate.

Logged every ``log_every`` steps (the weights after that many updates): the training loss, the
validation loss in bits per byte on fixed windows, the gradient norms reaching W_Q and W_K per layer,
and per layer and head the mean and minimum row entropy, the largest |logit| and the fraction of
saturated rows (largest weight > :data:`~attnscale.softmax_rows.SATURATED_WEIGHT`), over the
rows of a training batch that attend at least two keys (causal row 0 sees only itself). A NaN or inf
loss ends the run as diverged, recorded with its step; the analysis also counts as diverged a run
whose validation loss sits at the uniform prediction's 8 bits per byte to the end (a collapse).

Verdict per rule × d_k × optimiser (:func:`analyse`), per seed against the 1/√d_k run of the same
seed: *diverges*; *fails* (never within :data:`TARGET_FACTOR` × the reference's final validation
loss); else the ratio of the steps each needs to get there: *learns* (≤ :data:`LIKE_RATIO`) or
*slower*. The verdict shown is the seeds' most common one (a tie goes to the worse), with how many
seeds agree, and how far it holds: for which targets (exact, from the logs), with half the steps,
and, for a fail, with as many again at the rate of its last quarter. SGD is judged twice: at the rate best for 1/√d_k (``"sgd"``) and at the rule's own best
(``"sgd-own-best"``); the best rate of 1/√d_k must be inside the grid, which the analysis checks.

The package, by job: :mod:`.config` (the constants, one run and the sweep's configuration),
:mod:`.train` (one run's training), :mod:`.ngram_baselines` (the n-gram baselines on the sweep's text) and
:mod:`.judging` (a run against the reference; how far a verdict holds: the targets, the budget) and
:mod:`.analysis` (the learning-rate grids, the LR sensitivity, the verdicts, curves and samples).
"""

from attnscale.experiments.training.lm.analysis import analyse, lr_score
from attnscale.experiments.training.lm.ngram_baselines import baselines, beaten
from attnscale.experiments.training.lm.config import (
    BACKEND,
    DEFAULT_RULES,
    KIND,
    LIKE_RATIO,
    OPTIMIZERS,
    PROGRESS_EVERY,
    PROMPT,
    REFERENCE_RULE,
    RULE_CHOICES,
    TARGET_FACTOR,
    VERDICTS,
    LMCell,
    LMConfig,
    LMRun,
)
from attnscale.experiments.training.lm.judging import judge
from attnscale.experiments.training.lm.train import train_cell

__all__ = [
    "KIND",
    "RULE_CHOICES",
    "REFERENCE_RULE",
    "LMRun",
    "LMCell",
    "LMConfig",
    "train_cell",
    "analyse",
    "TARGET_FACTOR",
    "LIKE_RATIO",
    "VERDICTS",
    "DEFAULT_RULES",
    "OPTIMIZERS",
    "PROMPT",
    "PROGRESS_EVERY",
    "BACKEND",
    "baselines",
    "beaten",
    "lr_score",
    "judge",
]
