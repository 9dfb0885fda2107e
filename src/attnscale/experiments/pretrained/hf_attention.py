"""Run a Hugging Face model through an attention function of ours: see each call, or turn its scale.

Hugging Face models (BERT, Llama and most others since transformers 4.48) compute attention through
one dispatch: ``ALL_ATTENTION_FUNCTIONS.get_interface(config._attn_implementation, eager)``, called
*after* the rotary embedding and with the model's own mask and ``scaling``. We register one more
implementation, :data:`IMPLEMENTATION`, which calls the model's own eager function (the one in its
modeling module); :func:`attention_calls` switches a model to it for its duration and meanwhile

* multiplies ``scaling`` by ``alpha`` (the scale intervention), and
* hands each call to ``on_call`` as an :class:`AttentionCall`: q and k exactly as the softmax sees
  them (after RoPE, after a QK-norm), the additive mask the model passed, the scale used, what else
  its eager function adds to the logits (T5's relative ``position_bias``) or does to them (Gemma 2's
  ``softcap``: cap·tanh(logit/cap), before the mask), and the probabilities the model computed from
  them (its eager attention, so ``output_attentions`` holds the same maps).

An option this module does not carry into the call (a learned sink logit per head, as in GPT-OSS) is
refused with :class:`UnsupportedAttention`, naming the model type and the option, before any figure
is made; a model whose attention does not go through the interface at all is refused the same way.

With ``alpha = 1`` the model computes exactly what ``attn_implementation="eager"`` computes (a test
checks its outputs bit for bit). The mask function registered beside it is the eager one, so the
model builds the same additive float mask (0 = attend, the dtype's minimum = masked).
"""

from __future__ import annotations

import contextlib
import contextvars
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from attnscale.errors import InputError, require

__all__ = ["IMPLEMENTATION", "AttentionCall", "UnsupportedAttention", "register", "attention_calls"]

IMPLEMENTATION = "attnscale_eager"

# An additive mask entry at or below this masks its key (the value the capture of SDPA calls uses).
MASKED_BELOW = -1.0e4
# Module attributes of an attention whose logits this capture cannot rebuild, and what they are.
UNSUPPORTED_ATTRIBUTES = {"sinks": "a learned sink logit per head in the softmax (module.sinks)"}
# Names of cross-attention modules (queries from the decoder, keys from the encoder).
CROSS_ATTENTION_NAMES = ("encdecattention", "encoder_attn", "crossattention", "cross_attn")


class UnsupportedAttention(InputError):
    """A model whose attention calls cannot be rebuilt from what the attention interface hands over."""


@dataclass
class AttentionCall:
    """One attention call of a Hugging Face model.

    name: the attention module's path in the model ("model.layers.3.self_attn").
    q: (B, H_q, L, d_k), k: (B, H_kv, S, d_k): detached, as the model passed them (after RoPE).
    mask: the additive float mask (broadcastable to (B, H_q, L, S)) or None.
    scale: the factor that multiplied q·kᵀ in this call (the model's scaling × alpha).
    weights: (B, H_q, L, S) the model's own probabilities.
    bias: an additive bias besides the mask (T5's position_bias, broadcastable to (B, H_q, L, S)) or None.
    softcap: the cap of cap·tanh(scale·q·k / cap), applied before bias and mask, or None.
    qk_norm: the module normalises q and k before the product (``q_norm`` and ``k_norm``: Qwen3, OLMo 2).
    cross: a cross-attention (keys from the encoder), by the module's name.
    """

    name: str
    q: Any
    k: Any
    mask: Any
    scale: float
    weights: Any
    bias: Any = None
    softcap: float | None = None
    qk_norm: bool = False
    cross: bool = False

    def attended(self):
        """Bool (B, 1 or H_q, L, S): True where the query attends the key."""
        torch = require("torch", "probe")
        B, _, L, _ = self.q.shape
        S = self.k.shape[-2]
        if self.mask is None:
            return torch.ones((B, 1, L, S), dtype=torch.bool)
        mask = self.mask if self.mask.dtype == torch.bool else self.mask > MASKED_BELOW
        return mask.expand(B, mask.shape[1], L, S)


