"""The names of a compiled model's modules and of the attention calls in its graphs, as the eager model gives them.

API::

    from attnscale.torch.capture.paths import module_paths, trace_site, site, joined

    module_paths(model)   # {id(module): path}: the paths of the uncompiled model
    trace_site()          # while Dynamo traces an attention call: its site's index
    site(i)               # (path below the traced module, class of the module there, why unnamed)

Paths: ``torch.compile(model)`` wraps the model in an ``OptimizedModule`` that holds it as
``_orig_mod``, so its modules' paths read ``_orig_mod.blocks.0.attn``, and a submodule compiled in
place (``model.blocks[0] = torch.compile(block)``) adds ``_orig_mod`` in the middle:
:func:`module_paths` drops those parts, so the model, compiled or not, whole or a submodule, has
the paths of the uncompiled one, and the wrapper and the module it wraps have the same path.

Calls in a compiled graph: a graph runs with no Python frame per module, so the frames that name
an eager call (:mod:`attnscale.torch.capture.recorder`) stop at the module whose forward was compiled. What
is below it is read while Dynamo traces: Dynamo keeps a stack of the modules it has entered (the
``nn_module_stack`` it records in each node's meta), each by its source (``L['self'].blocks.0.attn``:
a path below a local of the traced frame) and class. :func:`trace_site` runs then (Dynamo calls it
and bakes its result into the graph as a constant: ``_dynamo_marked_constant``) and records the
innermost module's path below the traced frame's ``self`` and its class; the capture's operator
gets the site's index as an argument. When the graph runs, the capture finds the module whose
compiled forward runs by the frames, as for an eager call, and names the call by joining its path
with the site's — checking that the model has a module of the recorded class there. A graph is
not bound to one module: torch.compile shares one graph between instances of a class (all the
blocks of a regionally compiled model, two models compiled alike), which is why the module running
is read at run time, not baked in.

A call is left unnamed (``compiled[i]``, by its order in the step, and the capture warns once with
the reason) when: the traced function is no module's forward (a compiled function taking the
module as an argument: the graph cannot say which module it was given); the module is reached
through a global; Dynamo's tracing state is not the one read here (another PyTorch version); or
the model has no module of that class at the joined path.
"""

from __future__ import annotations

import inspect
import re
from typing import Any

import torch

from attnscale.torch.capture.registry import REGISTRY

__all__ = [
    "module_paths",
    "eager_path",
    "root_class",
    "trace_site",
    "site",
    "joined",
    "compiled",
    "UnnamedCompiledCall",
]


class UnnamedCompiledCall(UserWarning):
    """An attention call in a compiled graph could not be given its module's path (the message says why)."""


def eager_path(path: str) -> str:
    """``path`` without the ``_orig_mod`` parts that torch.compile's wrapper adds."""
    return ".".join(part for part in path.split(".") if part != "_orig_mod") if path else ""


def root_class(model) -> type:
    """The class of the model a torch.compile wrapper holds (of ``model`` itself when not wrapped)."""
    while hasattr(model, "_orig_mod") and type(model).__name__ == "OptimizedModule":
        model = model._orig_mod
    return type(model)


def compiled(module) -> bool:
    """Whether ``module`` runs compiled: ``torch.compile(module)``'s wrapper, or ``module.compile()``."""
    wrapper = getattr(torch._dynamo.eval_frame, "OptimizedModule", ())
    return isinstance(module, wrapper) or getattr(module, "_compiled_call_impl", None) is not None


def module_paths(model) -> dict[int, str]:
    """{id(module): its path in ``model`` as the uncompiled model names it} ("" for the model itself)."""
    return {id(m): eager_path(n) for n, m in model.named_modules()}


def joined(root: str, path: str) -> str:
    """The path ``path`` below the module at ``root``."""
    return f"{root}.{path}" if root and path else root or path


