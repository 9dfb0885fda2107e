"""What every interception path hands its calls to: :class:`Capture`, which names a call after the
module that made it, asks the replacing function first, and records the call (``on_call``, and
``calls`` when storing) or counts it as seen but not readable (``skipped``)."""

from __future__ import annotations

import sys
import warnings
from collections import Counter
from collections.abc import Callable
from types import FrameType
from typing import Any

import torch

from attnscale.torch.capture.call import Fallback, SDPAArguments, SDPACall
from attnscale.torch.capture.paths import UnnamedCompiledCall, joined, module_paths, root_class, site
from attnscale.torch.capture.registry import REGISTRY

__all__ = ["Capture", "Replace", "OnCall", "OnFigures"]

# The protocol between a capture and whoever watches through it (a Monitor):
# on_call(call): each call seen run by the model; replace(name, arguments): the call's output
# computed instead (a tensor), a Fallback (the model runs it, the call then seen with that word), or
# None (the model runs it); on_figures(name, q, k, v, stats): a compiled graph's own figures.
OnCall = Callable[[SDPACall], None]
Replace = Callable[[str, SDPAArguments], Any]
OnFigures = Callable[..., None]


class Capture:
    """What :func:`~attnscale.torch.capture.capture_sdpa` yields: ``calls`` (when storing) and
    ``skipped`` ((module name, reason) -> calls seen but not readable)."""

    def __init__(self, store: bool, on_call: OnCall | None, replace: Replace | None, on_figures: OnFigures | None):
        self.calls: list[SDPACall] = []
        self.skipped: Counter = Counter()
        self.replace = replace  # None: the model's attention always runs
        self.on_figures = on_figures
        self.paused = False  # capture_sdpa.pause(): every call is the model's own
        self.sdpa_seen = 0  # SDPA calls intercepted, replaced ones included
        self.compiled_calls = 0  # calls from compiled graphs since new_step() (their names)
        self.stack: list[str] = []  # class names of the modules running (no model)
        # How SDPA calls are found (capture_sdpa): "mode", "checking" (mode and names) or "names";
        # while checking, the model's SDPA calls seen at the names and those the mode saw that no name had.
        self.watch = "mode"
        self.through_names = 0
        self.missed = 0
        self._store = store
        self._on_call = on_call
        self._count = 0
        self._names: dict[int, str] | None = None  # module id → name (its path; the root's class), model given
        self._paths: dict[int, str] = {}  # module id → its path, as the uncompiled model names it
        self._by_path: dict[str, tuple[str, type]] = {}  # path → (name, class of the module there)
        self._unnamed: set[str] = set()  # why compiled calls went unnamed (each warned once)

    def name_modules(self, model) -> None:
        """Name calls after ``model``'s module paths (else by the class of the module running)."""
        self._paths = module_paths(model)
        modules = dict(model.named_modules())
        self._names = {i: p or root_class(model).__name__ for i, p in self._paths.items()}
        # The module a wrapper holds comes after the wrapper, and is the one with that path's class.
        self._by_path = {self._paths[id(m)]: (self._names[id(m)], type(m)) for m in modules.values()}

    def emit(self, name: str, a: SDPAArguments, output, source: str, weights=None, fallback=None) -> None:
        """Record one call of arguments ``a`` made by module ``name`` (tensors detached here)."""
        call = SDPACall.of(self._count, name, a, output, source, weights, fallback)
        self._count += 1
        if self._on_call is not None:
            self._on_call(call)
        if self._store:
            self.calls.append(call)

    def sdpa_call(self, name: str, sdpa, args, kwargs):
        """One SDPA call of module ``name`` outside a compiled graph: replaced, or run by ``sdpa``
        and recorded."""
        self.sdpa_seen += 1
        a = SDPAArguments.of(args, kwargs)
        done = None if self.replace is None else self.replace(name, a)
        if done is not None and not isinstance(done, Fallback):
            return done
        out = sdpa(*args, **(kwargs or {}))
        self.emit(name, a, out, "sdpa", fallback=done)
        return out

    def innermost_name(self) -> str | None:
        """The running module's name; None when a model is given and none of its modules runs (a
        call of another model, run while the mode is on torch's stack: its calls are not seen)."""
        if self._names is None:
            return self.stack[-1] if self.stack else ""
        named = getattr(REGISTRY.at_name, "named", None)
        if named is not None and named[0] is self:  # inside an interface call: its module's (no frames walked)
            return named[1]
        return self._names.get(id(self._running_module()))

    def _running_module(self):
        """The innermost of the model's modules running: the nearest caller frame that is one of them
        being called (nn.Module.__call__, as module hooks see it), so that a method of a helper
        module called from a layer's forward (a scale rule's attend) names the layer; failing that
        (a forward called directly), the nearest frame whose ``self`` is one of them. Two walks, the
        first reading f_locals only of __call__'s frames: f_locals builds a dict per frame read
        (Python 3.11), and a call is some 25 frames deep. None: none of them runs."""
        assert self._names is not None  # a model is given
        call = torch.nn.Module.__call__.__code__
        for only_calls in (True, False):
            frame: FrameType | None = sys._getframe(2)
            while frame is not None:
                if frame.f_code is call or not only_calls:
                    owner = frame.f_locals.get("self")
                    name = None if owner is None else self._names.get(id(owner))
                    if name is not None and (only_calls or name):
                        return owner
                frame = frame.f_back
        return None

    def compiled_name(self, index: int) -> str:
        """The name of a compiled graph's attention call made at trace site ``index``
        (:func:`~attnscale.torch.capture.paths.trace_site`): the module path the eager model gives
        it, or ``compiled[i]`` by its order (warned once, with why); counts the call."""
        self.compiled_calls += 1
        path, cls, why = site(index)
        if not why and self._names is None:  # no model: named by class, as the eager calls are
            return cls.__name__
        if not why:
            root = self._paths.get(id(self._running_module()))
            target = joined(root, path) if root is not None else None
            found = self._by_path.get(target) if target is not None else None
            if found is not None and found[1] is cls:
                return found[0]
            running = "none of the model's" if root is None else repr(root or "the model")
            why = f"the module running the graph ({running}) has no {cls.__name__} at {path or 'itself'!r}"
        if why not in self._unnamed:
            self._unnamed.add(why)
            warnings.warn(
                UnnamedCompiledCall(f"attention in a compiled graph named compiled[i] by its order: {why}"),
                stacklevel=2,
            )
        return f"compiled[{self.compiled_calls - 1}]"

    def module_name(self, module) -> str | None:
        """The name of an attention module handed over by the interface; None when it is not the model's."""
        if self._names is None:
            return type(module).__name__
        return self._names.get(id(module))
