"""One writer per results folder and kind (attnscale.results_lock): two processes on one folder never
compute the same cells twice; the second waits, says who holds the folder, then reads the first's
cells from the cache. A holder that is killed leaves no lock behind; Ctrl-C stops a wait; the lock is
given back on an error, and a run that wrote nothing leaves no trace. The commands that write results
hold it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from attnscale.results_lock import LOCK_NAME, ResultsLock, locked

pytest.importorskip("fcntl")

# A sweep of three cells of 0.3 s each, cached as it goes (the runner's cache), under the lock the
# train command holds; prints how many cells it computed.
SWEEP = textwrap.dedent(
    """
    import sys, time
    from attnscale import results
    from attnscale.cli.output import hold_results
    from attnscale.store import ResultCache

    root = sys.argv[1]
    with hold_results("train/lm", root):
        cache = ResultCache(results.cells_dir("train/lm", root))
        computed = 0
        for cell in ({"i": 0}, {"i": 1}, {"i": 2}):
            if cache.get("lm", cell) is None:
                time.sleep(0.3)
                cache.put("lm", cell, {"loss": cell["i"]})
                computed += 1
    print(computed)
    """
)


def _start(code: str, *args, **kw) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", code, *map(str, args)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        **kw,
    )


def _held_by(path, pid: int, timeout: float = 60.0) -> dict:
    """The lock file's record once process ``pid`` has written it."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            said = json.loads(path.read_text() or "null")
        except (OSError, ValueError):
            said = None
        if isinstance(said, dict) and said.get("pid") == pid:
            return said
        time.sleep(0.05)
    raise AssertionError(f"process {pid} never took {path}")


def test_two_processes_on_one_folder_compute_each_cell_once(tmp_path):
    lock_file = tmp_path / "train" / "lm" / LOCK_NAME
    first = _start(SWEEP, tmp_path)
    holder = _held_by(lock_file, first.pid)
    second = _start(SWEEP, tmp_path)
    out1, err1 = first.communicate(timeout=120)
    out2, err2 = second.communicate(timeout=120)
    assert first.returncode == 0 and second.returncode == 0, err1 + err2
    assert out1.strip() == "3" and out2.strip() == "0"  # nothing computed twice
    assert err1 == ""
    (line,) = err2.splitlines()  # the second run said, once, whom it waits for
    assert line.startswith(f"attnscale: waiting for {tmp_path / 'train' / 'lm'}: process {first.pid} on ")
    assert holder["command"] in line and "Ctrl-C stops waiting" in line
    assert not lock_file.exists()  # released: nobody holds it
    assert sorted(p.name.split("-")[0] for p in (tmp_path / "train" / "lm" / "cells").iterdir()) == ["lm"] * 3


def test_a_killed_holder_leaves_no_lock(tmp_path):
    hold = "import sys, time\nfrom attnscale.results_lock import locked\nwith locked('train/lm', sys.argv[1]):\n    time.sleep(600)\n"
    proc = _start(hold, tmp_path)
    _held_by(tmp_path / "train" / "lm" / LOCK_NAME, proc.pid)
    proc.kill()  # kill -9: no clean-up runs
    proc.wait(timeout=30)
    waited = []
    started = time.monotonic()
    with locked("train/lm", tmp_path, waiting=waited.append, command="test") as lock:
        assert json.loads(lock.path.read_text())["pid"] == os.getpid()
    assert waited == [] and time.monotonic() - started < 5  # the dead holder's record is stale, not a lock


def test_ctrl_c_stops_a_wait_and_takes_nothing(tmp_path):
    wait = "import sys\nfrom attnscale.results_lock import locked\nwith locked('train/lm', sys.argv[1], waiting=lambda h: print('waiting', flush=True)):\n    print('got it')\n"
    with locked("train/lm", tmp_path, command="holder") as lock:
        proc = _start(wait, tmp_path)
        assert proc.stdout.readline().strip() == "waiting"
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
        assert proc.returncode != 0 and "KeyboardInterrupt" in err and "got it" not in out
        assert json.loads(lock.path.read_text())["command"] == "holder"  # the holder's record untouched


def test_a_waiter_takes_the_lock_its_holder_removed_as_it_let_go(tmp_path):
    first = ResultsLock("train/lm", tmp_path, command="first")
    first.acquire()
    (tmp_path / "train" / "lm" / "result.json").write_text("{}")  # what the run wrote stays
    fd = os.open(first.path, os.O_RDWR)  # a waiter's view: the file as it was while held
    first.release()
    assert not first.path.exists() and (tmp_path / "train" / "lm" / "result.json").exists()
    from attnscale.results_lock import _same_file

    assert not _same_file(fd, first.path)  # the old file a waiter may now lock is not the lock: it retries
    second = ResultsLock("train/lm", tmp_path, command="second")
    second.acquire(waiting=lambda holder: pytest.fail(f"waited for {holder}"))
    assert json.loads(second.path.read_text())["command"] == "second"
    os.close(fd)
    second.release()


def test_an_error_gives_the_lock_back(tmp_path):
    with pytest.raises(RuntimeError):
        with locked("train/lm", tmp_path):
            raise RuntimeError("a sweep failed")
    other = ResultsLock("train/lm", tmp_path)
    other.acquire(waiting=lambda holder: pytest.fail(f"still held by {holder}"))
    other.release()
    other.release()  # twice is harmless


def test_the_train_command_computes_under_the_lock(tmp_path, monkeypatch, capsys):
    import fcntl

    from attnscale.cli import main
    from attnscale.errors import InputError
    from attnscale.experiments.training import registry

    def run_experiment(name, config, root, *args, **kw):
        fd = os.open(root / "train" / name / LOCK_NAME, os.O_RDWR)
        try:
            with pytest.raises(BlockingIOError):  # held by the command while it computes
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        finally:
            os.close(fd)
        raise InputError("stop here")

    monkeypatch.setattr(registry, "run_experiment", run_experiment)
    assert main(["train", "lm", "--quick", "--workers", "1", "--quiet", "--results", str(tmp_path)]) == 2
    assert "stop here" in capsys.readouterr().err
    assert not (tmp_path / "train").exists()  # given back, and a run that wrote nothing leaves nothing
