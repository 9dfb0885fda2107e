"""A sweep backend for the runner's tests: serial, and counts the cells it was asked to compute."""

from __future__ import annotations

from attnscale.experiments.sweeps.runner import SerialBackend


class CountingBackend:
    """Serial, and records how many cells it was asked to compute."""

    workers = 1

    def __init__(self):
        self.computed = 0

    def map(self, fn, cells):
        self.computed += len(cells)
        return SerialBackend().map(fn, cells)
