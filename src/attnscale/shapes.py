"""The one check of attention's input shapes, shared by the NumPy core and the torch kernel.

q: (..., H_q, L, d_k), k: (..., H_kv, S, d_k), v: (..., H_kv, S, d_v); H_kv divides H_q (grouped-query
attention); the leading dimensions broadcast. Shapes come in as plain tuples (a ``torch.Size`` is one),
so this module needs neither NumPy arrays nor torch.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from attnscale.errors import InputError

__all__ = ["QKVShapes", "check_qkv_shapes"]


@dataclass(frozen=True)
class QKVShapes:
    H_q: int
    H_kv: int
    L: int
    S: int
    d_k: int
    d_v: int
    lead: tuple[int, ...]  # the broadcast leading dimensions


# Kept per set of shapes: a model's attention calls repeat a few shapes, and the monitor checks them
# on every call (a torch.Size is a tuple, so they hash; a failed check is not kept).
@functools.lru_cache(maxsize=256)
def check_qkv_shapes(
    q4: tuple, k4: tuple, v4: tuple, q: tuple, k: tuple, v: tuple, allow_empty: bool = False
) -> QKVShapes:
    """Check the heads views ``q4, k4, v4`` (each at least 3-D: (..., H, N, d)); ``q, k, v`` are the
    shapes the caller passed, named in the messages. Raises :class:`InputError` naming the argument.
    ``allow_empty``: S = 0 keys, d_k = 0 and H_q = H_kv = 0 heads pass (as PyTorch's SDPA takes them:
    :func:`attnscale.torch.attention`); else refused (the NumPy core's rule)."""
    q4, k4, v4, q, k, v = (tuple(int(n) for n in s) for s in (q4, k4, v4, q, k, v))
    H_q, L, d_k = q4[-3:]
    H_kv, S, _ = k4[-3:]
    if k4[-1] != d_k:
        raise InputError(f"k: expected last dimension d_k = {d_k} to match q {q}, got k shape {k}")
    if v4[-2] != S:
        raise InputError(f"v: expected S = {S} keys to match k {k}, got v shape {v}")
    if v4[-3] != H_kv:
        raise InputError(f"v: expected H_kv = {H_kv} heads to match k {k}, got v shape {v}")
    if (d_k == 0 or S == 0) and not allow_empty:  # no default scale for d_k = 0, no distribution over 0 keys
        raise InputError(f"q, k: expected d_k >= 1 and S >= 1 keys, got q shape {q}, k shape {k}")
    if (H_kv == 0 and not (allow_empty and H_q == 0)) or (H_kv and H_q % H_kv):
        raise InputError(
            f"k: number of heads H_kv = {H_kv} must divide the number of query heads H_q = {H_q} (q {q}, k {k})"
        )
    try:
        lead = tuple(np.broadcast_shapes(q4[:-3], k4[:-3], v4[:-3]))
    except ValueError:
        raise InputError(f"q, k, v: leading dimensions must broadcast, got q {q}, k {k}, v {v}") from None
    return QKVShapes(H_q=H_q, H_kv=H_kv, L=L, S=S, d_k=d_k, d_v=v4[-1], lead=lead)
