"""The CJK font the page carries: a subset with exactly the page's non-ASCII characters, as WOFF2 in a
data: URL, under the family that the stylesheet and the figures' SVG text name."""

from __future__ import annotations

import base64
import io
import re

import pytest

from attnscale.errors import InputError
from attnscale.report import fonts
from attnscale.report.page import embed_fonts, stylesheet

FONT = fonts.find_cjk_font()
needs_font = pytest.mark.skipif(FONT is None, reason="no CJK font here (make setup installs fonts-noto-cjk)")


def _embedded_cmap(css: str) -> set[str]:
    from fontTools.ttLib import TTFont

    data = re.search(r"base64,([A-Za-z0-9+/=]+)\)", css).group(1)
    font = TTFont(io.BytesIO(base64.b64decode(data)))
    assert font.flavor == "woff2"
    return {chr(c) for c in font.getBestCmap()}


def test_page_characters_are_the_non_ascii_text_with_references_decoded():
    assert fonts.page_characters('<p title="键">缩放 &#x6570;&amp; a·b</p>') == "".join(sorted("键缩放数·"))
    assert fonts.page_characters("<p>plain ASCII only</p>") == ""


@needs_font
def test_font_face_covers_exactly_the_characters_of_the_page():
    page = "<html><head></head><body><h1>缩放点积注意力</h1><p>softmax · 权重 𓀀</p></body></html>"
    css = fonts.font_face_css(page)
    assert css.startswith("@font-face{") and f'font-family:"{fonts.FAMILY}"' in css
    # 𓀀 (a hieroglyph) is not in Noto Sans CJK: it is left out; every other non-ASCII character is there, and no other
    assert _embedded_cmap(css) == set("缩放点积注意力·权重")
    other = _embedded_cmap(fonts.font_face_css(page.replace("权重", "熵")))
    assert "熵" in other and "权" not in other
    fonts._subset.cache_clear()  # made again: the same bytes (a reproducible page)
    assert fonts.font_face_css(page) == css


@needs_font
def test_embed_fonts_puts_the_rule_in_the_head_and_skips_pages_without_such_text():
    page = "<html><head><style>x</style></head><body>键</body></html>"
    out = embed_fonts(page)
    assert out.index("@font-face") < out.index("</head>") < out.index("<body>")
    assert embed_fonts("<html><head></head><body>ASCII</body></html>") == "<html><head></head><body>ASCII</body></html>"


def test_a_font_variable_that_names_no_font_is_refused_naming_it(monkeypatch, tmp_path):
    junk = tmp_path / "junk.ttc"
    junk.write_bytes(b"not a font")
    for given in (tmp_path / "missing.ttc", junk):
        monkeypatch.setenv(fonts.ENV_VAR, str(given))
        with pytest.raises(InputError, match=f"{fonts.ENV_VAR}: expected a font file .*{given.name}"):
            fonts.find_cjk_font()


@pytest.fixture
def no_font(monkeypatch):
    """A machine without a CJK font: no candidate path, no variable (the lookup's cache cleared around)."""
    monkeypatch.delenv(fonts.ENV_VAR, raising=False)
    monkeypatch.setattr(fonts, "CANDIDATES", ())
    fonts._find.cache_clear()
    yield
    fonts._find.cache_clear()


def test_without_a_font_the_page_is_unchanged(no_font):
    assert fonts.find_cjk_font() is None
    page = "<html><head></head><body>键</body></html>"
    assert fonts.font_face_css(page) == "" and embed_fonts(page) == page
    assert "fonts-noto-cjk" in fonts.missing_font_message()
    assert fonts.matplotlib_families() == ["DejaVu Sans"]


def test_stylesheet_and_figures_name_the_embedded_family():
    assert f'"{fonts.FAMILY}"' in stylesheet()


@needs_font
def test_figures_lay_chinese_out_in_the_cjk_font_and_name_it_in_the_svg():
    from attnscale.report.plotting import figure_svg, style

    with style() as plt:
        fig, ax = plt.subplots(figsize=(3, 2))
        label = ax.set_xlabel("键数 n")
        fig.canvas.draw()
        cjk_width = label.get_window_extent().width
        label.set_text("ab n")
        latin_width = label.get_window_extent().width
    assert cjk_width > latin_width * 1.2  # measured with real CJK glyphs (a box is narrower)
    label.set_text("键数 n")
    svg = figure_svg(fig, "test")
    assert re.search(rf"font-family: 'DejaVu Sans', '{fonts.FAMILY}'", svg), svg[:2000]
