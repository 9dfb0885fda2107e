"""Where a result came from: versions, machine, seed. Attached to every result we save."""

from __future__ import annotations

import os
import platform
import sys
from importlib import metadata


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def environment() -> dict[str, object]:
    """Versions and machine, without importing heavy packages (torch is read from its metadata)."""
    from attnscale import __version__

    return {
        "attnscale": __version__,
        "python": sys.version.split()[0],
        "numpy": _version("numpy"),
        "torch": _version("torch"),
        "matplotlib": _version("matplotlib"),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "processor": platform.processor() or None,
        "cpu_count": os.cpu_count(),
    }
