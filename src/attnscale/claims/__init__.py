"""The seed's claims, each turned into an executable check with a verdict.

    >>> from attnscale.claims import VerifyConfig, run_claims
    >>> report = run_claims(VerifyConfig(quick=True, groups=(1,)))
    >>> report.claims[0].verdict
    'holds'

``run_claims`` runs the groups below (one module each; ``VerifyConfig.only`` narrows them to the
claims whose ids start with given prefixes, e.g. ``("S5", "S7.2")``) and returns a :class:`VerifyReport`: the
claim results, and in ``data`` the series the report's figures draw, so that nothing is recomputed
when rendering. The library never prints; pass ``progress(done, total, label)`` to follow a run.

The non-word fields of each claim (chapter, method, the number the seed prints) are in
the register ``attnscale.claims.register.REGISTER``; each group states its claims in English where it
builds the row with :func:`attnscale.claims.register.claim` (the Chinese is in ``i18n/zh.po``).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from attnscale.claims.result import (
    CHAPTERS,
    METHODS,
    VERDICTS,
    ClaimResult,
    VerifyConfig,
    VerifyReport,
    judge_printed,
    selects,
)
from attnscale.errors import InputError
from attnscale.stored_words import GROUP_TITLE

__all__ = [
    "run_claims",
    "VerifyConfig",
    "VerifyReport",
    "ClaimResult",
    "CHAPTERS",
    "METHODS",
    "VERDICTS",
    "judge_printed",
    "GROUPS",
]

# group number → (module under attnscale.claims, sub-steps it reports, title)
GROUPS: dict[int, tuple[str, int, str]] = {
    1: ("seed_numbers", 1, GROUP_TITLE["seed_numbers"]),
    2: ("iid_variance", 2, GROUP_TITLE["iid_variance"]),
    3: ("broken_assumptions", 2, GROUP_TITLE["broken_assumptions"]),
    4: ("rescaling", 1, GROUP_TITLE["rescaling"]),
    5: ("saturation", 1, GROUP_TITLE["saturation"]),
    6: ("gradients", 1, GROUP_TITLE["gradients"]),
    7: ("faq", 2, GROUP_TITLE["faq"]),
    8: ("beyond", 3, GROUP_TITLE["beyond"]),
    9: ("give_away", 1, GROUP_TITLE["give_away"]),
    10: ("from_results", 1, GROUP_TITLE["from_results"]),
}


def run_claims(
    config: VerifyConfig | None = None, progress: Callable[[int, int, str], None] | None = None
) -> VerifyReport:
    """Run the claim groups of ``config`` (all by default) and return their results."""
    import importlib

    from attnscale.claims.context import Context
    from attnscale.provenance import environment

    config = config or VerifyConfig()
    groups = config.selected_groups
    # Progress counts sub-steps in thousandths, so long Monte Carlo steps can report within themselves.
    total = 1000 * sum(GROUPS[g][1] for g in groups)
    done = 0

    def tick(label: str, fraction: float | None = None) -> None:
        nonlocal done
        if fraction is None:
            done = 1000 * (done // 1000 + 1)
        else:
            done = 1000 * (done // 1000) + min(999, int(1000 * fraction))
        if progress is not None:
            progress(min(done, total), total, label)

    ctx = Context(config=config, tick=tick)
    timings: dict[str, float] = {}
    start = time.perf_counter()
    for g in groups:
        module, _, _ = GROUPS[g]
        t0 = time.perf_counter()
        importlib.import_module(f"attnscale.claims.{module}").run(ctx)
        timings[f"group {g}: {module}"] = round(time.perf_counter() - t0, 3)
    timings["total"] = round(time.perf_counter() - start, 3)
    claims = [c for c in ctx.claims if config.keeps(c.id)]
    unmatched = [p for p in config.only or () if not any(selects(p, c.id) for c in ctx.claims)]
    if unmatched:
        known = ", ".join(c.id for c in ctx.claims)
        raise InputError(f"only: {unmatched} match no claim; the selected groups have {known}")
    return VerifyReport(config=config, environment=environment(), claims=claims, data=ctx.data, timings=timings)
