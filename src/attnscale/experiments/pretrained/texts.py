"""The probe's texts and what their tokens are: the built-in sentences (:func:`builtin_sentences`), a
file of them (:func:`read_texts`), and per batch the masks of the attention-sink candidates
(:func:`key_kinds`: the first real token, the tokenizer's special tokens, punctuation)."""

from __future__ import annotations

import unicodedata
from importlib import resources

import numpy as np

from attnscale.errors import InputError

__all__ = ["builtin_sentences", "read_texts", "punctuation_ids", "key_kinds"]


def builtin_sentences() -> list[str]:
    """The built-in varied English sentences, one per line of the package's sentences.txt."""
    text = resources.files("attnscale.experiments.pretrained").joinpath("sentences.txt").read_text(encoding="utf-8")
    return [line for line in text.splitlines() if line.strip()]


def read_texts(path) -> list[str]:
    """One sequence per line of a UTF-8 file; blank lines skipped; lines are never split or joined."""
    try:
        with open(path, encoding="utf-8") as f:
            texts = [line.rstrip("\r\n") for line in f if line.strip()]
    except (OSError, UnicodeDecodeError) as err:
        raise InputError(f"text: cannot read {str(path)!r} as UTF-8 text: {err}") from None
    if not texts:
        raise InputError(f"text: expected at least one non-blank line in {str(path)!r}, got none")
    return texts


def _is_punctuation(token: str) -> bool:
    # WordPiece marks word-inner pieces with "##", byte-level BPE a leading space with "Ġ".
    token = token.removeprefix("##").removeprefix("Ġ")
    return bool(token) and all(unicodedata.category(c).startswith("P") for c in token)


def punctuation_ids(tokenizer) -> np.ndarray:
    """Bool (vocabulary size,): which token ids are punctuation."""
    return np.array([_is_punctuation(t) for t in tokenizer.convert_ids_to_tokens(list(range(len(tokenizer))))])


def key_kinds(tokenizer, vocab_punct: np.ndarray, input_ids: np.ndarray, valid: np.ndarray) -> dict:
    """Bool (B, S) masks of the sink candidates: the first real token, the special tokens the
    tokenizer defines ([CLS], [SEP], BOS), punctuation."""
    first = np.zeros_like(valid)
    first[np.arange(len(valid)), valid.argmax(axis=1)] = True
    kinds = {"first": first}
    for name, token_id in (
        ("cls", tokenizer.cls_token_id),
        ("sep", tokenizer.sep_token_id),
        ("bos", tokenizer.bos_token_id),
    ):
        if token_id is not None:
            kinds[name] = (input_ids == token_id) & valid
    kinds["punct"] = vocab_punct[input_ids] & valid
    return kinds
