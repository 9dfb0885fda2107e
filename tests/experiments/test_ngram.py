"""The n-gram baselines: exact on a periodic text whose entropies are known by hand, k chosen on the
training part alone, bad input named."""

from __future__ import annotations

import math

import numpy as np
import pytest

from attnscale.errors import InputError
from attnscale.experiments.training import ngram


def _periodic(text: bytes, repeats: int) -> np.ndarray:
    return np.frombuffer(text * repeats, dtype=np.uint8)


def test_periodic_text_has_the_entropies_counted_by_hand():
    """ "abac" repeated: bytes a ½, b ¼, c ¼ (1.5 bits); after a, b or c equally and after b or c
    always a (½ bit per byte); two bytes of context fix the next one (0 bits). Add-k with the
    smallest k of the grid is within 1e-4 bit of each (the held-out tail picks it)."""
    text = _periodic(b"abac", 5000)
    train, valid = text[:18000], text[18000:]
    rows = {r["order"]: r for r in ngram.baselines(train, valid, orders=(1, 2, 3))}
    assert rows[1]["bpb"] == pytest.approx(1.5, abs=1e-4)
    assert rows[2]["bpb"] == pytest.approx(0.5, abs=1e-4)
    assert rows[3]["bpb"] == pytest.approx(0.0, abs=1e-4)
    assert rows[3]["k"] == ngram.K_GRID[0] and rows[3]["k_at_edge"]


def test_add_k_probability_is_the_closed_form():
    """One context seen n times, one continuation m of those: p = (m + k) / (n + 256 k)."""
    train = np.frombuffer(b"abababac", dtype=np.uint8)  # after a: b three times, c once
    model = ngram.NGramModel(train, 2, 0.5)
    data = np.frombuffer(b"ab", dtype=np.uint8)
    assert model.bits(data, np.array([1])) == pytest.approx(-math.log2((3 + 0.5) / (4 + 256 * 0.5)), rel=1e-12)
    unseen = np.frombuffer(b"zq", dtype=np.uint8)  # a context never seen: uniform
    assert model.bits(unseen, np.array([1])) == pytest.approx(8.0, rel=1e-12)


def test_k_is_chosen_on_the_training_part_only():
    """The validation bytes never choose k: a validation part that would want another k gets the same k."""
    rng = np.random.default_rng(0)
    train = rng.integers(0, 4, 20000).astype(np.uint8)
    a = ngram.baselines(train, rng.integers(0, 4, 2000).astype(np.uint8), orders=(2,))[0]
    b = ngram.baselines(train, rng.integers(0, 256, 2000).astype(np.uint8), orders=(2,))[0]
    assert a["k"] == b["k"] and a["bpb"] < b["bpb"]


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: ngram.NGramModel(np.zeros(10, np.uint8), 0, 0.1), "^order:"),
        (lambda: ngram.NGramModel(np.zeros(10, np.uint8), 2, 0.0), "^k:"),
        (lambda: ngram.NGramModel(np.zeros(2, np.uint8), 3, 0.1), "^train:"),
        (
            lambda: ngram.NGramModel(np.zeros(10, np.uint8), 3, 0.1).bits(np.zeros(10, np.uint8), np.array([1])),
            "^positions:",
        ),
    ],
)
def test_bad_input_is_named(make, message):
    with pytest.raises(InputError, match=message):
        make()