# The parts of a Dynamo source after its root: .attr or [index].
_PARTS = re.compile(r"\.([A-Za-z_0-9]+)|\[['\"]?([^\]'\"]+)['\"]?\]")


def site(index: int) -> tuple[str, Any, str]:
    """Site ``index`` (:func:`trace_site`): (path below the traced frame's module, class of the module
    at that path, why unnamed ("": named)). Recorded at trace time only (once per site in a graph),
    read by index when a graph runs."""
    return REGISTRY.sites[index]


def _site(path: str, cls: Any, why: str) -> int:
    key = (path, cls, why)
    if key not in REGISTRY.site_index:
        REGISTRY.site_index[key] = len(REGISTRY.sites)
        REGISTRY.sites.append(key)
    return REGISTRY.site_index[key]


def _path_of(source: str, root: str) -> str | None:
    """The module path of a Dynamo source below the source ``root``, or None when it is not below it."""
    if source != root and not source.startswith((root + ".", root + "[")):
        return None
    rest = source[len(root) :]
    matches = list(_PARTS.finditer(rest))
    if "".join(m.group(0) for m in matches) != rest:
        return None  # something else than attributes and indices (a call, a closure)
    return eager_path(".".join(m.group(1) or m.group(2) for m in matches))


def _module_self(code, f_locals: dict) -> tuple[str, type] | None:
    """(the source of the module whose method the traced frame runs, its class), or None when the
    frame is no module's method. The method is found by the code's name, or is its forward under
    another name: transformers wraps a model's forward in ``wrapped_func(*args, **kwargs)``, whose
    module is ``args[0]``. Dynamo resumes a frame after a graph break in a function of its own
    (``torch_dynamo_resume_in_forward_at_…``), whose ``self`` is still the module's."""

    def runs(owner) -> bool:
        methods = (getattr(type(owner), name, None) for name in (code.co_name, "forward"))
        return isinstance(owner, torch.nn.Module) and any(getattr(m, "__code__", None) is code for m in methods)

    first = code.co_varnames[0] if code.co_argcount else None
    if first is not None and runs(f_locals.get(first)):
        return f"L['{first}']", type(f_locals[first])
    if code.co_flags & inspect.CO_VARARGS:
        name = code.co_varnames[code.co_argcount + code.co_kwonlyargcount]
        args = f_locals.get(name) or ()
        if args and runs(args[0]):
            return f"L['{name}'][0]", type(args[0])
    if code.co_name.startswith("torch_dynamo_resume_in_") and isinstance(f_locals.get("self"), torch.nn.Module):
        return "L['self']", type(f_locals["self"])
    return None


def trace_site() -> int:
    """The site (its index, :func:`site`) of the attention call Dynamo is tracing. Called by Dynamo
    while it traces (the result becomes a constant of the graph); reads Dynamo's private tracing
    state, so anything unexpected there leaves the call unnamed, with the reason."""
    try:
        from torch._dynamo.symbolic_convert import InstructionTranslator

        tx = InstructionTranslator.current_tx().output.current_tx
        root = tx.output.root_tx
        stack = list(tx.nn_module_stack.values())
        code = root.f_code
        owner = _module_self(code, root.f_locals)  # the traced frame's real locals
    except Exception as e:  # noqa: BLE001 - private state of another version: unnamed, with the reason
        return _site("", None, f"Dynamo's tracing state could not be read ({type(e).__name__}: {e})")
    if owner is None:
        return _site(
            "",
            None,
            f"the compiled function {code.co_name!r} is no module's method (a module passed "
            "as an argument cannot be told from another of its class)",
        )
    if not stack:  # attention in the traced module's own forward
        return _site("", owner[1], "")
    source, cls = stack[-1]
    path = _path_of(source, owner[0])
    if path is None:
        return _site("", None, f"the module {source} is not reached from the compiled module's own self")
    return _site(path, cls, "")


trace_site._dynamo_marked_constant = True  # type: ignore[attr-defined]  # torch._dynamo.assume_constant_result
