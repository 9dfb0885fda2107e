"""Capture the attention a PyTorch model actually computes: q, k, v, mask and scale of every call.

API::

    from attnscale.torch.capture import capture_sdpa, SDPACall

    with capture_sdpa(model=None, store=True, on_call=None, replace=None) as cap:
        model(**inputs)
    cap.calls        # list[SDPACall] in call order (empty when store=False)
    cap.skipped      # list[(module name, reason)]: attention modules seen but not reconstructable

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
- ``output: (..., H_q, L, d_v)``: what the call returned.
- ``source``: ``"sdpa"`` (intercepted call) or ``"projections"`` (rebuilt, see below).
- ``weights``: the model's own probabilities ``(B, H_q, L, S)`` when it computed them (eager
  attention), else None.

Methods (torch, float64): ``call.logits()`` (scale·q·kᵀ plus any additive mask, −inf where masked),
``call.attended()`` (bool, True = attend, broadcast to ``(B, H_q, L, S)``),
``call.probabilities()`` (softmax of the logits; rows with nothing attended are all 0).

How calls are found:

- ``torch.nn.functional.scaled_dot_product_attention`` is intercepted with a
  :class:`torch.overrides.TorchFunctionMode`, so it is seen however the model imported it (``from
  torch.nn.functional import scaled_dot_product_attention`` included).
- Hugging Face BERT-family attention in the ``"eager"`` implementation never calls SDPA. A module
  with ``query``, ``key`` and ``value`` ``nn.Linear`` children and an ``attention_head_size`` is
  rebuilt from its projections' outputs (split into heads), its ``scaling`` and the extended
  ``attention_mask`` it received, and the probabilities it returned — but only when it made no SDPA
  call itself, so nothing is counted twice. Limits, said openly: this rebuild is right only for
  models whose projections feed the dot product unchanged (BERT, RoBERTa, ELECTRA...; not rotary
  models); a module whose keys come from a KV cache is listed in ``cap.skipped`` instead.
- Module names: with ``model`` given, the innermost of its modules running at the call — the nearest
  caller frame whose ``self`` is one of them — and forward hooks only on its BERT-style attention
  modules and their projections (hooks on every module would cost a forward ~10%). Without a
  model, global module hooks kept as a stack (which need no model but only know class names, cost
  every module's call, and cannot see keyword arguments before the call — the mask is read after it).

Tensors are detached, not copied: do not modify them in place while you hold the calls.
"""

from __future__ import annotations

import inspect
import math
import sys
from dataclasses import dataclass
from typing import Any, Callable

from attnscale.errors import require
from attnscale.torch.sdpa_mask import MASKED_BELOW, attended, split_attn_mask

__all__ = ["SDPACall", "Capture", "capture_sdpa", "MASKED_BELOW"]


@dataclass
class SDPACall:
    """One attention call, in PyTorch SDPA layout. See the module docstring for every field."""

    index: int
    name: str
    q: Any                     # (..., H_q, L, d_k) as passed (see the module docstring)
    k: Any                     # (..., H_k, S, d_k)
    v: Any                     # (..., H_k, S, d_v)
    attn_mask: Any             # None | bool (True = attend) | additive float, broadcastable to (..., H_q, L, S)
    is_causal: bool
    scale: float               # resolved: multiplies q·kᵀ
    dropout_p: float
    enable_gqa: bool
    output: Any                # (..., H_q, L, d_v)
    source: str = "sdpa"       # "sdpa" | "projections"
    weights: Any = None        # the model's own probabilities (B, H_q, L, S), when it computed them

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
        """float64 (B, H_q, L, S): scale·q·kᵀ plus any additive mask; −inf where not attended."""
        x = self.scale * (self.q.double() @ self.keys_for_queries().transpose(-2, -1))
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
        self.skipped: list[tuple[str, str]] = []
        self._store = store
        self._on_call = on_call
        self._replace = replace
        self._count = 0
        self._stack: list[_Frame] = []
        self._names: dict[int, str] | None = None    # module id → path, when a model is given

    def _emit(self, **fields) -> None:
        call = SDPACall(index=self._count, **fields)
        self._count += 1
        if self._on_call is not None:
            self._on_call(call)
        if self._store:
            self.calls.append(call)

    def _innermost_name(self) -> str:
        if self._names is None:
            return self._stack[-1].name if self._stack else ""
        # With a model, only its attention modules carry hooks (hooks on every module cost a forward
        # ~10%); the innermost of its modules running is the nearest caller frame whose ``self`` it is.
        frame = sys._getframe(1)
        while frame is not None:
            owner = frame.f_locals.get("self")
            if owner is not None and id(owner) in self._names:
                return self._names[id(owner)]
            frame = frame.f_back
        return ""


