"""The sweep runner: order, cache hits, resume after an interruption (also kill -9), process backend,
and each cell's own time, measured where it ran and kept with it in the cache."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass

import pytest

from attnscale.experiments.sweeps.runner import LocalBackend, run_sweep
from attnscale.errors import InputError
from attnscale.store import ResultCache
from helpers.sweeps import CountingBackend

CALLS: list[int] = []


@dataclass(frozen=True)
class Cell:
    x: int

    @property
    def label(self) -> str:
        return f"x={self.x}"


def square(cell: Cell) -> dict:
    CALLS.append(cell.x)
    return {"y": cell.x * cell.x, "half": cell.x / 2}


def test_results_in_cell_order_and_progress(tmp_path):
    seen = []
    cells = [Cell(i) for i in (3, 1, 2)]
    out = run_sweep("sq", cells, square, ResultCache(tmp_path), progress=lambda d, t, label: seen.append((d, t)))
    assert [d.result["y"] for d in out] == [9, 1, 4]
    assert seen[0] == (0, 3) and seen[-1] == (3, 3)


def test_cache_hit_does_not_recompute(tmp_path):
    cells = [Cell(i) for i in range(4)]
    first = run_sweep("sq", cells, square, ResultCache(tmp_path))
    backend = CountingBackend()
    CALLS.clear()
    second = run_sweep("sq", cells, square, ResultCache(tmp_path), backend)
    assert backend.computed == 0 and CALLS == []
    assert first == second  # results and times alike: a cached cell keeps its computation's time


def test_resumed_sweep_equals_uninterrupted(tmp_path):
    cells = [Cell(i) for i in range(6)]
    run_sweep("sq", cells[:2] + cells[4:5], square, ResultCache(tmp_path / "resumed"))  # the "interrupted" part
    backend = CountingBackend()
    resumed = run_sweep("sq", cells, square, ResultCache(tmp_path / "resumed"), backend)
    whole = run_sweep("sq", cells, square, ResultCache(tmp_path / "whole"))
    assert backend.computed == 3
    assert [d.result for d in resumed] == [d.result for d in whole]


def test_damaged_cache_file_is_recomputed(tmp_path):
    cache = ResultCache(tmp_path)
    run_sweep("sq", [Cell(5)], square, cache)
    cache.path("sq", {"x": 5}).write_text('{"config": {"x": 5}, "res')  # a torn file, as if written in place
    backend = CountingBackend()
    assert run_sweep("sq", [Cell(5)], square, cache, backend)[0].result["y"] == 25
    assert backend.computed == 1


def test_local_backend_matches_serial(tmp_path):
    cells = [Cell(i) for i in range(5)]
    serial = run_sweep("sq", cells, square, ResultCache(tmp_path / "a"))
    parallel = run_sweep("sq", cells, square, ResultCache(tmp_path / "b"), LocalBackend(workers=2))
    assert [d.result for d in serial] == [d.result for d in parallel]
    assert {d.seconds["workers"] for d in serial} == {1} and {d.seconds["workers"] for d in parallel} == {2}


def sleepy(cell: Cell) -> dict:
    time.sleep(0.2)
    return {"y": cell.x}


def test_each_cell_records_its_own_time_which_the_cache_keeps(tmp_path):
    """The runner times each cell where it runs (wall: at least its sleep; CPU: far less, as sleeping
    costs none) and writes the time into the cell's cache entry, which a later run reads back."""
    cache = ResultCache(tmp_path)
    (done,) = run_sweep("sleepy", [Cell(1)], sleepy, cache, LocalBackend(workers=1))
    assert 0.2 <= done.seconds["wall"] < 30 and 0 <= done.seconds["cpu"] < done.seconds["wall"]
    assert done.seconds["workers"] == 1
    assert json.loads(cache.path("sleepy", {"x": 1}).read_text())["seconds"] == done.seconds
    assert run_sweep("sleepy", [Cell(1)], sleepy, cache, CountingBackend()) == [done]


