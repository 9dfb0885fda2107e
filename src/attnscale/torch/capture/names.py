"""Interception at the names through which a model reaches SDPA, rebound while a capture watches
them, so that nothing runs for the model's other torch calls (a mode sees every one).

Where a model finds ``scaled_dot_product_attention`` when it calls it:

- ``torch.nn.functional``'s attribute: ``F.scaled_dot_product_attention(...)``,
  ``torch.nn.functional.scaled_dot_product_attention(...)`` (transformers' sdpa function, nanoGPT,
  this project's GPT): looked up at each call;
- a global of the Python module that defines one of the model's module classes (or a base class):
  ``from torch.nn.functional import scaled_dot_product_attention as sdpa``;
- an attribute of one of the model's modules: ``self.attend = F.scaled_dot_product_attention``.

A name bound anywhere else (a closure, a default argument, a helper module of the model's own) is
not found here: the capture checks, with its mode, that every call of a forward came through one of
these names before it relies on them alone (:class:`~attnscale.torch.capture.context.capture_sdpa`).
"""

from __future__ import annotations

import functools
import sys
from dataclasses import dataclass
from typing import Any

import torch

from attnscale.torch.capture.graphs import compiled_call
from attnscale.torch.capture.paths import compiled
from attnscale.torch.capture.registry import REGISTRY

__all__ = ["BoundName", "bound_names", "rebind", "restore", "name_function", "possible", "read_by_name_first"]


@dataclass(frozen=True)
class BoundName:
    """One name bound to SDPA: ``owner`` a Python module (its global) or an ``nn.Module`` (its attribute)."""

    owner: Any
    name: str


def bound_names(model, sdpa) -> list[BoundName]:
    """Every name through which ``model`` (an ``nn.Module``) may reach ``sdpa`` (the builtin), as
    listed in the module docstring; ``torch.nn.functional``'s first."""
    functional = sys.modules["torch.nn.functional"]
    found = [BoundName(functional, "scaled_dot_product_attention")]
    seen_modules = {functional.__name__}
    for module in model.modules():
        for name, value in vars(module).items():
            if value is sdpa:
                found.append(BoundName(module, name))
        for cls in type(module).__mro__:
            python_module = sys.modules.get(cls.__module__)
            if python_module is None or cls.__module__ in seen_modules:
                continue
            seen_modules.add(cls.__module__)
            found += [BoundName(python_module, n) for n, v in vars(python_module).items() if v is sdpa]
    return found


def rebind(names: list[BoundName], value) -> None:
    """Bind every name to ``value``."""
    for bound in names:
        _set(bound, value)


def restore(names: list[BoundName], original, ours) -> None:
    """Bind back to ``original`` the names still bound to ``ours`` (a name rebound since is left as it is)."""
    for bound in names:
        if vars(bound.owner).get(bound.name) is ours:
            _set(bound, original)


def _set(bound: BoundName, value) -> None:
    # An nn.Module's plain attribute lives in its __dict__ (its __setattr__ would only put it there too).
    vars(bound.owner)[bound.name] = value


@functools.cache
def name_function(compiled_replace=None):
    """What the names bound to SDPA are rebound to while a capture watches them (one function for
    every capture with the same ``compiled_replace``, as the mode's class: a compiled graph guards on
    the function a name holds, and a function per capture would recompile it for every monitor).
    Inside a graph Dynamo compiles, the call goes to the mode when one is on torch's stack
    ("checking"), else it is put in the graph as the mode would (:func:`compiled_call`)."""
    sdpa = torch._C._nn.scaled_dot_product_attention
    at_name, route, by_names = REGISTRY.at_name, REGISTRY.route, REGISTRY.by_names

    def scaled_dot_product_attention(*args, **kwargs):
        if torch.compiler.is_compiling():
            if not route["names"]:
                return sdpa(*args, **kwargs)
            return compiled_call(sdpa, args, kwargs, compiled_replace)
        cap = by_names[0] if by_names else None
        if cap is None or cap.paused or getattr(at_name, "inside", None) is not None:
            return sdpa(*args, **kwargs)
        name = cap.innermost_name()
        if name is None:  # another model's call: not ours to see
            return sdpa(*args, **kwargs)
        at_name.inside = cap
        try:
            cap.through_names += 1
            return cap.sdpa_call(name, sdpa, args, kwargs)
        finally:
            at_name.inside = None

    scaled_dot_product_attention.__doc__ = sdpa.__doc__
    return scaled_dot_product_attention


def possible(model) -> bool:
    """Whether ``model``'s SDPA calls may be watched at the names bound to SDPA: not while another
    capture does; not for a compiled model or one with a compiled module (its graph is traced with
    the mode); not with an ``nn.MultiheadAttention`` (only a torch-function mode keeps it off its
    fused fast path, where its attention is no SDPA call)."""
    return not REGISTRY.by_names and not any(
        compiled(m) or isinstance(m, torch.nn.MultiheadAttention) for m in model.modules()
    )


def read_by_name_first() -> None:
    """Have torch read its functions by name before SDPA's name is rebound. Dynamo and
    torch.overrides each build a table of torch's functions from their names once per process, the
    first time they need it: built while the name holds the capture's function, the table would
    hold that function for SDPA's, and SDPA itself would never again be traced as SDPA (seen: a
    model compiled later, under a monitor's mode, showed no attention call at all)."""
    from torch._dynamo import trace_rules

    for table in (trace_rules.get_torch_obj_rule_map, torch.overrides._get_overridable_functions):
        table()
