"""The reference results are package data: read through importlib.resources wherever attnscale is
installed (a wheel carries them; .ci/run builds one, installs it outside the clone and builds the
page there), one copy in the repository."""

from __future__ import annotations

import fnmatch
from pathlib import Path

import pytest

from attnscale import results

REPO = Path(__file__).resolve().parents[2]


def test_the_shipped_references_are_read_without_any_setting(monkeypatch):
    monkeypatch.delenv(results.REFERENCE_ENV, raising=False)
    shipped = results.shipped_reference()
    assert shipped is not None and results.reference_root() == shipped
    env = results.read_preferred("verify", root=Path("nowhere"))
    assert env.origin == "reference" and env.path.is_relative_to(shipped)
    monkeypatch.setenv(results.REFERENCE_ENV, "")  # switched off: none
    assert results.reference_root() is None


def test_every_shipped_reference_is_declared_package_data():
    import attnscale

    package = Path(attnscale.__file__).resolve().parent
    shipped = results.shipped_reference().resolve()
    assert shipped.is_relative_to(package), f"{shipped} lies outside the package {package}: a wheel would lack it"
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    patterns = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["attnscale"]
    files = [p.relative_to(package).as_posix() for p in shipped.rglob("*") if p.is_file()]
    assert len(files) >= 9 and all(f.endswith(".json.gz") for f in files)
    undeclared = [f for f in files if not any(fnmatch.fnmatch(f, pat) for pat in patterns)]
    assert not undeclared
    assert sum((package / f).stat().st_size for f in files) < 5 * 2**20  # the 5 MB limit
    assert not (REPO / "results" / "reference").exists()  # one copy
