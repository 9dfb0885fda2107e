"""Result files on disk: atomic writes and a cache keyed by a hash of the configuration.

Everything written here is strict JSON (RFC 8259). A cache entry keeps NaN and ±inf exactly (a diverged
run's loss must stay a divergence) by tagging them, ``{"$float": "NaN"}``, and untagging on read.
Nothing is ever half-written: files are written next to their destination and renamed into place
(``os.replace`` is atomic on POSIX), so an interrupted run (even kill -9) leaves either the old file
or the new one.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["config_hash", "to_jsonable", "write_json_atomic", "write_bytes_atomic", "read_json", "ResultCache"]


def to_jsonable(obj: Any) -> Any:
    """Plain JSON data from dataclasses, NumPy scalars/arrays, tuples and paths. NaN and ±inf stay
    floats here: a writer decides (results refuse them; the cache tags them)."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_jsonable(getattr(obj, f.name)) for f in dataclasses.fields(obj)}  # not ClassVars
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_jsonable(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return to_jsonable(obj.tolist())
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, Path):
        return str(obj)
    return obj


def config_hash(config: Any, length: int = 16) -> str:
    """A stable hash of a configuration (any JSON-able data): the cache key of its result."""
    text = json.dumps(to_jsonable(config), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:length]


def _read_umask() -> int:
    """The process umask, read without changing it where Linux shows it (/proc); elsewhere by
    setting and restoring it, once, at import (before any thread of ours writes files)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0)
    os.umask(mask)
    return mask


_UMASK = _read_umask()


def write_bytes_atomic(path: str | os.PathLike, data: bytes) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~_UMASK)  # mkstemp makes 0600; results are ordinary files
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path


_TAG = "$float"


def _tag_nonfinite(obj: Any) -> Any:
    if isinstance(obj, float) and not math.isfinite(obj):
        return {_TAG: "NaN" if obj != obj else ("Infinity" if obj > 0 else "-Infinity")}
    if isinstance(obj, dict):
        return {k: _tag_nonfinite(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_tag_nonfinite(v) for v in obj]
    return obj


def _untag(d: dict) -> Any:
    return float(d[_TAG]) if len(d) == 1 and d.get(_TAG) in ("NaN", "Infinity", "-Infinity") else d


def write_json_atomic(path: str | os.PathLike, data: Any) -> Path:
    """Strict JSON, NaN and ±inf tagged (read back exactly by :func:`read_json`)."""
    text = json.dumps(_tag_nonfinite(to_jsonable(data)), indent=1, sort_keys=False, ensure_ascii=False, allow_nan=False)
    return write_bytes_atomic(path, text.encode("utf-8"))


def _refuse(constant: str):
    raise ValueError(f"{constant} is not valid JSON")


def read_json(path: str | os.PathLike) -> Any:
    """A file :func:`write_json_atomic` wrote (tagged non-finite floats restored); bare NaN/Infinity,
    which no strict reader takes, is refused."""
    with open(path, encoding="utf-8") as f:
        return json.load(f, object_hook=_untag, parse_constant=_refuse)


class ResultCache:
    """A folder of ``<kind>-<hash>.json`` files, one per configuration.

    >>> import tempfile
    >>> cache = ResultCache(tempfile.mkdtemp())
    >>> cache.get("demo", {"d_k": 64}) is None
    True
    >>> _ = cache.put("demo", {"d_k": 64}, {"variance": 64.0})
    >>> cache.get("demo", {"d_k": 64})["variance"]
    64.0
    """

    def __init__(self, root: str | os.PathLike):
        self.root = Path(root)

    def path(self, kind: str, config: Any) -> Path:
        return self.root / f"{kind}-{config_hash(config)}.json"

    def get(self, kind: str, config: Any) -> Any | None:
        """The result stored for ``config``, None when there is none (or a damaged one)."""
        record = self.get_record(kind, config)
        return None if record is None else record["result"]

    def get_record(self, kind: str, config: Any) -> dict | None:
        """The whole entry stored for ``config``: ``{"config", "result"}`` and what :meth:`put` was
        given besides (``seconds``); None when there is none (or a damaged one)."""
        path = self.path(kind, config)
        if not path.exists():
            return None
        try:
            record = read_json(path)
        except ValueError:
            return None  # a foreign or damaged file is recomputed, not trusted
        return record if isinstance(record, dict) and "result" in record else None

    def put(self, kind: str, config: Any, result: Any, **extra: Any) -> Path:
        """Store ``result`` for ``config``, with ``extra`` fields beside it (plain JSON data)."""
        return write_json_atomic(self.path(kind, config), {"config": config, "result": result, **extra})
