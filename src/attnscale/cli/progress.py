"""Progress of long work on stderr, so that a long run never looks dead.

* On a terminal: a bar redrawn in place, with done/total, elapsed time and the time left (ETA).
* Elsewhere (``> log 2>&1``, CI, a job runner): one plain line every few seconds, and the last one,
  ``[12/30] 40% · 1m05s elapsed · ~1m38s left · <label>``, never a carriage return; while a long
  step runs, a heartbeat thread repeats the line (with the time updated) so the log never goes quiet.
* ``quiet=True`` (the commands' ``--quiet``): nothing.
* Inside long items: a caller that knows how far the running items are passes ``running=`` (the sum
  of their fractions done, e.g. 0.4 + 0.7 for two training cells) and says so in the label ("steps
  240/600, 420/600 in the running cells"); the percentage and the ETA then count that work too.

The library never prints: long-running library functions take a ``progress(done, total, label)``
callback, and the CLI passes an instance of :class:`Progress`::

    with Progress(quiet=args.quiet) as progress:
        run_experiment(..., progress=progress)
"""

from __future__ import annotations

import contextvars
import sys
import threading
import time
from collections.abc import Callable

from attnscale.i18n import N_, Filled, _, catalog, current_lang

ELAPSED, LEFT = N_("{t} elapsed"), N_("~{t} left")


def fmt_duration(seconds: float) -> str:
    """``7s``, ``1m05s``, ``2h03m``: short enough for a progress line."""
    s = int(round(max(seconds, 0.0)))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


class Progress:
    def __init__(
        self,
        stream=None,
        quiet: bool = False,
        tty: bool | None = None,
        every_s: float = 5.0,
        width: int = 28,
        clock: Callable[[], float] = time.monotonic,
        heartbeat: bool = True,
    ):
        self.stream = stream or sys.stderr
        self.quiet = quiet
        self.tty = _isatty(self.stream) if tty is None else tty
        self.every_s = every_s
        self.width = width
        self.clock = clock
        self.start = clock()
        self._shown = False
        self._last_line: float | None = None  # when the last plain line was written
        self._first: tuple[int, float] | None = None  # (done, time) at the first call: cached cells are free
        self._state: tuple[float, int, str, int] | None = None  # the last (done + running, total, label, done)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._beat: threading.Thread | None = None
        self._heartbeat = heartbeat and not self.tty and not quiet

    def eta(self, done: float, total: int, now: float) -> float | None:
        """Seconds left at the rate measured since the first call (work done before it, e.g. cells
        read from a cache, does not count); None until something has been done."""
        if self._first is None:
            return None
        done0, t0 = self._first
        if done <= done0 or now <= t0:
            return None
        return (total - done) * (now - t0) / (done - done0)

    def __call__(self, done: int, total: int, label: str = "", running: float = 0.0) -> None:
        """``done`` of ``total`` items finished; ``running``: how much of the running items is done
        (in items, so below their count)."""
        if self.quiet or total <= 0:
            return
        now = self.clock()
        if self._first is None:
            self._first = (done, now)
        count, done = done, done + running
        label = self._in_lang(label)
        if self.tty:
            eta = self.eta(done, total, now)
            left = "" if eta is None or done >= total else " " + _(LEFT, t=fmt_duration(eta))
            frac = min(max(done / total, 0.0), 1.0)
            filled = int(round(frac * self.width))
            bar = "█" * filled + "·" * (self.width - filled)
            text = f"{bar} {count}/{total} {fmt_duration(now - self.start)}{left} {label[:48]}"
            self.stream.write(f"\r{text:<{self.width + 76}}")
            self.stream.flush()
            self._shown = True
            return
        with self._lock:
            self._state = (done, total, label, count)
            if self._last_line is None or now - self._last_line >= self.every_s or done >= total:
                self._line(now)
        if self._heartbeat and self._beat is None and done < total:
            # A thread starts in an empty context: it runs in a copy of this one, so that its lines
            # are in the language bound here.
            self._beat = threading.Thread(
                target=contextvars.copy_context().run, args=(self._beating,), name="progress-heartbeat", daemon=True
            )
            self._beat.start()

    def _in_lang(self, label: str) -> str:
        """A label in the bound language: the library's labels are English, N_-marked where they are
        sentences, and :class:`~attnscale.i18n.Filled` where they carry data (``batch 1/2``: said
        here, through the catalog); any other (``Var(q·k), uniform``: names and formulas) stays as given."""
        if isinstance(label, Filled):
            return label.said()
        return _(label) if (None, label) in catalog(current_lang()) else label

    def _line(self, now: float) -> None:
        done, total, label, count = self._state
        parts = [f"[{count}/{total}] {100.0 * done / total:.0f}%", _(ELAPSED, t=fmt_duration(now - self.start))]
        eta = self.eta(done, total, now)
        if eta is not None and done < total:
            parts.append(_(LEFT, t=fmt_duration(eta)))
        if label:
            parts.append(label[:72])
        self.stream.write(" · ".join(parts) + "\n")
        self.stream.flush()
        self._last_line = now

    def _beating(self) -> None:
        # The work may sit on one step for minutes: say so every every_s seconds.
        while not self._stop.wait(self.every_s / 2):
            with self._lock:
                now = self.clock()
                if self._state and self._state[0] < self._state[1] and now - self._last_line >= self.every_s:
                    self._line(now)

    def close(self) -> None:
        self._stop.set()
        if self._beat is not None:
            self._beat.join()
            self._beat = None
        if self._shown:
            self.stream.write("\r" + " " * (self.width + 76) + "\r")
            self.stream.flush()
            self._shown = False

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _isatty(stream) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False
