"""What the report shows per chapter (own full result, else the reference, else own quick, and one line
saying which, from where and when, with the command and its time) and the headline answers, whose
words follow the numbers of their results."""

from __future__ import annotations

import copy
import gzip
import sys
import types

import pytest

from attnscale.i18n import language
from attnscale import provenance, results
from attnscale.report import headline
from attnscale.report.chapters import telemetry
from attnscale.report.experiments import render_experiment


@pytest.fixture
def chapter(monkeypatch):
    mod = types.ModuleType("attnscale.report.chapters.fake_demo")
    mod.TITLE = telemetry.TITLE  # a title with its Chinese (the page is built in both languages)
    mod.KIND, mod.HOW_TO = "demo", "attnscale demo --full"
    mod.render = lambda env: f"<p>answer {env.data['answer']}</p>"
    monkeypatch.setitem(sys.modules, mod.__name__, mod)
    return "fake_demo"


def test_a_chapter_shows_own_full_else_reference_else_own_quick_and_says_which(tmp_path, monkeypatch, chapter):
    own, ref = tmp_path / "own", tmp_path / "ref"
    ref.mkdir()  # an empty folder of references (a set folder that is not there is an error)
    monkeypatch.setenv(results.REFERENCE_ENV, str(ref))
    results.write("demo", {"answer": 1, "wall_s": 5.0}, seed=0, quick=True, root=own)
    quick = render_experiment(chapter, own)
    assert "answer 1" in quick.html and "Shown: your own quick run (demo/quick.json)" in quick.html
    made = results.write("demo", {"answer": 2, "wall_s": 972.0}, seed=0, root=tmp_path / "made")
    (ref / "demo").mkdir(parents=True)
    (ref / "demo" / "result.json.gz").write_bytes(gzip.compress(made.path.read_bytes()))
    shown = render_experiment(chapter, own)
    assert "answer 2" in shown.html and "answer 1" not in shown.html
    assert "Shown: the reference result shipped with attnscale, a full run computed " in shown.html
    cpu = provenance.cpu_text(results.read_reference("demo").environment["cpu"])
    assert cpu and f"{cpu}, " in shown.html  # the line names the CPU that made it
    assert "<code>attnscale demo --full</code> (it took 16 min 12 s there)" in shown.html
    with language("zh"):
        assert "本章显示：随 attnscale 发布的参考结果" in render_experiment(chapter, own).html
    results.write("demo", {"answer": 3}, seed=0, root=own)
    mine = render_experiment(chapter, own)
    assert "answer 3" in mine.html and "Shown: your own full run (demo/result.json)" in mine.html
    assert "its time is not recorded in the result" in mine.html
    results.write("demo", {"answer": 4, "wall_s": 6.0, "cells_cached": 3, "cells": [{}] * 4}, seed=0, root=own)
    resumed = render_experiment(chapter, own)
    assert "its last run took 6 s, reading 3 of its 4 cells from the cache of an earlier run" in resumed.html
    # Re-analysed from its cache alone, a run's seconds are the re-analysis's: not given as its time
    # (the shipped logit-growth read "its last run took 0 s").
    results.write("demo", {"answer": 5, "wall_s": 0.07, "cells_cached": 4, "cells": [{}] * 4}, seed=0, root=own)
    cached = render_experiment(chapter, own)
    assert "its run time is not recorded in the result: its last run read all 4 cells from the cache" in cached.html
    assert "took 0 s" not in cached.html
    with language("zh"):
        assert "全部 4 个单元都读自先前运行的缓存" in render_experiment(chapter, own).html
    # A sweep whose every cell records its own time: that is what the line gives, however its last
    # run got them (here all from the cache, in 0.07 s)
    timed = [{"seconds": {"wall": 600.0, "cpu": 500.0, "workers": 2}}] * 4
    results.write("demo", {"answer": 6, "wall_s": 0.07, "cells_cached": 4, "cells": timed}, seed=0, root=own)
    assert "(its 4 cells took 40 min 0 s of computing, 2 at a time)" in render_experiment(chapter, own).html
    with language("zh"):
        assert "其 4 个单元共计算了" in render_experiment(chapter, own).html


def test_a_run_under_half_a_second_is_not_said_to_take_0_s():
    from attnscale.report.experiments import duration_text

    assert duration_text(0.07) == "under 1 s"
    with language("zh"):
        assert duration_text(0.07) == "不到 1 秒"
    assert duration_text(0.0) == "0 s" and duration_text(0.6) == "1 s"


SCALE_VS_DK = {
    "table": [
        {"rule": "unscaled", "d_k": 16, "adam": {"verdict": "learns"}, "sgd_reference_lr": {"verdict": "learns"}},
        {
            "rule": "unscaled",
            "d_k": 256,
            "adam": {"verdict": "learns", "final_accuracy": {"mean": 0.97}},
            "sgd_reference_lr": {"verdict": "fails", "final_accuracy": {"mean": 0.41}, "lr": 0.3},
            "sgd_best_lr": {"verdict": "slower", "final_accuracy": {"mean": 0.93}, "lr": 0.03},
        },
        {
            "rule": "inverse_sqrt_dk",
            "d_k": 256,
            "adam": {"final_accuracy": {"mean": 0.98}},
            "sgd_reference_lr": {"final_accuracy": {"mean": 0.96}},
        },
    ]
}


