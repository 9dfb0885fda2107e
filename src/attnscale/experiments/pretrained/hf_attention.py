"""Run a Hugging Face model with its own eager attention and see each call, or turn its scale: what
the probe and the rescale read of a model, through the same ride on transformers' attention
interface as the monitor's (:mod:`attnscale.torch.capture.interface`: one reading of a call, one refusal of
what cannot be rebuilt from it).

:func:`attention_calls` switches the model to :data:`IMPLEMENTATION` for its duration (the module's own
eager function under a name of ours, with eager's mask: so it builds eager's additive float mask and
its attention returns the probabilities), rides the attention interface, and for each call

* multiplies ``scaling`` by ``alpha`` (the scale intervention), and
* hands it to ``on_call`` as an :class:`AttentionCall`: q and k exactly as the softmax sees them
  (after RoPE, after a QK-norm), the additive mask the model passed, the scale used, what else its
  eager function adds to the logits (T5's relative ``position_bias``) or does to them (Gemma 2's
  ``softcap``: cap·tanh(logit/cap), before the mask), and the probabilities the model computed from
  them (its eager attention, so ``output_attentions`` holds the same maps).

A call whose logits carry more than that (:meth:`~attnscale.torch.capture.interface.InterfaceCall.unreadable`:
a learned sink logit per head, as GPT-OSS's, and the like; the monitor refuses the same calls) is
refused with :class:`UnsupportedAttention`, naming the model type and the reason, before any figure
is made; a model whose attention does not go through the interface at all is refused the same way.

With ``alpha = 1`` the model computes exactly what ``attn_implementation="eager"`` computes (a test
checks its outputs bit for bit).
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from attnscale.errors import InputError, require
from attnscale.torch.capture.interface import InterfaceCall, riding
from attnscale.torch.sdpa_mask import MASKED_BELOW

__all__ = ["IMPLEMENTATION", "AttentionCall", "UnsupportedAttention", "register", "attention_calls"]

# The implementation a model is switched to while its calls are read: the module's own eager function,
# registered under a name of ours, since some models' "eager" bypasses the attention interface
# (GPT-2 with reorder_and_upcast_attn calls its own method) where any other name goes through it.
IMPLEMENTATION = "attnscale_eager"

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


def _model_eager(module) -> Callable:
    """The eager attention function of the module's own modeling file (Llama's repeats the key/value
    heads and takes the softmax in float32; BERT's does neither)."""
    import sys

    fn = getattr(sys.modules.get(type(module).__module__), "eager_attention_forward", None)
    if fn is None:
        config = getattr(module, "config", None)
        raise UnsupportedAttention(
            f"model: {getattr(config, 'model_type', None) or type(module).__name__} is not "
            f"supported: {type(module).__name__} has no eager_attention_forward in its "
            "modeling module to compute the probabilities with"
        )
    return fn


def _eager(module, query, key, value, attention_mask, *args, **kwargs):
    """:data:`IMPLEMENTATION`: the module's own eager function, as ``attn_implementation="eager"`` runs it."""
    return _model_eager(module)(module, query, key, value, attention_mask, *args, **kwargs)


def register() -> str:
    """Register :data:`IMPLEMENTATION` with transformers (idempotent), with eager's mask function (the
    additive float mask: 0 = attend, the dtype's minimum = masked); returns its name."""
    require("torch", "probe")
    transformers = require("transformers", "probe")
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, eager_mask

    transformers.AttentionInterface.register(IMPLEMENTATION, _eager)
    ALL_MASK_ATTENTION_FUNCTIONS.register(IMPLEMENTATION, eager_mask)
    return IMPLEMENTATION


def _handler(model_type: str, alpha: float, on_call, names: dict[int, str]):
    """The ride's handler: each call of the model's modules (``names``) refused when it cannot be
    rebuilt, run by the model's own eager function with its scale × ``alpha``, and handed to
    ``on_call``; another model's calls pass untouched."""

    def handle(call: InterfaceCall):
        if id(call.module) not in names:
            return call.run()
        why = call.unreadable()
        if why is not None:
            raise UnsupportedAttention(f"model: {model_type} is not supported: {why}")
        scaling = call.kwargs.get("scaling")
        scaling = (call.query.shape[-1] ** -0.5 if scaling is None else scaling) * alpha
        output, weights = dataclasses.replace(call, kwargs={**call.kwargs, "scaling": scaling}).run()
        if weights is None:
            raise UnsupportedAttention(
                f"model: {model_type}: its attention returned no probabilities (another "
                "monitor in replace mode answered the call?); the probe needs them"
            )
        if on_call is not None:
            module = call.module
            name = names.get(id(module), type(module).__name__)
            bias, softcap = call.kwargs.get("position_bias"), call.kwargs.get("softcap")
            mask = call.attention_mask
            on_call(
                AttentionCall(
                    name=name,
                    q=call.query.detach(),
                    k=call.key.detach(),
                    mask=None if mask is None else mask.detach(),
                    scale=float(scaling),
                    weights=weights.detach(),
                    bias=None if bias is None else bias.detach(),
                    softcap=None if softcap is None else float(softcap),
                    qk_norm=getattr(module, "q_norm", None) is not None and getattr(module, "k_norm", None) is not None,
                    cross=any(part in name.lower() for part in CROSS_ATTENTION_NAMES),
                )
            )
        return output, weights

    return handle


@contextlib.contextmanager
def attention_calls(model, *, alpha: float = 1.0, on_call: Callable[[AttentionCall], None] | None = None):
    """While active, every attention call of ``model`` (a Hugging Face model) runs through the model's
    own eager function (:data:`IMPLEMENTATION`) with its scale multiplied by ``alpha`` and is passed
    to ``on_call``; the model's own attention implementation is restored afterwards."""
    register()
    config = getattr(model, "config", None)
    before = getattr(config, "_attn_implementation", None)
    if before is None or not hasattr(model, "set_attn_implementation"):
        raise InputError(f"model: expected a Hugging Face PreTrainedModel, got {type(model).__name__}")
    model_type = getattr(config, "model_type", None) or type(model).__name__
    refused = UnsupportedAttention(
        f"model: {model_type} is not supported: its attention ({type(model).__name__}) does not go through "
        "transformers' attention interface, so its q, k and scale cannot be captured"
    )
    can_set = getattr(model, "_can_set_attn_implementation", None)
    if before != IMPLEMENTATION:
        if can_set is not None and not can_set():  # asked anyway, transformers would log a warning
            raise refused
        model.set_attn_implementation(IMPLEMENTATION)
        if model.config._attn_implementation != IMPLEMENTATION:
            raise refused
    names = {id(m): name for name, m in model.named_modules()}
    try:
        with riding(_handler(model_type, float(alpha), on_call, names)):
            yield
    finally:
        if before != IMPLEMENTATION:
            model.set_attn_implementation(before)
