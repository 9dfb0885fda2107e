"""scale-vs-dk's constants, the rules it sweeps, one cell (:class:`ScaleCell`, whose fields are its cache
key) and the sweep (:class:`ScaleVsDkConfig`, which lists its cells)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from attnscale.errors import InputError, check_count, check_positive
from attnscale.experiments.training.cells import RuleRun, rule_grid, shared_settings
from attnscale.experiments.training.tasks import MarkedCount
from attnscale.scales import RULES, ScaleRule

__all__ = [
    "KIND",
    "VERDICTS",
    "LIKE_REFERENCE_STEPS",
    "SATURATED_RUN",
    "LOGIT_GROWTH",
    "RULE_CHOICES",
    "REFERENCE_RULE",
    "OPTIMIZERS",
    "ScaleRun",
    "ScaleCell",
    "ScaleVsDkConfig",
]

KIND = "scale-vs-dk"

#: The verdicts of a (rule, d_k, optimiser, lr) against 1/√d_k, mildest first.
VERDICTS = ("learns", "slower", "fails", "diverges")
#: A run "learns like 1/√d_k" when it reaches the target within this many times the steps the
#: 1/√d_k run of the same seed, optimiser and learning rate needs; beyond it, "slower".
LIKE_REFERENCE_STEPS = 1.5
#: A run "is saturated" at a logged step when at least this fraction of its query rows are (largest
#: weight above softmax_rows.SATURATED_WEIGHT).
SATURATED_RUN = 0.5
#: The logits "grow" (or "shrink") when the median over runs of last-logged / step-0 logit standard
#: deviation is at least this factor (at most its inverse); otherwise they stay about the same.
LOGIT_GROWTH = 2.0

#: The rules of the sweep, by the name used in cells and tables.
RULE_CHOICES: dict[str, ScaleRule] = {
    "inverse_sqrt_dk": RULES["inverse_sqrt_dk"],
    "unscaled": RULES["unscaled"],
    "inverse_dk": RULES["inverse_dk"],
    "qknorm": RULES["qknorm"],
    "softcap_unscaled": RULES["softcap_unscaled"],
}
REFERENCE_RULE = "inverse_sqrt_dk"
OPTIMIZERS = ("adam", "sgd")


@dataclass(frozen=True, kw_only=True)
class ScaleRun:
    """What every run of the sweep shares; :class:`ScaleVsDkConfig` and :class:`ScaleCell` extend it,
    so each setting and its default is declared once."""

    steps: int = 500
    batch: int = 64
    log_every: int = 10  # steps between logged metrics (and the window of the running accuracy)
    final_eval: int = 2048  # fresh samples for the final accuracy
    task: MarkedCount = field(default_factory=MarkedCount)

    def __post_init__(self):
        for name in ("steps", "batch", "log_every", "final_eval"):
            check_count(name, getattr(self, name))


@dataclass(frozen=True)
class ScaleCell(RuleRun, ScaleRun):
    """One training run (rule, d_k, optimizer "adam" or "sgd", learning rate, seed, then the shared
    settings). Its hash is its cache key: every field that changes the numbers is here."""

    RULES: ClassVar = RULE_CHOICES
    OPTIMIZERS: ClassVar = OPTIMIZERS

    d_model: int = 32
    n_heads: int = 2
    code_version: int = 4  # bump when training code changes: old cached results then miss

    def __post_init__(self):
        super().__post_init__()
        self.check_run()


@dataclass(frozen=True)
class ScaleVsDkConfig(ScaleRun):
    """The sweep. Default: 270 cells of 500 steps; the cells at the grid's top rate diverge within a
    few steps. Each cell records its own run time, and the report states the times measured (see
    :meth:`quick` for seconds instead of minutes).

    The SGD grid runs from 0.03 to 2.7 in steps of 3: the rate tuned for 1/√d_k must lie strictly
    inside it at every d_k, which :func:`tune_sgd` checks and reports (an edge is said, never hidden).
    """

    rules: tuple[str, ...] = tuple(RULE_CHOICES)
    d_ks: tuple[int, ...] = (16, 64, 256)
    seeds: int = 3
    adam_lr: float = 3e-3
    sgd_lrs: tuple[float, ...] = (0.03, 0.1, 0.3, 0.9, 2.7)
    target_accuracy: float = 0.9

    def __post_init__(self):
        super().__post_init__()
        unknown = [r for r in self.rules if r not in RULE_CHOICES]
        if unknown or REFERENCE_RULE not in self.rules:
            raise InputError(
                f"rules: expected names among {sorted(RULE_CHOICES)} including {REFERENCE_RULE!r}, "
                f"got {list(self.rules)}"
            )
        check_count("seeds", self.seeds)
        check_positive("adam_lr", self.adam_lr)
        if not 0 < self.target_accuracy <= 1:
            raise InputError(f"target_accuracy: expected a number in (0, 1], got {self.target_accuracy!r}")
        if not self.sgd_lrs or list(self.sgd_lrs) != sorted(set(self.sgd_lrs)):
            raise InputError(f"sgd_lrs: expected increasing distinct learning rates, got {list(self.sgd_lrs)}")

    @classmethod
    def quick(cls, seeds: int = 1) -> ScaleVsDkConfig:
        """Seconds, not minutes: every rule, two d_k, three SGD rates, few steps."""
        return cls(d_ks=(16, 64), seeds=seeds, sgd_lrs=(0.03, 0.1, 0.3), steps=40, log_every=10, final_eval=256)

    def cells(self) -> list[ScaleCell]:
        return rule_grid(
            ScaleCell,
            self.rules,
            self.d_ks,
            self.seeds,
            ("adam", self.adam_lr),
            self.sgd_lrs,
            **shared_settings(self, ScaleRun),
        )
