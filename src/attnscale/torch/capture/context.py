"""The capture as a context manager: :class:`capture_sdpa` enters the interception paths — the mode
(:mod:`~attnscale.torch.capture.mode`), the names (:mod:`~attnscale.torch.capture.names`), the
interface (:mod:`~attnscale.torch.capture.interface`), the compiled graphs' ops — and decides, after
the model's first forward, which of mode and names watches from then on."""

from __future__ import annotations

import sys
from typing import Any

import torch

from attnscale.errors import InputTypeError
from attnscale.torch.capture import interface, names
from attnscale.torch.capture.graphs import define_ops
from attnscale.torch.capture.mode import mode_class
from attnscale.torch.capture.recorder import Capture, OnCall, OnFigures, Replace
from attnscale.torch.capture.registry import REGISTRY

__all__ = ["capture_sdpa", "recomputing"]

_SDPA = torch._C._nn.scaled_dot_product_attention  # the builtin, whatever the names hold


def recomputing() -> bool:
    """Whether this call runs inside autograd's backward: a forward run there is activation
    checkpointing's recomputation (torch.utils.checkpoint runs it from the backward, reentrant or
    not). A thread-local read, no device sync."""
    return torch._C._current_graph_task_id() != -1


class capture_sdpa:
    """Context manager recording every attention call made while it is active.

    model: a ``torch.nn.Module`` to name calls after its module paths (and to watch only its
    calls); None names calls by class, through global module hooks.
    store: keep the calls in ``cap.calls``; on_call: called with each :class:`SDPACall` as it happens.
    replace: called first with ``(name, arguments)`` (:class:`SDPAArguments`, tensors as passed,
    not detached) for every intercepted call it could compute. A tensor it returns,
    ``(..., H_q, L, d_v)``, is the call's attention output, and the model's own attention is not run
    nor an :class:`SDPACall` made; a :class:`Fallback` or None runs the model's own and records the
    call as usual (with that Fallback as its ``fallback``). This is how
    :class:`attnscale.torch.Monitor` in ``mode="replace"`` computes the model's attention itself.
    compiled_replace: the same inside a graph Dynamo compiles: called, traced, with the arguments of
    an SDPA call; ``(output, AttentionStats)`` puts that computation in the graph and hands the figures
    to ``on_figures(name, q, k, v, stats)`` when the graph runs; None keeps the model's SDPA (and
    ``on_call`` sees the call as in observe mode). It must be one module-level function (Dynamo
    guards on the mode's class, made once per function, not on the function).

    While entered: :meth:`pause` / :meth:`resume`, ``skipped``, and :meth:`new_step`.
    """

    def __init__(
        self,
        model=None,
        store: bool = True,
        on_call: OnCall | None = None,
        replace: Replace | None = None,
        compiled_replace=None,
        on_figures: OnFigures | None = None,
    ):
        if model is not None and not isinstance(model, torch.nn.Module):
            raise InputTypeError(f"model: expected a torch.nn.Module or None, got {type(model).__name__}")
        if on_call is not None and not callable(on_call):
            raise InputTypeError(f"on_call: expected a callable or None, got {type(on_call).__name__}")
        if replace is not None and not callable(replace):
            raise InputTypeError(f"replace: expected a callable or None, got {type(replace).__name__}")
        self._model = model
        self._capture = Capture(bool(store), on_call, replace, on_figures)
        self._compiled_replace = compiled_replace
        self._handles: list = []  # global module hooks (no model)
        self._model_hooks: list = []  # the mode's hooks on the model (not while paused)
        self._mode: Any  # from __enter__ on: the _SDPAMode of mode_class()
        self._riding: interface.riding  # from __enter__ on
        self._on = False  # the mode is on torch's stack
        self._bound: list[names.BoundName] = []  # the names rebound (watching by names)
        self._running = 0  # forwards of the model under way, watching by the names alone

    @property
    def skipped(self):
        """Counter {(module name, reason): calls}: attention seen but not readable."""
        return self._capture.skipped

    def new_step(self) -> None:
        """Compiled graphs' calls that cannot be named by module are named by their order from here
        (``compiled[0]``, ...): a monitor's step."""
        self._capture.compiled_calls = 0

    def __enter__(self) -> Capture:
        cap = self._capture
        if self._model is not None:
            cap.name_modules(self._model)
            self._hook(self._model)
            if names.possible(self._model):
                cap.watch = "checking"
                self._bound = names.bound_names(self._model, _SDPA)
                REGISTRY.by_names.append(cap)
                names.read_by_name_first()
                self._rebind()
        else:
            mod = torch.nn.modules.module
            self._handles.append(
                mod.register_module_forward_pre_hook(lambda m, args: cap.stack.append(type(m).__name__))
            )
            self._handles.append(mod.register_module_forward_hook(_pop(cap), always_call=True))
        self._riding = interface.riding(interface.interface_handler(cap)).__enter__()
        define_ops()  # here: Dynamo cannot trace their registration
        REGISTRY.live.append(cap)
        self._mode = mode_class(self._compiled_replace)(cap)
        self._lower()
        return cap

    def _lower(self) -> None:
        """Put the mode on torch's stack, unless it is there."""
        if not self._on:
            self._mode.__enter__()
            self._on = True

    def _lift(self) -> None:
        """Take the mode off torch's stack when it is on top (a mode entered after it stays, and
        ours then stays under it: a paused capture passes every call through)."""
        stack = torch._C._len_torch_function_stack()
        if self._on and stack and torch._C._get_function_stack_at(stack - 1) is self._mode:
            self._mode.__exit__(None, None, None)
            self._on = False

    def _hook(self, model) -> None:
        # The mode only while the model runs: every torch call under a mode costs ~2 µs more, and
        # a training step's loss, backward and optimiser (AdamW: ~20 calls per parameter) make
        # most of its calls (433 of 573 in the GPT benchmark's step, ~5% of it). Pre-hooks on every
        # module (a submodule called on its own is seen too), the lift on the model's own exit.
        # Hooks cost each module call ~4 µs (MiniLM's 120: 1% of a forward), so a pause removes them.
        self._model_hooks = [m.register_forward_pre_hook(self._lower_hook) for m in model.modules()]
        self._model_hooks.append(model.register_forward_hook(self._lift_hook, always_call=True))

    def _unhook(self) -> None:
        for h in self._model_hooks:
            h.remove()
        self._model_hooks = []

    def _lower_hook(self, module, args) -> None:
        # Under a compiled _call_impl (module.compile()) the hooks are traced: the mode, never
        # lifted by an eager exit, is still on the stack. torch.compile(model)'s wrapper runs them eagerly.
        if torch.compiler.is_compiling():  # paused: no hooks at all (pause removes them)
            return
        if recomputing():
            self._lower_for_rerun()
        else:
            self._lower()

    def _lower_for_rerun(self) -> None:
        """The mode on torch's stack for a recomputation in the backward (activation checkpointing).
        Autograd runs each backward node under the thread-local state captured when the backward
        began and restores it when the node ends, so a mode pushed here leaves with the node: it is
        pushed without touching ``_on`` (the forward's state), and only when not on the stack
        already (twice on it, a call would be seen twice)."""
        stack = torch._C._len_torch_function_stack()
        if not any(torch._C._get_function_stack_at(i) is self._mode for i in range(stack)):
            self._mode.__enter__()

    def _lift_hook(self, module, args, output) -> None:
        if not (torch.compiler.is_compiling() or recomputing()):  # a rerun's mode leaves with its backward node
            self._lift()
            # Not while the forward's error propagates: PyTorch runs this hook from its handler, in
            # a loop over the model's hooks that settling would change (its RuntimeError would hide
            # the model's own error). It settles after a forward that returns.
            if self._capture.watch == "checking" and sys.exc_info()[0] is None:
                self._settle()

    def _settle(self) -> None:
        """After a forward of the model watched both ways ("checking"): by the names alone from now
        on if every SDPA call of the model came through them (no mode, and no hooks on its modules:
        nothing runs for the model's other torch calls), by the mode alone if one did not;
        undecided while no call was seen."""
        cap = self._capture
        if cap.missed:
            cap.watch = "mode"
            self._unbind()
        elif cap.through_names:
            cap.watch = "names"
            self._unhook()
            self._lift()
            self._hook_route()

    def _hook_route(self) -> None:
        """Watching by the names alone: two hooks on the model keep ``REGISTRY.route`` true while it runs."""
        model = self._model
        assert model is not None  # watching by names needs a model
        self._running = 0
        self._model_hooks = [
            model.register_forward_pre_hook(self._route_on),
            model.register_forward_hook(self._route_off, always_call=True),
        ]

    def _route_on(self, module, args) -> None:
        self._running += 1
        REGISTRY.route["names"] = True

    def _route_off(self, module, args, output) -> None:
        self._running = max(0, self._running - 1)
        REGISTRY.route["names"] = self._running > 0

    def _rebind(self) -> None:
        names.rebind(self._bound, names.name_function(self._compiled_replace))

    def _restore_names(self) -> None:
        """The names bound to SDPA again (paused, or no more watching by names)."""
        names.restore(self._bound, _SDPA, names.name_function(self._compiled_replace))
        REGISTRY.route["names"] = False

    def _unbind(self) -> None:
        """No more watching by names: the names SDPA's own, and another capture free to."""
        self._restore_names()
        if self._capture in REGISTRY.by_names:
            REGISTRY.by_names.remove(self._capture)

    def pause(self) -> None:
        """Until :meth:`resume`, every attention call is the model's own, unseen, and the other torch
        calls cost nothing: the mode leaves torch's stack (when it is on top: a mode entered after it
        stays, and ours then passes every call through) and the interface hands calls straight on."""
        cap = self._capture
        if cap.paused:
            return
        cap.paused = True
        self._riding.pause()
        self._lift()
        self._unhook()
        if cap.watch != "mode":  # a compiled graph then guards its way to the model's own
            self._restore_names()

    def resume(self) -> None:
        """Watch again after :meth:`pause`."""
        cap = self._capture
        if not cap.paused:
            return
        if cap.watch != "mode":
            self._rebind()
        if cap.watch == "names":
            self._hook_route()
        else:
            if self._model is not None:
                self._hook(self._model)
            self._lower()
        self._riding.resume()
        cap.paused = False

    def __exit__(self, *exc) -> None:
        self._unhook()  # first: no hook may lower the mode again
        cap = self._capture
        if cap.watch != "mode":
            self._unbind()
            cap.watch = "mode"
        for h in self._handles:
            h.remove()
        self._handles.clear()
        if self._on:
            self._mode.__exit__(*exc)
        self._on = False
        cap.paused = False
        self._riding.__exit__(*exc)
        if cap in REGISTRY.live:
            REGISTRY.live.remove(cap)
        cap.stack.clear()


def _pop(cap: Capture):
    """A global module hook: the module that ran leaves ``cap``'s stack of class names (no model)."""

    def post_hook(module, args, output):
        if cap.stack:
            cap.stack.pop()

    return post_hook
