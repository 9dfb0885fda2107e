"""Prose helpers of the report that every part of it shares: typography (:func:`pretty`), a scale
rule's name (:func:`rule_label`) and a list in prose (:func:`listed`). The words themselves are
gettext messages written where they are used (:mod:`attnscale.i18n`).

Until the experiment chapters and the headline have moved their words to :mod:`attnscale.i18n`,
their sections of the old catalog ``text.toml`` are read here (:func:`words`, :func:`entry`); both
go when the last section is gone.
"""

from __future__ import annotations

import functools
import tomllib
from collections.abc import Callable
from importlib import resources

from attnscale.i18n import N_, _
from attnscale.scales import RULES, SoftCap

# A scale rule's name on the page, by the rule's name in attnscale.scales; a soft-cap's names its cap.
RULE_LABELS = {
    "inverse_sqrt_dk": N_("1/√d_k (Vaswani et al.)"),
    "unscaled": N_("unscaled"),
    "inverse_dk": N_("1/d_k (µP)"),
    "qknorm": N_("QK-norm"),
    "softcap": N_("soft-cap {cap:g} on 1/√d_k (Gemma 2)"),
    "softcap_unscaled": N_("soft-cap {cap:g}, unscaled"),
    "logn": N_("log-n (Scalable-Softmax)"),
}


def pretty(text: str) -> str:
    """Prose typography: d_k → dₖ (the source strings stay greppable ASCII)."""
    return text.replace("d_{k}", "dₖ").replace("d_k", "dₖ")


def rule_label(rule: str, lang: str, cap: float | None = None) -> str:
    """The name of the scale rule ``rule`` on the page. A soft-cap's names its cap: ``cap`` (what a
    result recorded), else the cap of the rule of that name in :data:`attnscale.scales.RULES`."""
    if rule not in RULE_LABELS:
        raise KeyError(f"rule: no label for the scale rule {rule!r}; expected one of {', '.join(RULE_LABELS)}")
    if cap is None and isinstance(RULES.get(rule), SoftCap):
        cap = RULES[rule].cap_value
    return pretty(_(RULE_LABELS[rule], lang, cap=cap))


def listed(items: list[str], lang: str) -> str:
    """``items`` as a list in prose: "4, 64 and 512", "4、64、512"."""
    if len(items) == 1:
        return items[0]
    return _(", ", lang, msgctxt="list").join(items[:-1]) + _(" and ", lang, msgctxt="list") + items[-1]


# --- the old catalog, for the sections not moved yet ----------------------------------------------

class MissingText(KeyError):
    """A section or key the code asks for is not in the catalog (or is not an entry)."""

    def __str__(self) -> str:          # KeyError would print the message in quotes
        return str(self.args[0])


@functools.cache
def catalog() -> dict:
    """The parsed ``text.toml`` (cached: read once per process)."""
    return tomllib.loads(resources.files("attnscale.report").joinpath("text.toml").read_text(encoding="utf-8"))


def entry(section: str, key: str) -> dict:
    """The entry ``key`` of ``section`` (a dotted path): its ``{"en": ..., "zh": ...}``."""
    node = catalog()
    for part in section.split("."):
        node = node.get(part) if isinstance(node, dict) else None
        if not isinstance(node, dict) or "en" in node:
            raise MissingText(f"report text: no section [{section}] in text.toml")
    found = node.get(key)
    if not isinstance(found, dict) or "en" not in found:
        raise MissingText(f"report text: no entry {key!r} in section [{section}] of text.toml")
    return found


def lookup(section: str, key: str, lang: str):
    """The string (or list of strings) of entry ``key`` of ``section`` in ``lang``, English when
    there is no translation."""
    found = entry(section, key)
    return found.get(lang) or found["en"]


def words(section: str) -> Callable[..., str]:
    """The lookup of one section, as chapters bind it: ``_t = text.words("rescale")``, then
    ``_t(key, lang, **values)`` is the entry in ``lang`` with its ``{named}`` slots formatted."""
    def _t(key: str, lang: str, **values) -> str:
        try:
            return lookup(section, key, lang).format(**values)
        except KeyError as err:
            if isinstance(err, MissingText):
                raise
            raise MissingText(f"report text: entry {key!r} of section [{section}] ({lang}) has the slot "
                              f"{{{err.args[0]}}}, which the code does not fill") from None
    return _t