class _Frame:
    """A module whose forward is running; for BERT-style attention, its projections' outputs."""

    __slots__ = ("module", "name", "projections", "saw_sdpa")

    def __init__(self, module, name: str):
        self.module = module
        self.name = name
        self.projections: dict[str, Any] = {}
        self.saw_sdpa = False


_PROJECTIONS = {"query": "q", "key": "k", "value": "v"}


def _is_projection_attention(module) -> bool:
    """A BERT-style attention module: query/key/value Linear children and a head size."""
    from torch import nn

    return (hasattr(module, "attention_head_size")
            and all(isinstance(getattr(module, p, None), nn.Linear) for p in _PROJECTIONS))


_SDPA_PARAMS = ("query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale", "enable_gqa")
_SDPA_DEFAULTS = {"attn_mask": None, "dropout_p": 0.0, "is_causal": False, "scale": None, "enable_gqa": False}


def _sdpa_arguments(args, kwargs) -> dict:
    bound = dict(_SDPA_DEFAULTS)
    bound.update(zip(_SDPA_PARAMS, args))
    bound.update(kwargs or {})
    return bound


def _make_mode(cap: Capture):
    torch = require("torch", "torch")
    from torch.overrides import TorchFunctionMode

    sdpa = torch.nn.functional.scaled_dot_product_attention

    class _SDPAMode(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            if func is not sdpa:
                return func(*args, **(kwargs or {}))
            for frame in cap._stack:
                frame.saw_sdpa = True
            a = _sdpa_arguments(args, kwargs)
            name = cap._innermost_name()
            if cap._replace is not None:
                out = cap._replace(name, a)
                if out is not None:
                    return out
            out = func(*args, **(kwargs or {}))
            q = a["query"]
            scale = a["scale"]
            cap._emit(
                name=name, q=q.detach(), k=a["key"].detach(), v=a["value"].detach(),
                attn_mask=None if a["attn_mask"] is None else a["attn_mask"].detach(),
                is_causal=bool(a["is_causal"]),
                scale=1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale),
                dropout_p=float(a["dropout_p"]), enable_gqa=bool(a["enable_gqa"]),
                output=out.detach(), source="sdpa")
            return out

    return _SDPAMode()


_MASK_PARAM_INDEX: dict[type, int | None] = {}


def _attention_mask_argument(module, args, kwargs):
    """The ``attention_mask`` the module was called with, positional or keyword (None if absent)."""
    if "attention_mask" in kwargs:
        return kwargs["attention_mask"]
    cls = type(module)
    if cls not in _MASK_PARAM_INDEX:
        names = list(inspect.signature(module.forward).parameters)
        _MASK_PARAM_INDEX[cls] = names.index("attention_mask") if "attention_mask" in names else None
    i = _MASK_PARAM_INDEX[cls]
    return args[i] if i is not None and i < len(args) else None


