"""The reproduction and thread-count checks under a second arithmetic: what another CPU type would do
to them, caught on this one. A file of its own, so that pytest-xdist runs it (minutes: the checks
again in a fresh process, the kernel built again for the other capability) beside
test_reference.py, not after it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from attnscale.experiments import reproduction


@pytest.mark.slow
@pytest.mark.skipif(os.environ.get("ATTNSCALE_SECOND_ARITHMETIC") == "1", reason="already under it")
def test_the_reproduction_and_thread_count_checks_hold_under_a_second_arithmetic():
    """What another CPU type would do to these checks, caught on this one: the same tests in a fresh
    process whose torch, oneDNN and MKL kernels round otherwise (attnscale.experiments.reproduction)."""
    tests = [
        "tests/experiments/test_reference.py::test_references_reproduce",
        "tests/torch/test_torch_backward.py::test_backward_across_thread_counts",
        "tests/torch/test_torch_attention.py::test_kernel_across_thread_counts",
    ]
    root = Path(__file__).resolve().parents[2]
    own = {
        k: v
        for k, v in os.environ.items()  # conftest's per-capability Inductor cache: chosen anew there
        if not (k == "TORCHINDUCTOR_CACHE_DIR" and "torchinductor_attnscale_" in v)
    }
    env = {**own, **reproduction.SECOND_ARITHMETIC, "ATTNSCALE_SECOND_ARITHMETIC": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *tests],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert " passed" in done.stdout and "skipped" not in done.stdout.splitlines()[-1], done.stdout[-500:]