def test_a_cell_cached_by_older_code_has_no_time(tmp_path):
    cache = ResultCache(tmp_path)
    cache.path("sq", {"x": 2}).write_text(json.dumps({"config": {"x": 2}, "result": {"y": 4}}))  # no "seconds"
    backend = CountingBackend()
    (done,) = run_sweep("sq", [Cell(2)], square, cache, backend)
    assert backend.computed == 0 and done.result == {"y": 4} and done.seconds is None


def test_local_backend_rejects_bad_workers():
    with pytest.raises(InputError, match="workers"):
        LocalBackend(workers=0)


SLOW_MODULE = """
import time
from dataclasses import dataclass

@dataclass(frozen=True)
class Slow:
    x: int

def slow_square(cell):
    time.sleep(0.25)
    return {"y": cell.x * cell.x}
"""

DRIVER = """
import sys
sys.path.insert(0, {folder!r})
from slowcells import Slow, slow_square
from attnscale.experiments.sweeps.runner import LocalBackend, run_sweep
from attnscale.store import ResultCache

if __name__ == "__main__":
    run_sweep("slow", [Slow(i) for i in range(12)], slow_square, ResultCache({cache!r}), LocalBackend(2))
"""


def test_kill_minus_9_then_rerun_computes_only_missing(tmp_path):
    (tmp_path / "slowcells.py").write_text(textwrap.dedent(SLOW_MODULE))
    cache_dir = tmp_path / "cache"
    driver = tmp_path / "driver.py"
    driver.write_text(DRIVER.format(folder=str(tmp_path), cache=str(cache_dir)))
    proc = subprocess.Popen(
        [sys.executable, str(driver)], start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and len(list(cache_dir.glob("slow-*.json"))) < 3:
            time.sleep(0.05)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the driver and its workers: the group this test started
        proc.wait()
    finished = sorted(cache_dir.glob("slow-*.json"))
    assert 3 <= len(finished) < 12, "the kill should land mid-sweep"
    for path in finished:  # nothing half-written
        assert json.loads(path.read_text())["result"]["y"] >= 0

    sys.path.insert(0, str(tmp_path))
    try:
        from slowcells import Slow, slow_square

        backend = CountingBackend()
        results = run_sweep("slow", [Slow(i) for i in range(12)], slow_square, ResultCache(cache_dir), backend)
    finally:
        sys.path.remove(str(tmp_path))
    assert backend.computed == 12 - len(finished)
    assert [d.result["y"] for d in results] == [i * i for i in range(12)]


INTERRUPT_MODULE = """
import time
from dataclasses import dataclass
from pathlib import Path

@dataclass(frozen=True)
class Cell:
    x: int
    marker: str

def work(cell):
    if cell.x == 1:
        time.sleep(0.3)
        Path(cell.marker).write_text("done")
    if cell.x == 2:
        time.sleep(8)               # a long cell, still running when Ctrl-C comes
        Path(cell.marker + ".long").write_text("done")
    return {"y": cell.x}
"""

INTERRUPT_DRIVER = """
import json, sys, time
from pathlib import Path
sys.path.insert(0, {folder!r})
from interruptcells import Cell, work
from attnscale.experiments.sweeps.runner import LocalBackend

if __name__ == "__main__":
    marker = Path({marker!r})
    gen = LocalBackend(2).map(work, [Cell(i, str(marker)) for i in range(3)])
    first = next(gen)
    deadline = time.monotonic() + 30
    while not marker.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    time.sleep(0.5)                 # cell 1 has finished, but nobody has read it yet
    handed = gen.throw(KeyboardInterrupt)
    try:
        next(gen)
        raised = False
    except KeyboardInterrupt:
        raised = True
    long_cell_ended = Path(str(marker) + ".long").exists()
    print(json.dumps({{"first": first, "handed": handed, "raised": raised, "long_cell_ended": long_cell_ended}}))
"""


def test_ctrl_c_hands_over_finished_cells_and_does_not_wait_for_running_ones(tmp_path):
    """Cell 2 sleeps 8 s. On KeyboardInterrupt the backend yields the finished, unread cell 1 (so
    run_sweep caches it) and re-raises before the running cell ends (a fact, not a time: load
    cannot break it)."""
    (tmp_path / "interruptcells.py").write_text(textwrap.dedent(INTERRUPT_MODULE))
    driver = tmp_path / "driver.py"
    driver.write_text(INTERRUPT_DRIVER.format(folder=str(tmp_path), marker=str(tmp_path / "cell1.done")))
    done = subprocess.run(
        [sys.executable, str(driver)], capture_output=True, text=True, timeout=90, stdin=subprocess.DEVNULL
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["first"][:2] == [0, {"y": 0}]
    assert seen["handed"][:2] == [1, {"y": 1}] and seen["raised"]
    assert not seen["long_cell_ended"], seen


def _session_alive(sid: int) -> list[int]:
    """Processes of session ``sid`` that still run (zombies waiting for init to reap them are dead)."""
    alive = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            if os.getsid(int(entry)) != sid:
                continue
            state = open(f"/proc/{entry}/stat").read().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if state not in ("Z", "X"):
            alive.append(int(entry))
    return alive


@pytest.mark.slow
@pytest.mark.skipif(not os.path.isdir("/proc"), reason="reads the process table from /proc")
def test_sigint_to_train_with_workers_ends_fast_leaves_no_process_keeps_cells(tmp_path):
    """SIGINT to the driver alone (as kill -INT or a job runner sends it, not the terminal's
    process-group Ctrl-C): exit 130 (within 60 s: no hang, whatever the load), no process of its session left, the finished cells
    cached; a second SIGINT during the clean-up prints no traceback."""
    pytest.importorskip("torch")
    out = tmp_path / "run"
    proc = subprocess.Popen(
        [sys.executable, "-m", "attnscale", "train", "scale-vs-dk", "--quick", "--workers", "2", "--results", str(out)],
        cwd=tmp_path,
        start_new_session=True,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not list(out.glob("**/cells/*.json")) and proc.poll() is None:
            time.sleep(0.05)
        cached_before = len(list(out.glob("**/cells/*.json")))
        assert cached_before >= 1 and proc.poll() is None, "the interrupt should land mid-sweep"
        proc.send_signal(signal.SIGINT)
        time.sleep(0.1)
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 130, (proc.returncode, stderr)
    assert "Traceback" not in stderr and "Exception ignored" not in stderr, stderr
    assert stderr.strip().splitlines()[-1] == "attnscale: interrupted"
    deadline = time.monotonic() + 5  # the forkserver sees its pipe close
    while _session_alive(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _session_alive(proc.pid) == []
    cells = sorted(out.glob("**/cells/*.json"))
    assert len(cells) >= cached_before and not (out / "summary.json").exists()
    for path in cells:  # whole files, each a finished cell
        assert "final_accuracy" in json.dumps(json.loads(path.read_text())["result"])


def test_ending_a_pool_leaves_its_wakeup_pipe_closed_before_exit():
    """After the workers are ended, the pool's manager thread has finished and closed its wake-up
    pipe, so that the interpreter's exit hook skips it instead of writing to a pipe being closed
    (Python 3.11 printed "OSError: Bad file descriptor" after a Ctrl-C otherwise)."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    from attnscale.experiments.sweeps.runner import _terminate

    pool = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"))
    running = pool.submit(time.sleep, 30)
    while not pool._processes:
        time.sleep(0.05)
    manager, wakeup = pool._executor_manager_thread, pool._executor_manager_thread_wakeup
    _terminate(pool, grace_s=5.0)
    assert not manager.is_alive() and wakeup._closed
    assert running.done()
