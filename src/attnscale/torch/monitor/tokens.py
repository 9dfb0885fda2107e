"""Which keys and heads a monitor's figures are of: an attention call's real keys (padding out), the
keys new to a KV cache (each counted once), each row's first real key, and grouped-query heads that
the caller packed into rows, unpacked back into the model's heads.

    keys = call_keys(real, first, past, ...)            # CallKeys: the keys Σ ‖k‖ counts, per batch row
    count_keys(run, k, keys)                             # a call's Σ ‖k‖ and key count over those keys
    first_real_weight(q, k, lse, first, ...)             # each row's weight on its first real key
    PackedHeads(model).groups(name, q, k, mask, causal)  # g when q (B, H/g, g, d) packs H heads' single rows

Shapes: q (B, H_q, L, d_k), k (B, H_kv, S, d_k) (4-D calls only: the others have no batch rows to
tell padding in). What a real key, a new key and a first real key are is said in
the monitor's user guide (docs/monitor.md: padding, KV caches and grouped-query heads).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch

from attnscale.torch.head_table import ROWS

__all__ = [
    "CallKeys",
    "keys_of",
    "real_keys",
    "call_keys",
    "count_keys",
    "first_real_weight",
    "grouping",
    "packed_groups",
    "unpack",
    "PackedHeads",
    "with_first_real",
    "unpack_call",
]

_K_NORM = ROWS.index("k_norm_sum")


@dataclass(frozen=True)
class CallKeys:
    """The keys of one call that its figures are of. ``count``: the keys Σ ‖k‖ counts (real and new;
    per KV head, over the batch); ``index``: (batch rows, positions), int64 (n,) each, of those keys,
    None for every key; ``host``: the same as NumPy arrays. ``first``: int64 (B,), each batch row's
    first real key, or None when it is key 0 in every row."""

    count: int
    index: Any
    first: Any
    host: Any = None


def keys_of(counted, first) -> CallKeys:
    """The :class:`CallKeys` of the keys ``counted`` (bool (B, S)) (one nonzero, copied to the host)."""
    index = counted.nonzero(as_tuple=True)
    host = tuple(i.cpu().numpy() for i in index)
    return CallKeys(len(host[0]), index, first, host)


def real_keys(mask, causal: bool, valid, L: int, S: int, B: int):
    """``(real, first)`` of a call: bool (B, S), the keys that some real query row may attend — what
    the call's ``mask`` (bool, True = attend, broadcastable to (B, H, L, S), or None) and a top-left
    ``causal`` limit let through, over the rows ``valid`` (bool (B, L), or None: every row) — or None
    when every key is; and int64 (B,), each batch row's first such key, or None when it is key 0
    everywhere. A key no real row may attend is padding (or a static cache's empty slot)."""
    real = None
    if mask is not None:
        m = mask.reshape((1,) * (4 - mask.dim()) + tuple(mask.shape)) if mask.dim() < 4 else mask
        if valid is not None and m.shape[-2] == L:
            m = m & valid.to(m.device)[:, None, :, None]
        real = m.any(dim=-2).any(dim=-2).expand(B, S)  # (B|1, S) → (B, S)
    if causal and S > L:  # top-left: row i attends keys j ≤ i, so keys from L on by none
        reach = (torch.arange(S, device=mask.device if mask is not None else None) < L).expand(B, S)
        real = reach if real is None else real & reach
    if real is None or bool(real.all()):
        return None, None
    first = real.to(torch.int8).argmax(dim=-1)  # the first True (0 where none: nothing attended)
    return real, (first if bool(first.any()) else None)


def call_keys(real, first, past: int, L: int, S: int, B: int, repeat: bool, device, starts=None) -> CallKeys:
    """The :class:`CallKeys` of a call in a forward that continues a KV cache of ``past`` tokens: of
    its ``real`` keys (None: every key), the ``L`` new ones — positions past .. past+L−1 when the keys
    span the sequence (S ≥ past + L: a dynamic cache, or a static one's slots), else the last L (a
    sliding window's S keys are the sequence's last) — and none when ``repeat`` (the very keys the
    layer's previous call read: an encoder's states to a cross-attention, read again from the cache
    at each step). ``first``: the call's first real keys (:func:`real_keys`); in a sliding window,
    the sequence's first real tokens (``starts``, int64 (B,), None: 0) less the positions it dropped,
    negative where dropped (no weight)."""
    if repeat:
        none = torch.zeros(0, dtype=torch.long, device=device)
        return CallKeys(0, (none, none), first, (none.cpu().numpy(),) * 2)
    pos = torch.arange(S, device=device)
    new = (pos >= past) & (pos < past + L) if S >= past + L else pos >= S - L
    if S < past + L:  # key j is the sequence's position j + past + L − S
        starts = torch.zeros(B, dtype=torch.long, device=device) if starts is None else starts.to(device)
        first = starts - (past + L - S)
    return keys_of(new.expand(B, S) if real is None else real & new, first)


def count_keys(run, k, keys: CallKeys) -> None:
    """Set ``run``'s (a :class:`~attnscale.torch.head_summary.Running` of one call on k (B, H_kv,
    S, d)) Σ ‖k‖ and key count to those of the keys ``keys`` counts: their norms (float32; float64 for
    float64 keys, as the figures) summed in float64; query head h reads KV head h // (H / H_kv). On
    the CPU in NumPy (torch's indexing and norm cost more than the arithmetic on a few keys:
    measured 170 µs against 26 on MiniLM's shapes, on a loaded machine), elsewhere in torch."""
    k = k.detach()
    if k.device.type == "cpu" and k.dtype in (torch.float32, torch.float64):
        picked = k.numpy()[keys.host[0], :, keys.host[1]]  # (n, H_kv, d)
        sums = np.sqrt(np.einsum("nhd,nhd->nh", picked, picked)).sum(0, dtype=np.float64)
    else:
        picked = k[keys.index[0], :, keys.index[1]]
        sums = torch.linalg.vector_norm(picked, dim=-1, dtype=torch.float32).sum(0).cpu().numpy().astype(np.float64)
    run.table[_K_NORM] = np.repeat(sums, run.heads // k.shape[1])
    run.keys = keys.count


def first_real_weight(q, k, lse, first, scale, softcap: float, mask, bias, causal: bool):
    """(B, H_q, L) in lse's dtype: each row's weight on its batch row's first real key ``first`` (B,),
    exp(s_ip − lse_i), with s_ip formed as the attention formed it: scale·q_i·k_p (``scale`` None:
    1/√d_k), soft-capped by ``softcap`` (0: none), plus ``bias`` (broadcastable to (B, H_q, L, S), or
    None); 0 where row i does not attend key p (``mask``, bool; a top-left ``causal`` limit, p > i),
    or p < 0 (the first real key is not among the call's: a sliding window dropped it). q (B, H_q, L,
    d) and lse (B, H_q, L): the rows of the figures (a sample's, its mask rows with it)."""
    B, H, L, d = q.shape
    H_kv, S = k.shape[1], k.shape[2]
    dtype = lse.dtype
    with torch.no_grad():
        rows = torch.arange(B, device=k.device)
        gone = first.to(k.device) < 0
        first = first.to(k.device).clamp(min=0)
        k_first = k[rows, :, first].to(dtype)  # (B, H_kv, d): advanced indices first
        factor = 1.0 / math.sqrt(d) if scale is None else float(scale)
        s = (q.to(dtype).reshape(B, H_kv, H // H_kv, L, d) * k_first[:, :, None, None]).sum(-1).reshape(B, H, L)
        s = s * factor
        if softcap:
            s = softcap * torch.tanh(s / softcap)
        if bias is not None:
            s = s + bias.expand(B, H, L, S)[rows, :, :, first].to(dtype)
        if mask is not None:
            s = s.masked_fill(~mask.expand(B, H, L, S)[rows, :, :, first], -math.inf)
        if causal:
            s = s.masked_fill((torch.arange(L, device=s.device) < first[:, None])[:, None], -math.inf)
        return (s.masked_fill(gone[:, None, None], -math.inf) - lse).exp_()


def grouping(module) -> tuple[int, int] | None:
    """(g, H) of an attention module with grouped-query heads: its ``num_key_value_groups`` g > 1 and
    its config's ``num_attention_heads`` H (or its ``num_heads``), as transformers' modules have
    them; None for any other module."""
    groups = getattr(module, "num_key_value_groups", 1)
    heads = getattr(getattr(module, "config", None), "num_attention_heads", None) or getattr(module, "num_heads", None)
    return (groups, heads) if isinstance(groups, int) and isinstance(heads, int) and groups > 1 else None


def packed_groups(grouped: tuple[int, int], q, k) -> int:
    """g when a call's q (B, H/g, g, d) packs the single query rows of the H heads of a module grouped
    ``(g, H)`` (:func:`grouping`) in groups of g per KV head (transformers' SDPA path does it for
    one-token decoding with a mask): q has H/g heads, as many as k, and g rows; else 0. A call of H
    heads is never packed."""
    groups, heads = grouped
    if q.dim() != 4 or k.dim() != 4:
        return 0
    packed = q.shape[-2] == groups and q.shape[-3] * groups == heads and k.shape[-3] == q.shape[-3]
    return groups if packed else 0


def unpack(x, groups: int):
    """A packed (B, H/g, g, n) tensor (q, the output, a per-head mask or bias) as (B, H, 1, n): head h
    = KV head h // g's row h % g, as the caller packed it; a mask or bias shared by the heads and rows
    ((B, 1, 1, S)) as it is; None as None."""
    if x is None or (x.shape[-3] == 1 and x.shape[-2] == 1):
        return x
    return x.reshape(*x.shape[:-3], x.shape[-3] * groups, 1, x.shape[-1])


class PackedHeads:
    """Which layers pack their module's grouped-query heads into rows: each layer's module looked up
    once in ``model`` (:func:`grouping`; None: no model, nothing is packed)."""

    def __init__(self, model):
        self._model = model
        self._packing: dict[str, Any] = {}  # layer -> its module's (groups, heads), None: not grouped

    def groups(self, name: str, q, k, mask, causal: bool) -> int:
        """g when a call of layer ``name`` packs its module's grouped-query heads, g single query rows
        to a KV head (:func:`packed_groups`), with a ``mask`` shared by heads and rows or packed as q;
        else 0."""
        if name not in self._packing:
            try:
                self._packing[name] = None if self._model is None else grouping(self._model.get_submodule(name))
            except AttributeError:  # a name that is no module path (no model: a class name)
                self._packing[name] = None
        grouped = self._packing[name]
        if grouped is None or causal:
            return 0
        groups = packed_groups(grouped, q, k)
        shared = mask is None or (mask.dim() == 4 and tuple(mask.shape[1:3]) in ((1, 1), tuple(q.shape[1:3])))
        return groups if shared else 0


def with_first_real(stats, q, k, first, scale, softcap: float, mask, bias, causal):
    """``stats`` with each row's weight on its batch row's first real key (``first`` (B,), not key 0:
    :func:`first_real_weight`, with the call's ``scale``, ``softcap``, ``mask``, ``bias`` and
    ``causal`` as its figures were made) and no head table: the call's figures are then summed from
    its rows (:func:`~attnscale.torch.head_summary.call_figures`)."""
    weight = first_real_weight(q, k, stats.lse, first, scale, softcap, mask, bias, bool(causal))
    return replace(stats, first_key_weight=weight, head_table=None, counted_entropy=None)


def unpack_call(call, groups: int):
    """An :class:`~attnscale.torch.capture.SDPACall` whose q packs ``groups`` grouped-query heads
    (:meth:`PackedHeads.groups`) with q (B, H, 1, d), its mask and output as q; 0: the call as it is."""
    if not groups:
        return call
    return replace(
        call,
        q=unpack(call.q, groups),
        attn_mask=unpack(call.attn_mask, groups),
        output=unpack(call.output, groups),
        enable_gqa=True,
    )
