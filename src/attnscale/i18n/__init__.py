"""Every word attnscale shows a person, in gettext's way: the English is written where it is used, as
a whole sentence with ``{named}`` placeholders, and its Chinese lies in the catalog ``zh.po`` beside
this module, keyed by that English (``msgid``), checked like ``msgfmt --check-format`` checks a
``python-brace-format`` entry. The page, the terminal and the claims all read it through :func:`_`,
which translates into the language bound by :func:`language` (as gettext binds a translation once, or
Django's ``activate``): each page build and each CLI run binds its language once, and the functions
between never pass it on. Outside any binding the language is English, the source language.

    >>> _("At d_k = {d_k} the logits grow.", d_k=64)
    'At d_k = 64 the logits grow.'
    >>> with language("zh"):
    ...     current_lang()
    'zh'

Where the data chooses among sentences, the choice is a table of messages marked with :func:`N_`
(found by the extraction, translated only when used) and a small pure function picks one:

    >>> VERDICT = {"learns": N_("learns"), "fails": N_("fails to learn")}
    >>> _(VERDICT["fails"])
    'fails to learn'

A message that two places translate differently carries a ``msgctxt`` (gettext's context). A
message with no Chinese in the catalog is a :class:`MissingTranslation` when asked for in Chinese,
never a silent English fallback; the test suite finds every such message first
(``tests/report/test_i18n.py``, with :mod:`attnscale.i18n.extract`).
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
from collections.abc import Iterator
from importlib import resources

__all__ = [
    "LANGS",
    "_",
    "N_",
    "Filled",
    "Message",
    "MissingTranslation",
    "TextError",
    "catalog",
    "check_lang",
    "current_lang",
    "filled",
    "language",
]

LANGS = ("en", "zh")
SOURCE_LANG = "en"


class TextError(LookupError):
    """A message cannot be shown: no translation, or a placeholder without a value."""

    def __str__(self) -> str:  # LookupError would print the message in quotes
        return str(self.args[0])


class MissingTranslation(TextError):
    """A message has no entry in the catalog of the language asked for."""


class Message(str):
    """A message marked by :func:`N_`: the English itself (a ``str``), with its gettext context."""

    context: str | None = None


def N_(message: str, msgctxt: str | None = None) -> str:
    """``message`` marked for the catalog, not translated yet: for tables of sentences chosen by data."""
    if msgctxt is None:
        return message
    marked = Message(message)
    marked.context = msgctxt
    return marked


class Filled(str):
    """A message with its placeholders filled, in English (a ``str``: shown as it is, it reads as the
    source says), that keeps the message and its values so that whoever shows it says it in the
    language bound there (:meth:`said`). For words the library hands over without showing them, such as
    a progress label: the CLI, which binds ``--lang``, shows them."""

    message: str = ""
    values: dict = {}

    def said(self) -> str:
        """The message in the bound language, its values filled (a value that is itself Filled, said too);
        a Filled made other than by :func:`filled` has no message and reads as it is."""
        if not self.message:
            return str(self)
        return _(self.message, **{k: v.said() if isinstance(v, Filled) else v for k, v in self.values.items()})


def filled(message: str, /, **values) -> Filled:
    """``message`` (marked with :func:`N_`, so that the catalog has it) filled with ``values`` in English,
    to be said in another language later (:meth:`Filled.said`).

    >>> label = filled(N_("batch {b}/{n}"), b=1, n=2)
    >>> label
    'batch 1/2'
    >>> with language("zh"):
    ...     label.said()
    '第 1/2 批'
    """
    out = Filled(str(message).format(**values))
    out.message, out.values = message, values
    return out


def check_lang(lang: str) -> str:
    """``lang`` when it is one of :data:`LANGS`, else :class:`ValueError` naming it."""
    if lang not in LANGS:
        raise ValueError(f"lang: expected one of {', '.join(LANGS)}, got {lang!r}")
    return lang


@functools.cache
def catalog(lang: str) -> dict[tuple[str | None, str], str]:
    """{(context, English): translation} of ``lang``'s catalog (read once per process); fuzzy,
    obsolete and empty entries are not translations."""
    import polib

    check_lang(lang)
    if lang == SOURCE_LANG:
        return {}
    text = resources.files(__package__).joinpath(f"{lang}.po").read_text(encoding="utf-8")
    return {
        (e.msgctxt or None, e.msgid): e.msgstr
        for e in polib.pofile(text)
        if e.msgstr and not e.obsolete and "fuzzy" not in e.flags
    }


# The language :func:`_` translates into. A context variable rather than a module global, so that two
# threads (or asyncio tasks) building pages in two languages each see their own binding.
_BOUND: contextvars.ContextVar[str] = contextvars.ContextVar("attnscale_lang", default=SOURCE_LANG)


@contextlib.contextmanager
def language(lang: str) -> Iterator[str]:
    """Within the ``with`` block, :func:`_` translates into ``lang`` (one of :data:`LANGS`, else
    :class:`ValueError`); on leaving it, the language bound before is back, so bindings nest."""
    token = _BOUND.set(check_lang(lang))
    try:
        yield lang
    finally:
        _BOUND.reset(token)


def current_lang() -> str:
    """The language of the innermost :func:`language` block; English (the source language) outside any."""
    return _BOUND.get()


def _(message: str, /, *, msgctxt: str | None = None, **values) -> str:
    """``message`` (English, with ``{named}`` placeholders; literal braces doubled) in the bound
    language (:func:`current_lang`), its placeholders filled from ``values`` by :meth:`str.format`."""
    lang = current_lang()
    context = getattr(message, "context", None) or msgctxt
    text = str(message) if lang == SOURCE_LANG else catalog(lang).get((context, str(message)))
    if text is None:
        where = f" (context {context!r})" if context else ""
        raise MissingTranslation(f"no {lang} translation of {str(message)!r}{where} in attnscale/i18n/{lang}.po")
    try:
        return text.format(**values)
    except (KeyError, IndexError) as err:
        raise TextError(
            f"the message {str(message)!r} has the placeholder {{{err.args[0]}}}, which was not given"
        ) from None
