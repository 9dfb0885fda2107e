"""Experiment early-warning: a quick sweep runs and its result renders; the analysis on synthetic runs
with known answers (where each detector alerts, the lead times, the false alarms); the chapter's
sentences follow the numbers."""

from __future__ import annotations

import copy
import json
import math

import pytest

pytest.importorskip("torch")

from attnscale import results  # noqa: E402
from attnscale.experiments.sweeps.runner import SerialBackend, run_sweep  # noqa: E402
from attnscale.experiments.training import early_warning  # noqa: E402
from attnscale.experiments.training.early_warning import analysis  # noqa: E402
from attnscale.report.chapters import early_warning as chapter  # noqa: E402
from attnscale.report.chapters import early_warning_words as words  # noqa: E402
from attnscale.store import ResultCache, to_jsonable  # noqa: E402


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    config = early_warning.EarlyWarningConfig(steps=12, warmup=2, tail=2, batch=4, corpus_chars=4000, seeds=1)
    cells = config.cells()
    done = run_sweep(
        "early-warning",
        cells,
        early_warning.train_cell,
        ResultCache(tmp_path_factory.mktemp("ew") / "cells"),
        SerialBackend(),
    )
    return {
        "cells": [{"cell": to_jsonable(c), "result": d.result, "seconds": d.seconds} for c, d in zip(cells, done)],
        "analysis": early_warning.analyse(config, cells, [d.result for d in done]),
    }


def envelope(data) -> results.Envelope:
    return results.Envelope(kind=chapter.KIND, data=json.loads(json.dumps(data, allow_nan=False)), quick=True)


def test_quick_cells_record_every_step(quick):
    for entry in quick["cells"]:
        r = entry["result"]
        n = r["steps_run"]
        assert n == 12 and len(r["loss"]) == len(r["grad_norm"]) == n
        assert set(r["layers"]) == {"blocks.0.attn", "blocks.1.attn"}
        for figures in r["layers"].values():
            assert set(figures) == set(early_warning.train.LAYER_FIGURES)
            assert all(len(v) == n for v in figures.values())
        assert all(x is not None and x > 0 for x in r["loss"] + r["grad_norm"])
    assert [row["detector"] for row in quick["analysis"]["table"]] == list(analysis.DETECTORS)


def test_the_chapter_renders_the_quick_result(quick):
    html = chapter.render(envelope(quick))
    assert html.count("<figure") == 1 and html.count("<svg") == 2 and html.count("<table") == 2


@pytest.fixture
def no_figures(monkeypatch):
    """The text tests need no SVGs (drawing them is most of a render's time)."""
    monkeypatch.setattr(chapter, "responsive_figure", lambda *a: "")


@pytest.mark.parametrize("lang", ["en", "zh"], indirect=True)
def test_the_chapter_words_in_both_languages(quick, lang, no_figures):
    html = chapter.render(envelope(quick))
    assert html.count("<table") == 2 and ("发散" in html) == (lang == "zh")


# --- the analysis on synthetic runs whose answers are known -------------------------------------------------

STEPS, BREAK, GROW = 200, 150, 100  # the loss jumps at step BREAK + 1; the logits grow from step GROW + 1
# A small grid of the attention detector's settings: the analysis replays each over every run.
GRID = {"grid_z": (6.0, 12.0), "grid_window": (64,), "grid_share": (0.5,)}


def _run(diverges: bool) -> dict:
    wiggle = [0.002 * (-1) ** t for t in range(STEPS)]
    loss = [1.0 + 3.0 * math.exp(-t / 10) + w for t, w in enumerate(wiggle)]
    logit = [5.0 + w for w in wiggle]
    if diverges:
        loss = [2.5 if t >= BREAK else x for t, x in enumerate(loss)]
        logit = [x * math.exp(max(0, t - GROW + 1) / 10) for t, x in enumerate(logit)]
    layer = {
        "max_abs_logit": logit,
        "entropy_min": [1.0 + w for w in wiggle],
        "saturated_fraction": [0.0] * STEPS,
        "rows_broken": [0] * STEPS,
    }
    return {
        "steps_run": STEPS,
        "loss": loss,
        "grad_norm": [1.0 + w for w in wiggle],
        "layers": {"blocks.0.attn": layer},
        "online": {"config": {}, "alerts": [], "count": 0},
    }


