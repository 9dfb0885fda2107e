"""Where a result came from: versions, machine, CPU, seed. Attached to every result we save."""

from __future__ import annotations

import hashlib
import os
import platform
import re
import sys
from importlib import metadata

__all__ = ["environment", "cpu", "cpu_flags", "same_arithmetic", "cpu_text", "machine_text"]

#: The fields of :func:`cpu` that decide the arithmetic of a float computation: the same values give
#: the same instructions and BLAS kernels (MKL picks its kernels by CPU and by thread count), so a
#: rerun may be compared bit for bit.
ARITHMETIC_FIELDS = ("model", "flags", "capability", "blas", "threads")
#: The rounding of the fused CPU kernel (attnscale/torch/ext): raised whenever a change to its sources
#: changes the bits it computes, so that a result made with another kernel is not held to bit-for-bit
#: reproduction on its own machine. 1: until 2026-12-03; 2: its vectors 512 bits wide where the CPU has
#: them, and its row sums in lanes (2026-12-04); 3: the monitor's per-head sums made by the kernel,
#: block by block (the same figures, summed in another order), and the weight on key 0 by the
#: kernel's own exp (2026-12-04); 4: the head table's norms made several rows at a time (the same
#: bits) and, with that change to the loop around it, float64's Σ entropy² contracted otherwise by the
#: compiler (last-bit differences, measured; float32 the same bits) (2026-12-04). A :func:`cpu`
#: record without the field is of 1.
KERNEL_ARITHMETIC = 4


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def _cpu_model() -> str | None:
    """The CPU's model name (Linux's /proc/cpuinfo; elsewhere what :func:`platform.processor` says)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith(("model name", "Model")) and ":" in line:
                    return " ".join(line.split(":", 1)[1].split()) or None
    except OSError:
        pass
    return platform.processor() or None


def cpu_flags() -> str:
    """The CPU's instruction-set flags line (Linux's /proc/cpuinfo; elsewhere what
    :func:`platform.processor` says)."""
    try:
        with open("/proc/cpuinfo") as f:
            return next((line for line in f if line.startswith(("flags", "Features"))), "")
    except OSError:
        return platform.processor()


def _flags_digest() -> str | None:
    """A short hash of the CPU's instruction-set flags: two CPUs sold under one model name (a
    virtual machine's "AMD EPYC") can differ in them."""
    line = cpu_flags()
    if ":" not in line:
        return None
    return hashlib.sha256(" ".join(sorted(line.split(":", 1)[1].split())).encode()).hexdigest()[:12]


def cpu() -> dict[str, object]:
    """The CPU a computation ran on and how torch used it: ``model`` (its name), ``flags`` (a hash of
    its instruction-set flags), ``capability`` (the
    instruction set torch's kernels dispatch to, ``torch.backends.cpu.get_cpu_capability()``; it
    follows ``ATEN_CPU_CAPABILITY``), ``blas`` (the BLAS torch was built with, and its version where
    torch says), ``threads`` (torch's intra-op threads now), ``kernel`` (:data:`KERNEL_ARITHMETIC`).
    torch's fields are None when torch is not imported: then nothing here used it."""
    torch = sys.modules.get("torch")
    capability = blas = threads = None
    if torch is not None:
        capability = torch.backends.cpu.get_cpu_capability()
        threads = torch.get_num_threads()
        config = torch.__config__.show()
        found = re.search(r"BLAS_INFO=(\w+)", config)
        blas = found.group(1) if found else None
        mkl = re.search(r"Math Kernel Library Version ([\d.]+)", config)
        if blas == "mkl" and mkl:
            blas = f"mkl {mkl.group(1)}"
        # MKL picks its own kernels, which these variables change (read when MKL loads).
        chosen = [f"{v}={os.environ[v]}" for v in ("MKL_CBWR", "MKL_ENABLE_INSTRUCTIONS") if os.environ.get(v)]
        if chosen and blas and blas.startswith("mkl"):
            blas = f"{blas} ({', '.join(chosen)})"
    return {
        "model": _cpu_model(),
        "flags": _flags_digest(),
        "capability": capability,
        "blas": blas,
        "threads": threads,
        "kernel": KERNEL_ARITHMETIC,
    }


def same_arithmetic(a: dict | None, b: dict | None) -> bool:
    """Whether two :func:`cpu` records describe the same arithmetic (model, instruction set, BLAS,
    threads, the fused kernel's rounding), so that a deterministic computation gives the same bits on
    both. Unknown fields never match; a record without ``kernel`` is of kernel arithmetic 1."""
    if not a or not b:
        return False
    same_cpu = all(a.get(f) is not None and a.get(f) == b.get(f) for f in ARITHMETIC_FIELDS)
    return same_cpu and a.get("kernel", 1) == b.get("kernel", 1)


def cpu_text(record: dict | None) -> str | None:
    """A :func:`cpu` record for reading: "AMD EPYC (AVX512, mkl 2024.2)"; None when it has no model."""
    if not record or not record.get("model"):
        return None
    details = ", ".join(str(record[f]) for f in ("capability", "blas") if record.get(f))
    return f"{record['model']} ({details})" if details else str(record["model"])


def environment() -> dict[str, object]:
    """Versions, machine and CPU, without importing heavy packages (torch is read from its metadata,
    and its CPU settings only when it is imported already)."""
    from attnscale import __version__

    return {
        "attnscale": __version__,
        "python": sys.version.split()[0],
        "numpy": _version("numpy"),
        "torch": _version("torch"),
        "matplotlib": _version("matplotlib"),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "processor": platform.processor() or None,
        "cpu_count": os.cpu_count(),
        "cpu": cpu(),
    }


def machine_text(environment: dict | None) -> str:
    """The machine of a result's environment, for reading: "Linux-6.1-x86_64, AMD EPYC (AVX512, mkl
    2024.2), 2 CPUs" (an envelope written before the CPU was recorded names what it has)."""
    env = environment or {}
    cpus = f"{env.get('cpu_count')} CPUs" if env.get("cpu_count") else None
    processor = cpu_text(env.get("cpu")) or env.get("processor")
    return ", ".join(str(x) for x in (env.get("platform") or env.get("machine"), processor, cpus) if x)
