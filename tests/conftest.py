"""Shared test set-up: the suite runs in a temporary folder, so that a command run on its defaults
(``./attnscale-results``, ``./attnscale-report``) never leaves files in the user's checkout."""

from __future__ import annotations

import os
import tempfile

import pytest

# torch 2.13's Inductor reuses a kernel compiled under another ATEN_CPU_CAPABILITY from its cache
# (seen here: a compiled GPT then returns NaN, or glibc aborts on a corrupted heap). The suite is run
# under a second arithmetic too (attnscale.experiments.reproduction.SECOND_ARITHMETIC), so each
# capability compiles into a cache of its own, unless the user chose one.
os.environ.setdefault(
    "TORCHINDUCTOR_CACHE_DIR",
    os.path.join(
        tempfile.gettempdir(), f"torchinductor_attnscale_{os.environ.get('ATEN_CPU_CAPABILITY') or 'default'}"
    ),
)


@pytest.fixture(scope="session", autouse=True)
def _run_in_a_temporary_folder(tmp_path_factory):
    before = os.getcwd()
    os.chdir(tmp_path_factory.mktemp("cwd"))
    try:
        yield
    finally:
        os.chdir(before)


@pytest.fixture(scope="session", autouse=True)
def _no_reference_results():
    """Without the shipped reference results (src/attnscale/reference_results), so that a test's temporary results
    folder is all the report and the verification see; the tests of the references themselves set
    ATTNSCALE_REFERENCE to the folder they mean (also for the commands they start)."""
    before = os.environ.get("ATTNSCALE_REFERENCE")
    os.environ["ATTNSCALE_REFERENCE"] = ""
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("ATTNSCALE_REFERENCE", None)
        else:
            os.environ["ATTNSCALE_REFERENCE"] = before


@pytest.fixture(autouse=True)
def _torch_process_settings_restored():
    """torch's deterministic flag and thread count as they were before each test: a training cell run
    in the test's own process sets both (deterministic kernels, one thread), and a later test must
    not inherit them."""
    import sys

    torch = sys.modules.get("torch")
    before = (
        None
        if torch is None
        else (
            torch.are_deterministic_algorithms_enabled(),
            torch.is_deterministic_algorithms_warn_only_enabled(),
            torch.get_num_threads(),
        )
    )
    yield
    if before is not None:
        deterministic, warn_only, threads = before
        torch.use_deterministic_algorithms(deterministic, warn_only=warn_only)
        torch.set_num_threads(threads)
    elif "torch" in sys.modules:  # imported by this test: torch's default flag
        sys.modules["torch"].use_deterministic_algorithms(False)


@pytest.fixture
def lang(request):
    """The language a test is parametrized with, bound for its run (as a page build or a CLI run binds
    its own): ``@pytest.mark.parametrize("lang", ["en", "zh"], indirect=True)``."""
    from attnscale.i18n import language

    with language(request.param):
        yield request.param


HEAVY_MARKS = ("slow", "model", "browser")


def _file_weight(items) -> tuple[int, int]:
    """(tests marked slow, model or browser; tests) of one file: how long it runs, roughly."""
    heavy = sum(any(item.get_closest_marker(m) for m in HEAVY_MARKS) for item in items)
    return heavy, len(items)


@pytest.hookimpl(trylast=True)  # after -m and -k have deselected
def pytest_collection_modifyitems(config, items):
    """Under pytest-xdist, the files with the most heavy tests first. `make test` gives each file to one
    worker (--dist loadfile) in collection order (--no-loadscope-reorder; xdist's own order is by number
    of tests, which puts a file of a few minute-long tests last), so a long file that started last would
    leave the other worker idle while it ran."""
    if not hasattr(config, "workerinput"):  # not an xdist worker: the order pytest collected
        return
    files: dict[str, list] = {}
    for item in items:
        files.setdefault(item.nodeid.split("::", 1)[0], []).append(item)
    order = sorted(files, key=lambda f: tuple(-n for n in _file_weight(files[f])))  # stable: ties as collected
    items[:] = [item for f in order for item in files[f]]
