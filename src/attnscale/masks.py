"""Causal masks, with both alignments named explicitly when queries and keys differ in number.

For L = 3 queries and S = 5 keys (1 = attend)::

    top_left (PyTorch is_causal)       bottom_right (FlashAttention >= 2.1, KV-cache decoding)
        1 0 0 0 0                          1 1 1 0 0
        1 1 0 0 0                          1 1 1 1 0
        1 1 1 0 0                          1 1 1 1 1

Top-left aligns query i with key i; bottom-right aligns the last query with the last key, which is
what a decoder needs when the L new queries follow S − L cached keys. With L = S both are the usual
lower triangle. With L > S, bottom-right leaves the first L − S query rows fully masked.
"""

from __future__ import annotations

import numpy as np

from attnscale.errors import InputError, check_choice

__all__ = ["CAUSAL_ALIGNMENTS", "causal_alignment", "causal_mask"]

CAUSAL_ALIGNMENTS = ("top_left", "bottom_right")


def causal_alignment(causal, L: int, S: int) -> str | None:
    """Validate the ``causal`` argument: False/None, "top_left", "bottom_right", or True when
    L == S (where both alignments agree). True with L ≠ S is refused: the alignment must be named."""
    if causal is None or causal is False:
        return None
    if causal is True:
        if L != S:
            raise InputError(
                f"causal: True is ambiguous when L != S (got L={L}, S={S}); "
                "expected causal='top_left' (PyTorch is_causal) or causal='bottom_right' (KV-cache decoding)"
            )
        return "top_left"
    if isinstance(causal, str) and causal in CAUSAL_ALIGNMENTS:
        return causal
    raise InputError(f"causal: expected False, True, 'top_left' or 'bottom_right', got {causal!r}")


def causal_mask(L: int, S: int, alignment: str = "top_left") -> np.ndarray:
    """Boolean (L, S), True = attend.

    >>> causal_mask(2, 3, "bottom_right").astype(int)
    array([[1, 1, 0],
           [1, 1, 1]])
    """
    check_choice("alignment", alignment, CAUSAL_ALIGNMENTS)
    offset = 0 if alignment == "top_left" else S - L
    return np.arange(S)[None, :] <= np.arange(L)[:, None] + offset
