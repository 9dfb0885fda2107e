"""Build and load the fused CPU kernel of :mod:`attnscale.torch.functional` (``health_attention.cpp``)
and the monitor's per-head sums (``head_sums.cpp``), one library.

The kernel is compiled on first use with ``torch.utils.cpp_extension.load`` (g++ and ninja; never at
``pip install`` time, where build isolation would pull a CUDA torch) and cached under torch's
extension folder (``TORCH_EXTENSIONS_DIR``, default ``~/.cache/torch_extensions``): the build is
named after a hash of the source, its path, the flags, the torch version and the CPU's instruction
sets, so a changed source or another machine never reuses a stale build, and two checkouts (a clone
beside a working tree) each keep their own build instead of rebuilding over each other (ninja's
build file records the source path). A cached load takes well under a
second; a fresh build about 7 s on two cores.

Its ops: ``torch.ops.attnscale_health.attention`` (forward: output and the per-row figures, the
weight on the first key among them on request, and on request the monitor's per-head table of
them, made as the rows are: ``head_tally.h``) and
``attention_backward`` (dq, dk, dv and, on request, dbias), tied together for autograd in C++ (a
``torch::autograd::Function`` registered for the op's Autograd key), so a call on tensors that
require grad records a backward like any PyTorch op; the figures are marked non-differentiable
(diagnostics, detached). Two more: ``all_finite`` (check_finite's scan) and ``head_sums`` (one
call's figures summed per head, for the monitor's aggregates:
:func:`attnscale.torch.monitor_aggregates.call_figures`).

When it cannot be built (no compiler, an unusual torch build), :func:`load_kernel` returns None and
:func:`kernel_status` says why; attention then runs on composed PyTorch calls. A missing compiler is
found before torch is asked (whose attempt would log a page-long warning first).
``ATTNSCALE_NO_KERNEL=1`` in the environment disables the kernel on purpose. The library never
prints: :func:`build_needed` tells a caller (the CLI) beforehand that the next load compiles.

Two things the plain ``cpp_extension.load`` gets wrong, handled here: torch looks for ninja only on
PATH, so a script run as ``.venv/bin/attnscale`` without an activated venv would not find the ninja
installed next to its Python (the ``probe`` extra installs it); and a build killed mid-way leaves its
lock file behind, on which every later load waits forever. A lock older than
:data:`STALE_LOCK_SECONDS` (far longer than a build) is removed; a younger one is waited for until
it is gone or that old.
"""

from __future__ import annotations

import hashlib
import os
import platform
import shutil
import sys
import threading
import time
from pathlib import Path

import torch
from torch.utils import cpp_extension

from attnscale.provenance import cpu_flags

__all__ = [
    "load_kernel",
    "kernel_status",
    "build_needed",
    "SOURCES",
    "HEADERS",
    "STALE_LOCK_SECONDS",
    "BACKWARD_Q_BLOCK",
    "BACKWARD_KV_BLOCK",
    "kernel_build",
]

# One library: the attention ops, and the monitor's sums; HEADERS, what they include (in the build's
# name, so that a change to them rebuilds as a change to a source does). A change that alters the bits
# the kernel computes raises attnscale.provenance.KERNEL_ARITHMETIC.
SOURCES = tuple(Path(__file__).with_name(name) for name in ("health_attention.cpp", "head_sums.cpp"))
HEADERS = tuple(Path(__file__).with_name(name) for name in ("lanes.h", "head_tally.h"))

# -fopenmp: at::parallel_for is an inline OpenMP region, compiled into this library; without the flag
# it silently runs on one thread. -march=native: the build is cached per CPU (see _build_name).
# -mprefer-vector-width=512: gcc's tuning for Intel's AVX-512 CPUs vectorises with 256-bit registers,
# where ATen's kernels (SDPA's among them) use 512: on the project's Intel Xeon (AVX-512), 2
# threads, 2026-12-04, the forward ÷ SDPA went 1.15× → 1.04× at (2, 8, 2048, 64) and 1.13× → 1.06× at
# (1, 8, 8192, 64). Without AVX-512 it changes nothing.
_CFLAGS = ("-O3", "-march=native", "-mprefer-vector-width=512", "-fopenmp", "-fno-math-errno", "-fno-trapping-math")
_LDFLAGS = ("-fopenmp",)

