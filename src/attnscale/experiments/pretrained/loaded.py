"""What loading a pretrained model gives (:class:`LoadedModel`) and what every loader of
:mod:`.loading` shares: transformers set to stay offline, GGUF reading without a progress bar, the
SHA-256 of a weights file."""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from typing import Any

from attnscale.errors import require

__all__ = [
    "MINILM",
    "SMOLLM2",
    "MODELS",
    "FAMILIES",
    "WEIGHTS_FILE",
    "LoadedModel",
    "offline_transformers",
    "quiet_gguf_progress",
    "sha256_of",
]

# The bundled models (:mod:`.pinned`), by their own names; and by the CLI's --model names.
MINILM = "all-MiniLM-L6-v2"
SMOLLM2 = "SmolLM2-135M-Instruct"
MODELS = {"minilm": MINILM, "smollm2": SMOLLM2}
# A transformers checkpoint's weights file in its folder.
WEIGHTS_FILE = "model.safetensors"
# How a model computes: an encoder (bidirectional), a decoder (causal LM), an encoder-decoder (seq2seq).
FAMILIES = ("encoder", "decoder", "encoder-decoder")


@dataclass
class LoadedModel:
    model: Any  # transformers model, eval mode
    tokenizer: Any
    name: str  # "all-MiniLM-L6-v2", "SmolLM2-135M-Instruct" or the folder given
    folder: str
    version: str | None  # the model package's version (None for a local folder)
    sha256: str | None  # of the weights file that was loaded
    causal: bool = False  # a decoder: each query attends itself and the keys before it
    weights_note: str = ""  # how the weights differ from the published ones ("" = they do not)
    seconds: float = 0.0  # time taken to check and load
    family: str = ""  # one of FAMILIES ("" = from causal: "decoder" or "encoder")
    user: bool = False  # the user's own model (results of kind probe/user/<key>), not a bundled one
    key: str = ""  # the user's model: its results' name, <key> above (see result_name)
    path: str | None = None  # the user's model: the absolute path it was loaded from (None: a notebook's)

    def __post_init__(self):
        if not self.family:
            self.family = "decoder" if self.causal else "encoder"


def sha256_of(path: str | os.PathLike, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def offline_transformers():
    # Set before transformers is imported, so nothing it does can reach for the hub.
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    require("torch", "probe")
    transformers = require("transformers", "probe")
    transformers.utils.logging.disable_progress_bar()  # the library never prints
    return transformers


def quiet_gguf_progress():
    """transformers' GGUF reader draws a tqdm bar of its own (not behind its logging switch)."""
    import contextlib
    from unittest import mock

    try:
        import transformers.modeling_gguf_pytorch_utils as gguf_utils
    except ImportError:
        return contextlib.nullcontext()
    if not hasattr(gguf_utils, "tqdm"):
        return contextlib.nullcontext()
    return mock.patch.object(gguf_utils, "tqdm", lambda iterable, *a, **k: iterable)
