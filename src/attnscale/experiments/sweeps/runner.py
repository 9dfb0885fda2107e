"""Run a sweep: a list of cells (frozen dataclass configurations), each computed once and cached.

* Each cell's result is stored under a hash of the cell (:class:`attnscale.store.ResultCache`) the
  moment it is done, written atomically: interrupt a sweep (Ctrl-C, kill -9) and run it again, and only
  the missing cells are computed; no result file is ever half-written.
* Cells run through a :class:`Backend`, the seam to other engines: anything with
  ``map(fn, cells)`` returning a generator of ``(index, result, seconds)`` as cells finish.
  :class:`LocalBackend` runs them in worker processes on this machine; a Ray or Dask backend would
  submit ``fn(cell)`` (timed there) as remote tasks and yield their results as they complete, with
  no change to the experiments.
* Stopping: :func:`run_sweep` closes the generator when it stops early (Ctrl-C, an error), and the
  backend then ends the work still running itself (the driver may be the only process that got the
  signal: ``kill -INT``, a job runner, a test), so that nothing is left behind.
* ``fn`` must be a module-level function (it is pickled by name) returning plain JSON data.
* Time: each backend measures every cell where it runs (:func:`timed_call`: the cell's own wall and
  CPU seconds, in the process that computed it), and :func:`run_sweep` keeps that with the cell in
  its cache entry (``seconds``), so that a cell read from the cache later still says what its
  computation took; an experiment never times its own cells.
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
from dataclasses import dataclass
from typing import Any, Protocol, cast

from attnscale.errors import check_count
from attnscale.experiments.sweeps.process_settings import process_settings, restore_process_settings
from attnscale.i18n import N_, filled
from attnscale.store import ResultCache, to_jsonable

__all__ = [
    "Backend",
    "SerialBackend",
    "LocalBackend",
    "Done",
    "run_sweep",
    "read_cached",
    "default_workers",
    "report_steps",
    "timed_call",
]

Progress = Callable[..., None]  # progress(done, total, label) and, with step reports, running=fraction

# Where report_steps sends (steps done, steps in all) of the cell running in this process: set by the
# backend around each cell; None when nobody listens.
_step_hook: Callable[[int, int], None] | None = None


def report_steps(done: int, total: int) -> None:
    """For a cell's loop: ``done`` of its ``total`` steps are done (nothing when nobody listens)."""
    if _step_hook is not None:
        _step_hook(done, total)


def timed_call(fn: Callable[[Any], Any], cell: Any) -> tuple[Any, dict[str, float]]:
    """``fn(cell)`` and what it took, measured in the process that computes it: ``{"wall": s, "cpu":
    s}``, wall-clock seconds (``time.perf_counter``) and the CPU seconds of this process
    (``time.process_time``: all its threads; in a worker process that is the cell's alone, in the
    driver (:class:`SerialBackend`) it includes whatever else the driver does meanwhile, little). The
    first cell in a fresh worker also pays for the imports it makes (torch: a few seconds), as a
    run does."""
    wall0, cpu0 = time.perf_counter(), time.process_time()
    result = fn(cell)
    return result, {"wall": time.perf_counter() - wall0, "cpu": time.process_time() - cpu0}


def _with_step_hook(hook, fn, cell):
    global _step_hook
    _step_hook = hook
    try:
        return timed_call(fn, cell)
    finally:
        _step_hook = None


class Backend(Protocol):
    #: how many cells it runs at once (None when it cannot say: a cluster it joined)
    workers: int | None

    def map(self, fn: Callable[[Any], Any], cells: Sequence[Any]) -> Iterator[tuple[int, Any, dict | None]]:
        """Compute ``fn(cell)`` for every cell; yield ``(index into cells, result, seconds)`` in any
        order, as each finishes (so that the caller can store it at once), ``seconds`` what
        :func:`timed_call` measured where the cell ran. On ``close()`` or an exception thrown in
        (KeyboardInterrupt), stop every cell still running before returning."""
        ...


class SerialBackend:
    """In this process, one cell after the other (no start-up cost: for small sweeps and tests).
    Process-wide settings a training cell makes (deterministic kernels, one thread) are undone after
    each cell, so that they do not leak into the caller. ``on_steps(index, done, total)``: the
    running cell's :func:`report_steps`."""

    reports_steps = True
    workers = 1

    def map(self, fn, cells, on_steps=None):
        for i, cell in enumerate(cells):
            before = process_settings()
            hook = None if on_steps is None else (lambda done, total, i=i: on_steps(i, done, total))
            try:
                result, seconds = _with_step_hook(hook, fn, cell)
            finally:
                restore_process_settings(before)
            yield i, result, seconds


