"""Capture the attention a PyTorch model actually computes: q, k, v, mask and scale of every call.

API::

    from attnscale.torch.capture import capture_sdpa, SDPACall

    with capture_sdpa(model=None, store=True, on_call=None, replace=None) as cap:
        model(**inputs)
    cap.calls        # list[SDPACall] in call order (empty when store=False)
    cap.skipped      # Counter {(module name, reason): calls}: attention seen but not readable

Each intercepted call becomes one :class:`SDPACall`, passed to ``on_call(call)`` as it happens (if
given) and appended to ``cap.calls`` only when ``store=True`` (a monitor computes its figures in
``on_call`` and keeps no tensors). Fields, in PyTorch's SDPA layout:

- ``index``: running number of the call within this capture (0, 1, ...).
- ``name``: the innermost module running when the call happened: its path in ``model``
  (``"encoder.layer.3.attention.self"``) when ``model`` is given, else its class name ("" if none).
- ``q: (..., H_q, L, d_k)``, ``k: (..., H_k, S, d_k)``, ``v: (..., H_k, S, d_v)``: detached tensors,
  shaped exactly as the model passed them — usually 4-D ``(B, H, N, d)``, but SDPA also takes any
  number of leading dimensions, and 3-D ``(N, L, d)`` with no head axis.
- ``attn_mask``: None, a bool tensor (True = attend) or an additive float tensor, broadcastable to
  ``(..., H_q, L, S)``, exactly as the model passed it; :mod:`attnscale.torch.sdpa_mask` says which
  entries mask and which add a bias.
- ``is_causal``: SDPA's flag (top-left aligned causal mask), ``dropout_p``, ``enable_gqa``.
- ``scale``: the factor that actually multiplied q·kᵀ, resolved (SDPA's None → 1/√d_k). Never None.
- ``softcap``: c of Gemma 2's logits c·tanh(scale·q·kᵀ / c), taken before the mask is added; 0.0 = none.
- ``output: (..., H_q, L, d_v)``: what the attention returned (None for ``"module"``, whose
  attention output is only seen after its output projection).
- ``source``: ``"sdpa"``, ``"interface"`` or ``"module"`` (below).
- ``weights``: the model's own probabilities ``(B, H_q, L, S)`` when it computed them (eager
  attention), else None.

Methods (torch, float64): ``call.logits()`` (the capped scale·q·kᵀ plus any additive mask, −inf
where masked), ``call.attended()`` (bool, True = attend, broadcast to ``(B, H_q, L, S)``),
``call.probabilities()`` (softmax of the logits; rows with nothing attended are all 0).

How calls are found (each once):

- ``"sdpa"``: ``torch.nn.functional.scaled_dot_product_attention`` is intercepted however the
  model reaches it, two ways. The names it is bound to where a model finds it
  (:mod:`attnscale.torch.sdpa_names`: ``torch.nn.functional``'s attribute, the globals of the
  modules defining the model's classes, the model's modules' attributes) are rebound, while the
  capture is active, to a function that sees the call and hands it on: nothing runs for the model's
  other torch calls. And a :class:`torch.overrides.TorchFunctionMode` sees every torch call while it
  is on torch's stack (SDPA found by an identity test), at about 2 µs each (measured: 3.4 → 5.3 µs
  for a small in-place op); with ``model`` given it is on the stack only while the model or one
  of its modules runs (forward pre-hooks on every module put it on, the model's own exit takes it
  off), so a training step's loss, backward and optimiser are not intercepted. The first forward
  of the model is watched both ways; at its end, if every SDPA call of the model came through a
  name, the names alone watch from then on (the mode and its hooks leave; two hooks on the model
  itself say when it runs, so that a graph compiled meanwhile is watched only if it is the
  model's); if the mode saw one that
  no name held (SDPA reached through a closure, say), the mode alone does, and the names are
  SDPA's own again. The mode alone watches from the start without a model, for a compiled model
  (whose graph Dynamo traces with the mode), for a model with an ``nn.MultiheadAttention`` (only a
  mode keeps it off its fused fast path, below) and while another capture watches by the names.
  Inside a graph Dynamo compiles, the call stays SDPA's and the
  custom op ``attnscale_capture::seen`` beside it hands its detached inputs to the innermost
  capture at run time (no graph break; ``output`` None), named as the eager model's call would be
  (:mod:`attnscale.torch.compiled_names`: the module below the compiled one is recorded while
  Dynamo traces, the one running the graph read from the frames when it runs; where that cannot be
  told, ``compiled[i]`` by its order since the last reset, with one :class:`UnnamedCompiledCall`
  warning saying why); with ``compiled_replace`` the graph computes the call itself and the op
  ``attnscale_capture::figures`` hands over its figures instead (a model compiled after the names
  took over is traced through the names' function, to the same ops). ``capture_sdpa.pause()`` /
  ``resume()`` take the mode off torch's stack, its hooks off the model and the names back to
  SDPA, and back (what ``Monitor(every=N)`` does between measured steps).
- ``"interface"``: a Hugging Face model computes attention through transformers' attention
  interface (:mod:`attnscale.torch.hf_interface`), which the capture rides while active. A call whose
  function called SDPA was already seen as ``"sdpa"`` (``attn_implementation="sdpa"``); one that
  did not and returned its probabilities — the model's own eager function, ``"eager"`` — is read
  from the interface's arguments: q and k after rotary embedding and QK-norm, k and v after the
  KV cache, the additive mask (and T5's ``position_bias``), ``scaling`` and ``softcap``. Any other
  call (flash or flex attention, an eager function with attention sinks) is counted in
  ``cap.skipped`` with its reason.
- ``"module"``: PyTorch's ``nn.MultiheadAttention`` (and the transformer layers built on it) hides
  its SDPA call from the mode; the mode sees ``F.multi_head_attention_forward`` instead, and the
  call is rebuilt from its arguments by :mod:`attnscale.torch.nn_modules` (which says why the
  modules then take their standard path, never their fused fast path).
- Only ``model``'s calls, when given: a call while none of its modules runs (another model run
  inside the context) is left to that model, unseen and uncounted.
- Module names: paths in the uncompiled model (``torch.compile``'s ``_orig_mod`` parts left out, so
  the compiled model and the plain one name alike). With ``model`` given, the innermost of its
  modules running at the call — the
  attention module an interface call names, else the nearest caller frame that calls one of them
  (``nn.Module.__call__``: a helper module's method called from a layer's forward names the layer, as
  hooks would), else the nearest frame whose ``self`` is one (no hooks: hooks on every module would
  cost a forward ~10%). Without a model, global module
  hooks kept as a stack (which need no model but only know class names, and cost every module's call).

Tensors are detached, not copied: do not modify them in place while you hold the calls.
"""

