"""Data for the training experiments, generated on the fly from a seed (no downloads).

* :class:`MarkedCount` (experiment A): count the ones among k marked positions. Attention must
  spread evenly over the k marked keys to solve it; one attended key is not enough (see
  :meth:`MarkedCount.single_key_ceiling`).
* :func:`grammar_corpus` (experiment B): English-like text from a seeded probabilistic grammar, read
  one character at a time by a small LM.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from functools import lru_cache

from attnscale.errors import InputError

__all__ = ["MarkedCount", "grammar_corpus", "CharCorpus"]


@dataclass(frozen=True)
class MarkedCount:
    """Sequences of ``n_keys`` bits, ``n_marked`` of them marked, then a query token; the label is the
    number of ones among the marked bits (0 … n_marked).

    Token ids: 0/1 an unmarked bit, 2/3 a marked bit, 4 the query (always last). Unmarked bits are
    distractors: attending to them corrupts the count.

    Why it needs spread attention: the answer is the mean of the marked values times k. A head that
    puts (almost) all its weight on one marked key sees one bit, and from one bit the best possible
    accuracy is :meth:`single_key_ceiling` (for k = 4 the same as guessing the prior's mode: 0.375).
    Above it, the model must average over several marked keys, with the weights of those keys equal
    to within about 1/k (the classes are 1/k apart in the mean).
    """

    n_keys: int = 16  # bit positions the query attends over (plus itself)
    n_marked: int = 4  # marked positions
    p_one: float = 0.5  # probability of a 1 at every position

    def __post_init__(self):
        if not 1 <= self.n_marked <= self.n_keys:
            raise InputError(
                f"MarkedCount: expected 1 <= n_marked <= n_keys, got n_marked={self.n_marked}, n_keys={self.n_keys}"
            )
        if not 0.0 < self.p_one < 1.0:
            raise InputError(f"MarkedCount p_one: expected a probability in (0, 1), got {self.p_one!r}")

    vocab = 5
    query_token = 4

    @property
    def seq_len(self) -> int:
        return self.n_keys + 1

    @property
    def n_classes(self) -> int:
        return self.n_marked + 1

    def sample(self, batch: int, generator):
        """tokens: (batch, n_keys + 1) long, labels: (batch,) long, drawn with a torch.Generator."""
        import torch

        bits = (torch.rand(batch, self.n_keys, generator=generator) < self.p_one).long()
        order = torch.rand(batch, self.n_keys, generator=generator).argsort(dim=1)
        marked = order < self.n_marked  # n_marked random positions per row
        tokens = bits + 2 * marked.long()
        query = torch.full((batch, 1), self.query_token, dtype=torch.long)
        labels = (bits * marked.long()).sum(dim=1)
        return torch.cat([tokens, query], dim=1), labels

    def _prior(self) -> list[float]:
        k, p = self.n_marked, self.p_one
        return [math.comb(k, c) * p**c * (1 - p) ** (k - c) for c in range(k + 1)]

    def prior_ceiling(self) -> float:
        """Best accuracy without looking at the input: the probability of the most likely count."""
        return max(self._prior())

    def single_key_ceiling(self) -> float:
        """Best accuracy from the value of one marked bit (a head attending one marked key):
        Σ_b max_c P(count = c, bit = b), with P(bit = 1 | count = c) = c / k."""
        k = self.n_marked
        prior = self._prior()
        return sum(max(prior[c] * (c / k if b else 1 - c / k) for c in range(k + 1)) for b in (0, 1))


# --- a character corpus from a seeded grammar -------------------------------------------------------

_WORDS = {
    "Det": "the a every one this that some no each my your our their".split(),
    "Adj": (
        "old young small large quiet loud bright dark green red blue golden silver wooden stone "
        "careful hungry tired clever slow quick gentle strange distant narrow heavy empty"
    ).split(),
    "Noun": (
        "cat dog bird fox horse farmer sailor child teacher baker river mountain village garden "
        "window door lantern letter boat bridge forest road market tower song story clock king "
        "queen painter miller student stranger island kettle candle wheel"
    ).split(),
    "Verb": (
        "saw found followed carried watched painted built crossed remembered opened closed "
        "visited answered heard forgot mended lifted guarded counted named"
    ).split(),
    "IVerb": "slept waited laughed sang wandered rested listened vanished arrived returned".split(),
    "Prep": "near under behind beside across over through past beyond inside".split(),
    "Adv": "slowly quietly suddenly often never always gladly softly early late".split(),
    "Conj": "and but so while because although".split(),
    "Name": "Ada Bruno Clara Dmitri Elena Felix Greta Hugo Ines Jonas Karin Leo Mira Nils Olga Paul".split(),
    "Num": "two three four five six seven eight nine ten twelve".split(),
}


def _noun_phrase(rng: random.Random) -> str:
    roll = rng.random()
    if roll < 0.15:
        return rng.choice(_WORDS["Name"])
    if roll < 0.25:
        return f"{rng.choice(_WORDS['Num'])} {rng.choice(_WORDS['Adj'])} {rng.choice(_WORDS['Noun'])}s"
    words = [rng.choice(_WORDS["Det"])]
    while rng.random() < 0.45 and len(words) < 3:
        words.append(rng.choice(_WORDS["Adj"]))
    words.append(rng.choice(_WORDS["Noun"]))
    if rng.random() < 0.2:
        words += [rng.choice(_WORDS["Prep"]), rng.choice(_WORDS["Det"]), rng.choice(_WORDS["Noun"])]
    return " ".join(words)


def _clause(rng: random.Random) -> str:
    subject = _noun_phrase(rng)
    adverb = f" {rng.choice(_WORDS['Adv'])}" if rng.random() < 0.25 else ""
    if rng.random() < 0.3:
        rest = f"{rng.choice(_WORDS['IVerb'])}{adverb}"
        if rng.random() < 0.5:
            rest += f" {rng.choice(_WORDS['Prep'])} {_noun_phrase(rng)}"
    else:
        rest = f"{rng.choice(_WORDS['Verb'])} {_noun_phrase(rng)}{adverb}"
    return f"{subject} {rest}"


def _sentence(rng: random.Random) -> str:
    text = _clause(rng)
    if rng.random() < 0.3:
        text += f", {rng.choice(_WORDS['Conj'])} {_clause(rng)}"
    end = "?" if rng.random() < 0.1 else "."
    return text[0].upper() + text[1:] + end


@lru_cache(maxsize=4)
def grammar_corpus(n_chars: int = 200_000, seed: int = 0) -> str:
    """About ``n_chars`` characters of sentences from a seeded probabilistic grammar (same seed, same
    text), in paragraphs of a few sentences. Local structure (spelling, agreement of "s" plurals,
    capitals after a full stop) is learnable by a 2-layer LM in a few hundred steps; the rest is noise.
    """
    if n_chars < 1000:
        raise InputError(f"grammar_corpus n_chars: expected at least 1000, got {n_chars}")
    rng = random.Random(seed)
    parts: list[str] = []
    size = 0
    while size < n_chars:
        paragraph = " ".join(_sentence(rng) for _ in range(rng.randint(2, 6))) + "\n"
        parts.append(paragraph)
        size += len(paragraph)
    return "".join(parts)[:n_chars]


class CharCorpus:
    """A text as character ids, split into train (first 90 %) and validation (last 10 %)."""

    def __init__(self, text: str):
        import torch

        self.chars = sorted(set(text))
        index = {c: i for i, c in enumerate(self.chars)}
        ids = torch.tensor([index[c] for c in text], dtype=torch.long)
        cut = int(0.9 * len(ids))
        self.train, self.valid = ids[:cut], ids[cut:]

    @property
    def vocab(self) -> int:
        return len(self.chars)

    @staticmethod
    def windows(ids, starts, context: int):
        """Inputs and next-character targets, each (len(starts), context)."""
        import torch

        offsets = torch.arange(context + 1)
        chunk = ids[starts[:, None] + offsets]  # (B, context + 1)
        return chunk[:, :-1], chunk[:, 1:]

    def batch(self, split: str, batch: int, context: int, generator):
        """A random batch of windows from ``split`` ("train" or "valid"), drawn with ``generator``."""
        import torch

        ids = self.train if split == "train" else self.valid
        starts = torch.randint(0, len(ids) - context - 1, (batch,), generator=generator)
        return self.windows(ids, starts, context)
