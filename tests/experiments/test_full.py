"""``attnscale full`` with a fake runner (the real steps take hours): the plan (every producer's
command, the sweeps' options passed through, the two pages last), resuming (current results are kept,
a failed step stops the run and the next run goes on from it) and the progress line's ETA from the
reference results' recorded times."""

from __future__ import annotations

import io
from pathlib import Path

from attnscale.cli import full


def _steps(tmp_path, **kw):
    return full.plan(tmp_path / "res", tmp_path / "site", **kw)


def test_the_plan_runs_every_producer_then_both_pages_passing_the_backend_to_the_sweeps(tmp_path):
    steps = _steps(tmp_path, workers=2, backend="ray", address="auto")
    assert [s.kind for s in steps] == [*full.ORDER, "", ""]
    by_kind = {s.kind: s.argv for s in steps if s.kind}
    assert by_kind["train/scale-vs-dk"] == (
        "train",
        "scale-vs-dk",
        "--results",
        str(tmp_path / "res"),
        "--workers",
        "2",
        "--backend",
        "ray",
        "--address",
        "auto",
    )
    assert by_kind["probe/smollm2"] == ("probe", "--model", "smollm2", "--results", str(tmp_path / "res"))
    assert "--backend" not in by_kind["verify"] and steps[-1].argv[-4:] == (
        "--page-dir",
        str(tmp_path / "site"),
        "--lang",
        "zh",
    )


class FakeRunner:
    """Runs nothing: records each step, reports twice "still running", then an exit status."""

    def __init__(self, fail: str | None = None):
        self.ran, self.fail, self.envs = [], fail, []

    def __call__(self, step, log: Path, env: dict):
        self.ran.append(step.kind or step.argv[-1])
        self.envs.append(env)
        yield None
        yield None
        yield 3 if step.kind == self.fail else 0


def test_current_results_are_kept_and_a_failure_stops_the_run_until_it_is_rerun(tmp_path, monkeypatch):
    shipped = tmp_path / "shipped"  # a folder: the variable is checked where it is read
    shipped.mkdir()
    monkeypatch.setenv("ATTNSCALE_REFERENCE", str(shipped))
    steps = _steps(tmp_path)
    done = {"train/scale-vs-dk"}
    current = lambda kind, root: kind in done  # noqa: E731
    stream = io.StringIO()
    runner = FakeRunner(fail="probe/smollm2")
    outcome = full.run_full(steps, tmp_path, full.Line(steps, stream), runner, current)
    assert [what for _, what in outcome] == ["kept", "ran", "ran", "ran", "ran", "failed (exit 3)"]
    assert runner.ran == ["train/logit-growth", "train/lm", "train/early-warning", "probe/minilm", "probe/smollm2"]
    done.update(["train/logit-growth", "train/lm", "train/early-warning", "probe/minilm"])  # what the first run made
    runner = FakeRunner()
    outcome = full.run_full(steps, tmp_path, full.Line(steps, io.StringIO()), runner, current)
    assert runner.ran == ["probe/smollm2", "rescale/smollm2", "rescale/minilm", "telemetry", "verify", "en", "zh"]
    assert all(what in ("kept", "ran") for _, what in outcome) and len(outcome) == len(steps)
    # the pages are built from the results made here, not from the shipped references
    assert runner.envs[-1]["ATTNSCALE_REFERENCE"] == "" and runner.envs[0]["ATTNSCALE_REFERENCE"] == str(shipped)
    assert "attnscale full: [1/12]" in stream.getvalue() and "(kept: current)" in stream.getvalue()


def test_the_eta_is_the_reference_times_left(tmp_path):
    steps = [full.Step("a", ("x",), 100.0), full.Step("b", ("y",), 50.0), full.Step("", ("z",), 0.0)]
    now = [0.0]
    stream = io.StringIO()
    line = full.Line(steps, stream, clock=lambda: now[0])
    assert line.left(0, 30.0) == 120.0 and line.left(0, 500.0) == 50.0 and line.left(1, 10.0) == 40.0
    now[0] = 90.0
    line.show(0, 90.0, force=True)
    assert stream.getvalue() == "attnscale full: [1/3] 1m30s elapsed · ~1m00s left · attnscale x\n"


