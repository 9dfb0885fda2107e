"""Experiment B, ``logit-growth``: attention logits grow at high learning rates; QK-layernorm and
QK-clip are two ways to stop it.

A small-scale proxy after Wortsman et al. 2023, "Small-scale proxies for large-scale Transformer
training instabilities" (Figures 1–2): a decoder-only character LM (2 layers, width 64, 4 heads,
context 64, pre-LN, no biases: the project's :class:`~attnscale.experiments.training.gpt.GPT` with
:func:`gpt_config`'s options, every linear layer std 1/√fan_in, embeddings N(0, 1), an untied head)
on :func:`~attnscale.experiments.training.tasks.grammar_corpus`, trained with AdamW (β₁ 0.9, β₂ 0.95, ε 1e-8,
weight decay 1e-4 independent of the LR, gradient clipping at norm 1), linear warm-up then cosine decay, at learning rates 1e-3 … 3e-1, in three variants:

- ``baseline``: plain attention;
- ``qk_layernorm``: per-head LayerNorm on q and k (Dehghani et al. 2023; Wortsman et al. 2023);
- ``qk_clip``: the logit guard :class:`attnscale.torch.guard.LogitGuard` at τ (QK-clip, as
  MuonClip for Kimi K2): after each optimiser step, a head whose largest logit in that step
  exceeded τ has its W_Q and W_K rows scaled by √(τ / max logit).

The model's attention (PyTorch SDPA) runs inside :class:`attnscale.torch.Monitor`, which gives every
training step's per-head max logit (it feeds the guard) and the layer-0 max logit over the
validation batches that is logged. It runs in :data:`MONITOR_MODE` "replace": the fused kernel
computes the model's attention, forward and backward, and its figures in the same pass
(cheaper than "observe", bit-for-bit plain training plus one extra forward per call: the README's
``benchmarks/monitor_replace.py`` table). Outputs equal SDPA's to rounding, not
bit-for-bit.

LR sensitivity, as the paper defines it: E over the learning rates of [min(ℓ(lr), ℓ₀) − min_lr ℓ(lr)],
with ℓ the final loss and ℓ₀ the loss at initialisation (a diverged run counts as ℓ₀).

The sweep is 3 variants × 6 learning rates = 18 cells of 1000 steps (the two-variant sweep was
2 × 7 = 14): the lowest rate, 3e-4, was dropped to pay for the third variant, since 1000 steps at
that rate only showed that they are too few.

The package, by job: :mod:`.config` (the constants, one run and the sweep's configuration),
:mod:`.train` (one run's training under the monitor) and :mod:`.analysis` (the table, the LR
sensitivity and the guard's figures).
"""

from attnscale.experiments.training.logit_growth.analysis import analyse
from attnscale.experiments.training.logit_growth.config import (
    KIND,
    MONITOR_MODE,
    VARIANTS,
    LogitCell,
    LogitGrowthConfig,
    LogitRun,
)
from attnscale.experiments.training.logit_growth.train import gpt_config, train_cell

__all__ = [
    "LogitRun",
    "LogitCell",
    "LogitGrowthConfig",
    "gpt_config",
    "train_cell",
    "analyse",
    "KIND",
    "VARIANTS",
    "MONITOR_MODE",
]
