"""The seed's claims as a register: for each claim id, in the order the checks run them, the seed's
chapter, how it is checked (``method``) and the number the seed prints (``seed_value``; None = it
prints none). Those are data; the claim's words are not here: each check states its claim where it
builds the row, in English, with :func:`claim` (its Chinese is in ``attnscale/i18n/zh.po``)::

    ctx.add(claim("S8.5", N_("with SSMax (logits × s·ln n, s = {s}) the max weight stays near 1 as n grows"),
                  s="0.43", expected=..., measured=..., verdict=..., note=...))

Where a statement quotes a value the code holds (a printed number it judges, a case's parameters,
SSMax's s), it has a ``{named}`` placeholder and the check passes the value by name; a
``seed_value`` may have placeholders too (``"{seed}"``: the numbers the row judges). A value, or a
computed text (``expected``, ``measured``, ``note``), is either language-neutral (numbers: a ``str``)
or worded per language: a function of no argument (``lambda: _("...", ...)``), called once in each
language bound (:func:`attnscale.i18n.language`). Keywords that are fields of :class:`ClaimResult` are the row's computed fields; every
other keyword is a placeholder's value.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import NamedTuple

from attnscale.claims.result import CHAPTERS, METHODS, WORDED, ClaimResult
from attnscale.i18n import LANGS, _, language
from attnscale.i18n.extract import placeholders

FIXED = ("id", "chapter", "claim_en", "claim_zh", "seed_value", "method")  # the statement's fields
COMPUTED = tuple(f.name for f in dataclasses.fields(ClaimResult) if f.name not in FIXED and not f.name.endswith("_zh"))


class Entry(NamedTuple):
    chapter: str  # one of CHAPTERS
    method: str  # one of METHODS
    seed_value: str | None = None  # the number the seed prints, verbatim, with {placeholders} of the check


class RegisterError(LookupError):
    """A claim id is not in the register, or a check passes the wrong values for its placeholders."""


# A Python table rather than a catalog file: the fields are constants the code checks (below, at
# import), not words to translate.
REGISTER: dict[str, Entry] = {
    "S1.1": Entry("softmax_large", "exact arithmetic", "{seed}"),
    "S1.2": Entry("softmax_large", "exact arithmetic", "{seed}"),
    "S1.3": Entry("softmax_large", "exact arithmetic", "{seed}"),
    "S1.4": Entry("softmax_large", "exact arithmetic", "{seed}"),
    "S1.5": Entry("softmax_large", "exact arithmetic", "{seed}"),
    "S1.6": Entry("softmax_large", "exact arithmetic", "{seed}"),
    "S1.7": Entry("softmax_large", "exact arithmetic", "{seed}"),
    "S1.8": Entry("softmax_large", "exact arithmetic", "{seed}"),
    "S1.9": Entry("softmax_large", "exact arithmetic", "{seed}"),
    "S1.10": Entry("softmax_large", "exact arithmetic", "{seed}"),
    "S1.11": Entry("softmax_large", "exact arithmetic", "{seed}"),
    "S1.12": Entry("softmax_large", "exact arithmetic", "{seed}"),
    "S1.13": Entry("softmax_large", "exact arithmetic", "{seed}"),
    "S1.14": Entry("softmax_large", "exact arithmetic", "{seed}"),
    "S1.15": Entry("softmax_large", "exact arithmetic", "{seed}"),
    "S1.16": Entry("real_numbers", "exact arithmetic", "1, 2, 0.5"),
    "S1.17": Entry("real_numbers", "exact arithmetic", "{seed}"),
    "S1.18": Entry("real_numbers", "exact arithmetic", "{seed}"),
    "S1.19": Entry("real_numbers", "exact arithmetic", "{seed}"),
    "S1.20": Entry("real_numbers", "exact arithmetic", "{seed}"),
    "S1.21": Entry("real_numbers", "exact arithmetic", "{seed}"),
    "S1.22": Entry("real_numbers", "exact arithmetic", "{seed}"),
    "S1.23": Entry("real_numbers", "exact arithmetic", "8; 1.75, 1.25, 1.5"),
    "S1.24": Entry("real_numbers", "exact arithmetic", "{seed}"),
    "S1.25": Entry("real_numbers", "exact arithmetic", "{seed}"),
    "S1.26": Entry("real_numbers", "exact arithmetic", "{seed}"),
    "S1.27": Entry("real_numbers", "exact arithmetic", "{seed}"),
    "S1.28": Entry("real_numbers", "exact arithmetic", "{seed}"),
    "S1.29": Entry("real_numbers", "exact arithmetic", "{seed}"),
    "S1.36": Entry("real_numbers", "exact arithmetic", "{seed}"),
    "S1.30": Entry("why_sqrt", "exact arithmetic", "{mean}; {diffs}; {squares}; {variance}"),
    "S1.31": Entry("why_sqrt", "exact arithmetic", "{mean}; {diffs}; {squares}; {variance}"),
    "S1.32": Entry("why_sqrt", "exact arithmetic", "4; 0.67"),
    "S1.33": Entry("proof", "exact arithmetic", "9 = 3 + 6; 3·1 + 6·0 = 3"),
    "S1.34": Entry("proof", "exact arithmetic", "4096 = 64 + 4032; variance 64"),
    "S1.35": Entry("formula", "closed form"),
    "S2.1": Entry("proof", "symbolic"),
    "S2.2": Entry("variance", "symbolic", "0; 1 x 1 = 1"),
    "S2.3": Entry("why_grows", "Monte Carlo"),
    "S2.4": Entry("variance", "Monte Carlo", "d_k"),
    "S2.5": Entry("variance", "Monte Carlo", "d_k"),
    "S2.6": Entry("variance", "Monte Carlo", "d_k"),
    "S2.7": Entry("variance", "Monte Carlo", "d_k"),
    "S3.1": Entry("beyond", "symbolic"),
    "S3.2": Entry("beyond", "symbolic"),
    "S3.3": Entry("beyond", "Monte Carlo"),
    "S3.4": Entry("beyond", "Monte Carlo"),
    "S3.5": Entry("beyond", "Monte Carlo"),
    "S3.6": Entry("beyond", "Monte Carlo"),
    "S4.1": Entry("why_sqrt", "symbolic", "d_k / c^2"),
    "S4.2": Entry("why_sqrt", "symbolic", "c = sqrt(d_k)"),
    "S4.3": Entry("why_sqrt", "Monte Carlo", "d_k / d_k = 1"),
    "S5.1": Entry("without_scaling", "Monte Carlo"),
    "S5.2": Entry("without_scaling", "Monte Carlo", "1.0"),
    "S5.3": Entry("without_scaling", "Monte Carlo"),
    "S5.4": Entry("why_sqrt", "Monte Carlo"),
    "S6.1": Entry("without_scaling", "Monte Carlo"),
    "S6.4": Entry("without_scaling", "Monte Carlo", "64"),
    "S6.2": Entry("why_sqrt", "Monte Carlo"),
    "S6.3": Entry("without_scaling", "Monte Carlo"),
    "S7.1": Entry("faq", "Monte Carlo"),
    "S7.2": Entry("faq", "Monte Carlo", "1 → 0.5"),
    "S7.4": Entry("faq", "Monte Carlo"),
    "S7.3": Entry("faq", "Monte Carlo", "d_k"),
    "S8.1": Entry("beyond", "Monte Carlo"),
    "S8.2": Entry("beyond", "Monte Carlo"),
    "S8.3": Entry("beyond", "Monte Carlo"),
    "S8.4": Entry("beyond", "exact arithmetic"),
    "S8.5": Entry("beyond", "closed form"),
    "S8.6": Entry("beyond", "closed form"),
    "S8.7": Entry("beyond", "Monte Carlo"),
    "S8.8": Entry("beyond", "Monte Carlo", "{entropy_1}, {entropy_sqrt}; {max_weight_1}"),
    "S8.9": Entry("beyond", "Monte Carlo", "{published}"),
    "S9.1": Entry("without_scaling", "closed form", "1"),
    "S9.2": Entry("beyond", "closed form"),
    "S10.1": Entry("softmax_large", "training results"),
    "S10.2": Entry("why_sqrt", "training results"),
    "S10.3": Entry("variance", "model probe", "0; 1"),
    "S10.4": Entry("without_scaling", "model probe", "64, 128"),
    "S10.5": Entry("faq", "citation"),
}


def check_register(register: dict[str, Entry]) -> dict[str, Entry]:
    """``register`` unchanged when every entry has a known chapter and method, and a seed_value whose
    placeholders are not named like a field of ClaimResult; else :class:`RegisterError` naming the id."""
    for cid, entry in register.items():
        if entry.chapter not in CHAPTERS:
            raise RegisterError(f"claim {cid!r} chapter: expected one of {CHAPTERS}, got {entry.chapter!r}")
        if entry.method not in METHODS:
            raise RegisterError(f"claim {cid!r} method: expected one of {METHODS}, got {entry.method!r}")
        clash = sorted(placeholders(entry.seed_value or "") & set(FIXED + COMPUTED))
        if clash:
            raise RegisterError(
                f"claim {cid!r} seed_value: the placeholder {{{clash[0]}}} is named like a field of ClaimResult"
            )
    return register


check_register(REGISTER)

Worded = Callable[[], str]  # a text worded in the bound language: called once in each language


def _in(value):
    """``value`` in the bound language: a :data:`Worded` value is called, any other is language-neutral."""
    return value() if callable(value) else value


def claim(cid: str, statement: str, /, **given) -> ClaimResult:
    """The row of claim ``cid``: the ``statement`` (an English message, marked with ``N_``) in every
    language with its placeholders filled from the keywords that are not ClaimResult fields, the
    register's fields, and the computed fields from those that are."""
    entry = REGISTER.get(cid)
    if entry is None:
        raise RegisterError(f"claim {cid!r}: not in the register (attnscale.claims.register.REGISTER)")
    fields = {k: v for k, v in given.items() if k in COMPUTED}
    values = {k: v for k, v in given.items() if k not in COMPUTED}
    wanted = placeholders(statement) | placeholders(entry.seed_value or "")
    if set(values) != wanted:
        raise RegisterError(f"claim {cid!r} has the placeholders {sorted(wanted)}, the check passed {sorted(values)}")
    filled, said = {}, {}
    for lang in LANGS:  # a row holds its words in every language, whichever is bound
        with language(lang):
            filled[lang] = {k: _in(v) for k, v in values.items()}
            said[lang] = _(statement, **filled[lang])
    with language("zh"):
        worded = {f"{k}_zh": fields[k]() for k in WORDED if callable(fields.get(k))}  # a neutral text is one text
    with language("en"):
        fields = {k: _in(v) for k, v in fields.items()}
    return ClaimResult(
        id=cid,
        chapter=entry.chapter,
        method=entry.method,
        claim_en=said["en"],
        claim_zh=said["zh"],
        seed_value=None if entry.seed_value is None else entry.seed_value.format(**filled["en"]),
        **fields,
        **worded,
    )