@pytest.fixture(scope="module")
def synthetic():
    config = early_warning.EarlyWarningConfig(steps=STEPS, warmup=50, seeds=1, arms=("plain", "low_lr"), **GRID)
    cells = config.cells()
    return cells, analysis.analyse(config, cells, [_run(True), _run(False)])


def test_each_detector_alerts_where_its_rule_says(synthetic):
    _, a = synthetic
    bad, good = a["runs"]
    assert bad["diverged_at"] == BREAK + 1 and good["diverged_at"] is None
    assert bad["olmo"] == BREAK + 1  # the jump is far above mean + 6σ of a quiet history
    assert bad["lightning"] is None  # 2.5 < 3 × the mean of 10 (≈1): Lightning never calls it a spike
    assert GROW < bad["attention"] < GROW + 10 and bad["attention_figure"] == "max_abs_logit"
    assert good["attention"] is None and good["olmo"] is None and good["lightning"] is None


def test_lead_times_and_false_alarms(synthetic):
    _, a = synthetic
    rows = {r["detector"]: r for r in a["table"]}
    att = rows["attention"]
    assert att["diverged_runs"] == 1 and att["healthy_runs"] == 1 and att["false_alarm_runs"] == 0
    assert att["lead_median"] == att["lead_min"] == BREAK + 1 - a["runs"][0]["attention"] > 40
    assert rows["olmo"]["lead_median"] == 0 and rows["olmo"]["fired_after"] == 1
    assert rows["lightning"]["missed"] == 1 and rows["lightning"]["lead_median"] is None
    assert words.comparison_key(a["table"]) == "earlier"
    assert a["proposal"] is not None and a["proposal"]["false_alarm_runs"] == 0


def test_a_run_built_to_diverge_that_did_not_is_no_healthy_run():
    runs = [
        {"diverged_at": None, "built_to": "diverge", "attention": 5},
        {"diverged_at": None, "built_to": "healthy", "attention": None},
        {"diverged_at": 90, "built_to": "healthy", "attention": 100},
    ]
    row = analysis.detector_row(runs, "attention")
    assert row["diverged_runs"] == 1 and row["healthy_runs"] == 1 and row["false_alarm_runs"] == 0
    assert row["fired_after"] == 1 and row["lead_median"] == row["lead_min"] == -10


# --- the sentences follow the numbers ----------------------------------------------------------------------


def _table(att_lead, peer_lead, diverged=3):
    def row(d, lead):
        return {
            "detector": d,
            "diverged_runs": diverged,
            "fired_before": 0 if lead is None else 3,
            "lead_median": lead,
            "healthy_runs": 4,
            "false_alarm_runs": 0,
        }

    return [
        row("attention", att_lead),
        row("attention_online", att_lead),
        row("olmo", peer_lead),
        row("lightning", None),
    ]


@pytest.mark.parametrize(
    "att, peer, key",
    [
        (50, 10, "earlier"),
        (10, 50, "later"),
        (20, 20, "same"),
        (None, 5, "attention_silent"),
        (30, None, "attention_only"),
        (None, None, "neither"),
    ],
)
def test_the_comparison_follows_the_lead_times(att, peer, key):
    assert words.comparison_key(_table(att, peer)) == key
    assert words.comparison_key(_table(att, peer, diverged=0)) == "none_diverged"


def test_the_sentences_change_with_the_numbers(synthetic):
    _, a = synthetic
    later = words.comparison_sentence(_table(10, 50))
    assert "attention warns later than the loss, by 40 steps" in later
    assert "attention warns 40 steps earlier" in words.comparison_sentence(_table(50, 10))
    row = dict(a["table"][0])
    assert words.false_alarm_key(row) == "none"
    row["false_alarm_runs"] = 2
    assert "false alarm in 2" in words.false_alarm_sentence(row)
    assert "false alarm in 2 of the" in words.online_false_alarm_sentence(row)
    row["false_alarm_runs"] = 0
    assert "no alarm on the" in words.online_false_alarm_sentence(row)
    assert words.proposal_key(None, a["default_config"]) == "none"
    proposal = copy.deepcopy(a["proposal"])
    proposal["config"].update(
        z=a["default_config"]["z"],
        window=a["default_config"]["window"],
        saturated_share=a["default_config"]["saturated_share"],
    )
    assert words.proposal_key(proposal, a["default_config"]) == "default"
    proposal["config"]["z"] += 1
    assert words.proposal_key(proposal, a["default_config"]) == "other"


