"""What a claim group works with: the configuration, independent seeded random streams, and the
place where it puts its claim results and the data series of the report's figures."""

from __future__ import annotations

import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from attnscale.claims.result import ClaimResult, VerifyConfig, level_text


@dataclass
class Context:
    config: VerifyConfig
    claims: list[ClaimResult] = field(default_factory=list)
    data: dict[str, Any] = field(default_factory=dict)
    # tick(label): one sub-step done; tick(label, fraction): that far into the current sub-step
    tick: Callable[..., None] = lambda label, fraction=None: None
    memo: dict[str, Any] = field(default_factory=dict)  # results shared between groups, see shared()

    def rng(self, stream: str) -> np.random.Generator:
        """A generator for one named stream: it depends on the seed and the name only, so a group's
        numbers do not change when another group is added, removed or run alone."""
        return np.random.default_rng(np.random.SeedSequence([self.config.seed, zlib.crc32(stream.encode())]))

    def shared(self, key: str, compute: Callable[[], Any]) -> Any:
        """A computation several groups use (e.g. the variance Monte Carlo), done once per run."""
        if key not in self.memo:
            self.memo[key] = compute()
        return self.memo[key]

    @property
    def level(self) -> str:
        """The configured confidence level as claim texts print it, e.g. "99%"."""
        return level_text(self.config.confidence)

    def add(self, claim: ClaimResult) -> None:
        """Record a claim; an interval given without its level is at the configured confidence."""
        if claim.ci_low is not None and claim.ci_level is None:
            claim.ci_level = self.config.confidence
        self.claims.append(claim)
