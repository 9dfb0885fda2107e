"""A sweep backend on Ray: each missing cell one Ray task, results yielded as they complete.

Plugs into :func:`attnscale.experiments.runner.run_sweep` like :class:`~attnscale.experiments.runner.LocalBackend`
(``map(fn, cells)`` yielding ``(index, result)`` as cells finish), with no change to the experiments:

* ``fn`` travels by name (module and qualified name), never by value, so a worker runs *its*
  installed attnscale; each task first checks that it is the driver's version and refuses otherwise.
* Results come back to the driver as task return values; the driver alone writes the cache (atomically,
  as for every backend), so workers need no shared storage and never see the results folder.
* A worker that dies mid-cell (killed, out of memory, its node lost) is retried ``max_retries`` times
  (Ray's system-failure retries); an exception raised *by the cell* is not retried and reaches the caller.
* Ctrl-C: the cells already finished are handed over (so the caller caches them), the others are
  cancelled (``ray.cancel(force=True)`` ends their worker processes), and a Ray instance this backend
  started is shut down, so no process is left behind.

With ``address=None`` a private local Ray instance is started for the sweep (``ray.init(num_cpus=...)``)
and stopped after it; with ``"auto"`` or ``"HOST:PORT"`` the backend joins a running cluster (started
with ``ray start --head``) and leaves it running. Ray is an optional dependency: ``attnscale[cluster]``.
"""

from __future__ import annotations

import importlib
import os
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from attnscale.errors import AttnScaleError, InputError, check_count, require

__all__ = ["RayBackend", "VersionMismatch"]


class VersionMismatch(AttnScaleError, RuntimeError):
    """A Ray worker runs another attnscale than the driver: its results would not be this sweep's."""


def _run_cell(module: str, qualname: str, cell: Any, driver_version: str, threads: int) -> Any:
    """The task body, on a worker: check the version, set the thread count, run ``module.qualname(cell)``."""
    import attnscale

    if attnscale.__version__ != driver_version:
        raise VersionMismatch(
            f"this Ray worker has attnscale {attnscale.__version__}, the driver {driver_version}; "
            f"install attnscale {driver_version} on every node of the cluster")
    # As in LocalBackend's workers: one cell's threads match the CPUs it reserved, so cells sharing a
    # node do not oversubscribe it. Set before torch loads (it reads OMP_NUM_THREADS then).
    os.environ["OMP_NUM_THREADS"] = str(threads)
    from attnscale.experiments import training

    before = training.process_settings()
    try:
        fn = importlib.import_module(module)
        for part in qualname.split("."):
            fn = getattr(fn, part)
        return fn(cell)
    finally:
        training.restore_process_settings(before)  # a worker process is reused by later tasks


@dataclass
class RayBackend:
    """Run cells as Ray tasks.

    address: None (start a private local instance), ``"auto"`` (the cluster this machine belongs to)
        or ``"HOST:PORT"`` of a head started with ``ray start --head``.
    num_cpus: CPUs of the private local instance (None: Ray's default, all of them); ignored when
        joining a cluster.
    cpus_per_cell: CPUs reserved by each task (and its thread count).
    max_retries: retries of a task whose worker died (not of a cell that raised).
    init_kwargs: passed on to ``ray.init`` (e.g. ``runtime_env``).
    """
    address: str | None = None
    num_cpus: int | None = None
    cpus_per_cell: int = 1
    max_retries: int = 3
    init_kwargs: dict = field(default_factory=dict)

    def __post_init__(self):
        if self.address is not None and (not isinstance(self.address, str) or not self.address.strip()):
            raise InputError(f"address: expected None, 'auto' or 'HOST:PORT', got {self.address!r}")
        for name in ("cpus_per_cell", "num_cpus"):
            if getattr(self, name) is not None:
                check_count(name, getattr(self, name))
        check_count("max_retries", self.max_retries, minimum=0)

    def _connect(self, ray) -> bool:
        """Join or start Ray; True when this backend started it (and so must stop it)."""
        if ray.is_initialized():
            return False
        kwargs = {"include_dashboard": False, "log_to_driver": False, "logging_level": "ERROR", **self.init_kwargs}
        if self.address is None:
            ray.init(num_cpus=self.num_cpus, **kwargs)
        else:
            try:
                ray.init(address=self.address, **kwargs)
            except ConnectionError as err:
                raise InputError(f"address: cannot reach a Ray cluster at {self.address!r} ({err})") from None
        return True

    def map(self, fn: Callable[[Any], Any], cells: Sequence[Any]):
        ray = require("ray", "cluster")
        from attnscale import __version__

        if not cells:
            return
        if "<locals>" in fn.__qualname__ or fn.__module__ == "__main__":
            raise InputError(f"fn: expected a module-level function importable by name, got {fn.__qualname__!r}")
        started = self._connect(ray)
        task = ray.remote(_run_cell).options(num_cpus=self.cpus_per_cell, max_retries=self.max_retries,
                                             retry_exceptions=False)
        pending = {task.remote(fn.__module__, fn.__qualname__, cell, __version__, self.cpus_per_cell): i
                   for i, cell in enumerate(cells)}
        try:
            while pending:
                ready, _ = ray.wait(list(pending), num_returns=1)
                for ref in ready:
                    yield pending.pop(ref), _get(ray, ref)
        except KeyboardInterrupt:
            # Hand over what already finished (the caller caches it), then stop the rest.
            ready, _ = ray.wait(list(pending), num_returns=len(pending), timeout=0)
            finished = []
            for ref in ready:
                try:
                    finished.append((pending.pop(ref), ray.get(ref, timeout=0)))
                except Exception:
                    pass  # a failed cell is simply not cached
            _cancel(ray, pending)
            pending.clear()
            yield from finished
            raise
        finally:
            _cancel(ray, pending)
            if started:
                ray.shutdown()


def _get(ray, ref):
    """A task's result; the cell's own exception (or VersionMismatch) re-raised as itself."""
    try:
        return ray.get(ref)
    except ray.exceptions.RayTaskError as err:
        cause = err.cause if getattr(err, "cause", None) is not None else err
        raise cause from None


def _cancel(ray, pending: dict) -> None:
    for ref in pending:
        try:
            ray.cancel(ref, force=True)
        except Exception:
            pass  # already finished or its worker already gone
