"""The results contract: where each kind of result lives, and the one envelope every producer writes.

Every program that computes (``verify``, the training sweeps, the probes, the benchmarks) writes its
result through :func:`write`; every face (the report, ``--json``) reads it through :func:`read` or
:func:`read_preferred`. Nothing else names a result path.

* **Kinds** (:data:`KINDS`): one table from a kind's name to its place under the results root and the
  fields its data must hold. A family (:data:`USER_FAMILIES`: ``probe/user``, ``rescale/user``) holds
  one kind per model of the user's, ``<family>/<slug>`` (:func:`user_kind`), with the family's fields. A quick run lives apart from a full one (``quick.json`` beside
  ``result.json``), so it never silently replaces it.
* **Envelope**: ``{"schema", "kind", "quick", "created", "config", "seed", "version", "environment",
  "data"}``. ``data`` is the producer's own, everything a face shows (analyses included).
* **Strict JSON** (RFC 8259): NaN and ±inf are refused at write time, naming where they are, so that a
  figure that does not exist is written as ``null`` with a reason beside it (see :func:`finite_or_none`).
  ``jq``, JavaScript's ``JSON.parse`` and every other reader take the files.
* **Atomic** writes (:func:`attnscale.store.write_bytes_atomic`): an interrupted producer leaves the
  old file or the new one, never half of one.
* **Validated** reads: a missing file, a malformed one, a wrong kind or a missing required field is a
  :class:`ResultError` naming the file and the field, raised at read time, not as a broken page later.
  A result may be stored gzip-compressed (``result.json.gz`` beside where ``result.json`` would be):
  :func:`read` opens either.
* **Reference results** (:func:`reference_root`): the full runs shipped with attnscale
  (``src/attnscale/reference_results/<kind>/result.json.gz`` in the repository: only the envelopes, never a sweep's
  cell cache). :func:`read_preferred`, the one choice every face makes, takes the user's own full
  result, else the reference one, else the user's quick one, and the envelope says which
  (:attr:`Envelope.origin`). ``ATTNSCALE_REFERENCE=DIR`` reads the references from DIR instead;
  ``ATTNSCALE_REFERENCE=`` (empty) uses none.

    >>> import tempfile
    >>> root = tempfile.mkdtemp()
    >>> _ = write("demo", {"answer": 42}, config={"n": 1}, seed=0, quick=True, root=root)
    >>> env = read("demo", root=root, quick=True)
    >>> env.data["answer"], env.quick, env.kind
    (42, True, 'demo')
    >>> read_preferred("demo", root=root).quick     # no full result: the quick one, flagged
    True
"""

from __future__ import annotations

import copy
import gzip
import json
import math
import os
import re
import tempfile
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TypeGuard

from attnscale.errors import InputError, check_choice
from attnscale.store import to_jsonable, write_bytes_atomic

__all__ = [
    "DEFAULT_ROOT",
    "SCHEMA",
    "Kind",
    "KINDS",
    "Envelope",
    "ResultError",
    "ResultMissing",
    "USER_FAMILIES",
    "user_kind",
    "user_kinds",
    "result_path",
    "cells_dir",
    "envelope",
    "write",
    "read",
    "read_preferred",
    "dumps",
    "strict_jsonable",
    "finite_or_none",
    "nulled_nonfinite",
    "restored_nonfinite",
    "check_writable",
    "REFERENCE_ENV",
    "reference_root",
    "shipped_reference",
    "read_reference",
    "recorded_seconds",
    "CellSeconds",
    "cell_seconds",
    "computed_on",
    "stored_path",
]

