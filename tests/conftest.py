"""Shared test set-up: the suite runs in a temporary folder, so that a command run on its defaults
(``./attnscale-results``, ``./attnscale-report``) never leaves files in the user's checkout."""

from __future__ import annotations

import os

import pytest


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