def _heads(x, head_size: int):
    """(B, T, H·d) → (B, H, T, d)."""
    B, T, width = x.shape
    return x.detach().view(B, T, width // head_size, head_size).transpose(1, 2)


def _rebuild_from_projections(cap: Capture, frame: _Frame, args, kwargs, output) -> None:
    module = frame.module
    p = frame.projections
    if not {"q", "k", "v"} <= p.keys():
        cap.skipped.append((frame.name, "keys or values did not come from this call's projections (cached)"))
        return
    d_k = module.attention_head_size
    q, k, v = _heads(p["q"], d_k), _heads(p["k"], d_k), _heads(p["v"], d_k)
    result = output[0] if isinstance(output, tuple) else output
    weights = output[1] if isinstance(output, tuple) and len(output) > 1 else None
    if weights is not None and weights.shape[-1] != k.shape[-2]:
        cap.skipped.append((frame.name, f"the module attended {weights.shape[-1]} keys but projected "
                                        f"{k.shape[-2]} (a KV cache); use attn_implementation='sdpa'"))
        return
    mask = _attention_mask_argument(module, args, kwargs)
    dropout = getattr(module, "dropout", None)
    cap._emit(
        name=frame.name, q=q, k=k, v=v,
        attn_mask=None if mask is None else mask.detach(), is_causal=False,
        scale=float(getattr(module, "scaling", d_k ** -0.5)),
        dropout_p=float(dropout.p) if module.training and dropout is not None else 0.0,
        enable_gqa=False, output=_heads(result, v.shape[-1]), source="projections",
        weights=None if weights is None else weights.detach())


def _rebuildable(model) -> list:
    """The modules of ``model`` whose forward the hooks must see: BERT-style attention modules (to
    rebuild eager attention) and their query/key/value projections."""
    out = []
    for m in model.modules():
        if _is_projection_attention(m):
            out += [m, *(getattr(m, attr) for attr in _PROJECTIONS)]
    return out


def _make_hooks(cap: Capture, names: dict[int, str] | None):
    def pre_hook(module, args):
        name = names.get(id(module), "") if names is not None else type(module).__name__
        cap._stack.append(_Frame(module, name))

    def post_hook(module, args, kwargs, output):
        # Pop down to this module's frame, so a forward that raised cannot unbalance the stack.
        while cap._stack:
            frame = cap._stack.pop()
            if frame.module is module:
                break
        else:
            return
        if cap._stack:
            parent = cap._stack[-1]
            for attr, key in _PROJECTIONS.items():
                if getattr(parent.module, attr, None) is module:
                    parent.projections[key] = output
        # output is None when the forward raised (always_call): there is nothing to rebuild then.
        if output is not None and not frame.saw_sdpa and _is_projection_attention(module):
            _rebuild_from_projections(cap, frame, args, kwargs, output)

    return pre_hook, post_hook


class capture_sdpa:
    """Context manager recording every attention call made while it is active.

    model: a ``torch.nn.Module`` to name calls after its module paths (and the only way its
    eager BERT-style attention can be rebuilt with names); None hooks all modules globally.
    store: keep the calls in ``cap.calls``; on_call: called with each :class:`SDPACall` as it happens.
    replace: called first with ``(name, arguments)`` for every intercepted SDPA call (arguments: a
    dict of SDPA's parameter names ``query, key, value, attn_mask, dropout_p, is_causal, scale,
    enable_gqa`` to what was passed, defaults filled in, tensors as they are: not detached). A tensor
    it returns is the call's output, and SDPA is not run nor an :class:`SDPACall` made; None runs
    SDPA and records the call as usual. This is how :func:`attnscale.torch.monitor` in
    ``mode="replace"`` computes the model's attention itself.
    """

    def __init__(self, model=None, store: bool = True, on_call: Callable[[SDPACall], None] | None = None,
                 replace: Callable[[str, dict], Any] | None = None):
        torch = require("torch", "torch")
        if model is not None and not isinstance(model, torch.nn.Module):
            from attnscale.errors import InputTypeError

            raise InputTypeError(f"model: expected a torch.nn.Module or None, got {type(model).__name__}")
        if on_call is not None and not callable(on_call):
            from attnscale.errors import InputTypeError

            raise InputTypeError(f"on_call: expected a callable or None, got {type(on_call).__name__}")
        if replace is not None and not callable(replace):
            from attnscale.errors import InputTypeError

            raise InputTypeError(f"replace: expected a callable or None, got {type(replace).__name__}")
        self._model = model
        self._capture = Capture(bool(store), on_call, replace)
        self._handles: list = []
        self._mode = None

    def __enter__(self) -> Capture:
        torch = require("torch", "torch")
        cap = self._capture
        if self._model is not None:
            names = {id(m): (n or type(m).__name__) for n, m in self._model.named_modules()}
            cap._names = names
            pre, post = _make_hooks(cap, names)
            for m in _rebuildable(self._model):
                self._handles.append(m.register_forward_pre_hook(pre))
                self._handles.append(m.register_forward_hook(post, with_kwargs=True, always_call=True))
        else:
            pre, post = _make_hooks(cap, None)
            mod = torch.nn.modules.module
            self._handles.append(mod.register_module_forward_pre_hook(pre))
            self._handles.append(mod.register_module_forward_hook(post, with_kwargs=True, always_call=True))
        self._mode = _make_mode(cap)
        self._mode.__enter__()
        return cap

    def __exit__(self, *exc) -> None:
        self._mode.__exit__(*exc)
        for h in self._handles:
            h.remove()
        self._handles.clear()
        self._capture._stack.clear()
