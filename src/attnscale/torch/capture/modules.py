"""PyTorch's own attention modules read as SDPA calls: ``nn.MultiheadAttention`` and everything built
on it (``nn.TransformerEncoderLayer``, ``nn.TransformerDecoderLayer``, ``nn.Transformer``).

These modules never reach a :class:`torch.overrides.TorchFunctionMode` with their SDPA call: they go
through ``F.multi_head_attention_forward``, a Python function that hands itself to the mode (its
``handle_torch_function``), and the mode runs it with itself switched off, so the SDPA call inside
(``need_weights=False``) or the explicit softmax (``need_weights=True``) is invisible. What the mode
does see is that function's arguments: the module's inputs, its public projections
(``in_proj_weight`` or ``q_proj_weight``/``k_proj_weight``/``v_proj_weight``, ``in_proj_bias``,
``out_proj``), the masks and flags. :func:`rebuild` projects q, k, v from them exactly as the function
does (with its own helpers ``F._in_projection_packed``/``F._in_projection``/``F._canonical_mask``:
torch is pinned) and gives the call in SDPA's layout::

    problem = rebuild(args, kwargs)        # F.multi_head_attention_forward's arguments
    problem.q: (B, H, L, d), problem.k, problem.v: (B, H, S, d)     d = embed_dim / num_heads
    problem.attn_mask: None or an additive float mask broadcastable to (B, H, L, S)
                       (attn_mask and key_padding_mask merged; bool masks, True = masked, made −inf)
    problem.finish(out)                    # out: (B, H, L, d) -> the function's attn_output

The layout is the function's (sequence first, (L, B, E)); ``batch_first`` modules transpose before
calling it and after, so both are seen alike, and an unbatched (L, E) input counts as B = 1. The
scale is 1/√d (PyTorch's: SDPA's default, or ``q·√(1/d)`` before the explicit softmax).

The fast path: in eval, without gradients, a ``batch_first`` module would call one fused op
(``torch._native_multi_head_attention``, or the encoder layer's ``_transformer_encoder_layer_fwd``)
that no hook can look into. PyTorch itself turns that path off while any torch-function override
is active (its ``why_not_sparsity_fast_path``: "some Tensor argument has_torch_function"), and the
capture's mode is one, so under a monitor — observe or replace mode alike — these modules take their
standard path. We leave it so rather than read the fused op's inputs: the standard path is the one
whose attention we can see and check, its output differs from the fast path's by rounding only
(float32: measured 2e-7 to 5e-7 on inputs of scale 2; the tests hold it to 1e-5 × max |out|), and a
monitor that changed which kernel runs in one mode and not the other would compare different
computations. One difference is not rounding: with a ``src_key_padding_mask`` in eval,
``nn.TransformerEncoder``'s nested-tensor path writes 0 at the padded positions, where the standard
path computes a value (both the same at every real position).

Refused (a reason, and the call runs unwatched): ``add_bias_kv``, ``add_zero_attn`` and static keys
or values (``static_k``/``static_v``), which add keys the projections do not make.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from attnscale.torch.capture.call import Fallback, SDPAArguments

__all__ = ["ModuleProblem", "rebuild", "module_call"]


@dataclass
class ModuleProblem:
    """One ``F.multi_head_attention_forward`` call in SDPA layout (see the module docstring)."""

    q: Any  # (B, H, L, d)
    k: Any  # (B, H, S, d)
    v: Any  # (B, H, S, d)
    attn_mask: Any  # None | additive float, broadcastable to (B, H, L, S)
    is_causal: bool  # top-left causal, only when the function itself passes it to SDPA
    dropout_p: float  # 0 unless training
    need_weights: bool  # the caller wants the head-averaged (or per-head) probabilities back
    finish: Callable  # out (B, H, L, d) -> attn_output, as the function returns it

    def sdpa_arguments(self) -> SDPAArguments:
        """The call as SDPA's arguments, with ``need_weights``."""
        return SDPAArguments(
            query=self.q,
            key=self.k,
            value=self.v,
            attn_mask=self.attn_mask,
            dropout_p=self.dropout_p,
            is_causal=self.is_causal,
            need_weights=self.need_weights,
        )


@functools.cache
def _signature() -> inspect.Signature:
    return inspect.signature(torch.nn.functional.multi_head_attention_forward)


def _bound(args, kwargs) -> dict:
    bound = _signature().bind(*args, **(kwargs or {}))
    bound.apply_defaults()
    return dict(bound.arguments)


