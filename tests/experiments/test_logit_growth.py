"""Experiment B (logit-growth) with its QK-clip arm: strict-JSON cells and analysis, every chapter figure
computed in the analysis, and a chapter whose sentences follow the figures."""

from __future__ import annotations

import copy
import dataclasses
import json
import re

import pytest

pytest.importorskip("torch")

from attnscale import results  # noqa: E402
from attnscale.experiments.training import logit_growth, common as training  # noqa: E402
from attnscale.experiments.sweeps.runner import SerialBackend, run_sweep  # noqa: E402
from attnscale.store import ResultCache, to_jsonable  # noqa: E402
from attnscale.report.chapters import training_logits as chapter  # noqa: E402

TAU = 4.0  # low enough that the guard acts within a few steps


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    config = logit_growth.LogitGrowthConfig(
        lrs=(1e-3, 3e-1), steps=8, warmup=2, batch=4, log_every=4, corpus_chars=4000, tau=TAU
    )
    cells = config.cells()
    done = run_sweep(
        "logit-growth",
        cells,
        logit_growth.train_cell,
        ResultCache(tmp_path_factory.mktemp("lg") / "cells"),
        SerialBackend(),
    )
    # The data of the train/logit-growth result, as the sweep writes it.
    summary = {
        "cells": [{"cell": to_jsonable(c), "result": d.result, "seconds": d.seconds} for c, d in zip(cells, done)],
        "analysis": logit_growth.analyse(config, cells, [d.result for d in done]),
    }
    return config, summary


def envelope(summary) -> results.Envelope:
    return results.Envelope(kind=chapter.KIND, data=json.loads(json.dumps(summary)), quick=True)


def test_cells_and_analysis_are_strict_json_and_hold_every_arm(run):
    config, summary = run
    results.strict_jsonable({"cells": summary["cells"], "analysis": summary["analysis"]})
    a = summary["analysis"]
    assert [(r["variant"], r["lr"]) for r in a["table"]] == [
        (v, lr) for v in logit_growth.VARIANTS for lr in config.lrs
    ]
    assert len(config.cells()) == 3 * len(config.lrs)
    clip = [c["result"] for c in summary["cells"] if c["result"]["variant"] == "qk_clip"]
    assert sum(r["clipped_heads"] for r in clip) == a["guard"]["clipped_heads"] > 0
    assert all(not r["attention_fallbacks"] for r in clip)
    unguarded = [c["result"] for c in summary["cells"] if c["result"]["variant"] != "qk_clip"]
    assert all(r["clipped_heads"] == 0 for r in unguarded)


def test_the_analysis_computes_what_the_chapter_shows(run):
    config, summary = run
    a = summary["analysis"]
    for v in logit_growth.VARIANTS:
        mine = [r for r in a["table"] if r["variant"] == v]
        top = min(mine, key=lambda r: r["final_loss_mean"])
        assert a["best"][v] == {"final_loss": top["final_loss_mean"], "lr": top["lr"]}
    low = {r["variant"]: r["final_loss_mean"] for r in a["table"] if r["lr"] == min(config.lrs)}
    assert a["low_lr_gap"]["gap"] == pytest.approx(min(low[v] - a["best"][v]["final_loss"] for v in low))
    qk = [r for r in a["table"] if r["variant"] == "qk_layernorm"]
    assert a["collapsed"]["lrs"] == [r["lr"] for r in qk if r["max_logit_final_mean"] < r["max_logit_init_mean"]]
    g = a["guard"]
    peaks = [c["result"]["max_logit_train_peak"] for c in summary["cells"] if c["result"]["variant"] == "qk_clip"]
    assert g["train_peak"] == max(peaks) and g["train_peak_over_tau"] == pytest.approx(max(peaks) / TAU)
    assert a["setup"]["tau"] == TAU and a["setup"]["parameters"] == summary["cells"][0]["result"]["parameters"]


def test_a_diverged_run_is_null_with_a_reason_and_counts_as_the_initial_loss(run, no_figures):
    config, summary = run
    cells = config.cells()
    res = [copy.deepcopy(c["result"]) for c in summary["cells"]]
    i = next(j for j, c in enumerate(cells) if c.variant == "baseline" and c.lr == max(config.lrs))
    res[i].update(final_loss=None, final_loss_reason="diverged at step 5", diverged_at=5)
    a = logit_growth.analyse(config, cells, res)
    results.strict_jsonable(a)
    row = next(r for r in a["table"] if r["variant"] == "baseline" and r["lr"] == max(config.lrs))
    assert row["final_loss_mean"] is None and row["final_loss_reason"] == "all 1 runs diverged" and row["diverged"] == 1
    others = [r["final_loss"] for j, r in enumerate(res) if cells[j].variant == "baseline"]
    assert a["lr_sensitivity"]["baseline"]["mean"] == pytest.approx(
        training.lr_sensitivity([training.capped_loss(loss, row["init_loss"]) for loss in others])
    )
    assert "—" in chapter.render(envelope({**summary, "analysis": a}))