DEFAULT_ROOT = Path("attnscale-results")
#: The environment variable naming the folder of reference results ("" for none).
REFERENCE_ENV = "ATTNSCALE_REFERENCE"
#: The package folder of the reference results (package data: a wheel carries them), read through
#: importlib.resources.
PACKAGE_REFERENCE = "reference_results"
SCHEMA = 1
ENVELOPE_FIELDS = ("schema", "kind", "quick", "created", "config", "seed", "version", "environment", "data")


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
        Kind(
            "probe/minilm",
            ("model", "heads", "check.max_abs_diff"),
            "attnscale probe --model minilm",
            "attnscale probe",
        ),
        Kind(
            "probe/smollm2",
            ("model", "heads", "check.max_abs_diff"),
            "attnscale probe --model smollm2",
            "attnscale probe --model smollm2",
        ),
        Kind(
            "rescale/smollm2",
            ("model", "alphas", "check", "analysis"),
            "attnscale rescale --model smollm2",
            "attnscale rescale",
        ),
        Kind(
            "rescale/minilm",
            ("model", "alphas", "check", "analysis"),
            "attnscale rescale --model minilm",
            "attnscale rescale --model minilm",
        ),
        Kind(
            "train/scale-vs-dk",
            ("cells", "analysis", "analysis.table", "analysis.verdicts"),
            "attnscale train scale-vs-dk",
            "attnscale train scale-vs-dk",
        ),
        Kind(
            "train/logit-growth",
            ("cells", "analysis.table", "analysis.guard", "analysis.setup"),
            "attnscale train logit-growth",
            "attnscale train logit-growth",
        ),
        Kind(
            "train/lm",
            ("cells", "analysis", "analysis.verdicts", "analysis.curves"),
            "attnscale train lm",
            "attnscale train lm",
        ),
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
        Kind("probe/user", KINDS["probe/minilm"].required, "attnscale probe --model PATH"),
        Kind("rescale/user", KINDS["rescale/minilm"].required, "attnscale rescale --model PATH"),
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


class ResultError(InputError):
    """A result file that cannot be used: the message names the file and the field."""


class ResultMissing(ResultError):
    """No result file of this kind yet."""


@dataclass(frozen=True)
class Envelope:
    kind: str
    data: Any
    config: Any = None
    seed: int | None = None
    quick: bool = False
    version: str = ""
    environment: dict = field(default_factory=dict)
    created: str = ""  # UTC, ISO 8601
    path: Path | None = None  # where it was read from (None before it is written)
    reference: bool = False  # read from the reference results (see reference_root)

    @property
    def origin(self) -> str:
        """Which result this is to its reader: "reference" (shipped with attnscale), "quick" or "full"
        (the user's own quick or full run)."""
        return "reference" if self.reference else "quick" if self.quick else "full"

    def to_dict(self) -> dict:
        return {
            "schema": SCHEMA,
            "kind": self.kind,
            "quick": self.quick,
            "created": self.created,
            "config": self.config,
            "seed": self.seed,
            "version": self.version,
            "environment": self.environment,
            "data": self.data,
        }


def _kind(kind: str) -> Kind:
    family, _, slug = kind.rpartition("/")
    if family in USER_FAMILIES and _SLUG.fullmatch(slug):
        return Kind(kind, USER_FAMILIES[family].required, USER_FAMILIES[family].description)
    check_choice("kind", kind, KINDS)
    return KINDS[kind]


def result_path(kind: str, root: str | os.PathLike = DEFAULT_ROOT, quick: bool = False) -> Path:
    """``<root>/<kind>/result.json``, or ``quick.json`` for a quick run."""
    return Path(root) / _kind(kind).name / ("quick.json" if quick else "result.json")


def cells_dir(kind: str, root: str | os.PathLike = DEFAULT_ROOT) -> Path:
    """Where a sweep of this kind caches its cells (keyed by a hash of each cell, so quick and full
    cells never collide)."""
    return Path(root) / _kind(kind).name / "cells"


def finite_or_none(x: Any) -> float | None:
    """``float(x)`` when finite, else ``None``: write the reason beside it (e.g. ``"diverged"``)."""
    if x is None:
        return None
    x = float(x)
    return x if math.isfinite(x) else None


