"""The report's modules import each other at the top, never inside a function: an import deferred
into a function is how a circle of modules hides (report/figures, html and text once held each other
that way). Any import graph that needs one is a module doing two jobs."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import attnscale.report

REPORT = Path(attnscale.report.__file__).parent
MODULES = sorted(REPORT.rglob("*.py"))


def _deferred_report_imports(path: Path) -> list[str]:
    """``module:line name`` of each import of an attnscale.report module inside a function of ``path``."""
    found = []
    for fn in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            continue
        for node in ast.walk(fn):
            names = (
                [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else []
            )
            found += [f"{path.name}:{node.lineno} {n}" for n in names if n.startswith("attnscale.report")]
    return found


@pytest.mark.parametrize("path", MODULES, ids=[str(p.relative_to(REPORT)) for p in MODULES])
def test_no_report_module_defers_an_import_of_another(path):
    assert _deferred_report_imports(path) == []


def test_the_check_sees_a_deferred_import(tmp_path):
    source = tmp_path / "m.py"
    source.write_text("def f():\n    from attnscale.report.html import esc\n    return esc\n", encoding="utf-8")
    assert _deferred_report_imports(source) == ["m.py:2 attnscale.report.html"]


def test_each_report_module_imports_first():
    """Imported first, before any other module of the report, each one loads: a circle of top-level
    imports would fail for the module the circle is entered by."""
    names = [
        ".".join(p.relative_to(REPORT.parent.parent).with_suffix("").parts).removesuffix(".__init__") for p in MODULES
    ]
    script = (
        "import importlib, sys\n"
        f"for name in {names!r}:\n"
        "    for loaded in [m for m in sys.modules if m.startswith('attnscale.report')]:\n"
        "        del sys.modules[loaded]\n"
        "    importlib.import_module(name)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
