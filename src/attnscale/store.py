"""Result files on disk: atomic writes and a cache keyed by a hash of the configuration.

Nothing is ever half-written: files are written next to their destination and renamed into place
(``os.replace`` is atomic on POSIX), so an interrupted run (even kill -9) leaves either the old file
or the new one.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["config_hash", "to_jsonable", "write_json_atomic", "write_bytes_atomic", "read_json", "ResultCache"]


def to_jsonable(obj: Any) -> Any:
    """Plain JSON data from dataclasses, NumPy scalars/arrays, tuples and paths. NaN and ±inf stay
    floats (json writes them as NaN/Infinity, which Python and the report's JavaScript both read)."""
    if hasattr(obj, "__dataclass_fields__"):
        return {k: to_jsonable(getattr(obj, k)) for k in obj.__dataclass_fields__}
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


def write_json_atomic(path: str | os.PathLike, data: Any) -> Path:
    text = json.dumps(to_jsonable(data), indent=1, sort_keys=False, ensure_ascii=False)
    return write_bytes_atomic(path, text.encode("utf-8"))


def read_json(path: str | os.PathLike) -> Any:
    with open(path, encoding="utf-8") as f:
        return json.load(f)


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
        path = self.path(kind, config)
        if not path.exists():
            return None
        try:
            return read_json(path)["result"]
        except (ValueError, KeyError, TypeError):
            return None  # a foreign or damaged file is recomputed, not trusted

    def put(self, kind: str, config: Any, result: Any) -> Path:
        return write_json_atomic(self.path(kind, config), {"config": config, "result": result})
