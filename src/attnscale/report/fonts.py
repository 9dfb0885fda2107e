"""The CJK font the report carries, so that its Chinese text is readable on a machine without one.

A self-contained page cannot count on the reader's fonts: without a CJK font every Chinese character
is a box. So the page embeds a subset of Noto Sans CJK SC (Debian's ``fonts-noto-cjk``, which
``make setup`` installs; any other copy can be named by ``ATTNSCALE_CJK_FONT=/path/font.ttc``),
cut with fontTools to exactly the non-ASCII characters the page uses and carried as WOFF2 in a
``data:`` URL (:func:`font_face_css`). Figures name the same family (:func:`matplotlib_families`), so
matplotlib lays Chinese labels out with the glyphs the browser will draw them with.

Without the font the page is built as before (its Chinese depends on the reader's fonts) and
:func:`missing_font_message` says how to get it.
"""

from __future__ import annotations

import base64
import functools
import html
import io
import os
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "FAMILY",
    "CjkFont",
    "find_cjk_font",
    "page_characters",
    "subset_woff2",
    "font_face_css",
    "matplotlib_families",
    "missing_font_message",
]

FAMILY = "Noto Sans CJK SC"  # the face inside the collection, and the page's CSS family name
ENV_VAR = "ATTNSCALE_CJK_FONT"
# Where Debian's fonts-noto-cjk (and fonts-noto-cjk-extra, Fedora's google-noto-sans-cjk) put it.
CANDIDATES = (
    "/usr/share/fonts/opentype/noto/NotoSansCJK-Regular.ttc",
    "/usr/share/fonts/noto-cjk/NotoSansCJK-Regular.ttc",
    "/usr/share/fonts/google-noto-cjk/NotoSansCJK-Regular.ttc",
    "/usr/share/fonts/opentype/noto/NotoSansCJKsc-Regular.otf",
)
INSTALL = "apt-get install --no-install-recommends fonts-noto-cjk (or make setup)"


@dataclass(frozen=True)
class CjkFont:
    path: Path
    index: int  # the face within a .ttc collection (0 for a single font)
    family: str


def _faces(path: Path) -> list[str]:
    from fontTools.ttLib import TTCollection, TTFont

    if path.suffix.lower() == ".ttc":
        return [f["name"].getDebugName(1) for f in TTCollection(str(path), lazy=True).fonts]
    return [TTFont(str(path), lazy=True)["name"].getDebugName(1)]


@functools.cache
def _find(override: str | None) -> CjkFont | None:
    paths = [override] if override else CANDIDATES
    for candidate in paths:
        path = Path(candidate)
        if not path.is_file():
            continue
        try:
            names = _faces(path)
        except Exception:  # not a font fontTools reads: look further
            continue
        # The Simplified Chinese face when there is one; a single-face font given by the user as is.
        for i, name in enumerate(names):
            if name == FAMILY:
                return CjkFont(path, i, name)
        if override and names:
            return CjkFont(path, 0, names[0])
    return None


def find_cjk_font() -> CjkFont | None:
    """The CJK font this machine has for the report (``$ATTNSCALE_CJK_FONT`` first), or None. A
    ``$ATTNSCALE_CJK_FONT`` that names no font file is refused, naming it, rather than passed over."""
    override = os.environ.get(ENV_VAR) or None
    found = _find(override)
    if override and found is None:
        from attnscale.errors import InputError

        raise InputError(f"{ENV_VAR}: expected a font file (TTF, OTF or TTC) fontTools can read, got {override!r}")
    return found


def missing_font_message() -> str:
    return (
        f"no CJK font found ({FAMILY}): Chinese text in the page relies on the reader's fonts; "
        f"install one with: {INSTALL}, or name one in ${ENV_VAR}"
    )


def page_characters(page: str) -> str:
    """The characters a page shows that the usual Latin fonts may lack: every non-ASCII character of
    its text, character references decoded (sorted, each once). ASCII is left to the page's own
    font stack."""
    return "".join(sorted({c for c in html.unescape(page) if ord(c) > 0x7F and c.isprintable()}))


@functools.lru_cache(maxsize=16)
def _subset(font: CjkFont, chars: str) -> bytes:
    from fontTools import subset
    from fontTools.ttLib import TTFont

    # recalcTimestamp=False: the same characters give the same bytes (the page is reproducible).
    source = TTFont(str(font.path), fontNumber=font.index, lazy=True, recalcTimestamp=False)
    # No OpenType layout features: they pull in vertical-text and other alternates a horizontal page
    # never shows (40% of the bytes); no hinting: browsers ignore CFF hints at screen sizes.
    options = subset.Options(layout_features=[], hinting=False, flavor="woff2")
    subsetter = subset.Subsetter(options)
    subsetter.populate(text=chars)
    subsetter.subset(source)
    buf = io.BytesIO()
    source.flavor = "woff2"
    source.save(buf)
    return buf.getvalue()


def subset_woff2(chars: str, font: CjkFont | None = None) -> bytes:
    """WOFF2 bytes of ``font`` (default: :func:`find_cjk_font`) cut to ``chars`` (those it has)."""
    font = font or find_cjk_font()
    if font is None:
        raise FileNotFoundError(missing_font_message())
    return _subset(font, "".join(sorted(set(chars))))


def font_face_css(page: str, font: CjkFont | None = None) -> str:
    """The ``@font-face`` rule that carries the glyphs of ``page`` (its final HTML): a WOFF2 subset
    of the CJK font with exactly the page's non-ASCII characters that the font has, in a ``data:``
    URL under the family name :data:`FAMILY`, which the stylesheet and the figures' SVG text name.
    Empty when the page has no such character or this machine has no CJK font."""
    font = font or find_cjk_font()
    chars = page_characters(page)
    if font is None or not chars:
        return ""
    data = base64.b64encode(subset_woff2(chars, font)).decode("ascii")
    # The stylesheet names FAMILY; the figures name the font's own family (the same one unless
    # $ATTNSCALE_CJK_FONT chose another font). font-display: block: the glyphs are in the page.
    return "".join(
        f'@font-face{{font-family:"{name}";font-style:normal;font-weight:400;font-display:block;'
        f'src:url(data:font/woff2;base64,{data}) format("woff2")}}'
        for name in dict.fromkeys((FAMILY, font.family))
    )


def _not_bold_warning(record) -> bool:
    # The page embeds one (regular) CJK face and the browser draws bold from it; matplotlib, asked for
    # the figures' bold titles, uses that regular face as well, which is what is meant: its warning
    # ("findfont: Failed to find font weight bold for Noto Sans CJK SC") would only be noise on the
    # terminal. Every other message of matplotlib's font manager passes.
    return not str(record.msg).startswith("findfont: Failed to find font weight")


@functools.cache
def _registered(font: CjkFont) -> str:
    import logging

    from matplotlib import font_manager

    font_manager.fontManager.addfont(str(font.path))  # every face of a .ttc, by its own family name
    logging.getLogger("matplotlib.font_manager").addFilter(_not_bold_warning)
    return font.family


def matplotlib_families() -> list[str]:
    """The sans-serif families for matplotlib: its own DejaVu Sans for Latin, then the CJK font
    (registered once) for what DejaVu lacks. In SVG output the text names both, so the browser
    picks the embedded face for Chinese."""
    font = find_cjk_font()
    return ["DejaVu Sans"] + ([_registered(font)] if font else [])
