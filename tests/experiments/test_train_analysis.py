"""scale-vs-dk analysis and chapter on hand-made cell results (no training, milliseconds): the verdicts,
the SGD tuning's edge check, the findings, strict JSON, and the chapter's sentences following the data.

Each test builds a sweep's results by hand, changes one thing in them, runs the real ``analyse`` and the
real ``render``, and checks that the figures and the words change with it."""

from __future__ import annotations

import copy
import json
import re

import pytest

from attnscale.i18n import language
from attnscale.experiments.training import scale_vs_dk as svd
from attnscale.results import Envelope, strict_jsonable

RULES = ("inverse_sqrt_dk", "unscaled", "softcap_unscaled")
CONFIG = svd.ScaleVsDkConfig(
    rules=RULES, d_ks=(16, 64), seeds=2, sgd_lrs=(0.03, 0.1, 0.3), steps=40, log_every=10, final_eval=64
)


def fake_result(
    reach_at: int | None,
    *,
    steps: int = 40,
    every: int = 10,
    std0: float = 4.0,
    std1: float = 4.0,
    sat0: float = 0.0,
    sat1: float = 0.0,
    grad_wq: float = 0.1,
    factor: float = 0.25,
    diverge_at: int | None = None,
    zero: bool = False,
) -> dict:
    """A cell result as train_cell writes it: accuracy 1.0 from step ``reach_at`` (None: 0.3 throughout),
    logit sd and saturated fraction moving linearly from (std0, sat0) to (std1, sat1) over the logged steps."""
    last = steps if diverge_at is None else diverge_at
    acc = [1.0 if reach_at is not None and t >= reach_at else 0.3 for t in range(last)]
    logged = list(range(0, min(last, steps), every))
    log = []
    for i, step in enumerate(logged):
        w = i / max(1, len(logged) - 1)
        log.append(
            {
                "step": step,
                "loss": 1.0,
                "accuracy": acc[step],
                "grad_wq": grad_wq,
                "grad_wk": grad_wq,
                "grad_zero": zero and i == len(logged) - 1,
                "entropy_median": [1.0, 1.0],
                "max_logit": 3 * (std0 + w * (std1 - std0)),
                "logit_std": std0 + w * (std1 - std0),
                "saturated_frac": sat0 + w * (sat1 - sat0),
            }
        )
    diverged = diverge_at is not None
    init = {
        "grad_wq": grad_wq,
        "grad_wk": grad_wq,
        "factor": factor,
        "jacobian_frobenius_rms": 0.5,
        "effective_jacobian_rms": 0.5,
        "wq_factor": grad_wq / 2,
        "wk_factor": grad_wq / 2,
        "logit_std": std0,
        "max_weight_mean": 0.5 + sat0 / 2,
    }
    return {
        "final_accuracy": None if diverged else acc[-1],
        "final_loss": None if diverged else 0.5,
        "diverged": diverged,
        "diverged_at": diverge_at,
        "grad_zero_ever": zero,
        "init": init,
        "loss": [1.0] * len(acc),
        "accuracy": acc,
        "log": log,
    }


def base_results(cells) -> list[dict]:
    """1/√d_k and soft-cap learn at step 10, unscaled at step 25 (slower) with Adam and fails with SGD; the
    best SGD rate is 0.1 (0.03 slower, 0.3 fails); the unscaled gradient at step 0 is 3× the scaled one."""
    out = []
    for c in cells:
        scaled = c.rule != "unscaled"
        grad = 0.1 if c.rule == "inverse_sqrt_dk" else 0.3
        factor = 1 / c.d_k**0.5 if c.rule == "inverse_sqrt_dk" else 1.0
        if c.optimizer == "adam":
            reach = 10 if scaled else 25
        else:
            reach = {0.03: 20, 0.1: 10, 0.3: None}[c.lr] if scaled else None
        out.append(
            fake_result(
                reach,
                grad_wq=grad,
                factor=factor,
                std0=4.0,
                std1=40.0 if not scaled else 6.0,
                sat0=0.1,
                sat1=0.8 if not scaled else 0.05,
            )
        )
    return out


def analyse(change=None, config=CONFIG):
    cells = config.cells()
    results = base_results(cells)
    if change:
        for c, r in zip(cells, results):
            change(c, r)
    return svd.analyse(config, cells, results)


