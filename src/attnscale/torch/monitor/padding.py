"""Which tokens of a forward are real: the padding a model's ``attention_mask`` marks and the tokens
its KV cache held, read by forward hooks on the outermost modules that take an ``attention_mask``,
and from them the query rows and keys of each call that the figures are of (docs/monitor.md:
padding, KV caches and grouped-query heads; :mod:`attnscale.torch.monitor.tokens` finds the keys)."""

from __future__ import annotations

import inspect
import weakref
from typing import Any

import torch

from attnscale.torch.capture import compiled
from attnscale.torch.monitor.tokens import CallKeys, call_keys, keys_of, real_keys

__all__ = ["RealTokens", "padding_modules"]


class RealTokens:
    """The real tokens of the forward under way in ``model``: :meth:`hook` puts a pre-hook and a hook
    on its outermost modules taking an ``attention_mask`` (found by :meth:`find`), :meth:`unhook`
    takes them off; :meth:`valid_rows`, :meth:`table_rows` and :meth:`call_keys` answer per call."""

    def __init__(self, model):
        self._model = model
        self._modules: dict = {}  # the modules whose attention_mask is read -> (position, of queries)
        self._hooks: list = []
        self._query_valid: tuple[Any, int] | None = None  # (B, L) bool: the forward's real tokens, and their count
        self._past: int | None = None  # tokens the forward's KV cache held before it (None: no cache given)
        self._starts: Any = None  # with a cache: (B,) each sequence's first real token (None: 0), from its mask
        self._stack: list = []  # (query rows, past, starts) of the forwards an inner hooked one ran in
        self._keys_cache: tuple | None = None  # (mask, rows, shape, (real, first, CallKeys)): see call_keys
        self._last_keys: dict[str, tuple] = {}  # layer -> (weakref to its last call's key storage, layout)

    def find(self) -> None:
        """Look up the modules to hook (when the monitor is entered: the model may be compiled since)."""
        self._modules = padding_modules(self._model)

    @property
    def hooked(self) -> bool:
        return bool(self._hooks)

    def hook(self) -> None:
        self._hooks = []
        for m in self._modules:
            self._hooks.append(m.register_forward_pre_hook(self._read, with_kwargs=True))
            self._hooks.append(m.register_forward_hook(self._forget_forward, always_call=True))

    def unhook(self) -> None:
        for hook in self._hooks:
            hook.remove()
        self._hooks, self._stack = [], []
        self._query_valid = self._past = self._starts = None

    def forget(self) -> None:
        """Hold no tensor of the model's: the last mask's keys, the layers' last keys."""
        self._keys_cache = None
        self._last_keys = {}

    def _read(self, module, args, kwargs) -> None:
        """A forward pre-hook of an outermost module that takes an ``attention_mask``: the one it
        was given (by name or in its place), (B, T) of 0/1 (or bool), as the real tokens of this
        forward's query rows (its last L columns where the forward continues a KV cache: T = past
        + L, the cache's tokens then its own); and the tokens its KV cache (``cache`` or
        ``past_key_values``) held before it."""
        self._stack.append((self._query_valid, self._past, self._starts))  # an encoder's inside its model's
        at, queries = self._modules[module]
        mask = kwargs.get("attention_mask")
        if mask is None and at is not None and at < len(args):
            mask = args[at]
        self._past, self._starts = _cache_length(kwargs.get("cache", kwargs.get("past_key_values"))), None
        if not (queries and isinstance(mask, torch.Tensor) and mask.dim() == 2):
            self._query_valid = None
            return
        valid = mask != 0
        if self._past and valid.shape[-1] == self._past + _input_length(args, kwargs):
            self._starts = valid.to(torch.int8).argmax(dim=-1)  # where a sliding window's keys start
            valid = valid[:, self._past :]  # the cache's tokens are no query row of this forward
        real = int(valid.sum())  # one count per forward, not per call
        self._query_valid = None if real == valid.numel() else (valid, real)

    def _forget_forward(self, module, args, output) -> None:
        """Its forward hook: the padding read is that forward's, of no call after it (those of the
        forward it ran in, if any, read that one's again)."""
        self._query_valid, self._past, self._starts = self._stack.pop() if self._stack else (None,) * 3

    def valid_rows(self, q):
        """(N, L) bool, which query rows of a call on q are real tokens (from the forward's
        attention_mask: its last L columns in a forward continuing a KV cache), and their number;
        None when every row counts (no mask, or one whose batch and length are not the call's:
        another shape)."""
        m = self._query_valid
        if m is None or q.dim() != 4 or tuple(m[0].shape) != (q.shape[0], q.shape[-2]):
            return None
        return m

    def table_rows(self, q, picked=None):
        """Whether the kernel may make a call's head table as it makes its figures (q 4-D: the
        table's rows are q's), and the rows the table counts: the real tokens (:meth:`valid_rows`),
        among them ``picked``'s (observe mode's sampled rows, its problem's); None: every row."""
        if q.dim() != 4:
            return False, None
        valid = self.valid_rows(q)
        if valid is None:
            return True, None
        rows = valid[0] if valid[0].device == q.device else valid[0].to(q.device)
        return True, rows if picked is None else rows.gather(-1, picked)

    def call_keys(self, name: str, q, k, mask, causal: bool) -> CallKeys | None:
        """The keys of a call on q (B, H, L, d), k (B, H_kv, S, d) its figures are of: the real ones
        (``mask``: bool, True = attend, or None; top-left ``causal``), of them the ones new to the
        forward's KV cache, and each batch row's first real key. None: every key, key 0 first (no
        padding, no cache; not 4-D). The real keys are found once per mask (a model hands every
        layer the same)."""
        if mask is None and self._past is None and not causal:
            return None  # no padding, no cache: every key, once (the common call, first)
        if q.dim() != 4 or k.dim() != 4 or k.shape[0] != q.shape[0] or (q.shape[0] > 1 and k.stride(0) == 0):
            return None  # keys broadcast over the batch are summed once (call_figures): left so
        B, L, S = q.shape[0], q.shape[-2], k.shape[-2]
        if mask is None and not (causal and S > L):
            real, first, keys = None, None, None  # every key real, key 0 first: nothing to find
        else:
            valid = self.valid_rows(q)
            rows = None if valid is None else valid[0]
            shape = (None if mask is None else mask._version, B, L, S, causal)
            c = self._keys_cache
            if c is None or c[0] is not mask or c[1] is not rows or c[2] != shape:
                real, first = real_keys(mask, causal, rows, L, S, B)
                c = (mask, rows, shape, (real, first, None if real is None else keys_of(real, first)))
                self._keys_cache = c
            real, first, keys = c[3]
        if self._past is None:  # no KV cache: every real key is the call's
            return keys
        repeat = self._same_keys(name, k)
        if not self._past:  # a cache's first forward: every real key is new
            return keys
        return call_keys(real, first, self._past, L, S, B, repeat, k.device, self._starts)

    def _same_keys(self, name: str, k) -> bool:
        """Whether k is the very keys the layer's previous call read (the same storage, place and
        layout, not written since: a cross-attention's keys, read again from the cache); records k's."""
        storage = k.untyped_storage()
        layout = (k.storage_offset(), tuple(k.shape), k.stride(), k._version)
        before = self._last_keys.get(name)
        self._last_keys[name] = (weakref.ref(storage), layout)
        return before is not None and before[0]() is storage and before[1] == layout