def rebuild(args, kwargs) -> ModuleProblem | str:
    """``F.multi_head_attention_forward``'s arguments as a :class:`ModuleProblem`, or the reason
    they cannot be. Differentiable: under autograd, q, k, v and ``finish`` carry gradients to the
    projections."""
    F: Any = torch.nn.functional  # its private helpers (_in_projection ...) are not in its type stubs
    a = _bound(args, kwargs)
    if a["bias_k"] is not None or a["bias_v"] is not None:
        return "add_bias_kv=True adds a learned key and value the projections do not make"
    if a["add_zero_attn"]:
        return "add_zero_attn=True adds a zero key and value the projections do not make"
    if a["static_k"] is not None or a["static_v"] is not None:
        return "static_k/static_v replace the projected keys or values"
    query, key, value, H = a["query"], a["key"], a["value"], a["num_heads"]
    key_padding_mask, attn_mask, is_causal = a["key_padding_mask"], a["attn_mask"], a["is_causal"]
    batched = F._mha_shape_check(query, key, value, key_padding_mask, attn_mask, H)
    if not batched:
        query, key, value = query.unsqueeze(1), key.unsqueeze(1), value.unsqueeze(1)
        if key_padding_mask is not None:
            key_padding_mask = key_padding_mask.unsqueeze(0)
    L, B, E = query.shape
    S = key.shape[0]
    d = E // H
    # The masks as the function reads them: float, 0 = attend, −inf = masked.
    key_padding_mask = F._canonical_mask(
        mask=key_padding_mask,
        mask_name="key_padding_mask",
        other_type=F._none_or_dtype(attn_mask),
        other_name="attn_mask",
        target_type=query.dtype,
    )
    if is_causal and key_padding_mask is None and not a["need_weights"]:
        attn_mask = None  # the function hands is_causal to SDPA
    else:
        attn_mask = F._canonical_mask(
            mask=attn_mask,
            mask_name="attn_mask",
            other_type=None,
            other_name="",
            target_type=query.dtype,
            check_other=False,
        )
        is_causal = False  # the mask it was given says it all
    if a["use_separate_proj_weight"]:
        b = (None,) * 3 if a["in_proj_bias"] is None else a["in_proj_bias"].chunk(3)
        q, k, v = F._in_projection(query, key, value, a["q_proj_weight"], a["k_proj_weight"], a["v_proj_weight"], *b)
    else:
        q, k, v = F._in_projection_packed(query, key, value, a["in_proj_weight"], a["in_proj_bias"])
    heads = lambda x: x.reshape(x.shape[0], B, H, d).permute(1, 2, 0, 3)  # noqa: E731  (N, B, E) → (B, H, N, d)
    if attn_mask is not None:
        attn_mask = attn_mask.view(B, H, -1, S) if attn_mask.dim() == 3 else attn_mask.view(1, 1, L, S)
    if key_padding_mask is not None:
        padding = key_padding_mask.view(B, 1, 1, S)
        attn_mask = padding if attn_mask is None else attn_mask + padding
    out_w, out_b = a["out_proj_weight"], a["out_proj_bias"]

    def finish(out):
        x = F.linear(out.permute(2, 0, 1, 3).reshape(L * B, E), out_w, out_b).view(L, B, -1)
        return x if batched else x.squeeze(1)

    return ModuleProblem(
        q=heads(q),
        k=heads(k),
        v=heads(v),
        attn_mask=attn_mask,
        is_causal=bool(is_causal),
        dropout_p=float(a["dropout_p"]) if a["training"] else 0.0,
        need_weights=bool(a["need_weights"]),
        finish=finish,
    )


def module_call(cap, func, args, kwargs):
    """``F.multi_head_attention_forward`` met by capture ``cap``'s mode: rebuilt by :func:`rebuild`,
    replaced or run as it is, and recorded as ``"module"``."""
    name = cap.innermost_name()
    if name is None:  # another model's module
        return func(*args, **(kwargs or {}))
    replacing = cap.replace is not None
    # Observing needs no graph; replacing does, through the projections.
    with contextlib.nullcontext() if replacing else torch.no_grad():
        problem = rebuild(args, kwargs)
    if isinstance(problem, str):
        cap.skipped[(name, problem)] += 1
        return func(*args, **(kwargs or {}))
    a, done = problem.sdpa_arguments(), None
    if replacing:
        done = cap.replace(name, a)
        if done is not None and not isinstance(done, Fallback):
            return problem.finish(done), None
    result = func(*args, **(kwargs or {}))
    cap.emit(name, a, None, "module", fallback=done)
    return result