from __future__ import annotations

import contextlib
import functools
import math
import sys
import threading
import warnings
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from types import FrameType
from typing import Any

from attnscale.errors import InputTypeError, require
from attnscale.torch import hf_interface, nn_modules, sdpa_names
from attnscale.torch.compiled_names import SITES, UnnamedCompiledCall, joined, module_paths, root_class, trace_site
from attnscale.torch.sdpa_mask import MASKED_BELOW, attended, split_attn_mask

__all__ = ["SDPACall", "Capture", "capture_sdpa", "compiled", "recomputing", "MASKED_BELOW", "UnnamedCompiledCall"]


@dataclass
class SDPACall:
    """One attention call, in PyTorch SDPA layout. See the module docstring for every field."""

    index: int
    name: str
    q: Any  # (..., H_q, L, d_k) as passed (see the module docstring)
    k: Any  # (..., H_k, S, d_k)
    v: Any  # (..., H_k, S, d_v)
    attn_mask: Any  # None | bool (True = attend) | additive float, broadcastable to (..., H_q, L, S)
    is_causal: bool
    scale: float  # resolved: multiplies q·kᵀ
    dropout_p: float
    enable_gqa: bool
    output: Any  # (..., H_q, L, d_v); None for source "module"
    source: str = "sdpa"  # "sdpa" | "interface" | "module"
    weights: Any = None  # the model's own probabilities (B, H_q, L, S), when it computed them
    softcap: float = 0.0  # c of c·tanh(scale·q·kᵀ / c) before the mask; 0.0 = none

    def keys_for_queries(self):
        """k as float64, with its heads repeated to match q's under grouped-query attention."""
        k = self.k.double()
        groups = self.q.shape[-3] // k.shape[-3]
        return k.repeat_interleave(groups, dim=-3) if groups > 1 else k

    def attended(self):
        """Bool (B, H_q, L, S): True where a query attends a key (mask and causal flag combined,
        read by :func:`attnscale.torch.sdpa_mask.attended`)."""
        return attended(self.attn_mask, self.is_causal, self.q, self.k)

    def logits(self):
        """float64 (B, H_q, L, S): the capped scale·q·kᵀ plus any additive mask; −inf where not attended."""
        torch = require("torch", "torch")
        x = self.scale * (self.q.double() @ self.keys_for_queries().transpose(-2, -1))
        if self.softcap:
            x = self.softcap * torch.tanh(x / self.softcap)
        _, bias = split_attn_mask(self.attn_mask)
        if bias is not None:
            x = x + bias.double()
        return x.masked_fill(~self.attended(), -math.inf)

    def probabilities(self):
        """float64 (B, H_q, L, S): softmax of :meth:`logits` per row; all 0 in a row with nothing attended."""
        torch = require("torch", "torch")
        x = self.logits()
        top = x.amax(dim=-1, keepdim=True)
        e = torch.exp(x - torch.where(torch.isfinite(top), top, torch.zeros_like(top)))
        total = e.sum(dim=-1, keepdim=True)
        return torch.where(total > 0, e / torch.where(total > 0, total, torch.ones_like(total)), torch.zeros_like(e))


