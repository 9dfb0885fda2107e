"""Real English text as byte tokens, with a fixed contiguous train/validation split.

The default text is already on every machine with Python, so nothing is downloaded: the standard
library's own documentation topics (``pydoc_data.topics``, about 465 kB of English prose and code
examples in CPython 3), its entries joined in sorted key order. ``--text FILE`` trains on the user's
own UTF-8 text instead. Tokens are the text's UTF-8 bytes (256 symbols, no tokenizer to fetch), so
a loss in bits per token is a loss in bits per byte.

The split is contiguous and fixed: the first ``1 − valid_fraction`` of the bytes train, the rest
validate, so no validation window overlaps a training one.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from attnscale.errors import InputError

__all__ = ["VOCAB", "DEFAULT_TEXT", "ByteText", "load_text", "check_text_file"]

VOCAB = 256  # byte tokens
DEFAULT_TEXT = "pydoc_data.topics"


def check_text_file(path: str | os.PathLike) -> Path:
    """The path of a readable, non-empty UTF-8 file, or an :class:`InputError` naming ``--text``."""
    p = Path(path)
    if not p.exists():
        raise InputError(f"--text: {str(p)!r} does not exist; expected a UTF-8 text file")
    if p.is_dir():
        raise InputError(f"--text: {str(p)!r} is a directory; expected a UTF-8 text file")
    raw = p.read_bytes()
    if not raw:
        raise InputError(f"--text: {str(p)!r} is empty; expected a UTF-8 text file")
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise InputError(f"--text: {str(p)!r} is not UTF-8 (byte {err.start}: {err.reason})") from None
    return p


def load_text(source: str = DEFAULT_TEXT) -> bytes:
    """The bytes of ``source``: :data:`DEFAULT_TEXT` or the path of a UTF-8 file."""
    if source == DEFAULT_TEXT:
        from pydoc_data.topics import topics

        return "\n\n".join(topics[key] for key in sorted(topics)).encode("utf-8")
    return check_text_file(source).read_bytes()


@dataclass(frozen=True)
class ByteText:
    """A text split into training and validation bytes. ``train``, ``valid``: uint8 arrays."""

    train: np.ndarray
    valid: np.ndarray
    source: str

    @classmethod
    def from_source(cls, source: str = DEFAULT_TEXT, valid_fraction: float = 0.1, context: int = 1) -> ByteText:
        """Split ``source``; both parts must hold one window of ``context`` + 1 bytes (inputs and the
        next byte of each), or an :class:`InputError` names the file and the sizes."""
        if not 0 < valid_fraction < 1:
            raise InputError(f"valid_fraction: expected a number in (0, 1), got {valid_fraction!r}")
        data = np.frombuffer(load_text(source), dtype=np.uint8)
        cut = int(round(len(data) * (1 - valid_fraction)))
        text = cls(data[:cut], data[cut:], source)
        shortest = min(len(text.train), len(text.valid))
        if shortest < context + 1:
            need = math.ceil((context + 1) / min(valid_fraction, 1 - valid_fraction))
            raise InputError(
                f"--context: {context} needs {context + 1} bytes in both the training and the validation "
                f"part, but --text {source!r} has {len(data)} bytes ({len(text.train)} training, "
                f"{len(text.valid)} validation); expected at least {need} bytes or a shorter context"
            )
        return text

    def batch(self, batch: int, context: int, generator):
        """A random training batch: tokens x and next tokens y, both (batch, context) long tensors,
        windows starting anywhere in the training bytes, drawn with the torch ``generator``."""
        import torch

        starts = torch.randint(0, len(self.train) - context, (batch,), generator=generator)
        return self._windows(self.train, starts.tolist(), context)

    def validation(self, context: int, windows: int, batch: int) -> list:
        """Fixed validation batches: ``windows`` windows of ``context`` tokens spread evenly over the
        validation bytes (all of them, without overlap, when they fit), as (x, y) batches of up to
        ``batch`` windows."""
        starts = self.validation_starts(context, windows)
        return [self._windows(self.valid, starts[i : i + batch], context) for i in range(0, len(starts), batch)]

    def validation_starts(self, context: int, windows: int) -> list[int]:
        """Where the fixed validation windows start in the validation bytes (see :meth:`validation`);
        window s scores the bytes s + 1 … s + context."""
        room = len(self.valid) - context - 1
        count = max(1, min(windows, room // context + 1))
        return np.linspace(0, room, count).round().astype(int).tolist()

    @staticmethod
    def _windows(data: np.ndarray, starts: list[int], context: int):
        import torch

        rows = np.stack([data[s : s + context + 1] for s in starts]).astype(np.int64)
        block = torch.from_numpy(rows)
        return block[:, :-1], block[:, 1:]

    def unigram_bits(self) -> float:
        """The unigram baseline: cross-entropy of the validation bytes, in bits per byte, under the
        training bytes' frequencies (add-one smoothed over the 256 bytes, so none is impossible)."""
        counts = np.bincount(self.train, minlength=VOCAB).astype(np.float64) + 1.0
        logp = np.log2(counts / counts.sum())
        return float(-logp[self.valid].mean())