def nulled_nonfinite(obj: Any, where: str = "data") -> tuple[Any, dict[str, str]]:
    """``obj`` as plain JSON data with every NaN/±inf replaced by ``None``, and the reasons: where each
    was and what it was (``{"data.cells[3].result.loss": "NaN"}``). For producers whose data may hold
    non-finite figures that their own code does not yet name: write the reasons beside the data.

    >>> nulled_nonfinite({"loss": [1.0, float("nan")], "peak": float("inf")})
    ({'loss': [1.0, None], 'peak': None}, {'data.loss[1]': 'NaN', 'data.peak': 'Infinity'})
    """
    reasons: dict[str, str] = {}

    def walk(x, at):
        if isinstance(x, float) and not math.isfinite(x):
            reasons[at] = "NaN" if x != x else ("Infinity" if x > 0 else "-Infinity")
            return None
        if isinstance(x, dict):
            return {k: walk(v, f"{at}.{k}") for k, v in x.items()}
        if isinstance(x, list):
            return [walk(v, f"{at}[{i}]") for i, v in enumerate(x)]
        return x

    return walk(to_jsonable(obj), where), reasons


_PATH_STEP = re.compile(r"\.([^.\[\]]+)|\[(\d+)\]")


def restored_nonfinite(obj: Any, reasons: dict[str, str], where: str = "data") -> Any:
    """The inverse of :func:`nulled_nonfinite`: a copy of ``obj`` with each NaN/±inf that ``reasons``
    names put back in its place (for a reader that needs the figures as they were computed, as the
    cell cache keeps them). A path that does not lead to a ``null`` in ``obj`` is a ValueError naming it.

    >>> data, reasons = nulled_nonfinite({"loss": [1.0, float("nan")]})
    >>> restored_nonfinite(data, reasons)
    {'loss': [1.0, nan]}
    """
    out = copy.deepcopy(obj) if reasons else obj
    for at, what in reasons.items():
        steps = [key if key else int(index) for key, index in _PATH_STEP.findall(at[len(where) :])]
        rebuilt = where + "".join(f"[{s}]" if isinstance(s, int) else f".{s}" for s in steps)
        node = out
        try:
            for step in steps[:-1]:
                node = node[step]
            ok = rebuilt == at and bool(steps) and node[steps[-1]] is None
        except (KeyError, IndexError, TypeError):
            ok = False
        if not ok or what not in ("NaN", "Infinity", "-Infinity"):
            raise ValueError(f"nonfinite: {at!r} ({what!r}) does not name a null figure of {where}")
        node[steps[-1]] = float(what)
    return out


def strict_jsonable(obj: Any, where: str = "data") -> Any:
    """Plain JSON data (see :func:`attnscale.store.to_jsonable`), refusing NaN and ±inf with an
    error that names where they are (``data.cells[3].loss``)."""
    return _check_finite(to_jsonable(obj), where)


def _check_finite(obj: Any, where: str) -> Any:
    if isinstance(obj, float) and not math.isfinite(obj):
        raise ValueError(f"{where}: {obj!r} is not valid JSON; write null and say why beside it")
    if isinstance(obj, dict):
        for k, v in obj.items():
            _check_finite(v, f"{where}.{k}")
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            _check_finite(v, f"{where}[{i}]")
    return obj


def _lookup(data: Any, dotted: str) -> bool:
    node = data
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return False
        node = node[part]
    return True


def _missing_fields(kind: Kind, data: Any) -> list[str]:
    return [f for f in kind.required if not _lookup(data, f)]


def dumps(obj: Any, indent: int | None = 1) -> str:
    """Strict JSON text of ``obj`` (an :class:`Envelope` or plain data): for ``--json -``."""
    if isinstance(obj, Envelope):
        obj = obj.to_dict()
    return json.dumps(strict_jsonable(obj, "result"), indent=indent, ensure_ascii=False, allow_nan=False)


