"""logit-growth's constants, one run (:class:`LogitCell`) and the sweep (:class:`LogitGrowthConfig`),
each setting declared once in :class:`LogitRun`."""

from __future__ import annotations

import math
from dataclasses import dataclass

from attnscale.errors import InputError, check_count, check_positive
from attnscale.experiments.training.cells import shared_settings

__all__ = ["KIND", "VARIANTS", "MONITOR_MODE", "LogitRun", "LogitCell", "LogitGrowthConfig"]

KIND = "logit-growth"
VARIANTS = ("baseline", "qk_layernorm", "qk_clip")
MONITOR_MODE = "replace"  # the figures from the model's own attention (see above)


@dataclass(frozen=True, kw_only=True)
class LogitRun:
    """What every run of the sweep shares; :class:`LogitGrowthConfig` and :class:`LogitCell` extend
    it, so each setting and its default is declared once."""

    steps: int = 1000
    warmup: int = 50  # linear warm-up steps (5 %, as the paper), then cosine decay to 0
    batch: int = 16  # sequences per step
    log_every: int = 25
    corpus_chars: int = 200_000

    def __post_init__(self):
        for name in ("steps", "batch", "log_every", "corpus_chars"):
            check_count(name, getattr(self, name))
        if not 0 <= self.warmup < self.steps:
            raise InputError(f"warmup: expected 0 <= warmup < steps={self.steps}, got {self.warmup!r}")


@dataclass(frozen=True)
class LogitCell(LogitRun):
    """One training run of the LM. Its hash is its cache key."""

    lr: float  # peak learning rate
    qk_layernorm: bool
    seed: int
    qk_clip: float | None = None  # τ of the logit guard (None: no guard)
    context: int = 64
    d_model: int = 64
    n_layers: int = 2
    n_heads: int = 4
    weight_decay: float = 1e-4  # independent of the peak LR, as the paper: p ← p − (lr_t/lr)·λ·p
    clip_norm: float = 1.0  # global gradient-norm clipping, as the paper
    eval_batches: int = 4  # fixed validation batches of ``batch`` sequences
    corpus_seed: int = 0
    code_version: int = 4  # bump when training code changes: old cached results then miss

    def __post_init__(self):
        super().__post_init__()
        check_positive("lr", self.lr)
        for name in ("context", "d_model", "n_layers", "n_heads", "eval_batches"):
            check_count(name, getattr(self, name))
        if self.d_model % self.n_heads:
            raise InputError(f"n_heads: expected a divisor of d_model={self.d_model}, got {self.n_heads}")
        if self.qk_clip is not None and not (self.qk_clip > 0 and math.isfinite(self.qk_clip)):
            raise InputError(f"qk_clip: expected None or a finite τ > 0, got {self.qk_clip!r}")
        if self.qk_clip is not None and self.qk_layernorm:
            raise InputError(
                "qk_clip: QK-clip rescales W_Q and W_K, which does nothing before a QK-layernorm; use one or the other"
            )

    @property
    def variant(self) -> str:
        return "qk_layernorm" if self.qk_layernorm else "qk_clip" if self.qk_clip is not None else "baseline"

    @property
    def label(self) -> str:
        return f"lr={self.lr:g} {self.variant} seed={self.seed}"


@dataclass(frozen=True)
class LogitGrowthConfig(LogitRun):
    lrs: tuple[float, ...] = (1e-3, 3e-3, 1e-2, 3e-2, 1e-1, 3e-1)
    seeds: int = 1
    tau: float = 100.0  # the guard's threshold (Kimi K2 trained with τ = 100)

    def __post_init__(self):
        super().__post_init__()
        if len(self.lrs) < 1 or any(not (lr > 0) for lr in self.lrs):
            raise InputError(f"lrs: expected positive learning rates, got {self.lrs!r}")
        check_count("seeds", self.seeds)
        check_positive("tau", self.tau)

    @classmethod
    def quick(cls, seeds: int = 1) -> LogitGrowthConfig:
        """Seconds, not minutes: the lowest and highest learning rates, few steps."""
        return cls(lrs=(1e-3, 3e-1), seeds=seeds, steps=40, warmup=8, batch=8, log_every=10, corpus_chars=20_000)

    def cells(self) -> list[LogitCell]:
        arms = {"baseline": (False, None), "qk_layernorm": (True, None), "qk_clip": (False, self.tau)}
        return [
            LogitCell(lr, arms[v][0], seed, qk_clip=arms[v][1], **shared_settings(self, LogitRun))
            for seed in range(self.seeds)
            for v in VARIANTS
            for lr in self.lrs
        ]
