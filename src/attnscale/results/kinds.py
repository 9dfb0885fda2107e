"""The table of kinds of result: each kind's name (its folder under the results root), the fields its
data must hold and the command that made its shipped reference; the families of the user's own models
(``probe/user/<slug>``); where a kind's result and cells live."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from attnscale.errors import InputError, check_choice

DEFAULT_ROOT = Path("attnscale-results")


@dataclass(frozen=True)
class Kind:
    """One kind of result: its folder under the root (the name itself) and the dotted paths that its
    ``data`` must hold (checked on write and on read, so a renamed key fails where it is made)."""

    name: str
    required: tuple[str, ...] = ()
    description: str = ""
    #: the command that made the reference result shipped for this kind (run from a fresh results
    #: folder), None when none is shipped. Plain data, so that the report can say how to reproduce
    #: a reference without importing what produced it (:mod:`attnscale.experiments.references`).
    reference_command: str | None = None


#: The fields a probe's result holds, and a rescale's, whichever model it is of.
PROBE_FIELDS = ("model", "heads", "check.max_abs_diff")
RESCALE_FIELDS = ("model", "alphas", "check", "analysis")


def _sweep(name: str, required: tuple[str, ...]) -> Kind:
    """A training sweep's kind, ``train/<experiment>``: made, and its reference too, by ``attnscale train <experiment>``."""
    command = "attnscale train " + name.removeprefix("train/")
    return Kind(name, ("cells", *required), command, command)


# The one table of kinds. A producer adds its kind here; a chapter names a kind, never a path.
KINDS: dict[str, Kind] = {
    k.name: k
    for k in (
        Kind("demo", ("answer",), "a doctest's"),
        Kind(
            "verify",
            ("claims", "counts"),
            "attnscale verify: the blog post's claims and their verdicts",
            "attnscale verify",
        ),
        Kind("probe/minilm", PROBE_FIELDS, "attnscale probe --model minilm", "attnscale probe"),
        Kind("probe/smollm2", PROBE_FIELDS, "attnscale probe --model smollm2", "attnscale probe --model smollm2"),
        Kind("rescale/smollm2", RESCALE_FIELDS, "attnscale rescale --model smollm2", "attnscale rescale"),
        Kind("rescale/minilm", RESCALE_FIELDS, "attnscale rescale --model minilm", "attnscale rescale --model minilm"),
        _sweep("train/scale-vs-dk", ("analysis", "analysis.table", "analysis.verdicts")),
        _sweep("train/logit-growth", ("analysis.table", "analysis.guard", "analysis.setup")),
        _sweep("train/lm", ("analysis", "analysis.verdicts", "analysis.curves")),
        _sweep("train/early-warning", ("analysis.table", "analysis.runs", "analysis.grid", "analysis.setup")),
        # The telemetry reference is the committed quiet run of docs/results (a benchmark on a loaded
        # machine would give wrong ratios), made with --repeats 3.
        Kind(
            "telemetry",
            ("rows", "memory", "verdicts", "variants"),
            "attnscale telemetry-bench",
            "attnscale telemetry-bench --repeats 3",
        ),
    )
}


# Families of kinds, one kind per model of the user's: "<family>/<slug>", the slug [a-z0-9._-].
USER_FAMILIES: dict[str, Kind] = {
    k.name: k
    for k in (
        Kind("probe/user", PROBE_FIELDS, "attnscale probe --model PATH"),
        Kind("rescale/user", RESCALE_FIELDS, "attnscale rescale --model PATH"),
    )
}


_SLUG = re.compile(r"[a-z0-9][a-z0-9._-]{0,63}")


def user_kind(family: str, slug: str) -> str:
    """The kind of the user's model ``slug`` in ``family`` ("probe" or "rescale"): "probe/user/<slug>"."""
    check_choice("family", f"{family}/user", USER_FAMILIES)
    if not _SLUG.fullmatch(slug):
        raise InputError(
            f"slug: expected 1 to 64 of a-z, 0-9, '.', '_', '-' (starting with a letter or digit), got {slug!r}"
        )
    return f"{family}/user/{slug}"


def user_kinds(family: str, root: str | os.PathLike = DEFAULT_ROOT) -> list[str]:
    """The kinds of ``family`` ("probe" or "rescale") that have a result (full or quick) under ``root``, sorted."""
    check_choice("family", f"{family}/user", USER_FAMILIES)
    folder = Path(root) / family / "user"
    found = (
        []
        if not folder.is_dir()
        else sorted(
            p.name
            for p in folder.iterdir()
            if _SLUG.fullmatch(p.name) and ((p / "result.json").is_file() or (p / "quick.json").is_file())
        )
    )
    return [f"{family}/user/{slug}" for slug in found]


def kind_spec(kind: str) -> Kind:
    family, _, slug = kind.rpartition("/")
    if family in USER_FAMILIES and _SLUG.fullmatch(slug):
        return Kind(kind, USER_FAMILIES[family].required, USER_FAMILIES[family].description)
    check_choice("kind", kind, KINDS)
    return KINDS[kind]


def result_path(kind: str, root: str | os.PathLike = DEFAULT_ROOT, quick: bool = False) -> Path:
    """``<root>/<kind>/result.json``, or ``quick.json`` for a quick run."""
    return Path(root) / kind_spec(kind).name / ("quick.json" if quick else "result.json")


def cells_dir(kind: str, root: str | os.PathLike = DEFAULT_ROOT) -> Path:
    """Where a sweep of this kind caches its cells (keyed by a hash of each cell, so quick and full
    cells never collide)."""
    return Path(root) / kind_spec(kind).name / "cells"
