"""A module imported where a test first uses it, not when pytest collects the file (transformers'
first model class costs seconds, paid by every xdist worker that collects the file otherwise)."""

from __future__ import annotations

import importlib.util

import pytest


class _LazyModule:
    def __init__(self, name: str):
        object.__setattr__(self, "_name", name)

    def __getattr__(self, attr: str):
        return getattr(pytest.importorskip(self._name), attr)

    def __repr__(self) -> str:
        return f"<{self._name}, imported at first use>"


def lazy_module(name: str):
    """``pytest.importorskip(name)`` without the import: the calling file is skipped where ``name``
    is not installed (found without importing it), and the module is imported at the first attribute
    a test reads. Call it at a test module's top level."""
    if importlib.util.find_spec(name) is None:
        pytest.skip(f"could not import {name!r}: not installed", allow_module_level=True)
    return _LazyModule(name)
