"""The model run for the probe and rescale, and its captured attention as NumPy: :func:`model_inputs`
(what of the tokenizer's output the model takes), :func:`forward` (one batch, an encoder-decoder's
decoder reading the text shifted right), :func:`arrays_of` (a captured call as float64 arrays) and
:func:`rebuilt_probabilities` (the softmax rebuilt from them, which the probe checks against the model's)."""

from __future__ import annotations

import numpy as np

from attnscale.errors import InputError

__all__ = ["model_inputs", "forward", "shifted_right", "arrays_of", "rebuilt_probabilities"]


def model_inputs(config, enc) -> dict:
    """The tokenizer's output a model of ``config`` takes: ids and attention mask, and token type ids
    only for a model with token types (BERT); another tokenizer's would be read wrongly (GPT-2 adds
    them as word embeddings) or refused (Llama)."""
    keys = ("input_ids", "attention_mask") + (("token_type_ids",) if getattr(config, "type_vocab_size", 0) else ())
    return {key: enc[key] for key in keys if key in enc}


def forward(loaded, enc: dict) -> dict:
    """Run the model on one batch; returns the decoder's input ids (None but for an encoder-decoder,
    which reads the text shifted right by one: its start token, then every token but the last)."""
    model = loaded.model
    if loaded.family != "encoder-decoder":
        model.base_model(**enc)  # no language-model head: its logits are not needed
        return None
    decoder_ids = shifted_right(model.config, enc["input_ids"], enc["attention_mask"])
    model(**enc, decoder_input_ids=decoder_ids, decoder_attention_mask=enc["attention_mask"])
    return decoder_ids


def shifted_right(config, ids, mask):
    """(B, L) → the decoder's input: the start token, then ids[:, :-1]; padding where ``mask`` is 0."""
    import torch

    start = getattr(config, "decoder_start_token_id", None)
    pad = getattr(config, "pad_token_id", None)
    if start is None or pad is None:
        raise InputError(
            f"model: {config.model_type} has no decoder_start_token_id or pad_token_id in its config; "
            "expected both for an encoder-decoder"
        )
    shifted = torch.cat([torch.full_like(ids[:, :1], start), ids[:, :-1]], dim=1)
    return torch.where(mask.bool(), shifted, torch.full_like(shifted, pad))


def arrays_of(call) -> dict:
    """A captured :class:`~attnscale.experiments.pretrained.hf_attention.AttentionCall` as the float64 NumPy
    arguments of :func:`~attnscale.experiments.pretrained.probe.stats.call_sums`: a key is attended where the additive mask is above
    ``MASKED_BELOW``; the mask's value there (0 in these models) is kept as a bias, and so is the
    model's own additive bias (T5's position bias)."""
    attended = call.attended().cpu().numpy()
    bias = None
    if call.mask is not None and call.mask.dtype.is_floating_point:
        bias = np.where(attended, call.mask.double().cpu().numpy(), 0.0)
    if call.bias is not None:
        bias = call.bias.double().cpu().numpy() + (0.0 if bias is None else bias)
    return {
        "q": call.q.double().cpu().numpy(),
        "k": call.k.double().cpu().numpy(),
        "scale": call.scale,
        "attended": attended,
        "bias": bias,
        "softcap": call.softcap,
    }


def rebuilt_probabilities(q, k, scale: float, attended, bias=None, softcap=None) -> np.ndarray:
    """float64 softmax(scale·q·kᵀ + bias) over attended keys, or softmax(cap·tanh(scale·q·kᵀ/cap) +
    bias) with a soft-cap; q: (B, H, L, d), k: (B, H_kv, S, d), each query head against key/value
    head h // (H / H_kv). Returns (B, H, L, S)."""
    from attnscale.softmax_rows import softmax

    k = np.repeat(k, q.shape[1] // k.shape[1], axis=1)
    logits = scale * (q @ np.swapaxes(k, -1, -2))
    if softcap is not None:
        logits = softcap * np.tanh(logits / softcap)
    logits = logits + (0.0 if bias is None else bias)
    return softmax(logits, np.broadcast_to(attended, logits.shape))
