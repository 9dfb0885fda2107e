"""Ride transformers' attention interface: every attention call a Hugging Face model makes through it,
whatever its ``attn_implementation``, handed to a function of ours.

Since transformers 4.48 (and in every model of transformers 5 but a handful) an attention module
computes its attention through one dispatch, *after* its rotary embedding, QK-norm and KV cache::

    fn = ALL_ATTENTION_FUNCTIONS.get_interface(config._attn_implementation, eager_attention_forward)
    out, weights = fn(self, query, key, value, attention_mask, dropout=..., scaling=..., **kwargs)

``eager_attention_forward`` (the default) is the one in the module's own modeling file. While
:class:`riding` is active, ``AttentionInterface.get_interface`` hands back a wrapper instead of
``fn``, and each call becomes an :class:`InterfaceCall` passed to ``handler(call)``, which returns
what the module gets back: usually ``call.run()``, the model's own function, untouched.

    with riding(handler):                 # handler(call: InterfaceCall) -> (out, weights)
        model(**batch)

Nothing is switched: the model keeps its implementation and its mask function (so ``"eager"``
gets its additive float mask, ``"sdpa"`` its bool mask or None). Without transformers imported
:class:`riding` does nothing, so a plain PyTorch model pays nothing. Nested contexts chain; the
patch is global to the process (as transformers' registry is), so a call from another thread
during the context is seen too. Nested contexts see a call innermost first: each handler's
``call.run()`` hands it to the next one out, and a handler that answers it itself (a monitor in
replace mode) hides it from the outer ones, as nested torch-function modes do with SDPA calls.

:meth:`InterfaceCall.sdpa_arguments` reads an eager call as SDPA's arguments — the logits are
``cap(scaling·q·kᵀ) + position_bias + attention_mask`` in every eager function of transformers 5
(``softcap``: Gemma 2 and its kin; ``position_bias``: T5's relative positions) — or says why it
cannot (``sinks``: gpt-oss's learned extra logit; extra positional arguments).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from attnscale.torch.capture.call import Fallback, SDPAArguments
from attnscale.torch.capture.registry import REGISTRY

__all__ = ["InterfaceCall", "riding", "available", "interface_handler"]

# Keyword arguments of an eager function that change its logits beyond what SDPA's arguments hold.
_UNREADABLE_KWARGS = ("sinks", "s_aux")


@dataclass
class InterfaceCall:
    """One call through the attention interface, as the module made it.

    module: the attention module; implementation: its ``config._attn_implementation`` (None for a
    module used on its own); chosen: the function the interface picked; eager: the modeling file's
    eager function (the interface's default; ``chosen is eager`` under ``"eager"``).
    query: (B, H_q, L, d), key: (B, H_kv, S, d), value: (B, H_kv, S, d_v); attention_mask as passed;
    args: positional arguments after the mask (none in transformers' own models); kwargs: the rest
    (``scaling``, ``dropout``, ``softcap``, ``position_bias``, ``sliding_window``, ...).
    """

    module: Any
    implementation: str | None
    chosen: Callable
    eager: Callable
    query: Any
    key: Any
    value: Any
    attention_mask: Any
    args: tuple = ()
    kwargs: dict = field(default_factory=dict)

    def run(self, fn: Callable | None = None):
        """Call ``fn`` (default: the chosen function) with the call's own arguments: (out, weights)."""
        return (fn or self.chosen)(
            self.module, self.query, self.key, self.value, self.attention_mask, *self.args, **self.kwargs
        )

    @property
    def eager_like(self) -> bool:
        """The model's own eager function was chosen (through any outer :class:`riding`'s wrapper):
        its logits are the ones :meth:`sdpa_arguments` reads."""
        fn = self.chosen
        while fn is not self.eager and hasattr(fn, "__wrapped__"):
            fn = fn.__wrapped__
        return fn is self.eager

    def unreadable(self) -> str | None:
        """Why :meth:`sdpa_arguments` cannot describe this call's logits, or None when it can."""
        if self.args:
            return f"{len(self.args)} positional argument(s) after the mask, which transformers' own models never pass"
        if not all(isinstance(t, torch.Tensor) and t.dim() == 4 for t in (self.query, self.key, self.value)):
            return "query, key and value are not 4-D tensors (B, H, L, d)"
        for name in ("attention_mask", "position_bias"):
            x = self.attention_mask if name == "attention_mask" else self.kwargs.get(name)
            if x is not None and not isinstance(x, torch.Tensor):
                return f"its {name} is a {type(x).__name__}, not a tensor"
        extra = [k for k in _UNREADABLE_KWARGS if self.kwargs.get(k) is not None]
        if extra:
            return (
                f"its eager function takes {', '.join(extra)} (a learned sink logit per head in the softmax), which "
                "q, k, scale and mask do not hold"
            )
        return None

    def sdpa_arguments(self) -> SDPAArguments:
        """The call as SDPA's arguments, with ``softcap`` (0.0 = none): ``attn_mask`` is the additive
        mask, sliced to S keys as eager functions do, plus ``position_bias``; ``scale`` the
        ``scaling`` used (None → 1/√d, as every eager function defaults). Only for a call
        :meth:`unreadable` accepts."""
        S = self.key.shape[-2]
        mask = self.attention_mask
        if mask is not None and mask.shape[-1] > S:
            mask = mask[..., :S]
        bias = self.kwargs.get("position_bias")
        if bias is not None:
            if mask is not None and mask.dtype == torch.bool:
                mask = torch.zeros_like(bias).masked_fill(~mask, -float("inf"))
            mask = bias if mask is None else bias + mask
        scaling = self.kwargs.get("scaling")
        return SDPAArguments(
            query=self.query,
            key=self.key,
            value=self.value,
            attn_mask=mask,
            dropout_p=float(self.kwargs.get("dropout") or 0.0),
            scale=None if scaling is None else float(scaling),
            enable_gqa=self.key.shape[-3] != self.query.shape[-3],
            softcap=float(self.kwargs.get("softcap") or 0.0),
        )


def available() -> bool:
    """transformers is imported and has the attention interface's dispatch (5.x, late 4.x)."""
    modeling = sys.modules.get("transformers.modeling_utils")
    if modeling is None and "transformers" in sys.modules:
        try:
            import transformers.modeling_utils as modeling
        except ImportError:  # a broken install: there is nothing to ride
            return False
    return modeling is not None and hasattr(getattr(modeling, "AttentionInterface", None), "get_interface")


class riding:
    """Context manager: ``handler(call)`` answers every call through transformers' attention
    interface while active (see the module docstring). A no-op where :func:`available` is False."""

    def __init__(self, handler: Callable[[InterfaceCall], Any]):
        self._handler = handler
        # transformers' AttentionInterface.get_interface before ours, and ours, while active
        self._before: Callable[..., Any] | None = None
        self._patch: Callable[..., Any] | None = None
        self._active = False

    def __enter__(self) -> riding:
        if not available():
            return self
        from transformers.modeling_utils import AttentionInterface

        before = AttentionInterface.get_interface
        this = self

        def get_interface(interface, attn_implementation, default):
            fn = before(interface, attn_implementation, default)
            if not this._active:
                return fn

            def wrapped(module, query, key, value, attention_mask, *args, **kwargs):
                if not this._active:  # a closure kept past the context
                    return fn(module, query, key, value, attention_mask, *args, **kwargs)
                return this._handler(
                    InterfaceCall(
                        module, attn_implementation, fn, default, query, key, value, attention_mask, args, kwargs
                    )
                )

            wrapped.__wrapped__ = fn  # type: ignore[attr-defined]  # what eager_like unwraps (made per call: no update_wrapper)
            return wrapped

        self._before, self._patch = before, get_interface
        self._active = True
        AttentionInterface.get_interface = get_interface  # type: ignore[method-assign]  # the patch is the point
        return self

    def pause(self) -> None:
        """Until :meth:`resume`, the interface hands back the model's function itself."""
        self._active = False

    def resume(self) -> None:
        self._active = self._before is not None

    def __exit__(self, *exc) -> None:
        if self._before is None:
            return
        from transformers.modeling_utils import AttentionInterface

        self._active = False
        # Restore only our own patch: a context entered after ours and still open keeps its own,
        # which passes through to ours, now inactive.
        if AttentionInterface.get_interface is self._patch:
            AttentionInterface.get_interface = self._before  # type: ignore[method-assign]  # our patch undone
        self._before = self._patch = None


def interface_handler(cap):
    """What answers each call through the interface for capture ``cap`` (a
    :class:`~attnscale.torch.capture.recorder.Capture`): a call whose function called SDPA was seen
    there; the model's eager function is read from the interface's arguments (or replaced); any
    other call is counted in ``cap.skipped`` with its reason."""

    def handle(call: InterfaceCall):
        if torch.compiler.is_compiling():  # its SDPA call, if any, is seen by the mode
            return call.run()
        name = cap.module_name(call.module)
        if name is None or cap.paused:  # another model's module, or paused
            return call.run()
        eager_like, fallback = call.eager_like, None
        if cap.replace is not None and eager_like and call.unreadable() is None:
            done = cap.replace(name, call.sdpa_arguments())
            if done is not None and not isinstance(done, Fallback):
                # Eager's layout (B, L, H, d); no probabilities, as under "sdpa".
                return done.transpose(1, 2).contiguous(), None
            fallback = done
        seen = cap.sdpa_seen
        # Its SDPA call, if any, is the module's: named from here, not by a walk of ~25 frames.
        outer, REGISTRY.at_name.named = getattr(REGISTRY.at_name, "named", None), (cap, name)
        try:
            out, weights = call.run()
        finally:
            REGISTRY.at_name.named = outer
        if cap.sdpa_seen != seen:  # its SDPA call was seen, and counted, there
            return out, weights
        why = call.unreadable()
        if why is None and not (eager_like or isinstance(weights, torch.Tensor)):
            why = (
                f"attention implementation {call.implementation!r} neither calls SDPA nor returns its "
                "probabilities (use attn_implementation='eager' or 'sdpa')"
            )
        if why is not None:
            cap.skipped[(name, why)] += 1
        else:
            cap.emit(name, call.sdpa_arguments(), out.transpose(1, 2), "interface", weights, fallback)
        return out, weights

    return handle
