"""Byte n-gram baselines: what counting the training bytes alone predicts about the validation bytes.

An order-n model predicts a byte from the n − 1 bytes before it, by add-k smoothed counts over the
training bytes::

    p(x | c) = (count(c, x) + k) / (count(c) + 256 k)

(a context never seen gives the uniform 1/256). ``k`` is chosen per order on the training part
alone: the counts of its first ``1 − HELD_OUT`` fraction score its last ``HELD_OUT`` fraction, for
every k of :data:`K_GRID`, and the best k is then used with the counts of the whole training part.
Cross-entropy in bits per byte, on the byte positions asked for, each with its true preceding bytes
(a validation byte's context may reach back into the training bytes, which precede it in the text).
"""

from __future__ import annotations

import numpy as np

from attnscale.errors import InputError, check_count

__all__ = ["K_GRID", "HELD_OUT", "NGramModel", "fit", "baselines"]

VOCAB = 256
#: The add-k constants tried (a log grid from 1e-6 to 3).
K_GRID = tuple(float(f"{m}e{e}") for e in range(-6, 1) for m in (1, 3))
HELD_OUT = 0.1


def _codes(data: np.ndarray, order: int, positions: np.ndarray) -> np.ndarray:
    """For each position i (i ≥ order − 1): the (order − 1)-byte context and the byte at i as one
    integer, context bytes most significant. data: (N,) uint8; positions: (P,) int -> (P,) int64."""
    code = np.zeros(len(positions), dtype=np.int64)
    for back in range(order - 1, -1, -1):
        code = code * VOCAB + data[positions - back].astype(np.int64)
    return code


class NGramModel:
    """Add-k counts of one order over a training byte string. train: (N,) uint8."""

    def __init__(self, train: np.ndarray, order: int, k: float):
        check_count("order", order)
        if not k > 0:
            raise InputError(f"k: expected a positive smoothing constant, got {k!r}")
        if len(train) < order:
            raise InputError(f"train: expected at least order={order} bytes, got {len(train)}")
        self.order, self.k = order, k
        joint = _codes(train, order, np.arange(order - 1, len(train)))
        self.joint, self.joint_n = np.unique(joint, return_counts=True)
        self.context, self.context_n = np.unique(joint // VOCAB, return_counts=True)

    @staticmethod
    def _lookup(keys: np.ndarray, counts: np.ndarray, query: np.ndarray) -> np.ndarray:
        at = np.searchsorted(keys, query).clip(max=len(keys) - 1)
        return np.where(keys[at] == query, counts[at], 0).astype(np.float64)

    def bits(self, data: np.ndarray, positions: np.ndarray) -> float:
        """Mean −log₂ p(data[i] | the order − 1 bytes before i) over ``positions`` (each ≥ order − 1)."""
        positions = np.asarray(positions, dtype=np.int64)
        if len(positions) == 0 or positions.min() < self.order - 1 or positions.max() >= len(data):
            raise InputError(
                f"positions: expected indices in [{self.order - 1}, {len(data)}), got "
                f"{len(positions)} of them in [{positions.min(initial=0)}, {positions.max(initial=0)}]"
            )
        joint = _codes(data, self.order, positions)
        num = self._lookup(self.joint, self.joint_n, joint) + self.k
        den = self._lookup(self.context, self.context_n, joint // VOCAB) + VOCAB * self.k
        return float(-np.log2(num / den).mean())


def fit(train: np.ndarray, order: int) -> tuple[NGramModel, dict]:
    """The add-k model of ``order`` on ``train``, k chosen on its held-out tail; and the choice
    (``k``, its held-out bits, and whether it lies at the edge of :data:`K_GRID`)."""
    cut = int(round(len(train) * (1 - HELD_OUT)))
    head = train[:cut]
    tail_positions = np.arange(max(cut, order - 1), len(train))
    held = {k: NGramModel(head, order, k).bits(train, tail_positions) for k in K_GRID}
    k = min(K_GRID, key=held.__getitem__)
    return NGramModel(train, order, k), {"k": k, "held_out_bpb": held[k], "k_at_edge": k in (K_GRID[0], K_GRID[-1])}


def baselines(train: np.ndarray, valid: np.ndarray, orders=(1, 2, 3, 4), positions=None) -> list[dict]:
    """Per order: bits per byte of the validation bytes (all of them, or the indices ``positions``
    into ``valid``), with the chosen k. train, valid: consecutive parts of one text, uint8."""
    text = np.concatenate([train, valid])
    where = np.arange(len(valid)) if positions is None else np.asarray(positions, dtype=np.int64)
    rows = []
    for order in orders:
        model, choice = fit(train, order)
        rows.append({"order": order, "bpb": model.bits(text, where + len(train)), **choice})
    return rows
