"""Every Python block of the README runs as written and prints what the README shows it prints.

Each ```python block is run alone, in a fresh interpreter, in an empty temporary folder (what a reader
pasting it into a file does), and must exit 0 and print something: a block that only assigns shows a
reader nothing. Before running, each block is read for names it uses but never defines (the README's
first block once called ``probe_model(model, tokenizer)`` with neither loaded) and names it imports but
never uses (it once imported ``TensorBoardSink`` for nothing).

The bare ``` block right after each runnable block is its printed output, and the run must print it
(:func:`output_differences`): every line, its words exactly and its numbers to their printed digits, so
a change that moves a figure fails here (the README once showed a mean entropy of 2.499 where the block
printed 2.580). The blocks are seeded, so their figures are the same on every run. One tolerance, for
one kind of number: a rounding error written in e-notation (``1e-06``, the float32 kernel against the
float64 reference) depends on the CPU's vector width and the backend that ran, so it must agree with the
shown one within a factor of 10 (its order of magnitude), not digit for digit. The line a first call
prints before building the fused kernel (``building the fused kernel``) is not part of the output.

A block may be illustrative only — lines that go into the reader's own set-up, which no file could
run alone — when its first line is ``# illustrative, not run: <why>``; it must still parse. Shell
commands and printed output are in ```sh or bare ``` blocks, not Python ones.
"""

from __future__ import annotations

import ast
import builtins
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import attnscale

README = Path(__file__).resolve().parents[2] / "README.md"
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


@pytest.mark.slow
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
    ran = [row for row in shown if not row.startswith(KERNEL_BUILD)]
    differences = output_differences(ran, output_after(line))
    assert not differences, f"README line {line}: the README shows another output:\n" + "\n".join(differences)
    if 'JSONLSink("attn.jsonl")' in code:  # the Quickstart's training loop: its sink logged one line per step
        steps = [json.loads(row)["step"] for row in (tmp_path / "attn.jsonl").read_text().splitlines()]
        assert steps == list(range(len(steps))) and len(steps) >= 2, f"README line {line}: attn.jsonl steps {steps}"


KERNEL_BUILD = "building the fused kernel"
NUMBER = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")


def output_after(line: int) -> list[str]:
    """The non-blank lines of the bare ``` block right after the Python block opened at ``line`` (blank
    lines between them allowed); a runnable block without one fails: the README shows what it prints."""
    text = README.read_text(encoding="utf-8").splitlines()
    end = next(i for i in range(line, len(text)) if text[i] == "```")
    following = next((i for i in range(end + 1, len(text)) if text[i].strip()), None)
    assert following is not None and text[following] == "```", (
        f"README line {line}: no bare ``` block of its printed output right after the block"
    )
    close = text.index("```", following + 1)
    return [row for row in text[following + 1 : close] if row.strip()]


def output_differences(printed: list[str], shown: list[str]) -> list[str]:
    """What differs between the lines a block printed and those the README shows, one message per line:
    the words must be the same, each number the same as written, except a number in e-notation, which
    must be within a factor of 10 of the shown one (a rounding error's order of magnitude)."""
    found = [f"{len(printed)} lines printed, {len(shown)} shown"] if len(printed) != len(shown) else []
    for i, (ran, doc) in enumerate(zip(printed, shown)):
        if NUMBER.split(ran) != NUMBER.split(doc) or not all(
            _same_number(a, b) for a, b in zip(NUMBER.findall(ran), NUMBER.findall(doc))
        ):
            found.append(f"line {i + 1}: printed {ran!r}, shown {doc!r}")
    return found


def _same_number(printed: str, shown: str) -> bool:
    if "e" not in shown.lower():
        return printed == shown
    a, b = abs(float(printed)), abs(float(shown))
    return a == b or (a > 0 and b > 0 and max(a, b) / min(a, b) <= 10)


def test_output_differences_holds_words_and_digits_and_e_notation_to_its_magnitude():
    shown = ["step 0: loss 5.570, mean entropy 2.580 nats", "max |Δ| 1e-06"]
    assert output_differences(list(shown), shown) == []
    assert output_differences(["step 0: loss 5.570, mean entropy 2.581 nats", "max |Δ| 1e-06"], shown)
    assert output_differences(["step 0: loss 5.570, mean entropy 2.58 nats", "max |Δ| 1e-06"], shown)
    assert output_differences(["step 0: loss 5.570, mean entropy 2.580 bits", "max |Δ| 1e-06"], shown)
    assert output_differences(["step 0: loss 5.570, mean entropy 2.580 nats", "max |Δ| 9e-07"], shown) == []
    assert output_differences(["step 0: loss 5.570, mean entropy 2.580 nats", "max |Δ| 2e-05"], shown)
    assert output_differences(shown[:1], shown) == ["1 lines printed, 2 shown"]