def envelope(kind: str, data: Any, *, config: Any = None, seed: int | None = None, quick: bool = False) -> Envelope:
    """The envelope :func:`write` would write (validated, strict, with this attnscale's version and
    environment and the time now), not written: for ``--json`` of a run that is not kept."""
    from attnscale import __version__
    from attnscale.provenance import environment

    spec = _kind(kind)
    data = strict_jsonable(data)
    missing = _missing_fields(spec, data)
    if missing:
        raise ValueError(f"result {kind!r}: data lacks the required field(s) {missing}")
    return Envelope(
        kind=kind,
        data=data,
        config=strict_jsonable(config, "config"),
        seed=seed,
        quick=bool(quick),
        version=__version__,
        environment=environment(),
        created=datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
    )


def write(
    kind: str,
    data: Any,
    *,
    config: Any = None,
    seed: int | None = None,
    quick: bool = False,
    root: str | os.PathLike = DEFAULT_ROOT,
    path: str | os.PathLike | None = None,
) -> Envelope:
    """Wrap ``data`` in the envelope and write it atomically to :func:`result_path` (or ``path``).
    Returns the envelope as written (with ``path`` set)."""
    env = envelope(kind, data, config=config, seed=seed, quick=quick)
    target = Path(path) if path is not None else result_path(kind, root, quick)
    write_bytes_atomic(target, dumps(env).encode("utf-8"))
    return Envelope(**{**env.__dict__, "path": target})


def _refuse_constant(name: str):
    raise ValueError(f"{name} is not valid JSON")


def stored_path(path: str | os.PathLike) -> Path | None:
    """The file that holds the result meant by ``path``: itself, else its gzip-compressed sibling
    (``result.json.gz``), else None."""
    path = Path(path)
    for candidate in (path, path.with_name(path.name + ".gz")):
        if candidate.is_file():
            return candidate
    return None


def _text(path: Path) -> str:
    raw = path.read_bytes()
    return (gzip.decompress(raw) if path.suffix == ".gz" else raw).decode("utf-8")


def read(
    kind: str, root: str | os.PathLike = DEFAULT_ROOT, quick: bool = False, path: str | os.PathLike | None = None
) -> Envelope:
    """The envelope of ``kind`` (full, or quick), validated; the file may be gzip-compressed
    (:func:`stored_path`). Raises :class:`ResultMissing` when there is no file, :class:`ResultError`
    naming the file and the field when it cannot be used."""
    spec = _kind(kind)
    meant = Path(path) if path is not None else result_path(kind, root, quick)
    target = stored_path(meant)
    if target is None:
        raise ResultMissing(f"{meant}: no {kind} result here yet ({spec.description or kind})")
    try:
        raw = json.loads(_text(target), parse_constant=_refuse_constant)
    except (ValueError, UnicodeDecodeError, OSError, EOFError) as err:
        raise ResultError(f"{target}: not a strict JSON result file ({err})") from None
    if not isinstance(raw, dict):
        raise ResultError(f"{target}: expected a JSON object (the result envelope), got {type(raw).__name__}")
    absent = [f for f in ENVELOPE_FIELDS if f not in raw]
    if absent:
        raise ResultError(f"{target}: envelope field(s) {absent} missing (written by an older attnscale? rerun it)")
    if raw["schema"] != SCHEMA:
        raise ResultError(f"{target}: field 'schema' is {raw['schema']!r}, expected {SCHEMA}")
    if raw["kind"] != kind:
        raise ResultError(f"{target}: field 'kind' is {raw['kind']!r}, expected {kind!r}")
    missing = _missing_fields(spec, raw["data"])
    if missing:
        raise ResultError(f"{target}: field(s) {['data.' + m for m in missing]} missing from the {kind} result")
    return Envelope(
        kind=kind,
        data=raw["data"],
        config=raw["config"],
        seed=raw["seed"],
        quick=bool(raw["quick"]),
        version=raw["version"],
        environment=raw["environment"],
        created=raw["created"],
        path=target,
        reference=_is_reference(target),
    )


