"""Interception by a :class:`torch.overrides.TorchFunctionMode`: every torch call passes it while
it is on torch's stack (about 2 µs each: measured 3.4 → 5.3 µs for a small in-place op), and it
takes SDPA (found by an identity test), ``F.multi_head_attention_forward``
(:mod:`attnscale.torch.capture.modules`) and, while Dynamo traces, SDPA into the graph
(:mod:`attnscale.torch.capture.graphs`). With a model, the capture puts it on the stack only while
the model runs (:class:`~attnscale.torch.capture.context.capture_sdpa`)."""

from __future__ import annotations

import functools

import torch
from torch.overrides import TorchFunctionMode

from attnscale.torch.capture.graphs import compiled_call
from attnscale.torch.capture.modules import module_call
from attnscale.torch.capture.registry import REGISTRY

__all__ = ["mode_class"]


@functools.cache
def mode_class(compiled_replace=None):
    """The capture's TorchFunctionMode, one class for every capture with the same ``compiled_replace``
    (None, or replace mode's one module-level function: two classes in all). Dynamo guards on the
    types of the modes on torch's stack, not on what it reaches through them: a class per capture
    made every new monitor compile the model again (8 monitors hit its recompile limit: eager from
    then on), and one class for both modes would run an observe monitor on a graph traced for
    replace mode."""
    sdpa = torch._C._nn.scaled_dot_product_attention  # the builtin, whatever the names hold
    module_attention = torch.nn.functional.multi_head_attention_forward

    class _SDPAMode(TorchFunctionMode):
        def __init__(self, cap):
            super().__init__()
            self.cap = cap

        # Every torch function the model calls passes through here: two identity tests and a call,
        # nothing else (no import, no lookup), is what keeps the mode itself under 1% of a step.
        # Paused (a mode entered after ours keeps it on the stack), every call is the model's own.
        def __torch_function__(self, func, types, args=(), kwargs=None):
            cap = self.cap
            if func is not sdpa or cap.paused:
                if func is module_attention and not cap.paused:
                    return module_call(cap, func, args, kwargs)
                return func(*args, **(kwargs or {}))
            if torch.compiler.is_compiling():
                return compiled_call(func, args, kwargs, compiled_replace)
            if getattr(REGISTRY.at_name, "inside", None) is cap:  # called from the name's own handling: seen there
                return func(*args, **(kwargs or {}))
            name = cap.innermost_name()
            if name is None:  # another model's call: not ours to see
                return func(*args, **(kwargs or {}))
            cap.missed += cap.watch == "checking"
            return cap.sdpa_call(name, func, args, kwargs)

    return _SDPAMode