def test_the_training_card_follows_the_verdicts_at_the_largest_d_k():
    card = headline.training_card(SCALE_VS_DK)
    assert card.label.startswith("training without ÷√d_k at d_k = 256") and card.href == "#exp-training"
    assert card.value == "fails with SGD"
    assert (
        "Adam 0.97, SGD 0.41 (1/√d_k: 0.98, 0.96)" in card.sub
        and "own best rate 0.03: 0.93, learns, but slower" in card.sub
    )
    changed = copy.deepcopy(SCALE_VS_DK)
    changed["table"][1]["sgd_reference_lr"]["verdict"] = "learns"
    assert headline.training_card(changed).value == "learns like 1/√d_k"
    changed["table"][1]["adam"]["verdict"] = "diverges"
    assert headline.training_card(changed).value == "diverges with Adam"
    with language("zh"):
        assert headline.training_card(changed).value == "用 Adam 时发散"
    assert headline.training_card({"table": []}) is None


def test_the_real_model_card_follows_the_perplexities():
    data = {
        "model": {"name": "SmolLM2-135M"},
        "unscaled_alpha": 8.0,
        "analysis": {"perplexity_alpha1": 10.0, "perplexity_unscaled": 250.0, "has_unscaled": True},
    }
    card = headline.real_model_card(data)
    assert (card.value, card.href) == ("perplexity ×25: much worse", "#exp-rescale")
    assert "perplexity 10 with 1/√d_k, 250 with none (α = 8)" in card.sub
    data["analysis"]["perplexity_unscaled"] = 10.2
    assert headline.real_model_card(data).value == "about the same (×1.02)"
    data["analysis"]["perplexity_unscaled"] = None
    assert headline.real_model_card(data).value == "no finite perplexity"


def _lm_row(rule, d_k, optimiser, verdict, bpb):
    return {"rule": rule, "d_k": d_k, "optimiser": optimiser, "verdict": verdict, "final_bpb": {"mean": bpb}}


LM = {
    "reference_rule": "inverse_sqrt_dk",
    "baselines": {"rows": [{"name": "bigram", "bpb": 3.33}, {"name": "trigram", "bpb": 2.52}]},
    "verdicts": [
        _lm_row("unscaled", 128, "adamw-own-best", "fails", 3.19),
        _lm_row("unscaled", 128, "sgd-own-best", "fails", 3.26),
        _lm_row("unscaled", 128, "sgd", "fails", 3.56),  # at 1/√d_k's rate: not the card's
        _lm_row("unscaled", 16, "adamw-own-best", "learns", 2.2),
        _lm_row("inverse_sqrt_dk", 128, "adamw-own-best", None, 2.34),
        _lm_row("inverse_sqrt_dk", 128, "sgd-own-best", None, 2.79),
    ],
}


def test_the_lm_card_follows_the_unscaled_verdicts_at_the_largest_d_k(tmp_path):
    assert headline.lm_card({"verdicts": []}) is None
    assert [c.href for c in headline.cards(tmp_path)] == []
    card = headline.lm_card(LM)
    assert (card.value, card.href) == (
        "does not reach the target within the budget",
        "#exp-lm",
    ) and "d_k = 128" in card.label
    assert "AdamW 3.19, SGD 3.26 (1/√d_k: 2.34, 2.79; a trigram table: 2.52)" in card.sub
    changed = copy.deepcopy(LM)
    changed["verdicts"][0]["verdict"] = "learns"
    assert headline.lm_card(changed).value == "fails with SGD"
    with language("zh"):
        assert headline.lm_card(changed).value == "用 SGD 时学不会"
    changed["verdicts"][1]["verdict"] = "slower"
    assert headline.lm_card(changed).value == "slower with SGD"


def test_bold_chinese_text_in_a_figure_prints_no_font_warning(caplog):
    """The page's figures set bold titles; the CJK font ships one regular face, which matplotlib then
    uses (as meant) without its "findfont: Failed to find font weight bold" reaching the terminal."""
    import io
    import logging

    from attnscale.report import fonts

    if fonts.find_cjk_font() is None:
        pytest.skip("no CJK font here (make fonts installs Debian's fonts-noto-cjk)")
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    families = fonts.matplotlib_families()
    with caplog.at_level(logging.INFO, logger="matplotlib.font_manager"):
        fig, ax = plt.subplots()
        ax.set_title("不缩放时的最大权重", fontweight="bold", family=families[-1])
        fig.savefig(io.BytesIO(), format="svg")
        plt.close(fig)
    assert not [r for r in caplog.records if "findfont" in r.getMessage()]


@pytest.mark.parametrize(
    "verdicts, value",
    [
        ({"adamw": "faster", "sgd": "faster"}, "learns faster than 1/√d_k"),
        ({"adamw": "faster", "sgd": "learns"}, "faster with AdamW"),
        ({"adam": "slower", "sgd": "fails"}, "fails with SGD"),  # the worst, where it holds
        ({"adam": "slower", "sgd": "slower"}, "learns, but slower"),
    ],
)
def test_a_cards_headline_names_the_worst_verdict_where_it_holds(verdicts, value):
    assert headline.training_value(verdicts) == value
    with language("zh"):
        assert headline.training_value(verdicts) not in ("", value)


def test_the_cards_are_set_as_prose():
    html = headline.cards_html([headline.Card("at d_k = 128", "learns like 1/√d_k", "a sub", "#x")])
    assert "d_k" not in html and "at dₖ = 128" in html and "1/√dₖ" in html