class Capture:
    """What :func:`capture_sdpa` yields: ``calls`` (when storing) and ``skipped``."""

    def __init__(self, store: bool, on_call: Callable[[SDPACall], None] | None, replace=None):
        self.calls: list[SDPACall] = []
        self.skipped: Counter = Counter()  # (module name, reason) -> calls
        self._store = store
        self._on_call = on_call
        self._replace = replace
        self._count = 0
        self._sdpa_seen = 0  # SDPA calls intercepted, replaced ones included
        self._stack: list[str] = []  # class names of the modules running (no model)
        self._names: dict[int, str] | None = None  # module id → name (its path; the root's class), model given
        self._paths: dict[int, str] = {}  # module id → its path, as the uncompiled model names it
        self._by_path: dict[str, tuple[str, type]] = {}  # path → (name, class of the module there)
        self._unnamed: set[str] = set()  # why compiled calls went unnamed (each warned once)
        self._paused = False  # capture_sdpa.pause(): every call is the model's own
        self._compiled = 0  # calls from compiled graphs so far (their names)
        self._on_figures: Callable | None = None  # (name, q, k, v, stats): a compiled graph's own figures
        # How SDPA calls are found (see capture_sdpa): "mode", "checking" (mode and names) or "names".
        self._watch = "mode"
        self._through_names = 0  # the model's SDPA calls seen at the names (checking)
        self._missed = 0  # the model's SDPA calls the mode saw that no name had (checking)

    def _emit(self, **fields) -> None:
        call = SDPACall(index=self._count, **fields)
        self._count += 1
        if self._on_call is not None:
            self._on_call(call)
        if self._store:
            self.calls.append(call)

    def _innermost_name(self) -> str | None:
        """The running module's name; None when a model is given and none of its modules runs (a
        call of another model, run while the mode is on torch's stack: its calls are not seen)."""
        if self._names is None:
            return self._stack[-1] if self._stack else ""
        named = getattr(_AT_NAME, "named", None)
        if named is not None and named[0] is self:  # inside an interface call: its module's (no frames walked)
            return named[1]
        # The innermost of the model's modules running is the nearest caller frame that is one of them
        # being called (nn.Module.__call__, as module hooks see it), so that a method of a helper
        # module called from a layer's forward (a scale rule's attend) names the layer; failing
        # that (a forward called directly), the nearest frame whose ``self`` is one of them.
        # Two walks, the first reading f_locals only of __call__'s frames: f_locals builds a dict per
        # frame read (Python 3.11), and a call is some 25 frames deep.
        return self._names.get(id(self._running_module()))

    def _running_module(self):
        """The innermost of the model's modules running, found by the frames (None: none of them)."""
        assert self._names is not None  # a model is given
        call = require("torch", "torch").nn.Module.__call__.__code__
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

    def _compiled_name(self, site: int) -> str:
        """The name of a compiled graph's attention call made at trace site ``site``
        (:func:`attnscale.torch.compiled_names.trace_site`): the module path the eager model gives it, or
        ``compiled[i]`` by its order (warned once, with why)."""
        path, cls, why = SITES[site]
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
        return f"compiled[{self._compiled}]"

    def _module_name(self, module) -> str | None:
        """The name of an attention module handed over by the interface; None when it is not the model's."""
        if self._names is None:
            return type(module).__name__
        return self._names.get(id(module))


_SDPA_PARAMS = ("query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale", "enable_gqa")
_SDPA_DEFAULTS = {"attn_mask": None, "dropout_p": 0.0, "is_causal": False, "scale": None, "enable_gqa": False}


def _sdpa_arguments(args, kwargs) -> dict:
    bound = dict(_SDPA_DEFAULTS)
    bound.update(zip(_SDPA_PARAMS, args))
    bound.update(kwargs or {})
    return bound


def _resolved_scale(scale, q) -> float:
    return 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)


