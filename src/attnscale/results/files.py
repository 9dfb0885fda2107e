"""The envelope every producer writes and every face reads: :func:`write` (validated, strict, atomic),
:func:`read` (validated, gzip or not), the reference results shipped with attnscale
(:func:`reference_root`) and the one choice every face makes between the user's result and the
reference (:func:`read_preferred`); an output path refused before any work (:func:`check_writable`)."""

from __future__ import annotations

import gzip
import json
import os
import tempfile
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from attnscale.errors import InputError
from attnscale.results.kinds import DEFAULT_ROOT, Kind, kind_spec, result_path
from attnscale.results.strict import strict_jsonable
from attnscale.store import write_bytes_atomic

#: The environment variable naming the folder of reference results ("" for none).
REFERENCE_ENV = "ATTNSCALE_REFERENCE"


#: The package folder of the reference results (package data: a wheel carries them), read through
#: importlib.resources.
PACKAGE_REFERENCE = "reference_results"


SCHEMA = 1


ENVELOPE_FIELDS = ("schema", "kind", "quick", "created", "config", "seed", "version", "environment", "data")


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

    spec = kind_spec(kind)
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
    spec = kind_spec(kind)
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
        f"({kind_spec(kind).description or kind})"
    )


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