@pytest.fixture
def no_figures(monkeypatch):
    """The text tests need no SVGs (drawing them is most of a render's time)."""
    for name in ("logits_figure", "loss_figure"):
        monkeypatch.setattr(chapter, name, lambda *a: None)
    monkeypatch.setattr(chapter, "responsive_figure", lambda *a: "")


def paragraphs(html: str) -> str:
    import html as html_

    return html_.unescape(" ".join(re.findall(r"<p>(.*?)</p>", html, re.S)))


@pytest.mark.parametrize("lang", ["en", "zh"], indirect=True)
def test_the_chapter_renders_the_envelope(run, lang):
    _, summary = run
    html = chapter.render(envelope(summary))
    assert html.count("<figure") == 2 and html.count("<svg") == 4 and "<table" in html
    a = summary["analysis"]
    assert f"{a['setup']['parameters']:,}" in html
    assert f"{a['lr_sensitivity']['qk_clip']['mean']:.3f}" in html
    assert f"{a['guard']['train_peak']:.4g}" in html


def test_the_guard_sentence_follows_the_figures(run, no_figures):
    _, summary = run
    data = copy.deepcopy(summary)
    g = data["analysis"]["guard"]
    g.update(train_peak=3.5, train_peak_over_tau=3.5 / TAU, clipped_heads=7)
    text = paragraphs(chapter.render(envelope(data)))
    assert "held every training step's largest logit at or under" in text and "7 head clips" in text
    g.update(train_peak=9.0, train_peak_over_tau=9.0 / TAU)
    text = paragraphs(chapter.render(envelope(data)))
    assert "2.25× τ" in text and "before that step's clip" in text and "held every" not in text
    g.update(clipped_heads=0, train_peak=1.5)
    text = paragraphs(chapter.render(envelope(data)))
    assert "QK-clip never acted" in text and "1.5" in text


def test_the_low_rate_and_collapse_sentences_appear_only_when_measured(run, no_figures):
    _, summary = run
    data = copy.deepcopy(summary)
    a = data["analysis"]
    a["low_lr_gap"]["gap"] = 0.37
    a["collapsed"]["highest"] = a["lr_low"]
    text = paragraphs(chapter.render(envelope(data)))
    assert "0.37 nats or more" in text and "not measured here" in text and "went from" in text
    a["low_lr_gap"]["gap"] = 0.0
    a["collapsed"]["highest"] = None
    text = paragraphs(chapter.render(envelope(data)))
    assert "nats or more" not in text and "went from" not in text
    a["best"]["qk_clip"] = {"final_loss": 1.234, "lr": 0.07}
    assert "1.234 at lr 0.07" in paragraphs(chapter.render(envelope(data)))


def test_cells_refuse_qk_clip_with_qk_layernorm_and_bad_tau():
    from attnscale.errors import InputError

    with pytest.raises(InputError, match="qk_clip: QK-clip rescales W_Q and W_K"):
        logit_growth.LogitCell(1e-3, True, 0, qk_clip=10.0)
    with pytest.raises(InputError, match="qk_clip: expected None or a finite"):
        logit_growth.LogitCell(1e-3, False, 0, qk_clip=0.0)
    with pytest.raises(InputError, match="tau: expected a finite number > 0"):
        dataclasses.replace(logit_growth.LogitGrowthConfig(), tau=-1.0)


def test_the_models_sdpa_path_equals_the_projects_attention():
    """The cell's GPT on plain SDPA (what the monitor rides) computes what the project's attention
    does, QK-layernorm or not; its options are the proxy's (untied head, no rescaled residuals)."""
    import torch

    from attnscale.experiments.training.gpt import GPT
    from attnscale.scales import InverseSqrtDk

    for qk_layernorm in (False, True):
        config = logit_growth.gpt_config(logit_growth.LogitCell(1e-3, qk_layernorm, 0, context=16, d_model=32), 13)
        assert (config.d_k, config.init, config.tied_head, config.qk_layernorm) == (8, "fan_in", False, qk_layernorm)
        torch.manual_seed(0)
        fused = GPT(config, InverseSqrtDk(), figures=False)
        explicit = GPT(config, InverseSqrtDk(), backend="chunked", figures=True)
        explicit.load_state_dict(fused.state_dict())
        x = torch.randint(0, 13, (3, 16), generator=torch.Generator().manual_seed(1))
        with torch.no_grad():
            torch.testing.assert_close(fused(x), explicit(x), rtol=1e-5, atol=1e-5)
        assert fused.lm_head is not None and (fused.blocks[0].attn.q_norm is not None) == qk_layernorm
        assert explicit.blocks[0].attn.figures is not None and fused.blocks[0].attn.figures is None
