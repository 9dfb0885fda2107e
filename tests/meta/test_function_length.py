"""Issue 33: no function in src/ is over MAX_LINES lines, from its ``def`` to the end of its body as
``ast`` counts them (decorators aside). A longer one is split by job, each piece named for what it does."""

from __future__ import annotations

import ast
from pathlib import Path

import attnscale

SRC = Path(attnscale.__file__).parent
MAX_LINES = 80


def long_functions(source: str, where: str) -> list[str]:
    """Each function or method of ``source`` (nested ones too) over MAX_LINES lines, as
    "where:line name (n lines)"."""
    return [
        f"{where}:{node.lineno} {node.name} ({node.end_lineno - node.lineno + 1} lines)"
        for node in ast.walk(ast.parse(source))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno + 1 > MAX_LINES
    ]


def test_no_function_in_src_is_over_80_lines():
    offenders = [
        found
        for path in sorted(SRC.rglob("*.py"))
        for found in long_functions(path.read_text(encoding="utf-8"), str(path.relative_to(SRC.parent)))
    ]
    assert not offenders, f"over {MAX_LINES} lines (split each by job):\n" + "\n".join(offenders)


def test_the_check_counts_from_def_to_the_end_of_the_body():
    body = "".join(f"    x{i} = {i}\n" for i in range(MAX_LINES - 1))
    at_most = f"def fits():\n{body}"
    over = f"class A:\n    @staticmethod\n    def too_long():\n{body.replace('    ', '        ')}        return 0\n"
    assert long_functions(at_most, "m.py") == []
    assert long_functions(over, "m.py") == [f"m.py:3 too_long ({MAX_LINES + 1} lines)"]