def _emit_arguments(cap: Capture, name: str, a: dict, output, source: str, weights=None) -> None:
    """Record one call given as SDPA's arguments ``a`` (tensors detached here)."""
    detach = lambda x: None if x is None else x.detach()  # noqa: E731
    cap._emit(
        name=name,
        q=a["query"].detach(),
        k=a["key"].detach(),
        v=a["value"].detach(),
        attn_mask=detach(a["attn_mask"]),
        is_causal=bool(a["is_causal"]),
        scale=_resolved_scale(a["scale"], a["query"]),
        dropout_p=float(a["dropout_p"]),
        enable_gqa=bool(a["enable_gqa"]),
        output=detach(output),
        source=source,
        weights=detach(weights),
        softcap=float(a.get("softcap", 0.0)),
    )


def _module_call(cap: Capture, func, args, kwargs):
    """``F.multi_head_attention_forward``: rebuilt by :mod:`attnscale.torch.nn_modules`, replaced or
    run as it is, and recorded as ``"module"``."""
    torch = require("torch", "torch")
    name = cap._innermost_name()
    if name is None:  # another model's module
        return func(*args, **(kwargs or {}))
    replacing = cap._replace is not None
    # Observing needs no graph; replacing does, through the projections.
    with contextlib.nullcontext() if replacing else torch.no_grad():
        problem = nn_modules.rebuild(args, kwargs)
    if isinstance(problem, str):
        cap.skipped[(name, problem)] += 1
        return func(*args, **(kwargs or {}))
    a = problem.sdpa_arguments()
    if replacing:
        out = cap._replace(name, a)
        if out is not None:
            return problem.finish(out), None
    result = func(*args, **(kwargs or {}))
    _emit_arguments(cap, name, a, None, "module")
    return result


# Captures alive, innermost last: the compiled graphs' figures op (:func:`_seen_op`) reports to the
# innermost; and the tensor it mutates. Module globals: a graph reads neither from the mode itself
# (Dynamo 2.13 cannot guard on what it reaches through the mode stack).
_LIVE: list[Capture] = []
_OPS: dict = {}
_LIBRARY: list = []  # the one torch.library.Library defining them (kept: it unregisters when freed)
_TOKEN: list = []


def _seen_op(torch):
    """``attnscale_capture::seen``: one SDPA call of a compiled graph handed to its capture, at run
    time, with real tensors. A custom operator, so Dynamo and Inductor keep it as one opaque op (no
    graph break, no recompilation: its arguments are tensors and numbers); it mutates a one-element
    token so that the compiler neither drops it (its result is unused) nor reorders it past the step."""
    if "seen" not in _OPS:

        def seen(q, k, v, attn_mask, dropout_p, is_causal, scale, enable_gqa, site, token):
            cap = _LIVE[-1] if _LIVE else None
            if cap is not None and not cap._paused:
                a = {
                    "query": q,
                    "key": k,
                    "value": v,
                    "attn_mask": attn_mask,
                    "dropout_p": dropout_p,
                    "is_causal": is_causal,
                    "scale": scale,
                    "enable_gqa": enable_gqa,
                }
                cap._sdpa_seen += 1
                _emit_arguments(cap, cap._compiled_name(site), a, None, "sdpa")
                cap._compiled += 1

        _register_op(
            torch,
            seen,
            "(Tensor q, Tensor k, Tensor v, Tensor? attn_mask, float dropout_p, bool is_causal, float? scale, "
            "bool enable_gqa, int site, Tensor(a!) token) -> ()",
        )
    return _OPS["seen"]


def _figures_op(torch):
    """``attnscale_capture::figures``: the figures of one attention call that a compiled graph
    computed itself (replace mode: :func:`attnscale.torch.attention`'s kernel in the graph, in place
    of the model's SDPA), handed to the innermost capture at run time, as :func:`_seen_op` hands
    inputs (an opaque op: no graph break; it mutates the token so that it is kept, in order)."""
    if "figures" not in _OPS:

        def figures(
            q, k, v, lse, entropy, max_logit, min_logit, first_key, head_table, counted_entropy, backend, site, token
        ):
            cap = _LIVE[-1] if _LIVE else None
            if cap is not None and not cap._paused and cap._on_figures is not None:
                from attnscale.torch.functional import AttentionStats

                cap._sdpa_seen += 1
                cap._on_figures(
                    cap._compiled_name(site),
                    q,
                    k,
                    v,
                    AttentionStats(
                        lse=lse,
                        entropy=entropy,
                        max_logit=max_logit,
                        min_logit=min_logit,
                        backend=backend,
                        first_key_weight=first_key,
                        head_table=head_table,
                        counted_entropy=counted_entropy,
                    ),
                )
                cap._compiled += 1

        _register_op(
            torch,
            figures,
            "(Tensor q, Tensor k, Tensor v, Tensor lse, Tensor entropy, Tensor max_logit, Tensor min_logit, "
            "Tensor first_key, Tensor? head_table, Tensor? counted_entropy, str backend, int site, Tensor(a!) token) -> ()",
        )
    return _OPS["figures"]


