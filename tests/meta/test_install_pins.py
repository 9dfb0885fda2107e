"""attnscale installs beside the user's own torch: pyproject.toml declares floors, never exact versions of
torch, transformers or lightning; the exact versions this project runs live in constraints.txt, which
`make setup` and CI install with (issue 48)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

REPO = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
FLOORED = ("torch", "transformers", "lightning")  # a user brings their own: never pinned exactly


def _project_requirements() -> list[tuple[str, Requirement]]:
    """(where, requirement) of every dependency and extra's requirement of [project] (attnscale's own
    extras, `attnscale[...]`, left out)."""
    project = PYPROJECT["project"]
    found = [("dependencies", Requirement(r)) for r in project["dependencies"]]
    for extra, reqs in project["optional-dependencies"].items():
        found += [(f"[{extra}]", Requirement(r)) for r in reqs]
    return [(where, r) for where, r in found if r.name != "attnscale"]


def constraints() -> dict[str, Version]:
    """{name: version} of constraints.txt's `name==version` lines."""
    pins = {}
    for line in (REPO / "constraints.txt").read_text(encoding="utf-8").splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            req = Requirement(line)
            (spec,) = req.specifier
            assert spec.operator == "==", f"constraints.txt: {line!r} is not an exact version"
            pins[req.name.lower().replace("_", "-")] = Version(spec.version)
    return pins


def _name(req: Requirement) -> str:
    return req.name.lower().replace("_", "-")


def test_torch_transformers_and_lightning_have_floors_not_pins():
    for where, req in _project_requirements():
        if _name(req) in FLOORED:
            ops = {s.operator for s in req.specifier}
            assert ops and ops <= {">=", "<"}, f"{where}: {req} (a floor >=, and at most an upper bound <)"


def test_every_requirement_is_pinned_in_the_constraints_at_a_version_it_admits():
    """What CI installs satisfies what pyproject.toml declares: each floor is at or below the version the
    suite runs with (the floors are the lowest versions it ran with)."""
    pins = constraints()
    for where, req in _project_requirements():
        name = _name(req)
        assert name in pins, f"{where}: {req.name} has no exact version in constraints.txt"
        assert req.specifier.contains(pins[name], prereleases=True), f"{where}: {req} excludes {pins[name]}"


def test_torch_is_constrained_to_the_cpu_build():
    assert str(constraints()["torch"]).endswith("+cpu"), "a looser torch could pull a multi-GB CUDA build"


@pytest.mark.parametrize("path", ["Makefile", ".ci/run"])
def test_make_and_ci_install_with_the_constraints(path):
    text = (REPO / path).read_text(encoding="utf-8")
    # every install of a package the project runs (not the installers: pip itself, the build tool)
    installs = [
        line
        for line in text.splitlines()
        if re.search(r"pip install\b", line)
        and not re.search(r"(--upgrade pip|install -q build)\s*$", line)
        and not line.lstrip().startswith("#")
    ]
    assert installs, path
    for line in installs:
        assert "-c constraints.txt" in line, f"{path}: {line.strip()!r} installs without the constraints"
