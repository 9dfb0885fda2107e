"""The training chapters render from their results alone (both languages), their sentences follow the
data, and the train CLI is wired.

The results are built here from real (tiny) cells through the experiments' own ``train_cell`` and
``analyse``; the scale-vs-dk one goes through ``results.write``/``results.read`` (strict JSON) into the
envelope its chapter receives."""

from __future__ import annotations

import copy
import re

import pytest

pytest.importorskip("torch")

from attnscale import results  # noqa: E402
from attnscale.cli import main  # noqa: E402
from attnscale.experiments.training import logit_growth, scale_vs_dk  # noqa: E402
from attnscale.experiments.sweeps.runner import run_sweep  # noqa: E402
from attnscale.i18n import language  # noqa: E402
from attnscale.report.chapters import EXPERIMENT_CHAPTERS, training, training_chain, training_logits  # noqa: E402
from attnscale.store import ResultCache, to_jsonable  # noqa: E402

SCALE = scale_vs_dk.ScaleVsDkConfig(
    rules=("inverse_sqrt_dk", "unscaled"), d_ks=(16,), seeds=1, sgd_lrs=(0.1, 0.3), steps=12, log_every=4, final_eval=64
)
LOGITS = logit_growth.LogitGrowthConfig(lrs=(1e-3, 1e-1), steps=8, warmup=2, batch=4, log_every=4, corpus_chars=4000)


def _sweep(name, module, config, root):
    cells = config.cells()
    out = run_sweep(name, cells, module.train_cell, ResultCache(root / "cells"))
    return cells, [d.result for d in out], [d.seconds for d in out]


@pytest.fixture(scope="module")
def scale_env(tmp_path_factory):
    root = tmp_path_factory.mktemp("scale")
    cells, out, seconds = _sweep("scale-vs-dk", scale_vs_dk, SCALE, root)
    data = {
        "description": "test",
        "cells": [{"cell": to_jsonable(c), "result": r, "seconds": s} for c, r, s in zip(cells, out, seconds)],
        "analysis": scale_vs_dk.analyse(SCALE, cells, out),
        "wall_s": 3.25,
    }
    results.write(training.KIND, data, config=to_jsonable(SCALE), seed=0, quick=True, root=root)
    return results.read(training.KIND, root=root, quick=True)


@pytest.fixture(scope="module")
def logit_summary(tmp_path_factory):
    root = tmp_path_factory.mktemp("logits")
    cells, out, seconds = _sweep("logit-growth", logit_growth, LOGITS, root)
    return {
        "config": to_jsonable(LOGITS),
        "cells": [{"cell": to_jsonable(c), "result": r, "seconds": s} for c, r, s in zip(cells, out, seconds)],
        "analysis": logit_growth.analyse(LOGITS, cells, out),
    }


def _render_logits(summary: dict) -> str:
    """The logit-growth chapter on ``summary``: as an envelope where the chapter takes one (``KIND``,
    render(env), the results contract), else as the summary dict itself."""
    if not hasattr(training_logits, "KIND"):
        return training_logits.render(summary)
    data = {k: v for k, v in summary.items() if k != "config"}
    return training_logits.render(results.Envelope(kind=training_logits.KIND, data=data, config=summary["config"]))


def _words(html: str) -> str:
    html = re.sub(r"<svg.*?</svg>", " ", html, flags=re.S)
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html)).replace("&#x27;", "'")


def _text_only(env) -> str:
    """The chapter's words without its figures (seconds each to draw; the text tests do not read them)."""
    from unittest import mock

    with (
        mock.patch.object(training, "_curves_figure", lambda *a: None),
        mock.patch.object(training_chain, "_chain_figure", lambda *a: None),
        mock.patch.object(training, "responsive_figure", lambda draw, alt, caption: ""),
        mock.patch.object(training_chain, "responsive_figure", lambda draw, alt, caption: ""),
    ):
        return _words(training.render(env))


def test_chapters_are_registered():
    assert "training" in EXPERIMENT_CHAPTERS and "training_logits" in EXPERIMENT_CHAPTERS
    assert training.KIND == "train/scale-vs-dk" and training.KIND in results.KINDS


@pytest.mark.slow
@pytest.mark.parametrize("lang", ["en", "zh"], indirect=True)
def test_scale_vs_dk_chapter_shows_the_result(scale_env, lang):
    a = scale_env.data["analysis"]
    html = training.render(scale_env)
    assert html.count("<figure") == 3 and html.count("<svg") == 6 and "<table" in html  # each for desktop and phone
    assert f"{a['single_key_ceiling']:.3f}" in html
    unscaled = next(r for r in a["chain_rule"]["rows"] if r["rule"] == "unscaled" and r["gradient"] == "grad_wq")
    assert f"{unscaled['ratio']:.2f}" in html
    tuned = a["sgd_tuning"][0]
    assert (
        f"dₖ = 16: {'‹' if tuned['edge'] == 'low' else '›' if tuned['edge'] == 'high' else ''}{tuned['lr']:g}" in html
    )
    assert ("快速扫描" if lang == "zh" else "Quick sweep") in html  # read back as quick: said so


def test_the_single_key_sentence_follows_the_two_ceilings(scale_env):
    """ "The same as guessing" only when the analysis finds the two ceilings equal; else both numbers."""
    a = scale_env.data["analysis"]
    assert a["single_key_is_prior"] == (a["single_key_ceiling"] == pytest.approx(a["prior_ceiling"]))
    assert ("the same as guessing" in _text_only(scale_env)) == a["single_key_is_prior"]
    other = copy.deepcopy(scale_env.data)
    other["analysis"].update(single_key_is_prior=False, prior_ceiling=a["single_key_ceiling"] / 2)
    env = results.Envelope(kind=training.KIND, data=other, quick=True)
    for lang, said in (("en", "the same as guessing"), ("zh", "相同")):
        with language(lang):
            intro = _text_only(env).split("W_Q")[0]
        assert f"{a['single_key_ceiling'] / 2:.3f}" in intro and said not in intro


def test_logit_growth_chapter_shows_the_summary(logit_summary):
    html = _render_logits(logit_summary)
    assert html.count("<figure") == 2 and html.count("<svg") == 4  # each for desktop and phone
    sens = logit_summary["analysis"]["lr_sensitivity"]["baseline"]["mean"]
    assert f"{sens:.3f}" in html
    params = logit_summary["cells"][0]["result"]["parameters"]
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


def test_cli_table_prints_the_analysis(scale_env, capsys):
    from attnscale.cli.train_tables import _print_scale_vs_dk

    a = scale_env.data["analysis"]
    _print_scale_vs_dk(a)
    out = capsys.readouterr().out
    assert f"d_k=16: {a['sgd_tuning'][0]['lr']:g}" in out
    line = next(x for x in out.splitlines() if x.startswith("unscaled"))
    adam = a["table"][1]["adam"]
    assert f"{adam['verdict']} {adam['seeds_agreeing']}/{adam['seeds']}" in line


@pytest.mark.slow
def test_training_chapters_figures_are_drawn_for_a_phone(scale_env, logit_summary):
    from helpers.report_data import figures_readable_on_a_phone

    figures_readable_on_a_phone(training.render(scale_env))
    with language("zh"):
        figures_readable_on_a_phone(_render_logits(logit_summary))
