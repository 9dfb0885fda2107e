"""One writer per kind of result: a run that writes ``<root>/<kind>/`` holds that folder's lock while
it computes and writes, so that two runs on one results folder never compute the same cells twice nor
write over each other's files.

The lock is ``fcntl.flock`` on ``<root>/<kind>/.lock`` (an advisory lock the kernel keeps per open
file): it is released when the holder closes it, exits, is stopped by Ctrl-C or is killed (``kill -9``
included), so a lock whose holder is gone is never in the way: a file left by a killed holder is
stale, and the next run takes it. While held, the file says who holds it (process id, host, command,
since when) for the run that waits; a holder that lets go removes it.

A second run waits (it is told who holds the lock, through ``waiting``), then goes on: a sweep then
reads from its cell cache what the first run computed, rather than computing it again. Waiting, not
stopping, because the second run's result is then the first's for free; Ctrl-C stops the wait.

    >>> import tempfile
    >>> root = tempfile.mkdtemp()
    >>> with locked("demo", root) as lock:
    ...     lock.path.name
    '.lock'

``flock`` locks are local to one machine: two hosts writing one results folder over NFS are not kept
apart (the holder's host is written in the file for that reason).
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from attnscale.errors import InputError

__all__ = ["Holder", "ResultsLock", "locked", "LOCK_NAME"]

#: The lock file's name inside a kind's folder (hidden: a results folder lists results, not locks).
LOCK_NAME = ".lock"


@dataclass(frozen=True)
class Holder:
    """Who holds a lock, as its lock file says."""

    pid: int | None
    host: str
    command: str
    since: str  # UTC, ISO 8601


class ResultsLock:
    """The lock of ``<root>/<kind>/``: :meth:`acquire` waits for it (calling ``waiting(holder)`` once,
    when another process holds it), :meth:`release` gives it back. Use :func:`locked`."""

    def __init__(self, kind: str, root, command: str | None = None):
        from attnscale.results import result_path

        self.folder = result_path(kind, root).parent
        self.path = self.folder / LOCK_NAME
        self.command = command if command is not None else " ".join(["attnscale", *sys.argv[1:]])
        self._fd: int | None = None
        self._made: list[Path] = []  # the folders acquire made, deepest first

    @staticmethod
    def _try(fd: int) -> bool:
        import fcntl

        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            return False

    def holder(self) -> Holder | None:
        """Who holds the lock now, as the lock file says (None when it says nothing readable)."""
        try:
            said = json.loads(self.path.read_text(encoding="utf-8") or "null")
        except (OSError, ValueError):
            return None
        if not isinstance(said, dict):
            return None
        return Holder(
            said.get("pid"), str(said.get("host", "?")), str(said.get("command", "?")), str(said.get("since"))
        )

    def acquire(self, waiting: Callable[[Holder | None], None] | None = None, poll_s: float = 0.2) -> None:
        """Take the lock, waiting while another process holds it; ``waiting(holder)`` is called once
        before the wait (the holder as its file says, None if it has not written it yet)."""
        if self._fd is not None:
            raise InputError(f"lock: {self.path} is held by this lock already")
        told = False
        while True:
            self._made = _missing_folders(self.folder)
            self.folder.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                while not self._try(fd):
                    if not told and waiting is not None:
                        waiting(self.holder())
                    told = True
                    time.sleep(poll_s)
                if _same_file(fd, self.path):
                    break
            except BaseException:  # Ctrl-C while waiting: nothing held, nothing left open
                os.close(fd)
                raise
            # The holder removed the file as it let go (release): lock the one at the path now.
            os.close(fd)
        record = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "command": self.command,
            "since": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        }
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(record).encode("utf-8"), 0)
        self._fd = fd

    def release(self) -> None:
        """Give the lock back: its file removed, and the folders :meth:`acquire` made, when the run
        left nothing in them (a run refused half-way leaves no trace). Safe to call twice."""
        import fcntl

        fd, self._fd = self._fd, None
        if fd is None:
            return
        try:
            # Removed while still held: a process waiting on this file sees it gone once it has the
            # lock (acquire compares the file it locked with the one at the path) and takes the next.
            self.path.unlink(missing_ok=True)
            # Explicitly: worker processes forked while it was held share the open file, and would
            # otherwise keep it locked until they end too.
            fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)
        for folder in self._made:  # deepest first; one with anything in it stays
            try:
                folder.rmdir()
            except OSError:
                break


def _missing_folders(folder: Path) -> list[Path]:
    """``folder`` and those above it that do not exist yet, deepest first."""
    missing = []
    while not folder.exists() and folder.parent != folder:
        missing.append(folder)
        folder = folder.parent
    return missing


def _same_file(fd: int, path: Path) -> bool:
    """Whether the open file ``fd`` is still the file at ``path``."""
    try:
        return os.path.samestat(os.fstat(fd), os.stat(path))
    except FileNotFoundError:
        return False


@contextlib.contextmanager
def locked(
    kind: str, root, waiting: Callable[[Holder | None], None] | None = None, command: str | None = None
) -> Iterator[ResultsLock]:
    """Hold the lock of ``<root>/<kind>/`` within the block (waiting for it first; see
    :class:`ResultsLock`), released on leaving it, by an error or Ctrl-C too. ``command``: what the
    lock file says the holder runs (default: this process's ``attnscale`` arguments)."""
    lock = ResultsLock(kind, root, command)
    lock.acquire(waiting)
    try:
        yield lock
    finally:
        lock.release()
