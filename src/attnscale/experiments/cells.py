"""A sweep and its cells share settings (steps, batch size, model width …) declared once.

Each experiment declares them in one keyword-only dataclass that both its sweep configuration and its
cell extend, so a default is written once and a sweep hands its values to every cell it makes.
"""

from __future__ import annotations

from dataclasses import fields

__all__ = ["shared_settings"]


def shared_settings(obj, settings: type) -> dict:
    """``obj``'s values of the fields that dataclass ``settings`` declares (``obj`` extends it)."""
    return {f.name: getattr(obj, f.name) for f in fields(settings)}
