"""A sweep backend on Ray: each missing cell one Ray task, results yielded as they complete.

Plugs into :func:`attnscale.experiments.sweeps.runner.run_sweep` like :class:`~attnscale.experiments.sweeps.runner.LocalBackend`
(``map(fn, cells)`` yielding ``(index, result, seconds)`` as cells finish), with no change to the experiments:

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
with ``ray start --head``) and leaves it running. Joining gives up after ``connect_timeout_s`` (30 s by
default) with an :class:`~attnscale.errors.InputError` that names the address and what was tried: Ray
itself retries an address where nothing answers for minutes, silently. Ray is an optional dependency:
``attnscale[cluster]``.
"""

from __future__ import annotations

import importlib
import os
import socket
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from attnscale.errors import AttnScaleError, InputError, check_count, check_positive, require
from attnscale.experiments.sweeps.process_settings import process_settings, restore_process_settings
from attnscale.experiments.sweeps.runner import timed_call

__all__ = ["DEFAULT_CONNECT_TIMEOUT_S", "RayBackend", "VersionMismatch"]

# How long joining a cluster may take before the backend gives up (the CLI's --connect-timeout).
DEFAULT_CONNECT_TIMEOUT_S = 30.0


class VersionMismatch(AttnScaleError, RuntimeError):
    """A Ray worker runs another attnscale than the driver: its results would not be this sweep's."""


def _run_cell(module: str, qualname: str, cell: Any, driver_version: str, threads: int) -> tuple[Any, dict]:
    """The task body, on a worker: check the version, set the thread count, run ``module.qualname(cell)``
    (timed there: :func:`~attnscale.experiments.sweeps.runner.timed_call`)."""
    import attnscale

    if attnscale.__version__ != driver_version:
        raise VersionMismatch(
            f"this Ray worker has attnscale {attnscale.__version__}, the driver {driver_version}; "
            f"install attnscale {driver_version} on every node of the cluster"
        )
    # As in LocalBackend's workers: one cell's threads match the CPUs it reserved, so cells sharing a
    # node do not oversubscribe it. Set before torch loads (it reads OMP_NUM_THREADS then).
    os.environ["OMP_NUM_THREADS"] = str(threads)

    before = process_settings()
    try:
        fn = importlib.import_module(module)
        for part in qualname.split("."):
            fn = getattr(fn, part)
        return timed_call(fn, cell)
    finally:
        restore_process_settings(before)  # a worker process is reused by later tasks