_STATE: contextvars.ContextVar = contextvars.ContextVar("attnscale_attention", default=None)


@dataclass
class _State:
    alpha: float
    on_call: Callable[[AttentionCall], None] | None
    names: dict[int, str]


def _model_eager(module) -> Callable:
    """The eager attention function of the module's own modeling file (Llama's repeats the key/value
    heads and takes the softmax in float32; BERT's does neither)."""
    fn = getattr(sys.modules.get(type(module).__module__), "eager_attention_forward", None)
    if fn is None:
        raise UnsupportedAttention(f"model: {_model_type(module)} is not supported: {type(module).__name__} has no "
                                   "eager_attention_forward in its modeling module to compute the probabilities with")
    return fn


def _model_type(module) -> str:
    config = getattr(module, "config", None)
    return getattr(config, "model_type", None) or type(module).__name__


def _attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    state = _STATE.get()
    for attribute, what in UNSUPPORTED_ATTRIBUTES.items():
        if getattr(module, attribute, None) is not None:
            raise UnsupportedAttention(f"model: {_model_type(module)} is not supported: its attention has {what}, "
                                       "which the probe cannot rebuild from q, k, scale and mask")
    if scaling is None:
        scaling = query.shape[-1] ** -0.5
    if state is not None:
        scaling = scaling * state.alpha
    output, weights = _model_eager(module)(module, query, key, value, attention_mask, scaling=scaling,
                                           dropout=dropout, **kwargs)
    if state is not None and state.on_call is not None:
        name = state.names.get(id(module), type(module).__name__)
        bias, softcap = kwargs.get("position_bias"), kwargs.get("softcap")
        state.on_call(AttentionCall(
            name=name, q=query.detach(), k=key.detach(),
            mask=None if attention_mask is None else attention_mask.detach(), scale=float(scaling),
            weights=weights.detach(), bias=None if bias is None else bias.detach(),
            softcap=None if softcap is None else float(softcap),
            qk_norm=getattr(module, "q_norm", None) is not None and getattr(module, "k_norm", None) is not None,
            cross=any(part in name.lower() for part in CROSS_ATTENTION_NAMES)))
    return output, weights


def register() -> str:
    """Register :data:`IMPLEMENTATION` with transformers (idempotent); returns its name, to pass as
    ``attn_implementation`` when loading a model."""
    require("torch", "probe")
    transformers = require("transformers", "probe")
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, eager_mask

    transformers.AttentionInterface.register(IMPLEMENTATION, _attention)
    ALL_MASK_ATTENTION_FUNCTIONS.register(IMPLEMENTATION, eager_mask)
    return IMPLEMENTATION


@contextlib.contextmanager
def attention_calls(model, *, alpha: float = 1.0, on_call: Callable[[AttentionCall], None] | None = None):
    """While active, every attention call of ``model`` (a Hugging Face model) runs through
    :data:`IMPLEMENTATION` with its scale multiplied by ``alpha`` and is passed to ``on_call``; the
    model's own attention implementation is restored afterwards."""
    register()
    config = getattr(model, "config", None)
    before = getattr(config, "_attn_implementation", None)
    if before is None or not hasattr(model, "set_attn_implementation"):
        raise InputError(f"model: expected a Hugging Face PreTrainedModel, got {type(model).__name__}")
    refused = UnsupportedAttention(
        f"model: {getattr(config, 'model_type', None) or type(model).__name__} is not supported: its attention "
        f"({type(model).__name__}) does not go through transformers' attention interface, so its q, k and "
        "scale cannot be captured")
    can_set = getattr(model, "_can_set_attn_implementation", None)
    if before != IMPLEMENTATION:
        if can_set is not None and not can_set():          # asked anyway, transformers would log a warning
            raise refused
        model.set_attn_implementation(IMPLEMENTATION)
        if model.config._attn_implementation != IMPLEMENTATION:
            raise refused
    names = {id(m): name for name, m in model.named_modules()}
    token = _STATE.set(_State(alpha=float(alpha), on_call=on_call, names=names))
    try:
        yield
    finally:
        _STATE.reset(token)
        if before != IMPLEMENTATION:
            model.set_attn_implementation(before)
