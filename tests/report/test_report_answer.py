"""The page answers first: its top sentences are chosen from the results (the verification's
variance and gradient, the training sweeps' verdicts), in English and in Chinese; "How this page was
made" says the configuration in words; the language links lead only to a page that is there.

Each test changes the data and sees the words change."""

from __future__ import annotations

import copy
import re

import pytest

from attnscale import results
from attnscale.i18n import language
from attnscale.report.answer import answer_text, measured_sentence, training_sentence
from attnscale.report.build import build_report
from attnscale.report.config_words import config_sentences
from helpers.report_data import fake_data, fake_verify
from helpers.report_data import prime as _prime
from helpers.report_data import report_config as _config


def _series(**change) -> dict:
    """The hand-made verification's series with the gaussian family's last d_k (and the
    gradients at the last d_k) changed."""
    s = copy.deepcopy(fake_data())
    g = s["variance_vs_dk"]["gaussian"]
    d = g["d_k"][-1]
    if "var" in change:
        g["estimate"][-1], g["ci_low"][-1], g["ci_high"][-1] = change["var"], change["var"] * 0.99, change["var"] * 1.01
    for mode in ("scaled", "unscaled"):
        if mode in change:
            for per in s["jacobian"]["by_n"].values():
                per[mode]["jacobian_frobenius"]["median"][-1] = change[mode]
    return s, d


def test_the_measured_sentence_follows_the_variance_and_the_gradient():
    s, d = _series(scaled=0.3, unscaled=1e-10)
    as_said = measured_sentence(s)
    assert as_said.startswith("The dot product q·k of two vectors of d_k random numbers")
    assert f"as the blog post says ({d} measured at d_k = {d})" in as_said, as_said
    assert "keeps its gradient: ‖J‖ = 0.3 with the scale, 1.0e-10 without" in as_said
    above, _ = _series(var=2.0 * d, scaled=0.3, unscaled=1e-10)
    assert "a variance above d_k here" in measured_sentence(above)
    below, _ = _series(var=0.5 * d, scaled=0.3, unscaled=0.29)
    words = measured_sentence(below)
    assert "a variance below d_k here" in words and "gains nothing from it" in words
    with language("zh"):
        zh = measured_sentence(s), measured_sentence(below)
    assert zh[0] != zh[1] and "与原文一致" in zh[0] and "低于" in zh[1] and "并未因此变大" in zh[1]
    # no data, no sentence (the page never fails for it)
    assert measured_sentence({}) == ""


@pytest.fixture
def shipped(monkeypatch):
    """The reference results shipped with attnscale, which the page shows by default (the suite
    hides them: tests/conftest.py)."""
    monkeypatch.setenv("ATTNSCALE_REFERENCE", str(results.shipped_reference()))


def _reference_analyses() -> tuple[dict, dict]:
    """The analyses of the shipped reference training results."""
    return tuple(
        copy.deepcopy(results.read_reference(kind).data["analysis"]) for kind in ("train/scale-vs-dk", "train/lm")
    )


def _set_unscaled(sweep: dict, lm: dict, verdict: str) -> None:
    """Every unscaled verdict of both analyses set to ``verdict``."""
    for row in sweep["table"]:
        if row.get("rule") == "unscaled":
            for key in ("adam", "sgd_reference_lr"):
                if isinstance(row.get(key), dict):
                    row[key]["verdict"] = verdict
    for v in lm["verdicts"]:
        if v.get("rule") == "unscaled":
            v["verdict"] = verdict


@pytest.mark.usefixtures("shipped")
def test_the_training_sentence_follows_the_training_results():
    sweep, lm = _reference_analyses()
    shipped = training_sentence(sweep, lm)
    assert shipped.startswith("Trained without it, a small attention model at d_k = ")
    _set_unscaled(sweep, lm, "learns")
    learns = training_sentence(sweep, lm)
    assert learns != shipped and "learns like 1/√d_k; the same holds for a small GPT" in learns
    _set_unscaled(sweep, lm, "diverges")
    assert "a small attention model at d_k = 256 diverges" in training_sentence(sweep, lm)
    lm["verdicts"] = [dict(v, verdict="learns") if v.get("rule") == "unscaled" else v for v in lm["verdicts"]]
    both = training_sentence(sweep, lm)
    assert "diverges, and a small GPT on real English text at d_k = " in both and both.endswith("learns like 1/√d_k.")
    assert training_sentence(sweep, None).startswith("Trained without it at d_k = 256, a small attention model")
    assert training_sentence(None, None) == ""
    with language("zh"):
        zh = training_sentence(sweep, lm)
    assert "发散" in zh and not re.search(r"[A-Za-z]{4,}", zh.replace("GPT", "")), zh


