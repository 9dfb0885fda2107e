"""The layers of docs/architecture.md, held: every import of an attnscale module in src/ — at the top
or deferred into a function — points down or within its layer, and the report reads results only
(no path from report/ to claims/, experiments/ or integrations/: the report imports the core only,
and the core only itself)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import attnscale

SRC = Path(attnscale.__file__).parent
# The drawing's layers by the module's first name under attnscale; anything not named is core.
FACES, REPORT, MIDDLE = {"cli", "__main__"}, {"report"}, {"claims", "experiments", "integrations"}
MAY_IMPORT = {"faces": {"faces", "report", "middle", "core"}, "report": {"report", "core"},
              "middle": {"middle", "core"}, "core": {"core"}}


def layer(module: str) -> str:
    parts = module.split(".")
    top = parts[1] if len(parts) > 1 else ""
    return ("faces" if top in FACES else "report" if top in REPORT else "middle" if top in MIDDLE else "core")


def module_name(path: Path) -> str:
    parts = ("attnscale",) + path.relative_to(SRC).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(source: str) -> list[tuple[int, str]]:
    """(line, module) of every attnscale import in ``source``, wherever it is (``from attnscale import
    x`` names the module attnscale.x, as it is one here)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("attnscale"):
            found += ([(node.lineno, f"attnscale.{a.name}") for a in node.names] if node.module == "attnscale"
                      else [(node.lineno, node.module)])
        elif isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names if a.name.startswith("attnscale")]
    return found


def upward(module: str, source: str) -> list[str]:
    here = layer(module)
    return [f"{module}:{line} imports {target} ({layer(target)}, above {here})"
            for line, target in imported(source) if layer(target) not in MAY_IMPORT[here]]


MODULES = sorted(SRC.rglob("*.py"))


@pytest.mark.parametrize("path", MODULES, ids=[str(p.relative_to(SRC)) for p in MODULES])
def test_no_import_points_up(path):
    assert upward(module_name(path), path.read_text(encoding="utf-8")) == []


@pytest.mark.parametrize("module, source", [
    ("attnscale.report.experiments", "def f():\n    from attnscale.experiments import references\n"),
    ("attnscale.report.html", "import attnscale.claims.register\n"),
    ("attnscale.torch.monitor", "from attnscale.experiments.training.gpt import GPT\n"),
    ("attnscale.results", "def g():\n    from attnscale import cli\n"),
    ("attnscale.claims.register", "from attnscale.report import html\n"),
])
def test_the_check_sees_an_import_that_points_up(module, source):
    assert len(upward(module, source)) == 1


def test_every_shipped_reference_kind_has_its_command_as_data():
    """What the report says of a reference (the command that made it) is in results.KINDS, for every
    kind that has a producer, and only for those."""
    from attnscale import results
    from attnscale.experiments import references

    with_command = {k for k, kind in results.KINDS.items() if kind.reference_command}
    assert with_command == set(references.PRODUCERS)
