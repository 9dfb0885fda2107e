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
MAY_IMPORT = {
    "faces": {"faces", "report", "middle", "core"},
    "report": {"report", "core"},
    "middle": {"middle", "core"},
    "core": {"core"},
}


def layer(module: str) -> str:
    parts = module.split(".")
    top = parts[1] if len(parts) > 1 else ""
    return "faces" if top in FACES else "report" if top in REPORT else "middle" if top in MIDDLE else "core"


def module_name(path: Path) -> str:
    parts = ("attnscale",) + path.relative_to(SRC).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(source: str) -> list[tuple[int, str]]:
    """(line, module) of every attnscale import in ``source``, wherever it is (``from attnscale import
    x`` names the module attnscale.x, as it is one here)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("attnscale"):
            found += (
                [(node.lineno, f"attnscale.{a.name}") for a in node.names]
                if node.module == "attnscale"
                else [(node.lineno, node.module)]
            )
        elif isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names if a.name.startswith("attnscale")]
    return found


def upward(module: str, source: str) -> list[str]:
    here = layer(module)
    return [
        f"{module}:{line} imports {target} ({layer(target)}, above {here})"
        for line, target in imported(source)
        if layer(target) not in MAY_IMPORT[here]
    ]


MODULES = sorted(SRC.rglob("*.py"))


@pytest.mark.parametrize("path", MODULES, ids=[str(p.relative_to(SRC)) for p in MODULES])
def test_no_import_points_up(path):
    assert upward(module_name(path), path.read_text(encoding="utf-8")) == []


@pytest.mark.parametrize(
    "module, source",
    [
        ("attnscale.report.experiments", "def f():\n    from attnscale.experiments import references\n"),
        ("attnscale.report.html", "import attnscale.claims.register\n"),
        ("attnscale.torch.monitor", "from attnscale.experiments.training.gpt import GPT\n"),
        ("attnscale.results", "def g():\n    from attnscale import cli\n"),
        ("attnscale.claims.register", "from attnscale.report import html\n"),
    ],
)
def test_the_check_sees_an_import_that_points_up(module, source):
    assert len(upward(module, source)) == 1


def test_every_shipped_reference_kind_has_its_command_as_data():
    """What the report says of a reference (the command that made it) is in results.KINDS, for every
    kind that has a producer, and only for those."""
    from attnscale import results
    from attnscale.experiments import references

    with_command = {k for k, kind in results.KINDS.items() if kind.reference_command}
    assert with_command == set(references.PRODUCERS)


def import_graph() -> dict[str, set[str]]:
    """{module: the attnscale modules it imports, at the top or deferred}; ``from package import
    name`` counts the submodule package.name where there is one."""
    modules = {module_name(p): p for p in MODULES}
    graph = {}
    for name, path in modules.items():
        targets = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("attnscale"):
                targets |= {
                    f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in modules else node.module
                    for a in node.names
                }
            elif isinstance(node, ast.Import):
                targets |= {a.name for a in node.names if a.name in modules}
        graph[name] = {t for t in targets if t in modules and t != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import circles of ``graph``: its strongly connected components of more than one module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_circle():
    """No two modules import each other, even through others or inside a function (a circle hidden
    in a deferred import is a module doing two jobs: functional, the backends and flex once were one)."""
    assert cycles(import_graph()) == []


def test_the_circle_check_sees_a_circle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []
