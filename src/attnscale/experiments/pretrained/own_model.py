"""The user's own model: a folder holding a transformers checkpoint or a ``.gguf`` file
(:func:`load_local`, loaded in float32 with ``local_files_only``, its memory estimated from its config
and a model that would not fit refused), or an already-loaded model and tokenizer (:func:`wrap`); the
name its results are kept under (:func:`result_name`); its family (encoder, decoder,
encoder-decoder) read from its config."""

from __future__ import annotations

import hashlib
import os
import re
import struct
import time
from pathlib import Path

from attnscale.errors import InputError, require
from attnscale.experiments.pretrained.loaded import (
    MODELS,
    WEIGHTS_FILE,
    LoadedModel,
    offline_transformers,
    quiet_gguf_progress,
    sha256_of,
)

# Bytes of memory per parameter while loading in float32: the weights as read (a de-quantised GGUF
# state dict, or a checkpoint's tensors) and the model they are copied into, both float32.
LOAD_BYTES_PER_PARAMETER = 8


# Memory the probe itself needs besides the model (its float64 batch arrays, bounded by max_pairs).
WORKING_BYTES = 1 << 30


_CAUSAL_HEADS = ("ForCausalLM", "LMHeadModel")


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

    transformers = offline_transformers()
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
        with quiet_gguf_progress():
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
    transformers = offline_transformers()
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
        with quiet_gguf_progress():
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
    weights = path if gguf else folder / WEIGHTS_FILE
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
