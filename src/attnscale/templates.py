"""The ``{named}`` slots of a :meth:`str.format` template: what the catalogs of words
(``report/text.toml``, ``cli/words.toml``, ``claims/claims.toml``) check to agree between a text's
English and its Chinese."""

from __future__ import annotations

import re
import string

__all__ = ["template_slots"]


def template_slots(text: str) -> set[str]:
    """The names of ``text``'s slots: ``"{seed[0]}"``, ``"{seed.x}"`` and ``"{seed:g}"`` are all the
    slot ``seed``. A lone brace raises :class:`ValueError` (a literal one is written ``{{`` or ``}}``)."""
    return {re.split(r"[.\[]", name)[0] for _, name, _, _ in string.Formatter().parse(text) if name is not None}