_worker_steps = None  # in a worker: the queue its cells' step reports go to


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
    """``fn(cell)`` in a worker and its :func:`timed_call` seconds, its step reports sent to the
    driver as (index, done, total)."""
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
                    yield pending.pop(future), *future.result()
        except KeyboardInterrupt:
            # Ctrl-C: end the workers, then hand over the cells that had already finished (so that
            # the caller caches them) and stop.
            ready = [f for f in pending if f.done() and not f.cancelled() and f.exception() is None]
            _terminate(pool)
            for future in ready:
                yield pending.pop(future), *future.result()
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
    manager = getattr(pool, "_executor_manager_thread", None)  # nor for this; shutdown drops it
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


@dataclass(frozen=True)
class Done:
    """A computed cell: its ``result`` (plain JSON data, as the cache returns it) and what computing
    it took, ``seconds`` = ``{"wall": s, "cpu": s, "workers": n}`` (:func:`timed_call`'s figures and
    how many cells its backend ran at once then, None when it could not say); ``seconds`` is None
    for a cell whose computation recorded no time (cached by older code)."""

    result: Any
    seconds: dict | None = None


def read_cached(kind: str, cells: Sequence[Any], cache: ResultCache) -> list[Done | None]:
    """Each cell as its cache entry holds it, None where the cache has none (or a damaged one)."""
    records = [cache.get_record(kind, to_jsonable(cell)) for cell in cells]
    return [None if r is None else Done(r["result"], r.get("seconds")) for r in records]


def run_sweep(
    kind: str,
    cells: Sequence[Any],
    fn: Callable[[Any], Any],
    cache: ResultCache,
    backend: Backend | None = None,
    progress: Progress | None = None,
    cached: list[Done | None] | None = None,
) -> list[Done]:
    """Every cell of ``cells`` done, in their order: cached ones are read, the others computed
    through ``backend`` (default: :class:`SerialBackend`) and cached, with their time, as each
    finishes.

    ``kind`` names the experiment in the cache (files ``<kind>-<hash of the cell>.json``).
    ``cached``: what :func:`read_cached` returned for these cells, when the caller read it already
    (the cache is then not read twice).
    """
    backend = backend or SerialBackend()
    total = len(cells)
    done_cells: list[Done | None] = list(read_cached(kind, cells, cache) if cached is None else cached)
    if len(done_cells) != total:
        raise ValueError(f"cached: expected one entry per cell ({total}), got {len(done_cells)}")
    missing = [i for i, hit in enumerate(done_cells) if hit is None]
    done = total - len(missing)
    if progress:
        progress(done, total, filled(N_("{done} cached"), done=done))
    todo = [cells[i] for i in missing]
    running: dict[int, tuple[int, int]] = {}  # index into todo -> (steps done, steps in all)
    finished: set[int] = set()

    def on_steps(j: int, steps_done: int, steps_total: int) -> None:
        if j not in finished:  # a report can arrive after its cell's result
            running[j] = (steps_done, steps_total)
            steps = ", ".join(f"{d}/{n}" for d, n in running.values())
            label = filled(N_("steps {steps} in the running cells"), steps=steps)
            progress(done, total, label, running=sum(d / max(n, 1) for d, n in running.values()))

    if progress and getattr(backend, "reports_steps", False):
        stream = backend.map(fn, todo, on_steps=on_steps)
    else:
        stream = backend.map(fn, todo)
    workers = getattr(backend, "workers", None)
    try:
        for j, result, seconds in stream:
            running.pop(j, None)
            finished.add(j)
            cell = todo[j]
            # Round-trip through the cache so that a fresh result and a cached one are the same data.
            cache.put(
                kind, to_jsonable(cell), result, seconds=None if seconds is None else {**seconds, "workers": workers}
            )
            done_cells[missing[j]] = read_cached(kind, [cell], cache)[0]
            done += 1
            if progress:
                progress(done, total, getattr(cell, "label", str(cell)))
    finally:
        # On Ctrl-C or an error here, the backend stops its running cells now, not whenever the
        # garbage collector gets to the generator (a traceback keeps it alive).
        getattr(stream, "close", lambda: None)()
    lost = [cells[i] for i, d in enumerate(done_cells) if d is None]
    if lost:  # a backend that did not yield every cell it was given
        raise RuntimeError(f"backend: {len(lost)} cell(s) never came back, the first {lost[0]}")
    return cast(list[Done], done_cells)
