"""The fused CPU kernel as the CLI speaks of it: one line before a first build, one line naming the
fallback and why when there is no compiler, never a build log; the library itself prints nothing."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

from attnscale.cli import kernel  # noqa: E402
from attnscale.i18n import language  # noqa: E402
from attnscale.torch import ext  # noqa: E402


def _without_compiler(tmp_path) -> dict:
    """The environment of a machine with no C++ compiler and an empty build cache: PATH holds only
    this Python's own folder (the venv's bin/, where ninja may be, but no c++, g++ or gcc)."""
    bin_dir = str(Path(sys.executable).parent)
    if any(shutil.which(cc, path=bin_dir) for cc in ("c++", "g++", "gcc", "cc")):
        pytest.skip(f"a compiler lies next to this Python ({bin_dir}): it cannot be hidden")
    env = {k: v for k, v in os.environ.items() if k not in ("CXX", "ATTNSCALE_NO_KERNEL")}
    return {**env, "PATH": bin_dir, "TORCH_EXTENSIONS_DIR": str(tmp_path / "ext")}


@pytest.mark.slow
def test_without_a_compiler_a_command_runs_and_says_the_fallback_once(tmp_path):
    env = _without_compiler(tmp_path)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "attnscale",
            "telemetry-bench",
            "--quick",
            "--no-model",
            "--no-backward",
            "--repeats",
            "1",
            "--results",
            str(tmp_path / "r"),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    said = [line for line in done.stderr.splitlines() if "kernel" in line]
    assert said == [
        "no fused kernel (FileNotFoundError: no C++ compiler: 'c++' is not on PATH): attention runs "
        "on composed PyTorch calls (backend 'composed')"
    ], done.stderr
    assert "WARNING" not in done.stderr and "building" not in done.stderr  # torch's compiler warning
    assert "composed" in done.stdout and (tmp_path / "r" / "telemetry" / "quick.json").is_file()
    assert not (tmp_path / "ext").exists() or not any((tmp_path / "ext").rglob("*.so"))


def test_the_library_prints_nothing_without_a_compiler(tmp_path):
    code = (
        "import torch; from attnscale.torch import attention, ext; "
        "assert not ext.build_needed(); "
        "attention(torch.ones(1, 3, 4), torch.ones(1, 3, 4), torch.ones(1, 3, 4))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], env=_without_compiler(tmp_path), capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0 and done.stdout == "" and done.stderr == "", done.stderr


def test_build_needed_is_true_on_an_empty_cache_and_builds_nothing(tmp_path):
    code = "from attnscale.torch import ext; print(ext.build_needed())"
    env = {**os.environ, "TORCH_EXTENSIONS_DIR": str(tmp_path / "ext")}
    env.pop("ATTNSCALE_NO_KERNEL", None)
    if shutil.which(env.get("CXX", "c++"), path=env.get("PATH")) is None:
        pytest.skip("no C++ compiler here")
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.stdout.strip() == "True", done.stderr
    assert not any((tmp_path / "ext").rglob("*.so"))
    disabled = subprocess.run(
        [sys.executable, "-c", code],
        env={**env, "ATTNSCALE_NO_KERNEL": "1"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert disabled.stdout.strip() == "False"


def test_after_a_load_no_build_is_needed():
    ext.load_kernel()
    assert ext.build_needed() is False


@pytest.mark.parametrize("quiet", [False, True])
def test_a_first_build_is_announced_in_one_line(monkeypatch, capsys, quiet):
    monkeypatch.setattr(ext, "build_needed", lambda: True)
    monkeypatch.setattr(ext, "kernel_status", lambda: {"available": True, "reason": "built"})
    assert kernel.prepare_kernel(quiet=quiet) is True
    err = capsys.readouterr().err
    assert err == ("" if quiet else "building the fused kernel, once: ~10 s\n")


def test_the_fallback_is_said_even_when_quiet(monkeypatch, capsys):
    monkeypatch.setattr(ext, "build_needed", lambda: False)
    monkeypatch.setattr(ext, "kernel_status", lambda: {"available": False, "reason": "disabled by ATTNSCALE_NO_KERNEL"})
    with language("zh"):
        assert kernel.prepare_kernel(quiet=True) is False
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "ATTNSCALE_NO_KERNEL" in err[0] and "composed" in err[0] and "kernel (" not in err[0]
