"""The report's text catalog (``attnscale/report/text.toml``) and its one reader, ``report.text``.

Every entry is bilingual with the same ``{slots}`` in both languages, every key the report's code
names exists, and a missing one fails loudly, naming its section and key.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from attnscale.report import text
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


def test_the_catalog_holds_the_report():
    sections = {section for section, _, _ in ENTRIES}
    assert {"ui", "seed_post", "figures", "cases", "facts", "seed.formula", "captions.jacobian"} <= sections
    assert len(ENTRIES) > 300          # the experiment chapters and the headline have left for attnscale.i18n


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
    with pytest.raises(text.MissingText, match=r"no entry 'no_such_key' in section \[figures\] of text\.toml"):
        text.words("figures")("no_such_key", "en")
    with pytest.raises(text.MissingText, match=r"no section \[no_such_section\]"):
        text.lookup("no_such_section", "title", "en")
    with pytest.raises(text.MissingText, match=r"no section \[seed_post\.title\]"):
        text.lookup("seed_post.title", "en", "en")          # an entry is not a section
    with pytest.raises(text.MissingText, match=r"no section \[seed\.no_such_chapter\]"):
        text.chapter_text("no_such_chapter", "en")
    with pytest.raises(KeyError):                           # still a KeyError to a caller that expects one
        text.t("no_such_label", "en")
    with pytest.raises(text.MissingText, match=r"entry 'rule_softcap_unscaled' of section \[ui\] \(zh\) has the slot \{cap\}"):
        text.words("ui")("rule_softcap_unscaled", "zh")     # a slot the caller left unfilled


def test_a_chinese_gap_falls_back_to_english_and_slots_are_filled(monkeypatch):
    catalog = {"demo": {"hello": {"en": "n = {n}", "zh": ""}}}
    monkeypatch.setattr(text, "catalog", lambda: catalog)
    assert text.words("demo")("hello", "zh", n=3) == "n = 3"
    catalog["demo"]["hello"]["zh"] = "n 为 {n}"
    assert text.words("demo")("hello", "zh", n=3) == "n 为 3"


def test_every_blog_chapter_and_figure_has_its_words():
    from attnscale.claims.result import CHAPTERS
    from attnscale.report.seed import BEYOND_PARTS, CHAPTER_FIGURES

    for chapter in CHAPTERS:
        for lang in text.LANGS:
            words = text.chapter_text(chapter, lang)
            assert words["title"] and words["paras"], chapter
    beyond = text.chapter_text("beyond", "zh")
    assert all(len(beyond[key]) == 2 for key, _ in BEYOND_PARTS)          # [heading, paragraph]
    blocks = {block for figures in CHAPTER_FIGURES.values() for block, _ in figures} | {b for _, b in BEYOND_PARTS}
    for block in blocks:
        alt, cap = text.caption(block, "zh", text.facts({}, "zh"))
        assert alt and cap, block


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
    where = {"t": "ui", "label": "figures", **{f: section for f in ("_t", "_pieces", "_p", "p", "_note", "_hyp")}}
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

    from attnscale.i18n import _

    for name in EXPERIMENT_CHAPTERS:
        module = importlib.import_module(f"attnscale.report.chapters.{name}")
        if isinstance(module.TITLE, dict):          # a chapter whose words are still in text.toml
            assert module.TITLE == text.entry(name, "title") and set(module.TITLE) == {"en", "zh"}, name
        else:                                       # an N_ message: its Chinese is in i18n/zh.po
            assert module.TITLE and _(module.TITLE, "zh") not in ("", module.TITLE), name


def test_every_rule_of_a_sweep_has_a_finished_label():
    """The language-model sweep trains the soft-cap too: its label names the cap (it once showed
    "soft-cap {cap:g}, unscaled"), from the result's caps where it records them, else the rule's own."""
    from attnscale.experiments.lm import RULE_CHOICES
    from attnscale.report.chapters import lm

    for rule in RULE_CHOICES:
        for lang in text.LANGS:
            assert "{" not in lm._rule(rule, lang), (rule, lang)
    assert lm._rule("softcap_unscaled", "en") == "soft-cap 50, unscaled"
    assert text.rule_label("softcap_unscaled", "zh", cap=30) == "软上限 30，不缩放"
