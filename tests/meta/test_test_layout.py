"""The tests' own layout: every test file in the folder of its layer, no two with one name (pytest
imports them by file name, "prepend" import mode: two would clash), and none importing another
(what several files share lives in tests/helpers/ and the conftest.py files)."""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
LAYERS = {"core", "torch", "claims", "experiments", "report", "cli", "meta"}


def _test_files() -> list[Path]:
    return sorted(TESTS.rglob("test_*.py"))


def test_every_test_file_is_in_the_folder_of_a_layer():
    misplaced = [
        str(p.relative_to(TESTS)) for p in _test_files() if p.parent.parent != TESTS or p.parent.name not in LAYERS
    ]
    assert not misplaced, f"test files outside tests/<layer>/ ({', '.join(sorted(LAYERS))}): {misplaced}"


def test_no_two_test_files_share_a_name():
    counts = Counter(p.name for p in _test_files())
    assert not [n for n, c in counts.items() if c > 1], {
        n: [str(p.relative_to(TESTS)) for p in _test_files() if p.name == n] for n, c in counts.items() if c > 1
    }


def test_no_test_file_imports_another():
    found = []
    for path in _test_files():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            names += [node.module] if isinstance(node, ast.ImportFrom) and node.module else []
            found += [f"{path.relative_to(TESTS)} imports {n}" for n in names if n.split(".")[0].startswith("test_")]
    assert not found, found
