"""Run a sweep: a list of cells (frozen dataclass configurations), each computed once and cached.

* Each cell's result is stored under a hash of the cell (:class:`attnscale.store.ResultCache`) the
  moment it is done, written atomically: interrupt a sweep (Ctrl-C, kill -9) and run it again, and only
  the missing cells are computed; no result file is ever half-written.
* Cells run through a :class:`Backend`, the seam to other engines: anything with
  ``map(fn, cells)`` returning a generator of ``(index, result)`` pairs as cells finish.
  :class:`LocalBackend` runs them in worker processes on this machine; a Ray or Dask backend would
  submit ``fn(cell)`` as remote tasks and yield their results as they complete, with no change to the
  experiments.
* Stopping: :func:`run_sweep` closes the generator when it stops early (Ctrl-C, an error), and the
  backend then ends the work still running itself (the driver may be the only process that got the
  signal: ``kill -INT``, a job runner, a test), so that nothing is left behind.
* ``fn`` must be a module-level function (it is pickled by name) returning plain JSON data.
* Progress inside a cell: a long cell calls :func:`report_steps` as it goes; a backend that
  ``reports_steps`` (:class:`SerialBackend`, :class:`LocalBackend`) hands those reports to
  :func:`run_sweep`, which passes the fraction done of the running cells to its ``progress``
  callback (``running=``), so that a sweep of cells of minutes shows it moving and an ETA.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from typing import Any, Protocol

from attnscale.errors import check_count
from attnscale.experiments.sweeps.process_settings import process_settings, restore_process_settings
from attnscale.store import ResultCache, to_jsonable

__all__ = ["Backend", "SerialBackend", "LocalBackend", "run_sweep", "read_cached", "default_workers", "report_steps"]

Progress = Callable[..., None]      # progress(done, total, label) and, with step reports, running=fraction

# Where report_steps sends (steps done, steps in all) of the cell running in this process: set by the
# backend around each cell; None when nobody listens.
_step_hook: Callable[[int, int], None] | None = None


def report_steps(done: int, total: int) -> None:
    """For a cell's loop: ``done`` of its ``total`` steps are done (nothing when nobody listens)."""
    if _step_hook is not None:
        _step_hook(done, total)


def _with_step_hook(hook, fn, cell):
    global _step_hook
    _step_hook = hook
    try:
        return fn(cell)
    finally:
        _step_hook = None


class Backend(Protocol):
    def map(self, fn: Callable[[Any], Any], cells: Sequence[Any]) -> Iterator[tuple[int, Any]]:
        """Compute ``fn(cell)`` for every cell; yield ``(index into cells, result)`` in any order, as
        each finishes (so that the caller can store it at once). On ``close()`` or an exception
        thrown in (KeyboardInterrupt), stop every cell still running before returning."""
        ...


class SerialBackend:
    """In this process, one cell after the other (no start-up cost: for small sweeps and tests).
    Process-wide settings a training cell makes (deterministic kernels, one thread) are undone after
    each cell, so that they do not leak into the caller. ``on_steps(index, done, total)``: the
    running cell's :func:`report_steps`."""

    reports_steps = True

    def map(self, fn, cells, on_steps=None):
        
        for i, cell in enumerate(cells):
            before = process_settings()
            hook = None if on_steps is None else (lambda done, total, i=i: on_steps(i, done, total))
            try:
                result = _with_step_hook(hook, fn, cell)
            finally:
                restore_process_settings(before)
            yield i, result


_worker_steps = None      # in a worker: the queue its cells' step reports go to


def _init_worker(steps_queue=None) -> None:
    # Ctrl-C in a terminal reaches the whole process group; the driver alone decides what happens
    # (it hands over the finished cells, then ends the workers), so a worker never sees it.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # One thread per worker: the workers already use the cores, and oversubscribing them slows all.
    # Set before torch loads (it reads OMP_NUM_THREADS then); torch is not imported here, as cells
    # that do not need it should not pay for it.
    os.environ["OMP_NUM_THREADS"] = "1"
    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(1)
    global _worker_steps
    _worker_steps = steps_queue


def _run_in_worker(fn, index: int, cell):
    """``fn(cell)`` in a worker, its step reports sent to the driver as (index, done, total)."""
    hook = None if _worker_steps is None else (lambda done, total: _worker_steps.put((index, done, total)))
    return _with_step_hook(hook, fn, cell)


