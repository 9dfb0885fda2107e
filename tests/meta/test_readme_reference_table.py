"""The documentation's table of shipped reference results (docs/reference-results.md, once the
README's) says what the results themselves record: each row's command, date, size and (where the
result records its run) run time, and the total size. A regenerated result whose row was not updated
fails here."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from attnscale import results
from attnscale.experiments import references

REPO = Path(__file__).resolve().parents[2]
PAGE = REPO / "docs" / "reference-results.md"
SHIPPED = results.shipped_reference()  # the package's own (the suite may switch the default off)
HEADER = "| result | command | its run time there | computed | size |"


def _rows() -> list[list[str]]:
    lines = PAGE.read_text(encoding="utf-8").splitlines()
    start = lines.index(HEADER) + 2
    rows = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip("|").split("|")])
    return rows


def _stored(kind: str) -> Path:
    return results.stored_path(results.result_path(kind, SHIPPED))


def _duration(seconds: float) -> str:
    s = round(seconds)
    return f"{s} s" if s < 60 else f"{s // 60}m{s % 60:02d}s"


ROWS = _rows()


def test_the_table_lists_every_shipped_result():
    assert sorted(row[0].strip("`") for row in ROWS) == sorted(references.PRODUCERS)


@pytest.mark.parametrize("row", ROWS, ids=[row[0].strip("`") for row in ROWS])
def test_each_row_says_what_its_result_records(row):
    kind, command, took, computed, size = row[0].strip("`"), row[1], row[2], row[3], row[4]
    env = results.read(kind, SHIPPED)
    assert command.startswith(f"`{references.producer(kind).command}"), (kind, command)
    assert computed == env.created[:16].replace("T", " ") + " UTC", (kind, computed, env.created)
    assert size == f"{_stored(kind).stat().st_size / 2**20:.2f} MiB", (kind, size)
    seconds = results.recorded_seconds(env)
    if kind.startswith("train/"):
        # a sweep's result records its last invocation (resumed from its cells); the row gives the
        # logged time of the real run, and says so
        assert re.search(r"\d", took), (kind, took)
    elif seconds is None:
        assert took == "not recorded", (kind, took)
    else:
        assert took == _duration(seconds), (kind, took, seconds)


def test_the_total_is_the_sum_of_the_files():
    total = sum(_stored(kind).stat().st_size for kind in references.PRODUCERS)
    text = PAGE.read_text(encoding="utf-8")
    found = re.search(r"([\d.]+) MiB in all \(([\d,]+) bytes", text)
    assert found, "the page's total of the reference results"
    assert found.group(2) == f"{total:,}" and found.group(1) == f"{total / 2**20:.1f}", (found.groups(), total)