def render(analysis, quick=False, wall_s=12.0, figures=False, seconds=()) -> str:
    """The chapter's HTML; without ``figures`` the (slow, seconds each) SVGs are left out: the words and
    tables are what these tests read. ``seconds``: each cell's recorded time (its ``seconds``)."""
    from unittest import mock

    from attnscale.report.chapters import training, training_chain

    cells = [{"cell": {}, "result": {}, "seconds": s} for s in seconds]
    env = Envelope(
        kind=training.KIND,
        data={"description": "", "cells": cells, "analysis": analysis, "wall_s": wall_s},
        quick=quick,
    )
    if figures:
        return training.render(env)
    caption_only = lambda draw, alt, caption: f"<figure>{caption}</figure>"  # noqa: E731
    with (
        mock.patch.object(training, "_curves_figure", lambda *a: None),
        mock.patch.object(training_chain, "_chain_figure", lambda *a: None),
        mock.patch.object(training, "responsive_figure", caption_only),
        mock.patch.object(training_chain, "responsive_figure", caption_only),
    ):
        return training.render(env)


def text(html: str) -> str:
    html = re.sub(r"<svg.*?</svg>", " ", html, flags=re.S)
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html)).replace("&#x27;", "'")


@pytest.fixture(scope="module")
def base():
    return analyse()


# --- verdicts and tuning ---------------------------------------------------------------------------


def test_seeds_verdict_takes_the_majority_and_breaks_ties_toward_severe():
    from attnscale.experiments.training.common import seeds_verdict

    assert seeds_verdict(["learns", "learns", "fails"]) == ("learns", 2)
    assert seeds_verdict(["learns", "fails"]) == ("fails", 1)
    assert seeds_verdict(["slower", "learns", "diverges"]) == ("diverges", 1)
    assert seeds_verdict(["faster", "learns"]) == ("learns", 1) and seeds_verdict([]) == (None, 0)


def test_verdicts_follow_the_steps_against_the_reference(base):
    v = {(e["rule"], e["d_k"], e["optimiser"], e["lr_choice"]): e for e in base["verdicts"]}
    assert v[("inverse_sqrt_dk", 16, "adam", "adam")]["verdict"] == "learns"
    slower = v[("unscaled", 16, "adam", "adam")]
    assert slower["verdict"] == "slower" and slower["seeds_agreeing"] == 2
    # The running accuracy (window 10, 0.3 before the jump to 1.0) first reaches 0.9 eight steps after the
    # jump: steps 18 (reference) and 33 (unscaled); the ratio counts batches seen, (t + 1) / (t_ref + 1).
    assert svd.steps_to_target(fake_result(10), 0.9, 10) == 18 and svd.steps_to_target(fake_result(25), 0.9, 10) == 33
    assert slower["steps_ratio"] == pytest.approx(34 / 19)
    assert v[("softcap_unscaled", 64, "adam", "adam")]["verdict"] == "learns"
    assert v[("unscaled", 64, "sgd", "tuned_for_reference")]["verdict"] == "fails"
    keys = {"rule", "d_k", "optimiser", "lr", "verdict", "seeds", "seeds_agreeing", "steps_ratio"}
    assert all(keys <= set(e) and e["verdict"] in svd.VERDICTS for e in base["verdicts"])


def test_like_reference_threshold_separates_learns_from_slower():
    # Unscaled with Adam jumping at 15 instead of 25: (23 + 1) / (18 + 1) < 1.5, so "learns".
    def at_15(c, r):
        if c.rule == "unscaled" and c.optimizer == "adam":
            r.update(fake_result(15, grad_wq=0.3, factor=1.0))

    v = {
        (e["rule"], e["d_k"], e["optimiser"]): e["verdict"]
        for e in analyse(at_15)["verdicts"]
        if e["lr_choice"] == "adam"
    }
    assert v[("unscaled", 16, "adam")] == "learns"


def test_diverged_runs_are_kept_shown_and_strict_json():
    def diverge(c, r):
        if c.rule == "unscaled" and c.optimizer == "sgd" and c.lr == 0.1:
            r.update(fake_result(None, diverge_at=12, grad_wq=0.3, factor=1.0))

    a = analyse(diverge)
    strict_jsonable(a)  # no NaN/inf anywhere
    json.dumps(a, allow_nan=False)
    row = next(r for r in a["table"] if r["rule"] == "unscaled" and r["d_k"] == 16)
    assert row["sgd_reference_lr"]["diverged"] == 2 and row["sgd_reference_lr"]["verdict"] == "diverges"
    assert row["sgd_reference_lr"]["final_accuracy"]["mean"] is None
    assert "÷2" in render(a) and "diverges 2/2" in text(render(a))