def test_the_chapter_renders_a_divergence(synthetic, no_figures):
    cells, a = synthetic
    results_ = [_run(True), _run(False)]
    data = {"cells": [{"cell": to_jsonable(c), "result": r} for c, r in zip(cells, results_)], "analysis": a}
    html = chapter.render(envelope(data))
    assert "attention warns" in html and "earlier than the loss" in html


def test_the_figures_sentence_counts_what_raised_the_first_alerts():
    runs = [{"attention_figure": f} for f in ("saturated_fraction", "max_abs_logit", "saturated_fraction", None)]
    said = words.figures_sentence(runs)
    assert "the share of saturated rows: 2" in said and "the largest |logit|: 1" in said
    assert words.figures_sentence([{"attention_figure": None}]) is None


def test_the_proposal_is_silent_on_healthy_runs_and_warns_most():
    def row(z, before, median, false):
        return {"config": {"z": z}, "fired_before": before, "lead_median": median, "false_alarm_runs": false}

    noisy, rare, common = row(4.0, 9, 400, 1), row(16.0, 2, 300, 0), row(8.0, 7, 120, 0)
    assert analysis.proposal([noisy, rare, common]) is common  # the false alarm rules 4.0 out; 7 > 2 runs
    assert analysis.proposal([noisy, row(12.0, 7, 120, 0), common])["config"]["z"] == 12.0  # ties: the larger z
    assert analysis.proposal([noisy, row(8.0, 0, None, 0)]) is None


def test_a_run_stopped_early_is_the_full_runs_first_steps(quick):
    entry = quick["cells"][0]
    cell = early_warning.WarnCell(**entry["cell"])
    short = early_warning.train_cell(cell, stop_after=5)
    full = entry["result"]
    assert short["steps_run"] == 5 and short["loss"] == full["loss"][:5] and short["grad_norm"] == full["grad_norm"][:5]
    assert {k: v[:5] for k, v in full["layers"]["blocks.0.attn"].items()} == short["layers"]["blocks.0.attn"]


def test_the_in_sample_sentence_names_the_peers_lead_and_false_alarms():
    table = _table(50, 10)
    said = words.in_sample_sentence({"config": {}}, table)
    assert "in-sample" in said and "a median 10 steps ahead" in said and "false alarm in 0 of the 4" in said
    table[2]["false_alarm_runs"] = 3
    assert "false alarm in 3 of the 4" in words.in_sample_sentence({"config": {}}, table)
    assert "no loss-spike detector alerted" in words.in_sample_sentence({"config": {}}, _table(50, None))
    assert words.in_sample_sentence(None, table) is None


def test_the_timeline_marks_each_first_alert_and_the_supported_settings(synthetic):
    cells, a = synthetic
    data = [{"cell": to_jsonable(c), "result": r} for c, r in zip(cells, [_run(True), _run(False)])]
    fig = chapter.timeline_figure(data, a)
    marked = {
        line.get_label(): line.get_xdata()[0]
        for ax in fig.axes
        for line in ax.get_lines()
        if len(line.get_xdata()) == 1
    }
    assert marked[chapter.SUPPORTED] == a["proposal"]["first_alerts"][0]
    assert marked[words.DETECTOR_NAMES["olmo"]] == BREAK + 1


def test_the_timing_sentence_says_whether_the_alert_came_early():
    runs = [{"diverged_at": 600}, {"diverged_at": 700}, {"diverged_at": None}]
    early = words.timing_sentence({"first_alerts": [60, 80, 5]}, runs)
    assert "median step 70 of runs that diverged at a median step 650" in early and "breaking early" in early
    assert words.timing_key([500, 560], [600, 700]) == "late"
    assert "second half" in words.timing_sentence({"first_alerts": [500, 560, None]}, runs)
    assert words.timing_sentence({"first_alerts": [None, None, 5]}, runs) is None
