"""Replace mode's computation of one call: :func:`attnscale.torch.attention` computes the model's
attention and its figures in one pass (:class:`Replaced`), or the call is left to the model's own
attention, counted under its reason (:class:`~attnscale.torch.capture.Fallback`). A call of a key
met before (shapes, dtypes, mask layout, flags) runs the fused kernel straight, with that call's
checks (:class:`~attnscale.torch.functional.KeptAttention`)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import torch

from attnscale.errors import InputError
from attnscale.torch.capture import Fallback, SDPAArguments
from attnscale.torch.functional import kept_attention
from attnscale.torch.monitor.kernel import attention_figures, scale_rule
from attnscale.torch.monitor.masks import MaskParts
from attnscale.torch.monitor.padding import RealTokens
from attnscale.torch.monitor.tally import CallFigures
from attnscale.torch.monitor.tokens import PackedHeads, unpack, with_first_real

__all__ = [
    "FALLBACK_REASONS",
    "TRAINING_BACKEND",
    "KEPT_KEYS",
    "Replaced",
    "Replacer",
    "left_to_sdpa",
    "compiled_replacement",
]

# Every reason replace mode counts a fallback under (``mon.fallbacks``, ``Step.fallbacks``; the
# user guide, docs/monitor.md, says what each means), in a fixed order: what combine_step packs.
FALLBACK_REASONS = (
    "dropout",
    "learned mask",
    "fully masked row",
    "attention weights asked",
    "unsupported",
    "other attention",
)
# The backend of replace mode when gradients are needed: "auto", the fused kernel with its own
# flash-style backward (memory O(L·d)) on CPU where it builds, FlexAttention's own backward on CUDA
# where it compiles, else the composed path.
TRAINING_BACKEND = "auto"
# Replace mode's kept calls: this many keys at most, each a few shapes and numbers; a training set's
# batches of many lengths make a new one per length, the oldest then goes.
KEPT_KEYS = 64


@dataclass(frozen=True)
class Replaced:
    """A call replace mode computed: its output (..., H_q, L, d_v) and its figures (None for a
    checkpoint's recomputation, which is not folded in: its forward was)."""

    output: Any
    figures: CallFigures | None


class Replacer:
    """Replace mode's side of a monitor: :meth:`compute` answers each intercepted call."""

    def __init__(self, backend: str, tokens: RealTokens, masks: MaskParts, packing: PackedHeads):
        self._backend = backend
        self._tokens, self._masks, self._packing = tokens, masks, packing
        # call key -> KeptAttention, of any layer: a model's layers share a few keys, and a batch of
        # another length is a new key for every layer at once (KEPT_KEYS at most, oldest out first).
        self._kept: dict[tuple, Any] = {}

    def compute(self, name: str, a: SDPAArguments, picked, index: int, rerun: bool) -> Replaced | Fallback | None:
        """The call of layer ``name`` (arguments ``a``) computed with its figures (of the rows
        ``picked``, None: every row; its record numbered ``index``), or a :class:`Fallback`, or
        None: a call SDPA itself takes or refuses (not counted). ``rerun``: a checkpoint's
        recomputation (computed, not folded in). A call that packs its module's grouped-query heads
        is computed unpacked, its output packed back."""
        if left_to_sdpa(a):
            return None
        q = a.query
        groups = self._packing.groups(name, q, a.key, a.attn_mask, a.is_causal)
        if groups:
            a = replace(a, query=unpack(q, groups), attn_mask=unpack(a.attn_mask, groups), enable_gqa=True)
        done: Replaced | Fallback | None = self._kept_call(name, a, index, rerun)
        if done is None:
            done = self._checked(name, a, picked, index, rerun)
        if groups and isinstance(done, Replaced):
            done = replace(done, output=done.output.reshape(*q.shape[:-1], done.output.shape[-1]))
        return done

    def _kept_call(self, name: str, a: SDPAArguments, index: int, rerun: bool) -> Replaced | None:
        """A call of a key seen before (whose call passed :meth:`_checked`'s checks, and was kept):
        the kernel, with the checks that call made; what the key cannot say is checked here."""
        kept = self._kept.get(_call_key(a, _grad(a)))
        if kept is None or rerun:
            return None
        mask, bias, averaged = self._masks.parts(a.attn_mask)
        if bias is not None or averaged:
            return None
        q, k, v = a.query, a.key, a.value
        keys = self._tokens.call_keys(name, q, k, mask, a.is_causal)
        out, stats = kept(q, k, v, mask, self._tokens.table_rows(q)[1])
        if keys is not None and keys.first is not None:
            stats = with_first_real(stats, q, k, keys.first, a.scale, 0.0, mask, None, a.is_causal)
        return Replaced(out, CallFigures(name, q, k, v, stats, "replaced", index, keys=keys))

    def _checked(self, name: str, a: SDPAArguments, picked, index: int, rerun: bool) -> Replaced | Fallback:
        q, k, v, m = a.query, a.key, a.value, a.attn_mask
        if a.need_weights:
            return Fallback("attention weights asked")
        if a.dropout_p > 0:
            return Fallback("dropout")
        grad = _grad(a)
        if m is not None and m.requires_grad and torch.is_grad_enabled():
            return Fallback("learned mask")
        # A table of every row (of the real tokens); none for a sample (summed after, from its rows)
        # nor for a checkpoint's recomputation (not folded in).
        tabled, counted = self._tokens.table_rows(q) if picked is None and not rerun else (False, None)
        scale, causal = scale_rule(a.scale, a.softcap), "top_left" if a.is_causal else False
        backend = TRAINING_BACKEND if grad else self._backend
        try:
            mask, bias, averaged = self._masks.parts(m)
            if averaged:
                return Fallback("fully masked row")
            out, stats = attention_figures(
                q,
                k,
                v,
                scale=scale,
                mask=mask,
                bias=bias,
                causal=causal,
                backend=backend,
                head_table=tabled,
                counted=counted,
            )
        except InputError:  # inputs attention refuses: SDPA runs them, and no figures are made
            return Fallback("unsupported", figures=False)
        if rerun:
            return Replaced(out, None)
        keys = self._tokens.call_keys(name, q, k, mask, a.is_causal)
        if keys is not None and keys.first is not None:
            stats = with_first_real(stats, q, k, keys.first, a.scale, a.softcap, mask, bias, a.is_causal)
        # Kept for the next call of the same key: every row's table, no bias, no learned mask.
        if tabled and picked is None and bias is None and (m is None or not m.requires_grad):
            self._keep(
                _call_key(a, grad), kept_attention(q, k, v, scale=scale, causal=causal, mask=mask, backend=backend)
            )
        return Replaced(out, CallFigures(name, q, k, v, stats, "replaced", index, picked=picked, keys=keys))

    def _keep(self, key: tuple, made) -> None:
        if made is None:
            return
        if len(self._kept) >= KEPT_KEYS:
            del self._kept[next(iter(self._kept))]
        self._kept[key] = made


def _grad(a: SDPAArguments) -> bool:
    """Whether the call needs gradients: enabled, and an input that requires them."""
    return torch.is_grad_enabled() and (a.query.requires_grad or a.key.requires_grad or a.value.requires_grad)


def left_to_sdpa(a: SDPAArguments) -> bool:
    """Whether an intercepted call is SDPA's own to take or refuse, in both of replace mode's paths:
    not tensors, rank below 2, an attn_mask with is_causal (SDPA refuses both: let it say so), heads
    it would not broadcast without enable_gqa."""
    q, k, m = a.query, a.key, a.attn_mask
    tensor = torch.Tensor
    if not (isinstance(q, tensor) and isinstance(k, tensor) and isinstance(a.value, tensor)) or q.dim() < 2:
        return True
    if m is not None and a.is_causal:
        return True
    return not a.enable_gqa and q.dim() >= 3 and k.dim() >= 3 and k.shape[-3] not in (1, q.shape[-3])


def _call_key(a: SDPAArguments, grad: bool) -> tuple:
    """What replace mode's handling of a call decides from, but the mask's values and the forward's
    padding: two calls of one key take the same path to the same computation, in any layer."""
    q, k, v, m = a.query, a.key, a.value, a.attn_mask
    mask = (m.shape, m.dtype, m.device, m.requires_grad) if isinstance(m, torch.Tensor) else m
    flags = (a.dropout_p, a.is_causal, a.scale, a.enable_gqa, a.need_weights, a.softcap)
    return (q.shape, k.shape, v.shape, q.dtype, k.dtype, v.dtype, q.device, k.device, v.device, mask, flags, grad)


def compiled_replacement(a: SDPAArguments):
    """Replace mode inside a graph Dynamo compiles (traced, with an SDPA call's arguments ``a``):
    ``(output, AttentionStats)`` of :func:`attnscale.torch.attention` for the calls it can judge
    from their shapes and flags alone — no dropout, no attn_mask or a bool one, heads SDPA would
    broadcast — on :data:`TRAINING_BACKEND` (the fused kernel, one op in the graph), on the CPU (the
    only device this path is tested on); None for the others, whose own SDPA then stays in the graph
    (observed). A float mask is left alone: whether it masks a whole row with finite numbers (a
    fallback in eager replace) depends on its values, which a graph cannot branch on."""
    if left_to_sdpa(a) or a.dropout_p > 0:
        return None
    q, m = a.query, a.attn_mask
    if q.device.type != "cpu":
        return None  # traced and tested on CPU only; on CUDA the compiled model's SDPA stays, observed
    if m is not None and m.dtype != torch.bool:
        return None
    return attention_figures(
        q,
        a.key,
        a.value,
        scale=a.scale,
        mask=m,
        bias=None,
        causal="top_left" if a.is_causal else False,
        backend=TRAINING_BACKEND,
        head_table=q.dim() == 4,  # every row: a compiled model's padding is not read (docs/monitor.md)
        counted=None,
    )