def _register_op(torch, fn, schema: str) -> None:
    """``fn`` as the op ``attnscale_capture::<its name>``, kept in :data:`_OPS`: it returns nothing
    and mutates the token (its fake does nothing), so a compiled graph keeps it, in order. Defined
    through a ``torch.library.Library``, not ``torch.library.custom_op``, whose Python wrapper cost
    46 µs a call against 2.5 (measured, 12 arguments): the graph calls it once per attention call."""
    if not _LIBRARY:
        _LIBRARY.append(torch.library.Library("attnscale_capture", "FRAGMENT"))
    lib, name = _LIBRARY[0], fn.__name__
    lib.define(name + schema)
    lib.impl(name, fn, "CompositeExplicitAutograd")
    torch.library.register_fake(f"attnscale_capture::{name}", lambda *args: None, lib=lib)
    _OPS[name] = getattr(torch.ops.attnscale_capture, name)


def _compiled_call(torch, func, args, kwargs, compiled_replace=None):
    """An SDPA call met while Dynamo traces. With ``compiled_replace`` (replace mode) the graph
    computes the call itself where that function can (it returns the output and figures of
    :func:`attnscale.torch.attention`, traced: the fused kernel is one op there), and
    :func:`_figures_op` hands the figures to the capture when the graph runs. Otherwise the model's
    own SDPA stays in the graph (its output the compiled model's own) and :func:`_seen_op` hands the
    call's detached inputs to the capture, which computes the figures as observe mode does."""
    a = _sdpa_arguments(args, kwargs)
    site = trace_site()  # a constant of the graph: the call's module below the compiled one
    done = None if compiled_replace is None else compiled_replace(a)
    if done is not None:
        out, stats = done
        _figures_op(torch)(
            a["query"].detach(),
            a["key"].detach(),
            a["value"].detach(),
            stats.lse,
            stats.entropy,
            stats.max_logit,
            stats.min_logit,
            stats.first_key_weight,
            stats.head_table,
            stats.counted_entropy,
            stats.backend,
            site,
            _TOKEN[0],
        )
        return out
    out = func(*args, **(kwargs or {}))
    mask = a["attn_mask"]
    _seen_op(torch)(
        a["query"].detach(),
        a["key"].detach(),
        a["value"].detach(),
        None if mask is None else mask.detach(),
        float(a["dropout_p"]),
        bool(a["is_causal"]),
        None if a["scale"] is None else float(a["scale"]),
        bool(a["enable_gqa"]),
        site,
        _TOKEN[0],
    )
    return out


@functools.cache
def _mode_class(compiled_replace=None):
    """The capture's TorchFunctionMode, one class for every capture with the same ``compiled_replace``
    (None, or replace mode's one module-level function: two classes in all; made on first use: torch
    is optional). Dynamo guards on the types of the modes on torch's stack, not on what it reaches
    through them: a class per capture made every new monitor compile the model again (8 monitors hit
    its recompile limit: eager from then on), and one class for both modes would run an observe
    monitor on a graph traced for replace mode."""
    torch = require("torch", "torch")
    from torch.overrides import TorchFunctionMode

    sdpa = torch._C._nn.scaled_dot_product_attention  # the builtin, whatever the names hold
    module_attention = torch.nn.functional.multi_head_attention_forward

    class _SDPAMode(TorchFunctionMode):
        def __init__(self, cap: Capture):
            super().__init__()
            self.cap = cap

        # Every torch function the model calls passes through here: two identity tests and a call,
        # nothing else (no import, no lookup), is what keeps the mode itself under 1% of a step.
        # Paused (a mode entered after ours keeps it on the stack), every call is the model's own.
        def __torch_function__(self, func, types, args=(), kwargs=None):
            cap = self.cap
            if func is not sdpa or cap._paused:
                if func is module_attention and not cap._paused:
                    return _module_call(cap, func, args, kwargs)
                return func(*args, **(kwargs or {}))
            if torch.compiler.is_compiling():
                return _compiled_call(torch, func, args, kwargs, compiled_replace)
            if getattr(_AT_NAME, "inside", None) is cap:  # called from the name's own handling: seen there
                return func(*args, **(kwargs or {}))
            name = cap._innermost_name()
            if name is None:  # another model's call: not ours to see
                return func(*args, **(kwargs or {}))
            cap._missed += cap._watch == "checking"
            return _eager_sdpa(cap, name, func, args, kwargs)

    return _SDPAMode


def _eager_sdpa(cap: Capture, name: str, func, args, kwargs):
    """One SDPA call of the model's module ``name``, outside a compiled graph: replaced, or run by
    ``func`` (SDPA) and recorded."""
    cap._sdpa_seen += 1
    a = _sdpa_arguments(args, kwargs)
    if cap._replace is not None:
        out = cap._replace(name, a)
        if out is not None:
            return out
    out = func(*args, **(kwargs or {}))
    _emit_arguments(cap, name, a, out, "sdpa")
    return out


