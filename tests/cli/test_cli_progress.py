"""Progress on stderr: a bar with an ETA on a terminal, a plain line every few seconds elsewhere,
nothing with --quiet."""

from __future__ import annotations

import io

from attnscale.cli.progress import Progress, fmt_duration


class Clock:
    def __init__(self):
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_durations():
    assert [fmt_duration(s) for s in (0, 7.4, 65, 3600 + 180)] == ["0s", "7s", "1m05s", "1h03m"]


def test_without_a_terminal_one_line_every_few_seconds_with_eta():
    out, clock = io.StringIO(), Clock()
    p = Progress(out, tty=False, every_s=5, clock=clock, heartbeat=False)
    p(2, 12, "2 cached")  # the first call: cached work is not timed
    for done in range(3, 13):
        clock.t += 2.0  # a cell every 2 s
        p(done, 12, f"cell {done}")
    lines = out.getvalue().splitlines()
    assert "\r" not in out.getvalue()
    assert lines[0].startswith("[2/12] 17% · 0s elapsed")
    # every 5 s of a 20 s run, and the last one
    assert [line.split()[0] for line in lines] == ["[2/12]", "[5/12]", "[8/12]", "[11/12]", "[12/12]"]
    # 3 cells in 6 s since the start: 7 left at 2 s each
    assert "~14s left" in lines[1] and "6s elapsed" in lines[1] and lines[1].endswith("cell 5")
    assert "left" not in lines[-1]


def test_on_a_terminal_a_bar_with_eta_then_cleared():
    out, clock = io.StringIO(), Clock()
    with Progress(out, tty=True, clock=clock) as p:
        p(0, 4)
        clock.t += 10
        p(1, 4, "a")
        text = out.getvalue()
        assert text.startswith("\r") and "1/4" in text and "~30s left" in text and "\n" not in text
    assert out.getvalue().endswith("\r")


def test_quiet_writes_nothing():
    out = io.StringIO()
    for tty in (True, False):
        with Progress(out, quiet=True, tty=tty) as p:
            p(1, 2, "x")
            p(2, 2, "y")
    assert out.getvalue() == ""


def test_stream_without_isatty_is_not_a_terminal():
    class Sink:
        def __init__(self):
            self.text = ""

        def write(self, s):
            self.text += s

        def flush(self):
            pass

    sink = Sink()
    Progress(sink)(1, 1, "done")
    assert sink.text.startswith("[1/1] 100%")


def test_heartbeat_repeats_the_line_while_a_long_step_runs():
    """No call for a while (one long cell): the log still gets a line every every_s, with the
    elapsed time updated; it stops with close() and once the work is done."""
    import time

    out = io.StringIO()
    with Progress(out, tty=False, every_s=0.2) as p:
        p(0, 3, "start")
        deadline = time.monotonic() + 60  # however loaded the machine: beats come, or this fails
        while out.getvalue().count("\n") < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
    beats = out.getvalue().splitlines()
    assert len(beats) >= 3 and all(line.startswith("[0/3] 0%") for line in beats)
    after = len(out.getvalue())
    time.sleep(0.4)
    assert len(out.getvalue()) == after  # closed: silent
    done = io.StringIO()
    with Progress(done, tty=False, every_s=0.1) as p:
        p(1, 1, "all")
        time.sleep(0.35)
    assert done.getvalue().count("\n") == 1


def test_work_inside_running_items_counts_in_the_percentage_and_the_eta():
    """running=: how much of the running items is done; the count stays the finished items."""
    out, clock = io.StringIO(), Clock()
    p = Progress(out, tty=False, every_s=0, clock=clock, heartbeat=False)
    p(0, 4, "0 cached")
    clock.t += 10
    p(0, 4, "steps 500/1000 in the running cells", running=0.5)  # half a cell in 10 s
    line = out.getvalue().splitlines()[-1]
    assert (
        line.startswith("[0/4] 12%") and "~1m10s left" in line and line.endswith("steps 500/1000 in the running cells")
    )
    tty = io.StringIO()
    with Progress(tty, tty=True, clock=clock) as bar:
        bar(0, 4)
        clock.t += 10
        bar(0, 4, "steps 500/1000", running=0.5)
        assert "0/4" in tty.getvalue() and "~1m10s left" in tty.getvalue()
