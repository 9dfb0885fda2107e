"""SDPA's ``attn_mask`` as the monitor computes with it: which entries mask, which add a bias, and
whether a row SDPA would average (masked by finite numbers) is one we would call empty."""

from __future__ import annotations

import torch

from attnscale.torch.sdpa_mask import split_attn_mask

__all__ = ["MaskParts"]


class MaskParts:
    """``parts(m)``: (mask, bias, averaged) of an attn_mask ``m`` — :func:`split_attn_mask`, and
    whether a row we call fully masked holds finite numbers (SDPA masks nothing there, so such a row,
    HF's finfo.min, gets softmax(mask)·v from it where we give 0). Kept for the last mask tensor
    until :meth:`forget`: a model hands the same mask to every layer."""

    def __init__(self):
        self._last: tuple | None = None  # (mask tensor, its version, its parts)

    def parts(self, m):
        if m is None:
            return None, None, False
        if self._last is not None and self._last[0] is m and self._last[1] == m._version:
            return self._last[2]
        mask, bias = split_attn_mask(m)
        averaged = m.dtype != torch.bool and bool((~mask.any(-1) & torch.isfinite(m).any(-1)).any())
        self._last = (m, m._version, (mask, bias, averaged))
        return mask, bias, averaged

    def forget(self) -> None:
        """Hold no tensor of the model's (a step closed, the context left)."""
        self._last = None
