"""Issue 47: no module in src/ is over MAX_LINES lines (its physical lines, as ``wc -l`` counts them:
docstring, comments and blank lines too). A longer one is split by idea, each part a module named for
what it holds (an over-long one is where several ideas hide), its public names kept where callers find
them."""

from __future__ import annotations

from pathlib import Path

import attnscale

SRC = Path(attnscale.__file__).parent
MAX_LINES = 500


def long_modules(paths: list[Path], root: Path) -> list[str]:
    """Each of ``paths`` over MAX_LINES lines, as "path (n lines)", longest first."""
    counted = [(len(path.read_text(encoding="utf-8").splitlines()), path) for path in paths]
    return [
        f"{path.relative_to(root)} ({n} lines)"
        for n, path in sorted(counted, key=lambda c: (-c[0], str(c[1])))
        if n > MAX_LINES
    ]


def test_no_module_in_src_is_over_500_lines():
    offenders = long_modules(sorted(SRC.rglob("*.py")), SRC.parent)
    assert not offenders, f"{len(offenders)} module(s) over {MAX_LINES} lines (split each by idea):\n" + "\n".join(
        offenders
    )


def test_the_check_counts_every_line_and_names_each_offender(tmp_path):
    at_most, over = tmp_path / "fits.py", tmp_path / "long.py"
    at_most.write_text('"""doc"""\n' + "\n" * (MAX_LINES - 2) + "x = 1\n", encoding="utf-8")
    over.write_text("# comment\n" * MAX_LINES + "\n", encoding="utf-8")  # comments and blanks count
    assert long_modules([at_most], tmp_path) == []
    assert long_modules([at_most, over], tmp_path) == [f"long.py ({MAX_LINES + 1} lines)"]
