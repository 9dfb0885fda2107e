"""The report's shared prose helpers (``report.text``) and the words of the blog post's chapters
(``report.seed_words``): every message of the blog post's chapters has its Chinese (tests/report/test_i18n.py
checks the catalog) and is filled from the verification's result; a value the result lacks is an
error, never a stand-in.
"""

from __future__ import annotations

import pytest

from attnscale.i18n import LANGS, TextError, language
from attnscale.report import seed_words, text


def _values() -> dict:
    """The placeholders' values from a verification's result as the engine writes it (made-up numbers),
    in the bound language."""
    from helpers.report_data import fake_data

    from attnscale.claims.result import CHAPTERS

    outline = [{"id": c, "part": "beyond" if c == "beyond" else "seed"} for c in CHAPTERS]
    data = {**fake_data(), "jacobian": {**fake_data()["jacobian"], "crossover": {"16": {"d_k": 64}}}}
    return seed_words.facts(data, {"confidence": 0.99}, outline)


def test_every_blog_chapter_and_figure_has_its_words():
    from attnscale.claims.result import CHAPTERS
    from attnscale.report.seed import BEYOND_PARTS, CHAPTER_FIGURES

    assert set(seed_words.CHAPTERS) == set(CHAPTERS)
    assert {key for key, _ in BEYOND_PARTS} == set(seed_words.BEYOND)
    blocks = {block for figures in CHAPTER_FIGURES.values() for block, _ in figures} | {b for _, b in BEYOND_PARTS}
    assert blocks == set(seed_words.CAPTIONS)
    for lang in LANGS:
        with language(lang):
            values = _values()
            for chapter in CHAPTERS:
                paras = seed_words.paragraphs(chapter, values)
                assert seed_words.title(chapter) and paras and all(paras), chapter
                assert not any("{" in p for p in paras), (chapter, paras)  # d_k: typeset by the page (html.esc)
            for key, _block in BEYOND_PARTS:
                heading, para = seed_words.subsection(key, values)
                assert heading and para and "{" not in para
            for block in blocks:
                alt, cap = seed_words.caption(block, values)
                assert alt and cap and "{" not in alt + cap and "…" not in alt + cap, block
    assert "99% confidence intervals" in seed_words.paragraphs("variance", _values())[1]
    with language("zh"):
        assert "dₖ = 4、64、512" in seed_words.caption("dot_histograms", _values())[0]


def test_a_value_the_result_lacks_is_an_error_not_a_stand_in():
    with pytest.raises(TextError, match=r"\{hist_dks\}"):
        seed_words.paragraphs("why_grows", seed_words.facts({}))
    with pytest.raises(TextError, match=r"\{level\}"), language("zh"):
        seed_words.caption("variance_vs_dk", seed_words.facts({}))


def test_lists_are_joined_as_each_language_writes_them():
    assert text.listed(["4", "64", "512"]) == "4, 64 and 512"
    assert text.listed(["16", "128"]) == "16 and 128"
    with language("zh"):
        assert text.listed(["4", "64", "512"]) == "4、64、512" and text.listed(["7"]) == "7"


def test_each_experiment_chapter_has_its_title_in_both_languages():
    import importlib

    from attnscale.report.chapters import EXPERIMENT_CHAPTERS
    from attnscale.report.experiments import title_of

    from attnscale.i18n import _

    for name in EXPERIMENT_CHAPTERS:
        module = importlib.import_module(f"attnscale.report.chapters.{name}")
        titles = {}
        for lang in LANGS:
            with language(lang):
                titles[lang] = title_of(module, name)
        assert all(titles.values()) and titles["en"] != titles["zh"], name
        with language("zh"):
            assert titles["zh"] == text.pretty(_(module.TITLE)), name  # an N_ message, set as prose
        assert "d_k" not in titles["en"] + titles["zh"], name


def test_every_rule_of_a_sweep_has_a_finished_label():
    """The language-model sweep trains the soft-cap too: its label names the cap (it once showed
    "soft-cap {cap:g}, unscaled"), from the result's caps where it records them, else the rule's own."""
    from attnscale.experiments.training.lm import RULE_CHOICES

    for rule in RULE_CHOICES:
        for lang in LANGS:
            with language(lang):
                assert "{" not in text.rule_label(rule), (rule, lang)
    assert text.rule_label("softcap_unscaled") == "soft-cap 50, unscaled"
    with language("zh"):
        assert text.rule_label("softcap_unscaled", cap=30) == "软上限 30，不缩放"


def test_a_rule_label_names_the_cap_of_the_result_or_of_the_rule():
    from attnscale.scales import RULES

    assert text.rule_label("softcap") == f"soft-cap {RULES['softcap'].cap_value:g} on 1/√dₖ (Gemma 2)"
    assert text.rule_label("softcap", cap=12.5) == "soft-cap 12.5 on 1/√dₖ (Gemma 2)"
    with language("zh"):
        assert text.rule_label("inverse_dk") == "1/dₖ（µP）"
    with pytest.raises(KeyError, match="no_such_rule"):
        text.rule_label("no_such_rule")


def test_a_d_k_is_written_one_way_on_the_page_cards_and_axes(monkeypatch):
    """A d_k is a dimension: "d_k = 4096" in the top cards and on the d_k axes, as in every verdict,
    not "4,096" beside "4096" (counts and measured values keep their separators: 4,087)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from attnscale import results
    from attnscale.report.figure_parts import dk_axis
    from attnscale.report.seed import glance_html

    monkeypatch.delenv(results.REFERENCE_ENV, raising=False)  # the shipped verification's figures
    series = results.read_reference("verify").data["series"]
    for lang in LANGS:
        with language(lang):
            cards = glance_html(series)
        assert "dₖ = 4096" in cards and "4,096" not in cards, cards
        assert "4,0" in cards  # the measured Var(q·k), about 4,087, keeps its separator
    fig, ax = plt.subplots()
    try:
        ax.plot([1, 1024, 4096], [1, 2, 3])
        dk_axis(ax, [1, 4, 16, 64, 256, 1024, 4096])
        formatter = ax.xaxis.get_major_formatter()
        assert [formatter(x, 0) for x in (4, 1024, 4096)] == ["4", "1024", "4096"]
    finally:
        plt.close(fig)
