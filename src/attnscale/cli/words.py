"""The CLI's words in each language, from its one catalog ``words.toml`` (read once, validated).

``word("softmax", "scaled", "zh", s=0.125)`` → ``"logits 已乘以 --scale 0.125"``: the entry's text in
``lang`` (English where an entry has no text in that language), with its ``{slots}`` filled by
:meth:`str.format`. An unknown section or key is a :class:`CatalogError` naming it.
"""

from __future__ import annotations

import functools
import tomllib
from importlib import resources

from attnscale.templates import template_slots

LANGS = ("en", "zh")
CATALOG = "words.toml"

# Sections whose entries are Chinese only: what a scale rule is for is told to the Chinese reader,
# while the English reader has the rule's citation (see the comment in words.toml).
ZH_ONLY = frozenset({"rule_purpose"})


class CatalogError(LookupError):
    """A text the CLI asks for is not in its catalog, or the catalog is malformed."""


def check_catalog(catalog: dict, source: str = CATALOG) -> dict:
    """``catalog`` unchanged when every entry is a table of texts in :data:`LANGS` with the languages
    it needs (both, zh alone in a :data:`ZH_ONLY` section) and the same ``{slots}`` in each; else
    :class:`CatalogError` naming ``source`` and the entry."""
    for section, entries in catalog.items():
        if not isinstance(entries, dict):
            raise CatalogError(f"{source}: [{section}] is not a section of entries")
        needed = {"zh"} if section in ZH_ONLY else set(LANGS)
        for key, entry in entries.items():
            where = f"{source}: {section}.{key}"
            if not isinstance(entry, dict) or not all(isinstance(v, str) for v in entry.values()):
                raise CatalogError(f"{where}: expected a table of texts such as {{ en = \"...\", zh = \"...\" }}")
            if set(entry) - set(LANGS) or needed - set(entry):
                raise CatalogError(f"{where}: expected the languages {sorted(needed)}, got {sorted(entry)}")
            try:
                slots = {frozenset(template_slots(text)) for text in entry.values()}
            except ValueError as err:      # a lone brace; a literal one is written {{ or }}
                raise CatalogError(f"{where}: {err}") from None
            if len(slots) > 1:
                raise CatalogError(f"{where}: the languages' {{slots}} differ: "
                                   + ", ".join(f"{lang} {sorted(template_slots(t))}" for lang, t in entry.items()))
    return catalog


@functools.cache
def catalog() -> dict:
    """The parsed, checked catalog (read from the package once per process)."""
    text = resources.files(__package__).joinpath(CATALOG).read_text(encoding="utf-8")
    return check_catalog(tomllib.loads(text))


def word(section: str, key: str, lang: str = "en", **slots) -> str:
    """The text of ``section.key`` in ``lang`` (English when that language has none), its ``{slots}``
    filled from ``slots`` (every slot it has must be given)."""
    entries = catalog().get(section)
    if entries is None:
        raise CatalogError(f"{CATALOG}: no section [{section}]; sections: {', '.join(sorted(catalog()))}")
    entry = entries.get(key)
    if entry is None:
        raise CatalogError(f"{CATALOG}: no entry {section}.{key}; [{section}] has {', '.join(entries)}")
    text = entry.get(lang) or entry.get("en")
    if text is None:
        raise CatalogError(f"{CATALOG}: {section}.{key} has no text in {lang!r} and no English to fall back on")
    try:
        return text.format(**slots)
    except KeyError as err:
        raise CatalogError(f"{CATALOG}: {section}.{key} needs the slot {{{err.args[0]}}}") from None