def test_a_dry_run_lists_what_it_would_keep_and_run_and_runs_nothing(tmp_path, capsys):
    steps = full.plan(tmp_path, tmp_path / "page")
    kept = {"probe/minilm"}
    planned = full.dry_run(steps, tmp_path, current=lambda kind, root: kind in kept)
    assert [s for _, s in planned] == steps
    assert {s.kind for what, s in planned if what == "kept"} == kept
    from attnscale.cli import main

    assert main(["full", "--dry-run", "--results", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "to run           attnscale train lm --results" in out and "nothing was run" in out
    assert not any(tmp_path.iterdir())  # nothing written


def _reference_sweep(folder: Path, seconds: list) -> list[dict]:
    """A train/scale-vs-dk reference in ``folder`` whose cells record ``seconds`` (a cell's wall, or None)."""
    from attnscale import results

    cells = [
        {
            "cell": {"rule": "unscaled", "seed": i},
            "result": {},
            "seconds": None if s is None else {"wall": s, "cpu": s / 2, "workers": 1},
        }
        for i, s in enumerate(seconds)
    ]
    results.write("train/scale-vs-dk", {"cells": cells, "analysis": {"table": [], "verdicts": []}}, seed=0, root=folder)
    return cells


def test_a_sweeps_eta_is_its_missing_cells_own_times_over_the_workers(tmp_path, monkeypatch):
    """A resumed sweep computes only the cells its cache lacks: those cells' times in the reference,
    run --workers at a time, are its ETA; a cell of no recorded time makes the step's time unknown."""
    from attnscale import results
    from attnscale.store import ResultCache

    monkeypatch.setenv("ATTNSCALE_REFERENCE", str(tmp_path / "ref"))
    cells = _reference_sweep(tmp_path / "ref", [100.0, 200.0, 300.0, 400.0])
    root = tmp_path / "res"
    cache = ResultCache(results.cells_dir("train/scale-vs-dk", root))
    for entry in cells[1:3]:  # an interrupted run cached two of them
        cache.put("scale-vs-dk", entry["cell"], {})
    step = next(s for s in full.plan(root, tmp_path / "site", workers=2) if s.kind == "train/scale-vs-dk")
    assert step.expected_s == (100.0 + 400.0) / 2
    assert step.basis == "2 of its 4 cells to compute, by their times in the reference, 2 at a time"
    _reference_sweep(tmp_path / "ref", [100.0, None, 300.0, 400.0])
    fresh = next(
        s for s in full.plan(tmp_path / "fresh", tmp_path / "site", workers=2) if s.kind == "train/scale-vs-dk"
    )
    assert fresh.expected_s is None and "1 of them without a recorded time" in fresh.basis
    steps = [full.Step("a", ("x",), 100.0), fresh, full.Step("", ("z",), 0.0)]
    stream = io.StringIO()
    full.Line(steps, stream, clock=lambda: 0.0).show(0, 0.0, force=True)
    assert "~1m40s + 1 step of unrecorded time left" in stream.getvalue()


def test_a_dry_run_says_what_each_time_comes_from(tmp_path, monkeypatch, capsys):
    from attnscale.cli import main

    monkeypatch.setenv("ATTNSCALE_REFERENCE", str(tmp_path / "ref"))
    _reference_sweep(tmp_path / "ref", [600.0, 600.0])
    assert main(["full", "--dry-run", "--workers", "2", "--results", str(tmp_path / "res")]) == 0
    out = capsys.readouterr().out
    assert "attnscale train scale-vs-dk --results" in out
    assert "(~10m00s: 2 of its 2 cells to compute, by their times in the reference, 2 at a time)" in out
    assert "(?: no reference result)" in out  # the other kinds: none in this folder
    assert "attnscale full: about 10m00s, plus train/logit-growth" in out