def test_tuned_rate_inside_the_grid_is_found_and_an_edge_is_said(base):
    assert [t["lr"] for t in base["sgd_tuning"]] == [0.1, 0.1]
    assert all(t["edge"] is None for t in base["sgd_tuning"])
    assert "inside the grid at every dₖ" in text(render(base))

    def best_is_lowest(c, r):
        if c.rule == "inverse_sqrt_dk" and c.optimizer == "sgd" and c.d_k == 64:
            r.update(fake_result({0.03: 5, 0.1: 10, 0.3: None}[c.lr], grad_wq=0.1, factor=0.125))

    a = analyse(best_is_lowest)
    assert [(t["lr"], t["edge"]) for t in a["sgd_tuning"]] == [(0.1, None), (0.03, "low")]
    words = text(render(a))
    assert "At dₖ = 64 it lies on the grid's edge" in words and "inside the grid at every" not in words
    with language("zh"):
        assert "最佳学习率可能在网格之外" in text(render(a))


# --- findings and the sentences they choose ----------------------------------------------------------


def test_step0_gradient_sentence_follows_which_is_larger(base):
    g = base["findings"]["gradient_step0"]["grad_wq"]
    assert g["direction"] == "larger" and [r["ratio"] for r in g["rows"]] == pytest.approx([3.0, 3.0])
    assert [r["scale_alone"] for r in g["rows"]] == pytest.approx([4.0, 8.0])
    assert "W_Q is larger without the scale" in text(render(base))

    def smaller(c, r):
        if c.rule == "unscaled":
            r["init"]["grad_wq"] = r["init"]["grad_wk"] = 0.05

    words = text(render(analyse(smaller)))
    assert "W_Q is smaller without the scale" in words and "W_Q is larger" not in words
    assert "0.50× (dₖ = 16)" in words

    def mixed(c, r):
        if c.rule == "unscaled" and c.d_k == 64:
            r["init"]["grad_wq"] = 0.05

    words = text(render(analyse(mixed)))
    assert "W_Q is larger without the scale at dₖ = 16 and smaller at dₖ = 64" in words


def test_failing_runs_saturation_path_and_growth_follow_the_logs(base):
    fails = base["findings"]["saturation_path"]["fails"]
    # Unscaled fails with SGD at the tuned rate: 2 d_k x 2 seeds, each from 0.1 to 0.8 saturated, sd 4 -> 40.
    assert (fails["runs"], fails["became_saturated"], fails["stayed_saturated"]) == (4, 4, 0)
    assert fails["growth"] == "grows" and fails["growth_median"] == pytest.approx(10.0)
    words = text(render(base))
    assert "become so as training goes on" in words and "Their logits grow during training" in words
    assert "Hypothesis, not tested here: that growing logits" in words

    def no_growth_start_saturated(c, r):
        if c.rule == "unscaled":  # same outcomes, other logs: saturated from the start, flat
            r["log"] = fake_result(None, sat0=0.9, sat1=0.9, std0=30.0, std1=31.0, grad_wq=0.3, factor=1.0)["log"]

    a = analyse(no_growth_start_saturated)
    fails = a["findings"]["saturation_path"]["fails"]
    assert fails["stayed_saturated"] == fails["runs"] > 0 and fails["growth"] == "steady"
    words = text(render(a))
    assert "start saturated and stay so" in words and "stays within a factor 2" in words
    assert "growing logits" not in words and "become so as training goes on" not in words