@dataclass
class RayBackend:
    """Run cells as Ray tasks.

    address: None (start a private local instance), ``"auto"`` (the cluster this machine belongs to)
        or ``"HOST:PORT"`` of a head started with ``ray start --head``.
    num_cpus: CPUs of the private local instance (None: Ray's default, all of them); ignored when
        joining a cluster.
    cpus_per_cell: CPUs reserved by each task (and its thread count).
    max_retries: retries of a task whose worker died (not of a cell that raised).
    connect_timeout_s: seconds that joining a cluster (``address`` given) may take, then an
        :class:`InputError` saying what was tried.
    init_kwargs: passed on to ``ray.init`` (e.g. ``runtime_env``).
    """

    address: str | None = None
    num_cpus: int | None = None
    cpus_per_cell: int = 1
    max_retries: int = 3
    connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S
    init_kwargs: dict = field(default_factory=dict)
    _started: bool = field(default=False, init=False, repr=False)  # connect() started or joined Ray

    def __post_init__(self):
        if self.address is not None and self.address != "auto":
            _host_port(self.address)  # refuses a malformed address before any work
        for name in ("cpus_per_cell", "num_cpus"):
            if getattr(self, name) is not None:
                check_count(name, getattr(self, name))
        check_count("max_retries", self.max_retries, minimum=0)
        check_positive("connect_timeout_s", self.connect_timeout_s)

    def _connect(self, ray) -> bool:
        """Join or start Ray; True when this backend started it (and so must stop it). A Ray already
        running in this process is used as it is, but an address given must still answer."""
        if ray.is_initialized():
            if self.address is not None:
                _reachable(self.address, self.connect_timeout_s)
            return False
        kwargs = {"include_dashboard": False, "log_to_driver": False, "logging_level": "ERROR", **self.init_kwargs}
        if self.address is None:
            ray.init(num_cpus=self.num_cpus, **kwargs)
        else:
            _join(ray, self.address, self.connect_timeout_s, kwargs)
        return True

    @property
    def workers(self) -> int | None:
        """How many cells run at once: the private instance's CPUs over each cell's; None when joining
        a cluster (its size is the cluster's) or when Ray picks the CPUs itself."""
        if self.address is not None or self.num_cpus is None:
            return None
        return max(1, self.num_cpus // self.cpus_per_cell)

    def connect(self) -> None:
        """Join (or start) Ray now rather than at the first cell, so that an address where no cluster
        answers is told before any work starts. The next :meth:`map` uses this connection and, at
        its end, closes it."""
        ray = require("ray", "cluster")
        self._started = self._connect(ray) or self._started

    def map(self, fn: Callable[[Any], Any], cells: Sequence[Any]):
        ray = require("ray", "cluster")
        from attnscale import __version__

        started, self._started = self._started, False
        if not cells or "<locals>" in fn.__qualname__ or fn.__module__ == "__main__":
            if started:
                ray.shutdown()
            if not cells:
                return
            raise InputError(f"fn: expected a module-level function importable by name, got {fn.__qualname__!r}")
        started = self._connect(ray) or started
        task = ray.remote(_run_cell).options(
            num_cpus=self.cpus_per_cell, max_retries=self.max_retries, retry_exceptions=False
        )
        pending = {
            task.remote(fn.__module__, fn.__qualname__, cell, __version__, self.cpus_per_cell): i
            for i, cell in enumerate(cells)
        }
        try:
            while pending:
                ready, _ = ray.wait(list(pending), num_returns=1)
                for ref in ready:
                    yield pending.pop(ref), *_get(ray, ref)
        except KeyboardInterrupt:
            # Hand over what already finished (the caller caches it), then stop the rest.
            ready, _ = ray.wait(list(pending), num_returns=len(pending), timeout=0)
            finished = []
            for ref in ready:
                try:
                    finished.append((pending.pop(ref), *ray.get(ref, timeout=0)))
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


def _host_port(address) -> tuple[str, int]:
    """``"HOST:PORT"`` (or ``"ray://HOST:PORT"``, ``"[::1]:PORT"``) as (host, port), or an InputError."""
    text = address.split("://", 1)[-1] if isinstance(address, str) else ""
    host, _, port = text.rpartition(":")
    host = host.strip("[]")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise InputError(f"address: expected None, 'auto' or 'HOST:PORT', got {address!r}")
    return host, int(port)


def _failed(address: str) -> str:
    return f"cannot reach a Ray cluster at {address!r}"


def _reachable(address: str, timeout_s: float) -> str:
    """A plain TCP connection to HOST:PORT within ``timeout_s``, so that a host name that does not
    resolve, a port where nothing listens or a host that never answers is told at once, in plain
    words (an InputError naming the address); what a later failure has then still to explain."""
    if address == "auto":
        return "Ray's search for the cluster this machine belongs to (RAY_ADDRESS, or the last 'ray start')"
    host, port = _host_port(address)
    tried = f"a TCP connection to {host} port {port}"
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            pass
    except socket.gaierror as err:
        raise InputError(f"{_failed(address)}: the host name {host!r} does not resolve ({err.strerror})") from None
    except ConnectionRefusedError:
        raise InputError(
            f"{_failed(address)}: {tried} was refused, nothing listens there "
            f"(a head is started with 'ray start --head --port={port}')"
        ) from None
    except TimeoutError:
        raise InputError(
            f"{_failed(address)}: {tried} got no answer within the {timeout_s:g} s connect timeout"
        ) from None
    except OSError as err:
        raise InputError(f"{_failed(address)}: {tried} failed ({err.strerror or err})") from None
    return f"{host} port {port} accepts TCP connections, but Ray's handshake there"


def _join(ray, address: str, timeout_s: float, kwargs: dict) -> None:
    """``ray.init(address=address)`` within ``timeout_s`` seconds, or an InputError naming the address
    and what was tried: first :func:`_reachable`, then Ray's own handshake, in a helper thread waited
    for until the deadline: Ray retries an unresponsive address for minutes inside one
    uninterruptible call. A handshake still going at the deadline is abandoned to that daemon thread
    (the command then exits)."""
    deadline = time.monotonic() + timeout_s
    failed = _failed(address)
    limit = f"the {timeout_s:g} s connect timeout"
    tried = _reachable(address, timeout_s)
    outcome: dict = {}

    def handshake():
        try:
            ray.init(address=address, **kwargs)
        except BaseException as err:  # handed to the waiting thread below
            outcome["error"] = err

    thread = threading.Thread(target=handshake, name="ray-connect", daemon=True)
    thread.start()
    thread.join(max(0.0, deadline - time.monotonic()))
    if thread.is_alive():
        raise InputError(f"{failed}: {tried} did not complete within {limit}")
    err = outcome.get("error")
    if isinstance(err, (ConnectionError, RuntimeError)):  # Ray's words for "no cluster answered there"
        raise InputError(f"{failed}: {tried} failed ({str(err).strip().splitlines()[0]})") from None
    if err is not None:
        raise err


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
