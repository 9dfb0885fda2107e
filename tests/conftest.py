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
