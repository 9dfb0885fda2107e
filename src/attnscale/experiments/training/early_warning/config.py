"""early-warning's constants, its arms, one run (:class:`WarnCell`) and the sweep
(:class:`EarlyWarningConfig`), each shared setting declared once in :class:`WarnRun`."""

from __future__ import annotations

from dataclasses import dataclass

from attnscale.errors import InputError, check_choice, check_count, check_positive
from attnscale.experiments.training.cells import shared_settings

__all__ = ["KIND", "Arm", "ARMS", "WarnRun", "WarnCell", "EarlyWarningConfig"]

KIND = "early-warning"


@dataclass(frozen=True)
class Arm:
    """One kind of run: the attention (QK-layernorm or not, 1/√d_k or unscaled), the peak learning
    rate its ramp reaches, and what it was built to do ("diverge" or "healthy"). What a run did is
    judged from its loss (:func:`~attnscale.experiments.training.early_warning.rules.divergence_step`),
    never taken from this label."""

    qk_layernorm: bool
    unscaled: bool
    peak_lr: float
    built_to: str


#: The arms, in the order the tables show them. The two that are built to diverge are the two ways the
#: post's chain breaks: logits that grow at a high rate without QK-layernorm, and unscaled logits;
#: the healthy ones are the same model with QK-layernorm at that rate, and at a tenth of it.
ARMS = {
    "plain": Arm(False, False, 0.3, "diverge"),
    "unscaled": Arm(False, True, 0.15, "diverge"),
    "qk_layernorm": Arm(True, False, 0.3, "healthy"),
    "low_lr": Arm(False, False, 0.03, "healthy"),
}


@dataclass(frozen=True, kw_only=True)
class WarnRun:
    """What every run of the sweep shares; the sweep's configuration and each cell extend it."""

    steps: int = 1000  # the learning rate rises linearly from 0 to the arm's peak over these steps
    warmup: int = 100  # steps before divergence is judged (the loss falls fastest here)
    tail: int = 100  # steps trained past the divergence, so that late alerts are seen too
    batch: int = 8
    corpus_chars: int = 100_000

    def __post_init__(self):
        for name in ("steps", "batch", "corpus_chars"):
            check_count(name, getattr(self, name))
        check_count("tail", self.tail, minimum=0)
        if not 0 <= self.warmup < self.steps:
            raise InputError(f"warmup: expected 0 <= warmup < steps={self.steps}, got {self.warmup!r}")


@dataclass(frozen=True)
class WarnCell(WarnRun):
    """One training run. Its hash is its cache key."""

    arm: str
    seed: int
    context: int = 64
    d_model: int = 64
    n_layers: int = 2
    n_heads: int = 4
    corpus_seed: int = 0
    code_version: int = 1  # bump when training code changes: old cached results then miss

    def __post_init__(self):
        super().__post_init__()
        check_choice("arm", self.arm, ARMS)
        check_count("seed", self.seed, minimum=0)
        for name in ("context", "d_model", "n_layers", "n_heads"):
            check_count(name, getattr(self, name))
        if self.d_model % self.n_heads:
            raise InputError(f"n_heads: expected a divisor of d_model={self.d_model}, got {self.n_heads}")

    @property
    def label(self) -> str:
        return f"{self.arm} seed={self.seed}"


@dataclass(frozen=True)
class EarlyWarningConfig(WarnRun):
    """The sweep: every arm of ``arms`` at seeds 0 … ``seeds`` − 1 (20 runs of at most 1,000 steps by
    default), and the grid of the attention detector's settings that the analysis replays."""

    arms: tuple[str, ...] = tuple(ARMS)
    seeds: int = 5
    # The attention detector's settings the analysis replays (every combination): its z, window and
    # saturated share (attnscale.early_warning.DetectorConfig's), for the defaults the runs support.
    grid_z: tuple[float, ...] = (4.0, 6.0, 8.0, 12.0, 16.0)
    grid_window: tuple[int, ...] = (64, 128)
    grid_share: tuple[float, ...] = (0.5, 0.9)

    def __post_init__(self):
        super().__post_init__()
        if not self.arms:
            raise InputError("arms: expected at least one arm")
        for arm in self.arms:
            check_choice("arms", arm, ARMS)
        check_count("seeds", self.seeds)
        for name in ("grid_z", "grid_window", "grid_share"):
            if not getattr(self, name):
                raise InputError(f"{name}: expected at least one value")

    @classmethod
    def quick(cls, seeds: int = 1) -> EarlyWarningConfig:
        """Seconds, not minutes: one seed of each arm, few short steps (nothing diverges that soon;
        the quick run checks the plumbing, not the answer)."""
        return cls(
            seeds=seeds,
            steps=30,
            warmup=5,
            tail=5,
            batch=4,
            corpus_chars=5_000,
            grid_z=(6.0, 12.0),
            grid_window=(64,),
            grid_share=(0.5,),
        )

    def cells(self) -> list[WarnCell]:
        return [
            WarnCell(arm, seed, **shared_settings(self, WarnRun)) for seed in range(self.seeds) for arm in self.arms
        ]


def peak_lr(cell: WarnCell) -> float:
    """The cell's arm's peak learning rate (checked positive)."""
    return check_positive("peak_lr", ARMS[cell.arm].peak_lr)