STALE_LOCK_SECONDS = 600.0  # a build takes seconds; a lock this old was left by a killed build
_lock = threading.Lock()
_state: dict[str, object] = {}


def _build_name() -> str:
    # The CPU's flags too: a -march=native build is never reused on another CPU sharing the cache. Not
    # ATen's dispatch level (ATEN_CPU_CAPABILITY): the code compiled here is the same whatever ATen picks.
    digest = hashlib.sha256()
    for source in (*SOURCES, *HEADERS):
        digest.update(source.read_bytes())
    for part in (
        *(str(source.resolve()) for source in SOURCES),
        *_CFLAGS,
        *_LDFLAGS,
        torch.__version__,
        platform.machine(),
        cpu_flags(),
    ):
        digest.update(part.encode())
    return f"attnscale_health_{digest.hexdigest()[:12]}"


_SWITCH = {
    "": False,
    "0": False,
    "false": False,
    "no": False,
    "off": False,
    "1": True,
    "true": True,
    "yes": True,
    "on": True,
}


def kernel_disabled() -> bool:
    """Whether ``$ATTNSCALE_NO_KERNEL`` asks for no fused kernel: 1/true/yes/on (any case) yes,
    unset, empty or 0/false/no/off no; any other value is refused, naming it (``=0`` once disabled it)."""
    from attnscale.errors import InputError

    value = os.environ.get("ATTNSCALE_NO_KERNEL", "")
    if value.strip().lower() not in _SWITCH:
        raise InputError(
            f"ATTNSCALE_NO_KERNEL: expected 1, true, yes or on (no kernel), or 0, false, no, off or empty, got {value!r}"
        )
    return _SWITCH[value.strip().lower()]


def load_kernel():
    """The op ``torch.ops.attnscale_health.attention``, building it if needed; None if it cannot be built.

    Thread-safe; builds at most once per process (torch's file lock serialises concurrent processes).
    """
    if "op" in _state:  # outside the lock: a dict lookup, which torch.compile traces
        return _state["op"]
    with _lock:
        if "op" in _state:
            return _state["op"]
        op, reason = None, "disabled by ATTNSCALE_NO_KERNEL" if kernel_disabled() else ""
        if not reason:
            try:
                name = _build_name()
                if _compiler() is None:
                    raise FileNotFoundError(f"no C++ compiler: {cpp_extension.get_cxx_compiler()!r} is not on PATH")
                _find_ninja_next_to_python()
                _clear_stale_lock(Path(cpp_extension._get_build_directory(name, False)) / "lock")
                cpp_extension.load(
                    name=name,
                    sources=[str(source) for source in SOURCES],
                    extra_cflags=list(_CFLAGS),
                    extra_ldflags=list(_LDFLAGS),
                    is_python_module=False,
                    verbose=False,
                )
                op = torch.ops.attnscale_health.attention
                _state["build"] = int(name.rsplit("_", 1)[1], 16)
                _register_fake()
                reason = "built"
            except Exception as err:  # noqa: BLE001 - any build or load failure means: use the fallback
                reason = f"{type(err).__name__}: {_telling_line(str(err))}"
        _state["op"], _state["reason"] = op, reason
        return op


# The op's arguments after (q, k, v): mask, bias, causal, causal_offset, scale, softcap, logit_range,
# first_key, q_block, kv_block, backward_q_block, backward_kv_block, build (kernel_build()). The
# backward's tile: two (rows × keys) blocks per thread, P and dP, 64 KiB each in float32. Measured on the project's machine,
# backward of (1, 8, 2048, 64), one thread, CPU time: 64×64, 128×128, 256×256, 128×256 and 256×512
# all within 7% of each other (305-325 ms).
BACKWARD_Q_BLOCK, BACKWARD_KV_BLOCK = 128, 128


def kernel_build() -> int:
    """The loaded kernel's build, as a number (its build name's digest: the sources, flags, torch and
    CPU), passed to the op as its last argument, which the C++ reads not: torch.compile's caches
    key a graph on its ops' arguments, not on a C++ op's code, so a graph compiled against another
    build (seen: another layout of its outputs, which Inductor asserts) is never reused. Call after
    :func:`load_kernel` returned the op."""
    build = _state["build"]  # a dict lookup, which torch.compile traces to a constant
    assert isinstance(build, int)
    return build


