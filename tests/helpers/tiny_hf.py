"""Tiny random-weight Hugging Face models (transformers configs, nothing downloaded): the one Llama
shape most tests use, written once. transformers is imported when a config is built, never when a
test module is collected."""

from __future__ import annotations

# 2 layers, 4 query heads on 2 key/value heads (groups of 2), head size 8: grouped-query attention,
# RoPE and a causal mask in a model that runs in milliseconds.
TINY_LLAMA = {
    "vocab_size": 50,
    "hidden_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "intermediate_size": 64,
}


def llama_config(**overrides):
    """``transformers.LlamaConfig`` of the tiny Llama (:data:`TINY_LLAMA`), with ``overrides``."""
    import transformers

    return transformers.LlamaConfig(**{**TINY_LLAMA, **overrides})
