"""The seed's claims as a register: what each claim states, read from ``claims.toml`` beside this
module (read once, validated). This module is its only reader.

A claim's statement is fixed: its id, the seed's chapter, the claim in English and in Chinese, the
number the seed prints (``seed_value``; absent = it prints none) and how it is checked (``method``).
The checks compute the rest and build the row with :func:`claim`::

    ctx.add(claim("S9.2", expected=..., measured=..., verdict=..., note=...))

Where a statement quotes a value the code holds (a printed number it judges, a case's parameters,
SSMax's s), the register's text has a ``{named}`` slot and the code passes the value by name:
``claim("S8.5", s="0.43", expected=...)``. A slot's value is a string, or ``{"en": ..., "zh": ...}``
where the languages word it differently (a case's name). Keywords that are fields of
:class:`ClaimResult` are the row's computed fields; every other keyword is a slot. Literal braces in
the register are doubled.
"""

from __future__ import annotations

import dataclasses
import functools
import re
import tomllib
from importlib import resources

from attnscale.claims.result import CHAPTERS, METHODS, ClaimResult
from attnscale.templates import template_slots

REGISTER = "claims.toml"
LANGS = ("en", "zh")
FIXED = ("id", "chapter", "claim_en", "claim_zh", "seed_value", "method")   # the statement's fields
COMPUTED = tuple(f.name for f in dataclasses.fields(ClaimResult) if f.name not in FIXED)
KEYS = ("chapter", "method", "seed_value", "en", "zh")                      # an entry's keys


class RegisterError(LookupError):
    """A claim id is not in the register, the register is malformed, or a check passes the wrong slots."""


def slots(entry: dict) -> set[str]:
    """The slots a check fills in a register entry: those of its text and of its seed_value."""
    return template_slots(entry["en"]) | template_slots(entry.get("seed_value") or "")


def check_register(register: dict, source: str = REGISTER) -> dict:
    """``register`` unchanged when every entry has a known chapter and method, English and Chinese
    with the same ``{slots}``, none named like a field of ClaimResult, and a seed_value if any; else
    :class:`RegisterError` naming ``source``, the id and the field."""
    for cid, entry in register.items():
        where = f"{source}: [{cid!r}]"
        if not isinstance(entry, dict):
            raise RegisterError(f"{where}: expected a table with {', '.join(KEYS)}")
        unknown = sorted(set(entry) - set(KEYS))
        if unknown:
            raise RegisterError(f"{where}: unknown field {unknown[0]!r}; an entry has {', '.join(KEYS)}")
        if entry.get("chapter") not in CHAPTERS:
            raise RegisterError(f"{where} chapter: expected one of {CHAPTERS}, got {entry.get('chapter')!r}")
        if entry.get("method") not in METHODS:
            raise RegisterError(f"{where} method: expected one of {METHODS}, got {entry.get('method')!r}")
        found = {}
        for field in (*LANGS, "seed_value"):
            text = entry.get(field)
            if text is None and field == "seed_value":
                continue
            if not isinstance(text, str) or not text:
                raise RegisterError(f"{where} {field}: expected a non-empty text, got {text!r}")
            try:
                found[field] = template_slots(text)
            except ValueError as err:      # a lone brace; a literal one is written {{ or }}
                raise RegisterError(f"{where} {field}: {err}") from None
        if found["en"] != found["zh"]:
            raise RegisterError(f"{where} zh: its {{slots}} {sorted(found['zh'])} differ from en's {sorted(found['en'])}")
        for field, names in found.items():
            clash = sorted(names & set(FIXED + COMPUTED))
            if clash:
                raise RegisterError(f"{where} {field}: the slot {{{clash[0]}}} is named like a field of ClaimResult")
    return register


_HEADER = re.compile(r'^\[\s*"([^"]*)"\s*\]', re.MULTILINE)


def parse_register(text: str, source: str = REGISTER) -> dict:
    """The register's TOML, checked (:func:`check_register`); an id given twice is refused naming it."""
    ids = _HEADER.findall(text)
    twice = sorted({cid for cid in ids if ids.count(cid) > 1})
    if twice:
        raise RegisterError(f"{source}: [{twice[0]!r}] id: given twice")
    try:
        return check_register(tomllib.loads(text), source)
    except tomllib.TOMLDecodeError as err:
        raise RegisterError(f"{source}: {err}") from None


@functools.cache
def register() -> dict:
    """The parsed, checked register {id: entry}, in the order the claims are run (read once)."""
    text = resources.files(__package__).joinpath(REGISTER).read_text(encoding="utf-8")
    return parse_register(text)


def _fill(text: str | None, values: dict, lang: str) -> str | None:
    if text is None:
        return None
    return text.format(**{k: v[lang] if isinstance(v, dict) else v for k, v in values.items()})


def claim(cid: str, /, **given) -> ClaimResult:
    """The row of claim ``cid``: its statement from the register, its ``{slots}`` filled from the
    keywords that are not ClaimResult fields, and the computed fields from those that are."""
    entry = register().get(cid)
    if entry is None:
        raise RegisterError(f"{REGISTER}: no claim {cid!r}")
    fields = {k: v for k, v in given.items() if k in COMPUTED}
    values = {k: v for k, v in given.items() if k not in COMPUTED}
    wanted = slots(entry)
    if set(values) != wanted:
        raise RegisterError(f"{REGISTER}: claim {cid!r} has the slots {sorted(wanted)}, the check passed "
                            f"{sorted(values)}")
    bad = [k for k, v in values.items() if isinstance(v, dict) and set(v) != set(LANGS)]
    if bad:
        raise RegisterError(f"claim {cid!r}: slot {bad[0]!r} given as a table needs exactly {LANGS}")
    return ClaimResult(id=cid, chapter=entry["chapter"], method=entry["method"],
                       claim_en=_fill(entry["en"], values, "en"),
                       claim_zh=_fill(entry["zh"], values, "zh"),
                       seed_value=_fill(entry.get("seed_value"), values, "en"),
                       **fields)