def _register_fake() -> None:
    """The ops' shapes and dtypes without computing them (as the C++ allocates its outputs), so that
    Dynamo and Inductor keep each as one opaque op in a compiled graph."""

    def like_layout(x, sizes):
        """A new tensor of ``sizes`` laid out as x: the C++ ``new_like_layout`` (x's first three
        dimensions in the order of its strides, largest first, ties in order; the last innermost)."""
        order = sorted(range(3), key=lambda d: -x.stride(d))
        return x.new_empty([sizes[d] for d in order] + [sizes[3]]).permute(*(order.index(d) for d in range(3)), 3)

    def attention(q, k, v, mask, bias, causal, offset, scale, softcap, logit_range, first_key, head_table, *rest):
        from attnscale.torch.head_table import ROWS  # the head table's rows (head_tally.h)

        rows = q.shape[:3]
        return (
            like_layout(q, (*rows, v.shape[3])),
            q.new_empty(rows),
            q.new_empty(rows),
            q.new_empty(rows),
            q.new_empty(rows if logit_range else (0,)),
            q.new_empty(rows if first_key else (0,)),
            q.new_empty((len(ROWS), rows[1]), dtype=torch.float64) if head_table else q.new_empty((0,)),
            q.new_empty(rows if head_table else (0,)),
        )

    def attention_backward(
        q, k, v, out, dout, lse, mask, bias, causal, offset, scale, softcap, bias_grad, q_block, kv_block
    ):
        dbias = q.new_empty((*q.shape[:3], k.shape[2]) if bias_grad else (0,))
        return like_layout(q, q.shape), like_layout(k, k.shape), like_layout(v, v.shape), dbias

    torch.library.register_fake("attnscale_health::attention", attention)
    torch.library.register_fake("attnscale_health::attention_backward", attention_backward)


def _compiler() -> str | None:
    """The path of the C++ compiler torch would run (``CXX``, else ``c++``), None when there is none."""
    return shutil.which(cpp_extension.get_cxx_compiler())


def build_needed() -> bool:
    """Whether the next :func:`load_kernel` compiles (seconds): not tried yet in this process, not
    disabled, a compiler there, and no finished build of this source in the cache."""
    if "op" in _state or kernel_disabled():
        return False
    if _compiler() is None:
        return False
    name = _build_name()
    return not (Path(cpp_extension._get_build_directory(name, False)) / f"{name}.so").is_file()


def _find_ninja_next_to_python() -> None:
    """Put the folder of this Python's own ninja (a venv's bin/) on PATH when PATH has none: torch
    runs ``ninja`` by name only."""
    if shutil.which("ninja") is not None:
        return
    beside = Path(sys.executable).with_name("ninja")
    if beside.is_file():
        os.environ["PATH"] = os.pathsep.join(filter(None, (str(beside.parent), os.environ.get("PATH"))))


def _clear_stale_lock(lock: Path, max_age: float = STALE_LOCK_SECONDS, poll: float = 0.1) -> None:
    """Return once ``lock`` is absent, removing it when older than ``max_age`` seconds (torch's
    lock file is written once when a build starts, so its age is the build's age). A live build
    releases it within seconds; a killed one never does, and torch would wait on it forever."""
    while True:
        try:
            age = time.time() - lock.stat().st_mtime
        except FileNotFoundError:
            return
        if age > max_age:
            try:
                lock.unlink()
            except FileNotFoundError:
                pass
            return
        time.sleep(poll)


def _telling_line(message: str) -> str:
    """The line of a (long) build log that says what went wrong."""
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    for marker in ("error:", "not found", "no such file", "undefined symbol"):
        for line in lines:
            if marker in line.lower():
                return line[:300]
    return lines[0][:300] if lines else "(no message)"


def kernel_status() -> dict[str, object]:
    """{"available": bool, "reason": str} of the CPU kernel, loading it first if that was not tried
    yet, and "cuda": {"backend", "reason"}, what backend="auto" runs on CUDA ("flex" when compiled
    FlexAttention works there, else "composed"; None without CUDA: see attnscale.torch.backends.flex)."""
    from attnscale.torch.backends.flex import cuda_status

    op = load_kernel()
    return {"available": op is not None, "reason": _state["reason"], "cuda": cuda_status()}