# _BY_NAMES: the capture that watches SDPA at its names (at most one at a time: a capture entered
# while it watches finds calls with its mode). _ROUTE: whether its model is running while it
# watches by them alone ("names"), as a plain dict, which a compiled graph guards on by value: a
# graph traced while the model runs (the model compiled after the capture was entered) computes the
# figures, one traced elsewhere (another compiled function calling SDPA) does not. _AT_NAME.inside:
# the capture handling an SDPA call at a name on this thread, so that the calls its handling makes
# (the model's SDPA run for observe mode, a backend's own) pass straight on, past its own mode too
# (another capture's mode sees them, as it would see the model's call). _AT_NAME.named: (capture,
# module name) while that capture's interface handler runs a module's attention function on this
# thread: the name of the SDPA call it makes (Capture._innermost_name).
_BY_NAMES: list[Capture] = []
_ROUTE = {"names": False}
_AT_NAME = threading.local()


@functools.cache
def _name_function(compiled_replace=None):
    """What the names bound to SDPA are rebound to while a capture watches them (one function for
    every capture with the same ``compiled_replace``, as :func:`_mode_class`: a compiled graph
    guards on the function a name holds, and a function per capture would recompile it for every
    monitor). Inside a graph Dynamo compiles, the call goes to the mode when one is on torch's stack
    ("checking"), else it is put in the graph as the mode would (:func:`_compiled_call`)."""
    torch = require("torch", "torch")
    sdpa = torch._C._nn.scaled_dot_product_attention

    def scaled_dot_product_attention(*args, **kwargs):
        if torch.compiler.is_compiling():
            if not _ROUTE["names"]:
                return sdpa(*args, **kwargs)
            return _compiled_call(torch, sdpa, args, kwargs, compiled_replace)
        cap = _BY_NAMES[0] if _BY_NAMES else None
        if cap is None or cap._paused or getattr(_AT_NAME, "inside", None) is not None:
            return sdpa(*args, **kwargs)
        name = cap._innermost_name()
        if name is None:  # another model's call: not ours to see
            return sdpa(*args, **kwargs)
        _AT_NAME.inside = cap
        try:
            cap._through_names += 1
            return _eager_sdpa(cap, name, sdpa, args, kwargs)
        finally:
            _AT_NAME.inside = None

    scaled_dot_product_attention.__doc__ = sdpa.__doc__
    return scaled_dot_product_attention


def recomputing() -> bool:
    """Whether this call runs inside autograd's backward: a forward run there is activation
    checkpointing's recomputation (torch.utils.checkpoint runs it from the backward, reentrant or
    not). A thread-local read, no device sync."""
    return require("torch", "torch")._C._current_graph_task_id() != -1


def _make_interface_handler(cap: Capture):
    """What answers each call through transformers' attention interface (see the module docstring)."""
    torch = require("torch", "torch")

    def handle(call: hf_interface.InterfaceCall):
        if torch.compiler.is_compiling():  # its SDPA call, if any, is seen by the mode
            return call.run()
        name = cap._module_name(call.module)
        if name is None or cap._paused:  # another model's module, or paused
            return call.run()
        eager_like = call.eager_like
        if cap._replace is not None and eager_like and call.unreadable() is None:
            out = cap._replace(name, call.sdpa_arguments())
            if out is not None:
                # Eager's layout (B, L, H, d); no probabilities, as under "sdpa".
                return out.transpose(1, 2).contiguous(), None
        seen = cap._sdpa_seen
        # Its SDPA call, if any, is the module's: named from here, not by a walk of ~25 frames.
        outer, _AT_NAME.named = getattr(_AT_NAME, "named", None), (cap, name)
        try:
            out, weights = call.run()
        finally:
            _AT_NAME.named = outer
        if cap._sdpa_seen != seen:  # its SDPA call was seen, and counted, there
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
            _emit_arguments(cap, name, call.sdpa_arguments(), out.transpose(1, 2), "interface", weights)
        return out, weights

    return handle


def _make_hooks(cap: Capture):
    """Global module hooks keeping the class names of the modules running (no model given)."""

    def pre_hook(module, args):
        cap._stack.append(type(module).__name__)

    def post_hook(module, args, output):
        if cap._stack:
            cap._stack.pop()

    return pre_hook, post_hook