def shipped_reference() -> Path | None:
    """The reference results this attnscale ships: its package data (``attnscale/reference_results``,
    found through :mod:`importlib.resources`, so an installed wheel has them as a checkout does), or
    None when they are not on the file system (a zipped install)."""
    from importlib import resources

    folder = resources.files("attnscale").joinpath(PACKAGE_REFERENCE)
    return folder if isinstance(folder, Path) and folder.is_dir() else None


def reference_root() -> Path | None:
    """The folder of reference results: ``$ATTNSCALE_REFERENCE`` when set (empty: none), else the
    ones shipped with attnscale (:func:`shipped_reference`). A set value that is not a folder is an
    :class:`~attnscale.errors.InputError` naming the variable: a typo must not silently show no
    reference results."""
    chosen = os.environ.get(REFERENCE_ENV)
    if chosen is not None:
        if not chosen.strip():
            return None
        folder = Path(chosen)
        if not folder.is_dir():
            what = "a file" if folder.exists() else "nothing there"
            raise InputError(
                f"{REFERENCE_ENV}: expected a folder of reference results (or empty for none), got {chosen!r} ({what})"
            )
        return folder
    return shipped_reference()


def _is_reference(path: Path) -> bool:
    ref = reference_root()
    return ref is not None and path.resolve().is_relative_to(ref.resolve())


def read_reference(kind: str) -> Envelope:
    """The reference result of ``kind`` (always a full run); :class:`ResultMissing` when none ships."""
    ref = reference_root()
    if ref is None:
        raise ResultMissing(f"no reference results here (set {REFERENCE_ENV}=DIR to read them from DIR)")
    return read(kind, ref, quick=False)


def read_preferred(kind: str, root: str | os.PathLike = DEFAULT_ROOT) -> Envelope:
    """The result a face shows: the user's own full result when there is one, else the reference
    result, else the user's quick one (:attr:`Envelope.origin` says which, for the face to say so);
    :class:`ResultMissing` when there is none of the three."""
    for attempt in (
        lambda: read(kind, root, quick=False),
        lambda: read_reference(kind),
        lambda: read(kind, root, quick=True),
    ):
        try:
            return attempt()
        except ResultMissing:
            pass
    raise ResultMissing(
        f"{result_path(kind, root)}: no {kind} result here yet, full, quick or reference "
        f"({_kind(kind).description or kind})"
    )


def _number(x: object) -> TypeGuard[int | float]:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


@dataclass(frozen=True)
class CellSeconds:
    """What a sweep's cells took to compute, as each cell of the result records it (its
    ``seconds``: ``{"wall", "cpu", "workers"}``, measured where and when the cell was computed, so a
    cell read from a cache keeps its computation's time). A cell computed by code that recorded no
    time has none here: it counts in :attr:`cells`, not in :attr:`timed` nor in any sum."""

    each: tuple[float | None, ...]  # per entry of data["cells"], in order: its own wall-clock seconds, or None
    cpu_s: float | None  # the timed cells' CPU seconds, summed (None when none records them)
    workers: int | None  # how many cells ran at once as they were timed, when all timed cells say
    # the same number; None when they differ or do not say

    @property
    def cells(self) -> int:
        return len(self.each)

    @property
    def timed(self) -> int:
        return sum(s is not None for s in self.each)

    @property
    def wall_s(self) -> float:
        """The timed cells' own wall-clock seconds, summed (one cell after another)."""
        return float(sum(s for s in self.each if s is not None))

    @property
    def wall_s_max(self) -> float | None:
        return max((s for s in self.each if s is not None), default=None)

    def summary(self) -> dict:
        """The sweep-level field a sweep's result holds beside its cells (``data.cell_seconds``)."""
        return {
            "cells": self.cells,
            "timed": self.timed,
            "wall": self.wall_s,
            "cpu": self.cpu_s,
            "wall_max": self.wall_s_max,
            "workers": self.workers,
        }