@pytest.mark.slow
@pytest.mark.usefixtures("no_engine", "fast_figures", "shipped")
def test_the_top_of_the_page_changes_with_the_verification_and_the_training_results(tmp_path, monkeypatch):
    import attnscale.report.chapters as chapters

    monkeypatch.setattr(chapters, "EXPERIMENT_CHAPTERS", ())  # their figures take a minute; the top reads results

    def top(verify: dict) -> str:
        config = _config(tmp_path)
        _prime(config, verify)
        page = build_report(config).path.read_text(encoding="utf-8")
        hero = page[: page.index("</header>")]
        answer = re.search(r'<p class="answer">(.*?)</p>', hero).group(1)
        # the answer comes first: before the cards
        assert hero.index('class="answer"') < hero.index('class="glance"')
        return answer

    verify = fake_verify()
    first = top(verify)
    d = verify["data"]["variance_vs_dk"]["gaussian"]["d_k"][-1]
    assert "has variance dₖ, as the blog post says" in first and "Trained without it" in first
    g = verify["data"]["variance_vs_dk"]["gaussian"]
    g["estimate"][-1], g["ci_low"][-1], g["ci_high"][-1] = 3.0 * d, 2.9 * d, 3.1 * d
    changed = top(verify)
    assert changed != first and "has a variance above dₖ here" in changed
    # the user's own training result, in which the unscaled rule learns, replaces the reference's
    sweep = results.read_reference("train/scale-vs-dk")
    data = copy.deepcopy(sweep.data)
    _set_unscaled(data["analysis"], {"verdicts": []}, "learns")
    results.write("train/scale-vs-dk", data, config=sweep.config, seed=sweep.seed, root=tmp_path / "results")
    retrained = top(verify)
    assert "a small attention model at dₖ = 256 learns like 1/√dₖ, and a small GPT" in retrained
    assert "does not reach the target within the budget; the same holds for a small GPT" in changed
    assert answer_text({}, tmp_path / "results").startswith("Trained without it")  # no verification data


@pytest.mark.usefixtures("no_engine", "fast_figures")
def test_how_this_page_was_made_says_the_configuration_in_words(tmp_path):
    config = _config(tmp_path)
    _prime(config)
    footer = build_report(config).path.read_text(encoding="utf-8").split("<footer", 1)[1]
    assert "max_draws" not in footer and "verify." not in footer and "=None" not in footer
    assert "a quick verification (--quick): each Monte Carlo estimate drawn until its 99% interval" in footer
    assert "at most 2,097,152 random numbers" in footer and "every claim group" in footer
    full = config_sentences({"quick": False, "max_draws": 4096, "only": ["S5", "S7.2"], "margin": 0.1}, 3)
    assert full[0].startswith("a full verification") and "at most 4,096 random numbers" in full[0]
    assert full[1:] == [
        "an equality claim holds only within ±10% of its value",
        "only the claims S5, S7.2",
        "the interactive attention row's random seed: 3",
    ]
    with language("zh"):
        assert config_sentences({"quick": True, "groups": [1, 3]}, 0)[1] == "只计算第 1, 3 组论断"


@pytest.mark.usefixtures("no_engine", "fast_figures")
def test_language_links_lead_only_to_pages_that_are_there(tmp_path):
    """--lang zh alone: no dead link to index.html; the English page built after it links both ways."""
    zh_config = _config(tmp_path, lang="zh")
    _prime(zh_config)
    zh = build_report(zh_config).path
    page = zh.read_text(encoding="utf-8")
    assert 'href="index.html"' not in page
    assert 'data-page="index.html"' in page and "attnscale report --lang en" in page
    en = build_report(_config(tmp_path)).path
    assert '<a href="index.zh.html" hreflang="zh">中文版</a>' in en.read_text(encoding="utf-8")
    relinked = zh.read_text(encoding="utf-8")
    assert '<a href="index.html" hreflang="en">English</a>' in relinked and 'data-page="index.html"' not in relinked
    # only the language switch changed on the page built first
    assert re.sub(r'<p class="lang-switch">.*?</p>', "", relinked) == re.sub(
        r'<p class="lang-switch">.*?</p>', "", page
    )
