"""Every Python block of the README runs as written and shows what it computed.

Each ```python block is run alone, in a fresh interpreter, in an empty temporary folder (what a reader
pasting it into a file does), and must exit 0 and print something: a block that only assigns shows a
reader nothing. Before running, each block is read for names it uses but never defines (the README's
first block once called ``probe_model(model, tokenizer)`` with neither loaded) and names it imports but
never uses (it once imported ``TensorBoardSink`` for nothing).

A block may be illustrative only — lines that go into the reader's own set-up, which no file could
run alone — when its first line is ``# illustrative, not run: <why>``; it must still parse. Shell
commands and printed output are in ```sh or bare ``` blocks, not Python ones.
"""

from __future__ import annotations

import ast
import builtins
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import attnscale

README = Path(__file__).resolve().parents[1] / "README.md"
ILLUSTRATIVE = "# illustrative, not run: "
BLOCK = re.compile(r"^```python\n(.*?)^```$", re.S | re.M)


def python_blocks() -> list[tuple[int, str]]:
    """(line number of the opening fence, code) of every ```python block of the README."""
    text = README.read_text(encoding="utf-8")
    return [(text.count("\n", 0, m.start()) + 1, m.group(1)) for m in BLOCK.finditer(text)]


def runnable_blocks() -> list[tuple[int, str]]:
    return [(line, code) for line, code in python_blocks() if not code.startswith(ILLUSTRATIVE)]


def _names(code: str) -> tuple[set[str], set[str], set[str]]:
    """(bound, used, imported) names of ``code``, scopes merged: a name bound anywhere counts as
    defined (enough for straight-line README code; what it misses is a name used before or outside
    the scope it is bound in, which running the block then catches)."""
    bound, used, imported = set(), set(), set()
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.Name):
            (used if isinstance(node.ctx, ast.Load) else bound).add(node.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                name = alias.asname or alias.name.split(".")[0]
                bound.add(name)
                imported.add(name)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            bound.add(node.name)
    return bound, used, imported


def test_the_readme_has_python_blocks_and_marks_the_illustrative_ones_with_a_reason():
    blocks = python_blocks()
    assert len(runnable_blocks()) >= 2, "the extractor found too few runnable blocks: has the fence changed?"
    for line, code in blocks:
        ast.parse(code)  # an illustrative block must still be Python
        if code.startswith(ILLUSTRATIVE):
            why = code.splitlines()[0].removeprefix(ILLUSTRATIVE)
            assert len(why.split()) >= 4, f"README line {line}: say why the block is not run"


@pytest.mark.parametrize("line, code", runnable_blocks(), ids=lambda x: f"line{x}" if isinstance(x, int) else "")
def test_a_block_defines_what_it_uses_and_uses_what_it_imports(line, code):
    bound, used, imported = _names(code)
    undefined = sorted(used - bound - set(dir(builtins)))
    assert not undefined, f"README line {line}: the block uses {undefined} without defining them"
    unused = sorted(imported - used)
    assert not unused, f"README line {line}: the block imports {unused} without using them"


@pytest.mark.parametrize("line, code", runnable_blocks(), ids=lambda x: f"line{x}" if isinstance(x, int) else "")
def test_a_block_runs_alone_and_prints_what_it_computed(line, code, tmp_path):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    script = tmp_path / "block.py"
    script.write_text(code, encoding="utf-8")
    src = str(Path(attnscale.__file__).resolve().parents[1])  # this checkout's attnscale, not another
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, (src, os.environ.get("PYTHONPATH")))),
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
    }
    done = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, f"README line {line}:\n{done.stderr[-3000:]}"
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    shown = [row for row in done.stdout.splitlines() if row.strip()]
    assert shown, f"README line {line}: the block prints nothing of what it computed"
    shown_in_readme = _output_after(line)
    if shown_in_readme is not None:  # the README quotes its output: the same lines
        ran = [row for row in shown if not row.startswith("building the fused kernel")]
        assert [row[:10] for row in ran] == [row[:10] for row in shown_in_readme], (ran, shown_in_readme)


def _output_after(line: int) -> list[str] | None:
    """The lines of the bare ``` block that quotes a Python block's output ("What it printed ..."
    just before it), when the README has one between this block and the next heading or block."""
    text = README.read_text(encoding="utf-8").splitlines()
    end = next(i for i in range(line, len(text)) if text[i] == "```")
    for i in range(end + 1, len(text)):
        if text[i].startswith(("#", "```python")):
            return None
        if text[i] == "```" and "printed" in text[i - 1]:
            close = text.index("```", i + 1)
            return [row for row in text[i + 1 : close] if row.strip()]
    return None