class capture_sdpa:
    """Context manager recording every attention call made while it is active.

    model: a ``torch.nn.Module`` to name calls after its module paths (and to watch only its
    interface calls); None names calls by class, through global module hooks.
    store: keep the calls in ``cap.calls``; on_call: called with each :class:`SDPACall` as it happens.
    replace: called first with ``(name, arguments)`` for every intercepted call it could compute
    (arguments: a dict of SDPA's parameter names ``query, key, value, attn_mask, dropout_p,
    is_causal, scale, enable_gqa`` to what was passed, defaults filled in, tensors as they are: not
    detached; interface calls add ``softcap``, module calls ``need_weights``). A tensor it returns,
    ``(..., H_q, L, d_v)``, is the call's attention output, and the model's own attention is not run
    nor an :class:`SDPACall` made; None runs it and records the call as usual. This is how
    :class:`attnscale.torch.Monitor` in ``mode="replace"`` computes the model's attention itself.
    compiled_replace: the same inside a graph Dynamo compiles: called, traced, with the arguments of
    an SDPA call; ``(output, AttentionStats)`` puts that computation in the graph and hands the figures
    to ``on_figures(name, q, k, v, stats)`` when the graph runs; None keeps the model's SDPA (and
    ``on_call`` sees the call as in observe mode). It must be one module-level function (Dynamo
    guards on the mode's class, made once per function, not on the function).
    """

    def __init__(
        self,
        model=None,
        store: bool = True,
        on_call: Callable[[SDPACall], None] | None = None,
        replace: Callable[[str, dict], Any] | None = None,
        compiled_replace: Callable[[dict], Any] | None = None,
        on_figures: Callable[..., None] | None = None,
    ):
        torch = require("torch", "torch")
        if model is not None and not isinstance(model, torch.nn.Module):
            raise InputTypeError(f"model: expected a torch.nn.Module or None, got {type(model).__name__}")
        if on_call is not None and not callable(on_call):
            raise InputTypeError(f"on_call: expected a callable or None, got {type(on_call).__name__}")
        if replace is not None and not callable(replace):
            raise InputTypeError(f"replace: expected a callable or None, got {type(replace).__name__}")
        self._model = model
        self._capture = Capture(bool(store), on_call, replace)
        self._capture._on_figures = on_figures
        self._compiled_replace = compiled_replace
        self._handles: list = []
        self._model_hooks: list = []  # the mode's hooks on the model (not while paused)
        self._mode: Any  # from __enter__ on: the _SDPAMode of _mode_class()
        self._riding: hf_interface.riding  # from __enter__ on
        self._on = False  # the mode is on torch's stack
        self._compiling = torch.compiler.is_compiling
        self._bound: list[sdpa_names.BoundName] = []  # the names rebound (watching by names)
        self._running = 0  # forwards of the model under way, watching by the names alone

    def __enter__(self) -> Capture:
        torch = require("torch", "torch")
        cap = self._capture
        if self._model is not None:
            cap._paths = module_paths(self._model)
            modules = dict(self._model.named_modules())
            cap._names = {i: p or root_class(self._model).__name__ for i, p in cap._paths.items()}
            # The module a wrapper holds comes after the wrapper, and is the one with that path's class.
            cap._by_path = {cap._paths[id(m)]: (cap._names[id(m)], type(m)) for m in modules.values()}
            self._hook(self._model)
            if _by_names_possible(torch, self._model):
                cap._watch = "checking"
                self._bound = sdpa_names.bound_names(self._model, torch._C._nn.scaled_dot_product_attention)
                _BY_NAMES.append(cap)
                _read_by_name_first(torch)
                self._rebind()
        else:
            pre, post = _make_hooks(cap)
            mod = torch.nn.modules.module
            self._handles.append(mod.register_module_forward_pre_hook(pre))
            self._handles.append(mod.register_module_forward_hook(post, always_call=True))
        self._riding = hf_interface.riding(_make_interface_handler(cap)).__enter__()
        if not _TOKEN:
            _TOKEN.append(torch.zeros(1))
        _seen_op(torch)  # defined here: Dynamo cannot trace their registration
        _figures_op(torch)
        _LIVE.append(cap)
        self._mode = _mode_class(self._compiled_replace)(cap)
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
        torch = require("torch", "torch")
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
        if self._compiling():  # paused: no hooks at all (pause removes them)
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
        torch = require("torch", "torch")
        stack = torch._C._len_torch_function_stack()
        if not any(torch._C._get_function_stack_at(i) is self._mode for i in range(stack)):
            self._mode.__enter__()

    def _lift_hook(self, module, args, output) -> None:
        if not (self._compiling() or recomputing()):  # a rerun's mode leaves with its backward node
            self._lift()
            # Not while the forward's error propagates: PyTorch runs this hook from its handler, in
            # a loop over the model's hooks that settling would change (its RuntimeError would hide
            # the model's own error). It settles after a forward that returns.
            if self._capture._watch == "checking" and sys.exc_info()[0] is None:
                self._settle()

    def _settle(self) -> None:
        """After a forward of the model watched both ways ("checking"): by the names alone from now
        on if every SDPA call of the model came through them (no mode, and no hooks on its modules:
        nothing runs for the model's other torch calls), by the mode alone if one did not;
        undecided while no call was seen."""
        cap = self._capture
        if cap._missed:
            cap._watch = "mode"
            self._unbind()
        elif cap._through_names:
            cap._watch = "names"
            self._unhook()
            self._lift()
            self._hook_route()

    def _hook_route(self) -> None:
        """Watching by the names alone: two hooks on the model keep :data:`_ROUTE` true while it runs."""
        model = self._model
        assert model is not None  # watching by names needs a model
        self._running = 0
        self._model_hooks = [
            model.register_forward_pre_hook(self._route_on),
            model.register_forward_hook(self._route_off, always_call=True),
        ]

    def _route_on(self, module, args) -> None:
        self._running += 1
        _ROUTE["names"] = True

    def _route_off(self, module, args, output) -> None:
        self._running = max(0, self._running - 1)
        _ROUTE["names"] = self._running > 0

    def _rebind(self) -> None:
        sdpa_names.rebind(self._bound, _name_function(self._compiled_replace))

    def _restore_names(self) -> None:
        """The names bound to SDPA again (paused, or no more watching by names)."""
        torch = require("torch", "torch")
        sdpa_names.restore(
            self._bound, torch._C._nn.scaled_dot_product_attention, _name_function(self._compiled_replace)
        )
        _ROUTE["names"] = False

    def _unbind(self) -> None:
        """No more watching by names: the names SDPA's own, and another capture free to."""
        self._restore_names()
        if self._capture in _BY_NAMES:
            _BY_NAMES.remove(self._capture)

    def pause(self) -> None:
        """Until :meth:`resume`, every attention call is the model's own, unseen, and the other torch
        calls cost nothing: the mode leaves torch's stack (when it is on top: a mode entered after it
        stays, and ours then passes every call through) and the interface hands calls straight on."""
        cap = self._capture
        if cap._paused:
            return
        cap._paused = True
        self._riding._active = False  # the interface hands back the model's function itself
        self._lift()
        self._unhook()
        if cap._watch != "mode":  # a compiled graph then guards its way to the model's own
            self._restore_names()

    def resume(self) -> None:
        """Watch again after :meth:`pause`."""
        cap = self._capture
        if not cap._paused:
            return
        if cap._watch != "mode":
            self._rebind()
        if cap._watch == "names":
            self._hook_route()
        else:
            if self._model is not None:
                self._hook(self._model)
            self._lower()
        self._riding._active = self._riding._before is not None
        cap._paused = False

    def __exit__(self, *exc) -> None:
        self._unhook()  # first: no hook may lower the mode again
        if self._capture._watch != "mode":
            self._unbind()
            self._capture._watch = "mode"
        for h in self._handles:
            h.remove()
        self._handles.clear()
        if self._on:
            self._mode.__exit__(*exc)
        self._on = False
        self._capture._paused = False
        self._riding.__exit__(*exc)
        if self._capture in _LIVE:
            _LIVE.remove(self._capture)
        self._capture._stack.clear()


