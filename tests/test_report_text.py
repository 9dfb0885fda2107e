"""The report's shared prose helpers (``report.text``), the words of the blog post's chapters
(``report.seed_words``), and what is left of the old catalog ``report/text.toml`` (the experiment
chapters' and the headline's sections, until they move to :mod:`attnscale.i18n`).

Every entry left in the catalog is bilingual with the same ``{slots}`` in both languages, every key
the report's code names exists, and a missing one fails loudly, naming its section and key. Every
message of the blog post's chapters has its Chinese (tests/test_i18n.py) and is filled from the
verification's result; a value the result lacks is an error, never a stand-in.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from attnscale.i18n import LANGS, TextError
from attnscale.report import seed_words, text
from attnscale.templates import template_slots

REPORT = Path(text.__file__).parent


def _entries(node: dict, path: str = ""):
    """(section, key, entry) for every entry of the catalog: a table with "en" is an entry, any
    other table a (sub)section."""
    for key, value in node.items():
        assert isinstance(value, dict), f"[{path}] {key!r}: expected a table, got {value!r}"
        if "en" in value:
            yield path, key, value
        else:
            yield from _entries(value, f"{path}.{key}" if path else key)


ENTRIES = list(_entries(text.catalog()))


def _strings(value) -> list[str]:
    return value if isinstance(value, list) else [value]


def test_the_catalog_holds_only_what_has_not_moved():
    sections = {section for section, _, _ in ENTRIES}
    assert not {"ui", "seed_post", "figures", "cases", "facts"} & sections
    assert not any(s.startswith(("seed.", "captions.")) for s in sections), sections


@pytest.mark.parametrize("section, key, entry", ENTRIES, ids=[f"{s}.{k}" for s, k, _ in ENTRIES])
def test_every_entry_is_bilingual_with_the_same_slots(section, key, entry):
    # No entry may lack its Chinese (none has a reason to: names such as "Python" are written in both).
    assert set(entry) == {"en", "zh"}, f"[{section}] {key}: languages {sorted(entry)}"
    en, zh = _strings(entry["en"]), _strings(entry["zh"])
    assert len(en) == len(zh), f"[{section}] {key}: {len(en)} English strings, {len(zh)} Chinese"
    for i, (e, z) in enumerate(zip(en, zh)):
        assert isinstance(e, str) and e and isinstance(z, str) and z, f"[{section}] {key}[{i}]: empty or not text"
        slots_en, slots_zh = template_slots(e), template_slots(z)
        assert slots_en == slots_zh, f"[{section}] {key}[{i}]: slots {slots_en} in en, {slots_zh} in zh"


def test_a_missing_section_or_key_names_both():
    with pytest.raises(text.MissingText, match=r"no entry 'no_such_key' in section \[rescale\] of text\.toml"):
        text.words("rescale")("no_such_key", "en")
    with pytest.raises(text.MissingText, match=r"no section \[no_such_section\]"):
        text.lookup("no_such_section", "title", "en")
    with pytest.raises(text.MissingText, match=r"no section \[rescale\.title\]"):
        text.lookup("rescale.title", "en", "en")          # an entry is not a section
    with pytest.raises(KeyError):                           # still a KeyError to a caller that expects one
        text.words("rescale")("no_such_key", "en")
    with pytest.raises(text.MissingText, match=r"entry 'intro' of section \[lm\] \(zh\) has the slot \{d_model\}"):
        text.words("lm")("intro", "zh")                     # a slot the caller left unfilled


def test_a_chinese_gap_falls_back_to_english_and_slots_are_filled(monkeypatch):
    catalog = {"demo": {"hello": {"en": "n = {n}", "zh": ""}}}
    monkeypatch.setattr(text, "catalog", lambda: catalog)
    assert text.words("demo")("hello", "zh", n=3) == "n = 3"
    catalog["demo"]["hello"]["zh"] = "n 为 {n}"
    assert text.words("demo")("hello", "zh", n=3) == "n 为 3"


def _values(lang: str) -> dict:
    """The placeholders' values from a verification's result as the engine writes it (made-up numbers)."""
    from test_report_figures import fake_data

    from attnscale.claims.result import CHAPTERS

    outline = [{"id": c, "part": "beyond" if c == "beyond" else "seed"} for c in CHAPTERS]
    data = {**fake_data(), "jacobian": {**fake_data()["jacobian"], "crossover": {"16": {"d_k": 64}}}}
    return seed_words.facts(data, lang, {"confidence": 0.99}, outline)


def test_every_blog_chapter_and_figure_has_its_words():
    from attnscale.claims.result import CHAPTERS
    from attnscale.report.seed import BEYOND_PARTS, CHAPTER_FIGURES

    assert set(seed_words.CHAPTERS) == set(CHAPTERS)
    assert {key for key, _ in BEYOND_PARTS} == set(seed_words.BEYOND)
    blocks = {block for figures in CHAPTER_FIGURES.values() for block, _ in figures} | {b for _, b in BEYOND_PARTS}
    assert blocks == set(seed_words.CAPTIONS)
    for lang in LANGS:
        values = _values(lang)
        for chapter in CHAPTERS:
            paras = seed_words.paragraphs(chapter, lang, values)
            assert seed_words.title(chapter, lang) and paras and all(paras), chapter
            assert not any("{" in p or "d_k" in p for p in paras), (chapter, paras)
        for key, _block in BEYOND_PARTS:
            heading, para = seed_words.subsection(key, lang, values)
            assert heading and para and "{" not in para
        for block in blocks:
            alt, cap = seed_words.caption(block, lang, values)
            assert alt and cap and "{" not in alt + cap and "…" not in alt + cap, block
    assert "99% confidence intervals" in seed_words.paragraphs("variance", "en", _values("en"))[1]
    assert "dₖ = 4、64、512" in seed_words.caption("dot_histograms", "zh", _values("zh"))[0]


def test_a_value_the_result_lacks_is_an_error_not_a_stand_in():
    with pytest.raises(TextError, match=r"\{hist_dks\}"):
        seed_words.paragraphs("why_grows", "en", seed_words.facts({}, "en"))
    with pytest.raises(TextError, match=r"\{level\}"):
        seed_words.caption("variance_vs_dk", "zh", seed_words.facts({}, "zh"))


def test_lists_are_joined_as_each_language_writes_them():
    assert text.listed(["4", "64", "512"], "en") == "4, 64 and 512"
    assert text.listed(["4", "64", "512"], "zh") == "4、64、512"
    assert text.listed(["16", "128"], "en") == "16 and 128" and text.listed(["7"], "zh") == "7"


# --- every literal key the code looks up exists --------------------------------------------------------

def _lookups(path: Path):
    """(function name, key or f-string prefix, is_prefix, line) of each call f("key", ...) in ``path``
    for the lookup functions below, and the section ``_t`` is bound to there (``_t = text.words(...)``)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    section = None
    for node in ast.walk(tree):
        if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)
                and getattr(node.value.func, "attr", getattr(node.value.func, "id", "")) == "words"
                and isinstance(node.targets[0], ast.Name) and node.targets[0].id in ("_t", "_pieces")):
            section = node.value.args[0].value
    calls = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.args):
            continue
        arg = node.args[0]
        if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
            calls.append((node.func.id, arg.value, False, node.lineno))
        elif isinstance(arg, ast.JoinedStr) and arg.values and isinstance(arg.values[0], ast.Constant):
            calls.append((node.func.id, arg.values[0].value, True, node.lineno))
    return section, calls


