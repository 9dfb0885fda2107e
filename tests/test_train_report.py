"""The training chapters render from summaries alone (both languages), and the train CLI is wired."""

from __future__ import annotations

import math

import pytest

pytest.importorskip("torch")

from attnscale.cli import main  # noqa: E402
from attnscale.experiments import logit_growth, scale_vs_dk  # noqa: E402
from attnscale.experiments.sweeps import run_experiment  # noqa: E402
from attnscale.report.chapters import EXPERIMENT_CHAPTERS, training, training_logits  # noqa: E402


@pytest.fixture(scope="module")
def summaries(tmp_path_factory):
    out = tmp_path_factory.mktemp("train")
    a = scale_vs_dk.ScaleVsDkConfig(rules=("inverse_sqrt_dk", "unscaled"), d_ks=(16,), seeds=1, sgd_lrs=(0.3,),
                                    steps=12, log_every=4, final_eval=64)
    b = logit_growth.LogitGrowthConfig(lrs=(1e-3, 1e-1), steps=8, warmup=2, batch=4, log_every=4,
                                       corpus_chars=4000)
    return (run_experiment("scale-vs-dk", a, out / "scale-vs-dk"),
            run_experiment("logit-growth", b, out / "logit-growth"))


def test_chapters_are_registered():
    assert "training" in EXPERIMENT_CHAPTERS and "training_logits" in EXPERIMENT_CHAPTERS
    assert training.RESULT_PATH == "train/scale-vs-dk/summary.json"
    assert training_logits.RESULT_PATH == "train/logit-growth/summary.json"


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_scale_vs_dk_chapter_shows_the_summary(summaries, lang):
    a, _ = summaries
    html = training.render(a, lang)
    assert html.count("<svg") == 2 and "<table" in html
    ceiling = f"{a['analysis']['single_key_ceiling']:.3f}"
    assert ceiling in html
    ratio = a["analysis"]["chain_rule"]["rows"][1]["ratio"]
    assert f"{ratio:.2f}" in html


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_logit_growth_chapter_shows_the_summary(summaries, lang):
    _, b = summaries
    html = training_logits.render(b, lang)
    assert html.count("<svg") == 2
    sens = b["analysis"]["lr_sensitivity"]["baseline"]["mean"]
    assert f"{sens:.3f}" in html
    params = b["cells"][0]["result"]["parameters"]
    assert f"{params:,}" in html and params > 0


def test_cli_rejects_bad_seeds(capsys):
    assert main(["train", "scale-vs-dk", "--seeds", "0"]) == 2
    assert "--seeds" in capsys.readouterr().err


def test_cli_help_lists_experiments(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["train", "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert "scale-vs-dk" in out and "logit-growth" in out and "--quick" in out


def test_the_single_key_sentence_follows_the_two_ceilings(summaries):
    """"The same as guessing" only when the result's two ceilings are equal; else both numbers, no claim."""
    import copy

    a, _ = summaries
    single, prior = a["analysis"]["single_key_ceiling"], a["analysis"]["prior_ceiling"]
    same = "the same as guessing" in training.render(a, "en")
    assert same == math.isclose(single, prior, rel_tol=1e-9, abs_tol=1e-12)
    other = copy.deepcopy(a)
    other["analysis"]["prior_ceiling"] = single / 2
    for lang, said in (("en", "the same as guessing"), ("zh", "相同")):
        html = training.render(other, lang)
        assert f"{single / 2:.3f}" in html and said not in html.split("W_Q")[0]
    other["analysis"]["prior_ceiling"] = single
    assert "the same as guessing" in training.render(other, "en")


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_logit_growth_text_claims_only_what_it_measured(summaries, lang):
    """No "attends almost uniformly" (nothing measures uniformity); a cause of the low-LR gap is a guess."""
    _, b = summaries
    html = training_logits.render(b, lang)
    assert "uniform" not in html and "均匀的" not in html
    assert "steps are too few there" not in html
    text = training_logits.TEXT
    assert "not measured" in text["low_end"]["en"] and "未测量" in text["low_end"]["zh"]
    assert "uniform" not in text["collapse"]["en"] and "均匀" not in text["collapse"]["zh"]
