"""The names through which a model reaches SDPA, found and rebound, so that a capture can watch its
attention calls at their entry points instead of through a mode that every torch call passes.

Where a model finds ``scaled_dot_product_attention`` when it calls it:

- ``torch.nn.functional``'s attribute: ``F.scaled_dot_product_attention(...)``,
  ``torch.nn.functional.scaled_dot_product_attention(...)`` (transformers' sdpa function, nanoGPT,
  this project's GPT): looked up at each call;
- a global of the Python module that defines one of the model's module classes (or a base class):
  ``from torch.nn.functional import scaled_dot_product_attention as sdpa``;
- an attribute of one of the model's modules: ``self.attend = F.scaled_dot_product_attention``.

A name bound anywhere else (a closure, a default argument, a helper module of the model's own) is
not found here: :mod:`attnscale.torch.capture` checks, with its mode, that every call of a forward
came through one of these names before it relies on them alone.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any

__all__ = ["BoundName", "bound_names", "rebind", "restore"]


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
        if _get(bound) is ours:
            _set(bound, original)


def _get(bound: BoundName):
    return vars(bound.owner).get(bound.name)


def _set(bound: BoundName, value) -> None:
    # An nn.Module's plain attribute lives in its __dict__ (its __setattr__ would only put it there too).
    vars(bound.owner)[bound.name] = value