class LocalBackend:
    """Worker processes on this machine (``concurrent.futures`` with ``forkserver``, or ``spawn``
    where forkserver is missing): a fresh interpreter per worker, never a fork of a process that may
    hold threads. At most ``workers`` cells run at once; results come back as they finish.
    ``on_steps(index, done, total)``: the running cells' :func:`report_steps`, through a queue that
    is read while waiting for cells (so at most about ``poll_s`` late)."""

    reports_steps = True
    poll_s = 1.0

    def __init__(self, workers: int = 2, start_method: str | None = None):
        check_count("workers", workers)
        methods = multiprocessing.get_all_start_methods()
        self.workers = workers
        self.start_method = start_method or ("forkserver" if "forkserver" in methods else "spawn")

    def map(self, fn, cells, on_steps=None):
        ctx = multiprocessing.get_context(self.start_method)
        steps = None if on_steps is None else ctx.SimpleQueue()
        pool = ProcessPoolExecutor(self.workers, mp_context=ctx, initializer=_init_worker, initargs=(steps,))
        pending = {pool.submit(_run_in_worker, fn, i, cell): i for i, cell in enumerate(cells)}
        try:
            while pending:
                done, _ = wait(pending, timeout=None if steps is None else self.poll_s, return_when=FIRST_COMPLETED)
                while steps is not None and not steps.empty():
                    on_steps(*steps.get())
                for future in done:
                    yield pending.pop(future), future.result()
        except KeyboardInterrupt:
            # Ctrl-C: end the workers, then hand over the cells that had already finished (so that
            # the caller caches them) and stop.
            ready = [f for f in pending if f.done() and not f.cancelled() and f.exception() is None]
            _terminate(pool)
            for future in ready:
                yield pending.pop(future), future.result()
            raise
        finally:
            # Cells left over (an error, an interrupt, or the caller stopped reading): end them now
            # rather than wait for them; their results would be discarded.
            if pending:
                _terminate(pool)
            else:
                pool.shutdown(wait=True)


def _terminate(pool: ProcessPoolExecutor, grace_s: float = 3.0) -> None:
    """Drop the cells not started and end the running ones: SIGTERM, then SIGKILL after ``grace_s``.
    Without this the interpreter's exit waits for every running cell (``concurrent.futures`` joins
    its workers at exit), which made Ctrl-C hang for as long as the slowest cell."""
    workers = list((getattr(pool, "_processes", None) or {}).values())  # no public handle before 3.14
    manager = getattr(pool, "_executor_manager_thread", None)         # nor for this; shutdown drops it
    pool.shutdown(wait=False, cancel_futures=True)
    for w in workers:
        if w.is_alive():
            w.terminate()
    deadline = time.monotonic() + grace_s
    for w in workers:
        w.join(max(0.0, deadline - time.monotonic()))
        if w.is_alive():
            w.kill()
            w.join(1.0)
    # Let the pool's manager thread finish closing its wake-up pipe before the caller goes on to exit:
    # Python 3.11's exit hook otherwise races it, writes to the pipe being closed, and prints an
    # "Exception ignored … OSError: Bad file descriptor" after the Ctrl-C (seen on a long sweep).
    if manager is not None:
        manager.join(grace_s)


def default_workers() -> int:
    return max(1, min(2, os.cpu_count() or 1))


def read_cached(kind: str, cells: Sequence[Any], cache: ResultCache) -> list[Any]:
    """Each cell's cached result, None where the cache has none (or a damaged one)."""
    return [cache.get(kind, to_jsonable(cell)) for cell in cells]


def run_sweep(kind: str, cells: Sequence[Any], fn: Callable[[Any], Any], cache: ResultCache,
              backend: Backend | None = None, progress: Progress | None = None,
              cached: list[Any] | None = None) -> list[Any]:
    """Results of ``fn`` for every cell, in the order of ``cells``: cached ones are read, the others
    computed through ``backend`` (default: :class:`SerialBackend`) and cached as each finishes.

    ``kind`` names the experiment in the cache (files ``<kind>-<hash of the cell>.json``).
    ``cached``: what :func:`read_cached` returned for these cells, when the caller read it already
    (the cache is then not read twice).
    """
    backend = backend or SerialBackend()
    total = len(cells)
    results: list[Any] = list(read_cached(kind, cells, cache) if cached is None else cached)
    if len(results) != total:
        raise ValueError(f"cached: expected one entry per cell ({total}), got {len(results)}")
    missing = [i for i, hit in enumerate(results) if hit is None]
    done = total - len(missing)
    if progress:
        progress(done, total, f"{done} cached")
    todo = [cells[i] for i in missing]
    running: dict[int, tuple[int, int]] = {}    # index into todo -> (steps done, steps in all)
    finished: set[int] = set()

    def on_steps(j: int, steps_done: int, steps_total: int) -> None:
        if j not in finished:                      # a report can arrive after its cell's result
            running[j] = (steps_done, steps_total)
            label = "steps " + ", ".join(f"{d}/{n}" for d, n in running.values()) + " in the running cells"
            progress(done, total, label, running=sum(d / max(n, 1) for d, n in running.values()))

    if progress and getattr(backend, "reports_steps", False):
        stream = backend.map(fn, todo, on_steps=on_steps)
    else:
        stream = backend.map(fn, todo)
    try:
        for j, result in stream:
            running.pop(j, None)
            finished.add(j)
            cell = todo[j]
            # Round-trip through the cache so that a fresh result and a cached one are the same data.
            cache.put(kind, to_jsonable(cell), result)
            results[missing[j]] = cache.get(kind, to_jsonable(cell))
            done += 1
            if progress:
                progress(done, total, getattr(cell, "label", str(cell)))
    finally:
        # On Ctrl-C or an error here, the backend stops its running cells now, not whenever the
        # garbage collector gets to the generator (a traceback keeps it alive).
        getattr(stream, "close", lambda: None)()
    return results
