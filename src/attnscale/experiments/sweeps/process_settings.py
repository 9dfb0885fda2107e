"""torch's process-wide settings (the deterministic flag, warn-only, the intra-op thread count) kept
around a cell that runs in the caller's own process or in a reused worker: a cell's
:func:`~attnscale.experiments.training.common.seed_everything` changes them, the next cell (or the
caller) must not inherit them."""

from __future__ import annotations

import sys

__all__ = ["process_settings", "restore_process_settings", "remember_first_settings"]


# torch's process-wide settings as they were before seed_everything first changed them in this process.
_first_settings: list[tuple[bool, bool, int]] = []


def process_settings() -> tuple[bool, bool, int] | None:
    """torch's (deterministic algorithms, warn-only, intra-op threads), or None when torch is not
    imported yet (then they are torch's defaults)."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    return (
        torch.are_deterministic_algorithms_enabled(),
        torch.is_deterministic_algorithms_warn_only_enabled(),
        torch.get_num_threads(),
    )


def restore_process_settings(settings: tuple[bool, bool, int] | None) -> None:
    """Put back what :func:`process_settings` returned before a cell ran. None (torch was not imported
    then): the settings torch had before :func:`seed_everything` first changed them, if it did."""
    if settings is None:
        if not _first_settings:
            return
        settings = _first_settings[0]
    import torch

    deterministic, warn_only, threads = settings
    torch.use_deterministic_algorithms(deterministic, warn_only=warn_only)
    torch.set_num_threads(threads)


def remember_first_settings() -> None:
    """Record torch's settings before this process first changes them (what
    :func:`restore_process_settings` puts back for a cell that ran before torch was imported)."""
    if not _first_settings:
        _first_settings.append(process_settings())
