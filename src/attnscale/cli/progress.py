"""A progress bar on stderr for long work; silent when stderr is not a terminal.

The library never prints: long-running library functions take a ``progress(done, total, label)``
callback, and the CLI passes an instance of :class:`Progress`.
"""

from __future__ import annotations

import sys
import time


class Progress:
    def __init__(self, stream=None, enabled: bool | None = None, width: int = 28):
        self.stream = stream or sys.stderr
        self.enabled = self.stream.isatty() if enabled is None else enabled
        self.width = width
        self.start = time.monotonic()
        self._shown = False

    def __call__(self, done: int, total: int, label: str = "") -> None:
        if not self.enabled or total <= 0:
            return
        frac = min(max(done / total, 0.0), 1.0)
        filled = int(round(frac * self.width))
        elapsed = time.monotonic() - self.start
        bar = "█" * filled + "·" * (self.width - filled)
        self.stream.write(f"\r{bar} {done}/{total} {elapsed:5.1f}s {label[:40]:<40}")
        self.stream.flush()
        self._shown = True

    def close(self) -> None:
        if self._shown:
            self.stream.write("\r" + " " * (self.width + 60) + "\r")
            self.stream.flush()
            self._shown = False

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