SOURCES = sorted(REPORT.glob("*.py")) + sorted((REPORT / "chapters").glob("*.py"))


@pytest.mark.parametrize("path", SOURCES, ids=[p.name for p in SOURCES])
def test_every_key_the_code_names_is_in_the_catalog(path):
    section, calls = _lookups(path)
    # _t itself, and the chapters' helpers that hand their first argument to _t (a paragraph, a note, a hypothesis)
    where = {**{f: section for f in ("_t", "_pieces", "_p", "p", "_note", "_hyp")}}
    for func, key, is_prefix, line in calls:
        if func not in where:
            continue
        assert where[func] is not None, f"{path.name}:{line}: {func}() without a section"
        keys = {k for s, k, _ in ENTRIES if s == where[func]}
        found = any(k.startswith(key) for k in keys) if is_prefix else key in keys
        assert found, f"{path.name}:{line}: {func}({key!r}) has no entry in [{where[func]}]"


def test_each_experiment_chapter_has_its_title_in_both_languages():
    import importlib

    from attnscale.report.chapters import EXPERIMENT_CHAPTERS
    from attnscale.report.experiments import title_of

    for name in EXPERIMENT_CHAPTERS:
        module = importlib.import_module(f"attnscale.report.chapters.{name}")
        titles = {lang: title_of(module, name, lang) for lang in LANGS}
        assert all(titles.values()) and titles["en"] != titles["zh"], name
        if isinstance(module.TITLE, dict):     # a chapter still on the old catalog
            assert module.TITLE == text.entry(name, "title") and set(module.TITLE) == {"en", "zh"}, name
        else:                                  # an N_ message, set as prose
            assert "d_k" not in titles["en"] + titles["zh"], name


def test_every_rule_of_a_sweep_has_a_finished_label():
    """The language-model sweep trains the soft-cap too: its label names the cap (it once showed
    "soft-cap {cap:g}, unscaled"), from the result's caps where it records them, else the rule's own."""
    from attnscale.experiments.lm import RULE_CHOICES
    from attnscale.report.chapters import lm

    for rule in RULE_CHOICES:
        for lang in LANGS:
            assert "{" not in lm._rule(rule, lang), (rule, lang)
    assert lm._rule("softcap_unscaled", "en") == "soft-cap 50, unscaled"
    assert text.rule_label("softcap_unscaled", "zh", cap=30) == "软上限 30，不缩放"


def test_a_rule_label_names_the_cap_of_the_result_or_of_the_rule():
    from attnscale.scales import RULES

    assert text.rule_label("softcap", "en") == f"soft-cap {RULES['softcap'].cap_value:g} on 1/√dₖ (Gemma 2)"
    assert text.rule_label("softcap", "en", cap=12.5) == "soft-cap 12.5 on 1/√dₖ (Gemma 2)"
    assert text.rule_label("inverse_dk", "zh") == "1/dₖ（µP）"
    with pytest.raises(KeyError, match="no_such_rule"):
        text.rule_label("no_such_rule", "en")
