"""What the cells of the training sweeps have in common.

* A sweep and its cells share settings (steps, batch size, model width …), declared once: each
  experiment puts them in one keyword-only dataclass that both its sweep configuration and its cell
  extend, and :func:`shared_settings` hands the sweep's values to every cell it makes.
* A cell of a sweep over scale rules (``scale-vs-dk``, ``lm``) is one run of one rule at one d_k with
  one optimiser, learning rate and seed: :class:`RuleRun`, its checks and its label; both sweep the
  same grid (:func:`rule_grid`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import ClassVar

from attnscale.errors import check_choice, check_count, check_positive

__all__ = ["shared_settings", "RuleRun", "rule_grid"]


def shared_settings(obj, settings: type) -> dict:
    """``obj``'s values of the fields that dataclass ``settings`` declares (``obj`` extends it)."""
    return {f.name: getattr(obj, f.name) for f in fields(settings)}


@dataclass(frozen=True)
class RuleRun:
    """One run of a scale rule: which rule (a key of the experiment's ``RULES``), the query/key size
    per head, the optimiser (one of its ``OPTIMIZERS``), the learning rate and the seed."""

    RULES: ClassVar[Mapping] = {}
    OPTIMIZERS: ClassVar[tuple[str, ...]] = ()

    rule: str
    d_k: int
    optimizer: str
    lr: float
    seed: int

    def check_run(self) -> None:
        """Each of the five, or an InputError naming it (the cells call this from __post_init__)."""
        check_choice("rule", self.rule, self.RULES)
        check_count("d_k", self.d_k)
        check_choice("optimizer", self.optimizer, self.OPTIMIZERS)
        check_positive("lr", self.lr)
        check_count("seed", self.seed, minimum=0)

    @property
    def label(self) -> str:
        return f"{self.rule} d_k={self.d_k} {self.optimizer} lr={self.lr:g} seed={self.seed}"


def rule_grid(cell: type, rules, d_ks, seeds: int, adaptive: tuple[str, float], sgd_lrs, **common) -> list:
    """The cells of a sweep over scale rules, seed by seed, d_k by d_k, rule by rule: each with the
    adaptive optimiser ``adaptive`` = (name, rate) at its one rate, then plain SGD at every rate of
    ``sgd_lrs``; ``common`` (the shared settings) goes to every cell."""
    name, lr = adaptive
    return [
        cell(rule, d_k, optimizer, rate, seed, **common)
        for seed in range(seeds)
        for d_k in d_ks
        for rule in rules
        for optimizer, rate in [(name, lr), *(("sgd", r) for r in sgd_lrs)]
    ]