def padding_modules(model) -> dict:
    """The outermost modules of ``model`` whose forward takes an ``attention_mask`` (a Hugging Face
    model, a LightningModule wrapping one ...; none inside another such), each with ``(place,
    queries)``: the mask's place among its forward's positional arguments (None: by name only), and
    whether the mask is of the forward's query rows: where the monitor reads which query rows are
    padding, and the forward's KV cache. A Hugging Face encoder-decoder's mask is its encoder's:
    the encoder is hooked too (its ``generate`` runs it on its own) and reads it, the model only its
    cache. None on a compiled model (a hook added to it would recompile its graph) or without a model."""
    if model is None or compiled(model):
        return {}

    def outermost(module) -> dict:
        takes, place = _mask_place(module)
        if takes:
            encoder = _encoder(module)
            reads, at = (False, None) if encoder is None else _mask_place(encoder)
            return {module: (place, False), encoder: (at, True)} if reads else {module: (place, True)}
        return {m: at for child in module.children() for m, at in outermost(child).items()}

    return outermost(model)  # a module shared by two parents, once


_POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)


def _mask_place(module) -> tuple[bool, int | None]:
    """Whether the module's forward takes an attention_mask, and its place (None: by name only)."""
    try:
        parameters = list(inspect.signature(module.forward).parameters.values())
    except (TypeError, ValueError):
        return False, None
    names = [p.name for p in parameters]
    if "attention_mask" not in names:
        return False, None
    before = parameters[: names.index("attention_mask") + 1]
    return True, (len(before) - 1 if all(p.kind in _POSITIONAL for p in before) else None)


def _encoder(module):
    """A Hugging Face encoder-decoder's encoder (its ``get_encoder()``, not itself); else None."""
    get = getattr(module, "get_encoder", None)
    if not (callable(get) and getattr(getattr(module, "config", None), "is_encoder_decoder", False)):
        return None
    encoder = get()
    return encoder if isinstance(encoder, torch.nn.Module) and encoder is not module else None


def _cache_length(cache) -> int | None:
    """The tokens a forward's KV cache (``cache`` / ``past_key_values``: a transformers Cache) held
    before the forward; None without a cache (0 for one that cannot say)."""
    if cache is None:
        return None
    length = getattr(cache, "get_seq_length", None)
    return int(length()) if callable(length) else 0


def _input_length(args, kwargs) -> int:
    """The tokens a forward is given (``input_ids`` or ``inputs_embeds``, by name or first; their
    dimension 1), −1 when none is."""
    given = (kwargs.get("input_ids"), kwargs.get("inputs_embeds"), args[0] if args else None)
    x = next((x for x in given if isinstance(x, torch.Tensor) and x.dim() >= 2), None)
    return -1 if x is None else x.shape[1]
