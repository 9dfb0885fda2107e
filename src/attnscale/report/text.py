"""Every word of the report in English and Chinese (the language of the blog post it checks), read
from one catalog, ``text.toml`` beside this module: interface labels, the blog post's chapters,
figure captions and labels, and each experiment chapter's words. This module is its only reader
(loaded once); the rest of the report looks strings up here by (section, key, language).

Settings of the verification are not typed in the catalog: the page fills ``{named}`` slots from its
data (:func:`facts`); literal braces are doubled. A Chinese string missing from an entry falls back
to English; a section or key missing from the catalog raises :class:`MissingText` naming both.
"""

from __future__ import annotations

import functools
import tomllib
from collections.abc import Callable
from importlib import resources
from attnscale.i18n import _

LANGS = ("en", "zh")


class MissingText(KeyError):
    """A section or key the code asks for is not in the catalog (or is not an entry)."""

    def __str__(self) -> str:          # KeyError would print the message in quotes
        return str(self.args[0])


@functools.cache
def catalog() -> dict:
    """The parsed ``text.toml`` (cached: read once per process)."""
    return tomllib.loads(resources.files("attnscale.report").joinpath("text.toml").read_text(encoding="utf-8"))


def entry(section: str, key: str) -> dict:
    """The entry ``key`` of ``section`` (a dotted path: ``"seed.formula"``): its ``{"en": ..., "zh": ...}``."""
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


def pretty(text: str) -> str:
    """Prose typography: d_k → dₖ (the source strings stay greppable ASCII)."""
    return text.replace("d_{k}", "dₖ").replace("d_k", "dₖ")


def t(key: str, lang: str) -> str:
    """The interface label ``key`` in ``lang`` (English when no translation exists)."""
    return pretty(lookup("ui", key, lang))


def rule_label(rule: str, lang: str, cap: float | None = None) -> str:
    """A scale rule's name on the page (the label "rule_<rule>"). A soft-cap's names its cap: ``cap``
    (what a result recorded), else the cap of the rule of that name in attnscale.scales."""
    if cap is None:
        from attnscale.scales import RULES, SoftCap

        named = RULES.get(rule)
        cap = named.cap_value if isinstance(named, SoftCap) else 0
    return t(f"rule_{rule}", lang).format(cap=cap)


# The blog post the verification checks (the project calls it "the seed"): named and linked on the page.
SEED_POST = {
    "title": entry("seed_post", "title"),
    "author": "Amit Shekhar",
    "published": entry("seed_post", "published"),
    "url": "https://outcomeschool.com/blog",
}


class _Facts(dict):
    """Values for the ``{named}`` slots of the prose; a slot without a value reads "…"."""

    def __missing__(self, key):
        return "…"


def facts(data: dict, lang: str, config: dict | None = None, outline: list | None = None) -> _Facts:
    """The prose's slots in ``lang``, filled from the verification's result (its settings, formatted,
    never typed here): which d_k the histograms use, which n the saturation rows have, SSMax's s, the
    range of d_k of the variance, the reading of the Jacobian's curve, the confidence level
    (``config``), the number of the blog post's chapters (``outline``)."""
    from attnscale.report.html import percent

    out = _Facts()
    if (config or {}).get("confidence") is not None:
        out["level"] = percent(config["confidence"])
    if outline:
        out["n_seed_chapters"] = str(sum(entry["part"] == "seed" for entry in outline))
    var = next(iter((data.get("variance_vs_dk") or {}).values()), None)
    if var and var.get("d_k"):
        out["var_dk_min"], out["var_dk_max"] = str(min(var["d_k"])), str(max(var["d_k"]))
    hist = data.get("dot_histograms") or {}
    dks = [str(h.get("d_k", k)) for k, h in hist.items()]
    if dks:
        out["hist_dks"] = _listed(dks, lang)
        out["n_hist"] = str(len(dks))
    ns = list((data.get("saturation") or {}).get("by_n", {}))
    if ns:
        out["sat_ns"] = _listed(ns, lang)
    out["jac_story"] = _jacobian_story(data.get("jacobian") or {}, lang)
    if (data.get("ssmax") or {}).get("s") is not None:
        out["ssmax_s"] = f'{data["ssmax"]["s"]:g}'
    return out


_pieces = words("facts")


def _listed(items: list[str], lang: str) -> str:
    """``items`` as a list in prose: "4, 64 and 512", "4、64、512"."""
    if len(items) == 1:
        return items[0]
    return _(", ", lang).join(items[:-1]) + _(" and ", lang, msgctxt="facts") + items[-1]


def _jacobian_story(jac: dict, lang: str) -> str:
    """The Jacobian caption's reading of the curve, from the verification's crossover per n (where the
    unscaled median drops below the scaled one for good) and the d_k of its peak; without them, only
    what the figure shows."""
    cross, peaks = jac.get("crossover"), jac.get("peak_d_k") or {}
    if not cross:
        return _("Compare the red (unscaled) and blue (÷√d_k) medians at each d_k.", lang)
    items = []
    for n, c in cross.items():
        peak = _(", peaks at d_k = {d_k}", lang, d_k=peaks[n]) if n in peaks else ""
        if c.get("d_k") is None:
            items.append(_("n = {n}: never below the scaled one on this grid{peak}", lang, n=n, peak=peak))
        else:
            items.append(_("n = {n}: below the scaled one from d_k = {d_k} on{peak}", lang, n=n, d_k=c["d_k"], peak=peak))
    return _("The unscaled median, per number of keys: {items}.", lang, items=_("; ", lang).join(items))


def _fill(text: str, values: dict | None) -> str:
    return pretty(text.format_map(values if values is not None else _Facts()))


def chapter_text(chapter: str, lang: str, values: dict | None = None) -> dict:
    """A blog-post chapter's title, paragraphs and (the beyond chapter) subsections [heading,
    paragraph] in ``lang`` (English when no translation exists), slots filled from ``values``
    (see :func:`facts`); ``chapter`` is an id of the verification's outline."""
    section = f"seed.{chapter}"
    keys = catalog()["seed"].get(chapter)
    if keys is None:
        raise MissingText(f"report text: no section [{section}] in text.toml")
    out = {}
    for key in keys:
        value = lookup(section, key, lang)
        out[key] = _fill(value, values) if isinstance(value, str) else [_fill(p, values) for p in value]
    return out


def caption(key: str, lang: str, values: dict | None = None) -> tuple[str, str]:
    """(alt text, caption) of the figure drawn from data block ``key``, slots filled from ``values``."""
    section = f"captions.{key}"
    return _fill(lookup(section, "alt", lang), values), _fill(lookup(section, "caption", lang), values)