def cell_seconds(result: Envelope | dict) -> CellSeconds | None:
    """The cells' own time of a sweep's result (its envelope, or its data), read from each cell's
    ``seconds``; None when the result holds no cells (not a sweep). The one reader of these fields:
    every face that says what a sweep's cells cost, or how long computing them would take, asks here."""
    data = result.data if isinstance(result, Envelope) else result
    cells = data.get("cells") if isinstance(data, dict) else None
    if not isinstance(cells, list):
        return None
    recorded: list[dict] = [
        c["seconds"] if isinstance(c, dict) and isinstance(c.get("seconds"), dict) else {} for c in cells
    ]
    each = tuple(float(r["wall"]) if _number(r.get("wall")) and r["wall"] >= 0 else None for r in recorded)
    timed = [r for r, wall in zip(recorded, each) if wall is not None]
    cpu = [float(r["cpu"]) for r in timed if _number(r.get("cpu"))]
    workers = {int(r["workers"]) if _number(r.get("workers")) else None for r in timed}
    return CellSeconds(
        each=each, cpu_s=float(sum(cpu)) if cpu else None, workers=workers.pop() if len(workers) == 1 else None
    )


def computed_on(env: Envelope) -> dict:
    """The environment where the figures of ``env`` were computed: for a sweep rebuilt from the cells
    of an earlier result alone (every cell taken from it: ``data.cells_from``), that result's, which
    it records; for any other result its own (``env.environment``, where it was written). A sweep
    whose cells came partly from an earlier result and partly from this run has its own."""
    data = env.data if isinstance(env.data, dict) else {}
    source = data.get("cells_from")
    if (
        isinstance(source, dict)
        and isinstance(source.get("environment"), dict)
        and source.get("cells") == len(data.get("cells") or []) > 0
    ):
        return source["environment"]
    return env.environment


def recorded_seconds(env: Envelope) -> float | None:
    """How long the run that made ``env`` took, as the result itself records it: for a sweep whose
    every cell records its time, the cells' own wall-clock seconds summed (:func:`cell_seconds`;
    run N at a time, a run takes about 1/N of it), else its ``wall_s`` (of its last invocation: cells
    read from the cache cost nothing there); a probe's or rescale's ``seconds`` (loading and
    computing), the verification's ``timings.total``; None when the result records no time."""
    data = env.data if isinstance(env.data, dict) else {}
    cells = cell_seconds(data)
    if cells is not None and cells.cells and cells.timed == cells.cells:
        return cells.wall_s
    if _number(data.get("wall_s")):
        return float(data["wall_s"])
    seconds = data.get("seconds")
    if isinstance(seconds, dict) and seconds and all(_number(v) for v in seconds.values()):
        return float(sum(seconds.values()))
    total = (data.get("timings") or {}).get("total") if isinstance(data.get("timings"), dict) else None
    return float(total) if _number(total) else None


def check_writable(path: str | os.PathLike, what: str) -> Path:
    """Refuse, before any work, an output path that cannot be written: the nearest existing folder on
    its way must be a writable folder. Creates nothing."""
    path = Path(path)
    probe = path
    while not probe.exists():
        if probe.parent == probe:
            break
        probe = probe.parent
    if probe.exists() and not probe.is_dir():
        raise InputError(f"{what}: {str(probe)!r} is a file, expected a folder on the way to {str(path)!r}")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise InputError(f"{what}: cannot write under {str(probe)!r} (permission denied)")
    # Permissions do not tell everything (root may write anywhere, but not into /proc or a read-only
    # file system): a folder made and removed at once does.
    try:
        os.rmdir(tempfile.mkdtemp(dir=probe, prefix=".attnscale-check-"))
    except OSError as err:
        raise InputError(
            f"{what}: cannot write under {str(probe)!r} ({err.strerror or err}), "
            f"expected a folder where {str(path)!r} can be made"
        ) from None
    return path