def compiled(torch, module) -> bool:
    """Whether ``module`` runs compiled: ``torch.compile(module)``'s wrapper, or ``module.compile()``."""
    wrapper = getattr(torch._dynamo.eval_frame, "OptimizedModule", ())
    return isinstance(module, wrapper) or getattr(module, "_compiled_call_impl", None) is not None


def _by_names_possible(torch, model) -> bool:
    """Whether ``model``'s SDPA calls may be watched at the names bound to SDPA (capture_sdpa):
    not while another capture does; not for a compiled model or one with a compiled module (its
    graph is traced with the mode); not with an ``nn.MultiheadAttention`` (only a torch-function
    mode keeps it off its fused fast path, where its attention is no SDPA call)."""
    return not _BY_NAMES and not any(
        compiled(torch, m) or isinstance(m, torch.nn.MultiheadAttention) for m in model.modules()
    )


def _read_by_name_first(torch) -> None:
    """Have torch read its functions by name before SDPA's name is rebound. Dynamo and
    torch.overrides each build a table of torch's functions from their names once per process, the
    first time they need it: built while the name holds the capture's function, the table would
    hold that function for SDPA's, and SDPA itself would never again be traced as SDPA (seen: a
    model compiled later, under a monitor's mode, showed no attention call at all)."""
    from torch._dynamo import trace_rules

    for table in (trace_rules.get_torch_obj_rule_map, torch.overrides._get_overridable_functions):
        table()