def test_softcap_sentence_follows_its_start_and_its_outcome(base):
    assert base["findings"]["softcap"]["saturated_yet_learns"] == []
    assert "does not test whether starting saturated stops learning" in text(render(base))

    def cap_starts_saturated(c, r):
        if c.rule in ("softcap_unscaled", "unscaled") and c.d_k == 64 and c.optimizer == "adam":
            reach = 10 if c.rule == "softcap_unscaled" else None
            r.update(
                fake_result(
                    reach,
                    sat0=0.9,
                    sat1=0.2 if reach else 0.95,
                    std0=8.0,
                    std1=10.0 if reach else 90.0,
                    grad_wq=0.3,
                    factor=1.0,
                )
            )

    a = analyse(cap_starts_saturated)
    assert a["findings"]["softcap"]["saturated_yet_learns"] == [64]
    words = text(render(a))
    assert "At dₖ = 64 soft-cap 50 starts with 0.90 of its query rows saturated" in words
    assert "starting saturated does not by itself stop learning here" in words
    assert "Hypothesis, not tested here: the cap keeps the logits" in words

    def cap_fails_too(c, r):
        cap_starts_saturated(c, r)
        if c.rule == "softcap_unscaled" and c.d_k == 64 and c.optimizer == "adam":
            r.update(fake_result(None, sat0=0.9, sat1=0.95, std0=8.0, std1=90.0, grad_wq=0.3, factor=1.0))

    words = text(render(analyse(cap_fails_too)))
    assert "reaches the target on 0/2 seeds" in words and "does not by itself stop learning" not in words


def test_reference_that_never_reaches_the_target_is_said_and_quick_is_labelled(base):
    assert "not even 1/√dₖ" not in text(render(base))
    assert "Quick sweep" not in text(render(base))

    def nothing_learns(c, r):
        r.update(fake_result(None, grad_wq=r["init"]["grad_wq"], factor=r["init"]["factor"]))

    a = analyse(nothing_learns)
    words = text(render(a, quick=True))
    assert "not even 1/√dₖ reaches 0.9 accuracy" in words and "Quick sweep (40 steps, 2 seed(s))" in words
    assert "learns like 1/√dₖ" not in words.split("Verdicts")[1]


def test_adam_only_hypothesis_appears_only_when_the_data_show_it(base):
    assert base["findings"]["optimiser"]["adam_only"] == [
        {"rule": "unscaled", "d_k": 16},
        {"rule": "unscaled", "d_k": 64},
    ]
    assert "Hypothesis, not tested here: Adam divides" in text(render(base))

    def sgd_learns_too(c, r):
        if c.rule == "unscaled" and c.optimizer == "sgd" and c.lr == 0.03:
            r.update(fake_result(30, grad_wq=0.3, factor=1.0))

    a = analyse(sgd_learns_too)
    assert a["findings"]["optimiser"]["adam_only"] == []
    assert "Adam divides" not in text(render(a))


def test_durations_are_the_ones_the_cells_record(base):
    n = len(CONFIG.cells())
    words = text(render(base, wall_s=437.0, seconds=[{"wall": 0.5, "cpu": 0.25, "workers": 2}] * n))
    assert f"took {0.25 * n:.0f} CPU-seconds" in words and "took 437 s of wall time" in words
    assert "minutes" not in words
    words = text(render(base, wall_s=None, seconds=[{"wall": 3.0, "cpu": 2.0, "workers": 1}] * n))
    assert f"took {2.0 * n:.0f} CPU-seconds" in words and "3 s of wall time per cell" in words
    assert "This run of the sweep" not in words
    # cells computed by an attnscale that did not time them: no time is told for them
    assert "Measured run time" not in text(render(base, seconds=[None] * n))


def test_zero_gradient_sentence_does_not_say_not_zero_when_it_was_zero(base):
    assert "the gradient becomes smaller, not zero" not in text(render(base))  # logged value never falls

    def zero_gradient(c, r):
        if c.rule == "unscaled" and c.d_k == 64 and c.optimizer == "adam":
            r.update(fake_result(None, grad_wq=0.3, factor=1.0, zero=True))

    a = analyse(zero_gradient)
    assert a["findings"]["zero_gradient"]["group_zero"] == 2
    words = text(render(a))
    assert "exactly zero at a logged step in 2/2 seeds" in words and "not zero" not in words


@pytest.mark.slow
@pytest.mark.parametrize("lang", ["en", "zh"], indirect=True)
def test_chapter_renders_every_part_in_both_languages(base, lang):
    html = render(copy.deepcopy(base), figures=lang == "en")  # figures take seconds: drawn once
    # three tables, the biggest (the gradient check) also whole behind a <details>
    assert html.count("<figure") == 3 and html.count("<table") == 4
    assert html.count("<svg") == (6 if lang == "en" else 0)  # each figure for desktop and phone
    assert html.count("<details") == 1
    assert "{" not in text(html)  # every placeholder filled


# --- the chapter's choices: pure functions of the result's numbers (report/chapters/training_words.py) ---


