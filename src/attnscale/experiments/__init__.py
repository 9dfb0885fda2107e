"""Experiments built on the core: training runs and the real-model probe."""