def _variants():
    """The base sweep and the variants above, each changing which sentences the data call for."""

    def smaller(c, r):
        if c.rule == "unscaled":
            r["init"]["grad_wq"] = r["init"]["grad_wk"] = 0.05

    def mixed(c, r):
        if c.rule == "unscaled" and c.d_k == 64:
            r["init"]["grad_wq"] = 0.05

    def stays_saturated(c, r):
        if c.rule == "unscaled":
            r["log"] = fake_result(None, sat0=0.9, sat1=0.9, std0=30.0, std1=31.0, grad_wq=0.3, factor=1.0)["log"]

    def cap_saturated(c, r):
        if c.rule in ("softcap_unscaled", "unscaled") and c.d_k == 64 and c.optimizer == "adam":
            reach = 10 if c.rule == "softcap_unscaled" else None
            r.update(
                fake_result(
                    reach,
                    sat0=0.9,
                    sat1=0.2 if reach else 0.95,
                    std0=8.0,
                    std1=10.0 if reach else 90.0,
                    grad_wq=0.3,
                    factor=1.0,
                    zero=not reach,
                )
            )

    def nothing_learns(c, r):
        r.update(fake_result(None, grad_wq=r["init"]["grad_wq"], factor=r["init"]["factor"], std1=1.0))

    return [analyse(change) for change in (None, smaller, mixed, stays_saturated, cap_saturated, nothing_learns)]


def test_the_chapter_chooses_what_the_analysis_records():
    """The sentences are chosen in the chapter from the numbers; on every variant the choice is the one
    the analysis still records in its findings (kept so shipped results stay as they are)."""
    from attnscale.report.chapters import training_words as w

    seen = set()
    for a in _variants():
        f, s = a["findings"], a["setup"]
        assert (w.single_key_versus(a) == "same") == a["single_key_is_prior"]
        ref = f["reference"]
        assert w.reference_reach(ref["rows"]) == (
            None if ref["reached_everywhere"] else "nowhere" if ref["reached_nowhere"] else "partly"
        )
        for g in f["gradient_step0"].values():
            assert w.gradient_direction(g["rows"]) == (g["direction"], g["larger_at"], g["smaller_at"])
            seen.add(g["direction"])
        fails = f["saturation_path"]["fails"]
        assert w.dominant_path(fails) == fails["dominant_path"]
        assert w.logit_trend(fails["growth_median"], s["logit_growth"]) == fails["growth"]
        seen |= {fails["dominant_path"], fails["growth"]}
        cap = f["softcap"]
        outcomes = w.softcap_outcomes(cap["rows"], s["saturated_run"])
        assert [r["d_k"] for key, r in outcomes if key == "learns"] == cap["saturated_yet_learns"]
        assert [r["d_k"] for key, r in outcomes if key == "fails"] == cap["saturated_and_fails"]
        assert w.softcap_lower_logits(cap["rows"], s["saturated_run"]) == cap["learns_with_lower_logits"]
        zero = f["zero_gradient"]
        floor = w.gradient_floor(zero)
        assert floor == (
            "zero"
            if zero["group_zero"]
            else None
            if zero["falls_below_start"] is None
            else "falls"
            if zero["falls_below_start"]
            else "stays"
        )
        seen |= {floor, w.reference_reach(ref["rows"])}
    # the variants reach every key the tests above read the words of
    assert {"larger", "smaller", "mixed", "became", "stayed", "grows", "steady", "zero", "stays", "nowhere"} <= seen


def test_the_words_follow_the_recorded_thresholds_without_a_new_analysis(base):
    """The thresholds are the result's own (setup): changing one changes the words, with no new analysis."""
    words = text(render(base))
    assert "Their logits grow during training (median last ÷ first logit standard deviation ≥ 2)" in words
    assert "Soft-cap 50 never starts with 50% or more" in words
    other = copy.deepcopy(base)
    other["setup"].update(logit_growth=20.0, saturated_run=0.05, caps={"softcap_unscaled": 30.0})
    words = text(render(other))
    assert "stays within a factor 20 of where it started" in words and "growing logits" not in words
    # at 5% soft-cap counts as starting saturated (0.1 at step 0), learns, and ends below unscaled
    assert "At dₖ = 16 soft-cap 30 starts with 0.10 of its query rows saturated" in words
    assert "Hypothesis, not tested here: the cap keeps the logits within ±30" in words
    assert "does not test whether starting saturated" not in words
