"""The lm experiment: the torch rules equal the core's, the data is what it says, the GPT learns real
text (past the project's own bigram baseline), the same seed gives the same numbers, a run stopped
early logs what the whole run logs first, the sweep resumes after kill -9 and shows the steps of its
running cells, bad input is one line, the verdicts and the LR sensitivity follow the numbers, and
the chapter's words follow the data."""

from __future__ import annotations

import dataclasses
import html
import json
import math
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from attnscale import AuxRequest  # noqa: E402
from attnscale import attention as core_attention  # noqa: E402
from attnscale.errors import InputError  # noqa: E402
from attnscale.experiments.training import lm, common as training  # noqa: E402
from attnscale.experiments.training.gpt import GPT, GPTConfig  # noqa: E402
from attnscale.i18n import language  # noqa: E402
from helpers.sweeps import CountingBackend  # noqa: E402
from attnscale.experiments.training.registry import run_experiment  # noqa: E402
from attnscale.experiments.training.text_data import ByteText, check_text_file  # noqa: E402
from attnscale.scales import LogN  # noqa: E402
from attnscale.torch.scales import ScaledLogits, attended_keys  # noqa: E402

#: Seconds on one core: two rules, one d_k, AdamW and one SGD rate, a few steps of a narrow model.
# What attend() returns per row in the GPT (lse, entropy, logit range).
FIGURES = AuxRequest(lse=True, entropy=True, logit_range=True)
TINY = lm.LMConfig(
    rules=("inverse_sqrt_dk", "unscaled"),
    d_ks=(8,),
    seeds=1,
    adamw_lrs=(3e-3,),
    sgd_lrs=(0.3,),
    steps=6,
    batch=4,
    context=16,
    d_model=16,
    n_layers=1,
    log_every=3,
    eval_windows=4,
)


def tiny_cell(**kw) -> lm.LMCell:
    base = dict(steps=6, batch=4, context=16, d_model=16, n_layers=1, log_every=3, eval_windows=4, sample_bytes=8)
    return lm.LMCell(**{**dict(rule="inverse_sqrt_dk", d_k=8, optimizer="adamw", lr=3e-3, seed=0), **base, **kw})


# --- every rule's torch path equals the NumPy core (float64) -----------------------------------------


@pytest.mark.parametrize("name", sorted(lm.RULE_CHOICES))
@pytest.mark.parametrize("causal", [True, False])
def test_every_rule_logits_and_attention_equal_the_core(name, causal):
    """ScaledLogits' logits, and attend()'s output, lse, entropy and logit range (the path the GPT
    trains through), against attnscale.attention in float64."""
    rule = lm.RULE_CHOICES[name]
    rng = np.random.default_rng(3)
    B, H, L, d_k = 2, 3, 9, 5
    q, k, v = (rng.normal(size=(B, H, L, d)) * 3.0 for d in (d_k, d_k, 4))  # large: soft-cap bends
    ref_out, ref = core_attention(
        q, k, v, scale=rule, causal=causal, aux=AuxRequest(logits=True, weights=True, lse=True)
    )
    module = ScaledLogits(rule, d_k).double()
    tq, tk, tv = (torch.from_numpy(x) for x in (q, k, v))
    logits = module(tq, tk, attended_keys(L, L, causal)).detach().numpy()
    keep = ref.logits > -np.inf
    assert np.max(np.abs(logits[keep] - ref.logits[keep])) <= 1e-12 * max(1.0, np.abs(ref.logits[keep]).max())
    out, res = module.attend(tq, tk, tv, causal=causal, aux=FIGURES)
    p = ref.weights
    entropy = -(np.where(p > 0, p * np.log(np.where(p > 0, p, 1.0)), 0.0)).sum(-1)
    masked = np.where(keep, ref.logits, np.nan)
    for got, want in (
        (out, ref_out),
        (res.lse, ref.lse),
        (res.entropy, entropy),
        (res.max_logit, np.nanmax(masked, -1)),
        (res.min_logit, np.nanmin(masked, -1)),
    ):
        err = np.max(np.abs(got.detach().numpy() - want))
        assert err <= 1e-10, f"{name}: {err:.2e}"


def test_qknorm_gain_is_learned_and_logn_needs_n():
    module = ScaledLogits(lm.RULE_CHOICES["qknorm"], 8)
    q, k, v = torch.randn(1, 2, 5, 8), torch.randn(1, 2, 5, 8), torch.randn(1, 2, 5, 8)
    module.attend(q, k, v, aux=FIGURES)[0].sum().backward()
    assert module.gain.grad is not None and float(module.gain.grad) != 0.0
    with pytest.raises(InputError, match="^n:"):
        ScaledLogits(LogN(), 8)(q, k)
    with pytest.raises(InputError, match="factor"):
        ScaledLogits(LogN(), 8).factor()


def test_the_factor_of_a_learned_gain_is_read_without_a_warning():
    import warnings

    module = ScaledLogits(lm.RULE_CHOICES["qknorm"], 16)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # torch warns when a tensor that requires grad becomes a float
        assert module.factor() == pytest.approx(module.rule.gain / 4)


@pytest.mark.parametrize("name", sorted(lm.RULE_CHOICES))
@pytest.mark.parametrize("backend", ["chunked", "composed"])
def test_every_rule_gives_gradients_to_q_and_k(name, backend):
    """gradcheck (float64) through attend(); soft-cap takes the chunked path whatever the backend."""
    module = ScaledLogits(lm.RULE_CHOICES[name], 4).double()
    q, k, v = (torch.randn(1, 1, 5, 4, dtype=torch.float64, requires_grad=True) for _ in range(3))
    torch.autograd.gradcheck(lambda a, b, c: module.attend(a, b, c, backend=backend, aux=FIGURES)[0], (q, k, v))


# --- the text ----------------------------------------------------------------------------------------


def test_default_text_is_real_english_split_contiguously():
    text = ByteText.from_source()
    assert len(text.train) + len(text.valid) > 400_000
    assert abs(len(text.valid) / (len(text.train) + len(text.valid)) - 0.1) < 1e-4
    assert b" the " in text.train.tobytes() and b" the " in text.valid.tobytes()
    assert 3.5 < text.unigram_bits() < 6.0  # English bytes: about 4.5 bits, well below 8 (uniform)


def test_text_file_problems_are_one_line_naming_text(tmp_path):
    (tmp_path / "empty.txt").write_bytes(b"")
    (tmp_path / "latin1.txt").write_bytes("café".encode("latin-1"))
    for path, words in (
        (tmp_path / "nope.txt", "does not exist"),
        (tmp_path, "directory"),
        (tmp_path / "empty.txt", "empty"),
        (tmp_path / "latin1.txt", "not UTF-8"),
    ):
        with pytest.raises(InputError, match=f"^--text: .*{words}"):
            check_text_file(path)
    (tmp_path / "short.txt").write_text("tiny text " * 10)
    with pytest.raises(InputError, match=r"^--context: 64 .* has 100 bytes"):
        ByteText.from_source(str(tmp_path / "short.txt"), context=64)


# --- the model and one cell --------------------------------------------------------------------------


def test_every_rule_starts_from_the_same_weights():
    states = []
    for name in lm.RULE_CHOICES:
        torch.manual_seed(5)
        model = GPT(GPTConfig(context=16, d_model=16, n_layers=2, d_k=4), lm.RULE_CHOICES[name])
        states.append({k: v for k, v in model.state_dict().items() if not k.endswith("rule.gain")})
    for other in states[1:]:
        assert other.keys() == states[0].keys()
        assert all(torch.equal(other[k], states[0][k]) for k in other)


def test_head_tied_to_embedding_and_heads_from_d_k():
    model = GPT(GPTConfig(context=8, d_model=16, n_layers=1, d_k=4), lm.RULE_CHOICES["unscaled"])
    assert model.blocks[0].attn.n_heads == 4
    tokens = torch.randint(0, 256, (2, 8))
    model(tokens).sum().backward()
    assert model.tok.weight.grad is not None
    assert tuple(model.blocks[0].attn.figures["entropy"].shape) == (2, 4, 8)


def test_cell_log_has_every_figure_and_is_strict_json():
    result = lm.train_cell(tiny_cell(rule="softcap_unscaled"))
    assert [e["step"] for e in result["log"]] == [0, 3, 6]
    entry = result["log"][-1]
    assert len(entry["grad_wq"]) == len(entry["grad_wk"]) == 1 and entry["grad_wq"][0] > 0
    heads = entry["heads"][0]
    for key in ("entropy_mean", "entropy_min", "max_abs_logit", "saturated_frac"):
        assert len(heads[key]) == 2
    assert all(lo <= mean for lo, mean in zip(heads["entropy_min"], heads["entropy_mean"]))
    assert all(m < 50.0 for m in heads["max_abs_logit"])  # the soft-cap's bound
    json.dumps(result, allow_nan=False)
    assert result["diverged"] is None and isinstance(result["sample"], str)


def _head_figures_before_issue_47(figures: dict) -> dict[str, list]:
    """The LM sweep's own per-head summary before it took the monitor's (issue 47), kept verbatim as
    the reference the shipped results were made with."""
    from attnscale.results import finite_or_none
    from attnscale.softmax_rows import SATURATED_WEIGHT

    H = figures["entropy"].shape[1]
    per_head = lambda t: t[:, :, 1:].double().transpose(0, 1).reshape(H, -1)  # noqa: E731  (H, rows)
    entropy, hi, lo, lse = (per_head(figures[k]) for k in ("entropy", "max_logit", "min_logit", "lse"))
    top_weight = torch.exp(hi - lse)
    as_list = lambda t: [finite_or_none(v) for v in t.tolist()]  # noqa: E731
    return {
        "entropy_mean": as_list(entropy.mean(1)),
        "entropy_min": as_list(entropy.amin(1)),
        "max_abs_logit": as_list(torch.maximum(hi.abs(), lo.abs()).amax(1)),
        "saturated_frac": as_list(
            torch.where(torch.isnan(top_weight), math.nan, (top_weight > SATURATED_WEIGHT).double()).mean(1)
        ),
    }


@pytest.mark.parametrize("rule, gain", [("inverse_sqrt_dk", 1.0), ("unscaled", 6.0), ("softcap_unscaled", 6.0)])
def test_head_figures_are_the_monitors_summary_with_the_sweeps_old_values(rule, gain):
    """The per-head figures a cell logs come from the monitor's summary (head_summary.call_figures) and
    equal what the sweep computed itself before: mean and minimum entropy, largest |logit| and the
    saturated fraction, over the rows from 1 (row 0 attends only itself), on layers whose rows range
    from spread out to saturated."""
    from attnscale.experiments.training.lm.train import head_figures
    from attnscale.experiments.training.text_data import VOCAB

    torch.manual_seed(0)
    gpt = GPT(GPTConfig(VOCAB, 16, 32, 2, 8), lm.RULE_CHOICES[rule], backend="chunked")
    with torch.no_grad():
        for block in gpt.blocks:
            block.attn.w_q.weight.mul_(gain)
        gpt(torch.randint(0, VOCAB, (3, 16)))
    layers = [a.figures for a in gpt.attention_layers()]
    new, old = [head_figures(f) for f in layers], [_head_figures_before_issue_47(f) for f in layers]
    assert [sorted(n) for n in new] == [sorted(o) for o in old]
    saturated = 0.0
    for n, o in zip(new, old):
        for key in o:
            assert n[key] == pytest.approx(o[key], rel=1e-6, abs=1e-9), key
        saturated = max(saturated, *o["saturated_frac"])
    assert (saturated > 0.2) == (gain > 1)  # the large gains do saturate rows: the fraction is tested


def test_a_cell_records_the_attention_backend_that_ran_it():
    from attnscale.torch.ext import kernel_status

    expected = "kernel" if kernel_status()["available"] else "composed"
    assert lm.train_cell(tiny_cell())["attention_backend"] == expected  # what backend "auto" chose
    assert lm.train_cell(tiny_cell(backend="chunked"))["attention_backend"] == "chunked"


def test_same_seed_same_numbers_other_seed_other_numbers():
    a, b = lm.train_cell(tiny_cell()), lm.train_cell(tiny_cell())
    assert a == b  # the cell holds no time of its own: the sweep runner measures it
    assert lm.train_cell(tiny_cell(seed=1))["log"] != a["log"]


def test_a_diverged_run_is_recorded_not_raised():
    result = lm.train_cell(tiny_cell(rule="unscaled", optimizer="sgd", lr=1e30))
    assert result["diverged"] is not None and result["final_bpb"] is None and result["final_bpb_reason"] == "diverged"
    json.dumps(result, allow_nan=False)


def test_tiny_gpt_with_inverse_sqrt_dk_and_adamw_beats_the_unigram_baseline():
    """The model really learns: within its budget, validation below the text's unigram cross-entropy."""
    result = lm.train_cell(
        lm.LMCell(
            "inverse_sqrt_dk",
            16,
            "adamw",
            1e-2,
            0,
            steps=150,
            batch=16,
            context=32,
            d_model=32,
            n_layers=1,
            log_every=50,
            eval_windows=32,
            sample_bytes=8,
        )
    )
    print(f"unigram {result['unigram_bpb']:.3f}, init {result['init_bpb']:.3f}, final {result['final_bpb']:.3f} bpb")
    assert result["final_bpb"] < result["unigram_bpb"] - 0.3


NATO = "alpha bravo charlie delta echo foxtrot golf hotel india juliett kilo lima mike november oscar papa".split()


def test_tiny_gpt_learns_more_than_the_projects_bigram_baseline(tmp_path):
    """On a small fixed text (16 words drawn at random, so spelling a word needs more than the byte
    before), the 1/√d_k run ends below the project's own bigram baseline on the same validation
    bytes: it has learned more than pair counts (about 3 CPU-s)."""
    rng = np.random.default_rng(0)
    path = tmp_path / "nato.txt"
    path.write_text(" ".join(NATO[i] for i in rng.integers(0, len(NATO), 6000)))
    cell = lm.LMCell(
        "inverse_sqrt_dk",
        16,
        "adamw",
        1e-2,
        0,
        steps=200,
        batch=16,
        context=16,
        d_model=32,
        n_layers=1,
        log_every=50,
        eval_windows=64,
        sample_bytes=8,
        text=str(path),
        text_sha256="nato",
    )
    result = lm.train_cell(cell)
    bigram = next(r for r in lm.baselines(cell)["rows"] if r["name"] == "bigram")
    print(f"bigram {bigram['bpb']:.3f}, final {result['final_bpb']:.3f} bpb")
    assert result["final_bpb"] < bigram["bpb"] - 0.3
    assert lm.beaten(result["final_bpb"], lm.baselines(cell)["rows"]) in ("bigram", "trigram", "4-gram")


def test_a_run_stopped_early_logs_what_the_whole_run_logs_first():
    """stop_after: same schedule, same batches, so its log is the whole run's first entries."""
    whole = lm.train_cell(tiny_cell())
    part = lm.train_cell(tiny_cell(), stop_after=4)
    assert [e["step"] for e in part["log"]] == [0, 3]
    assert part["log"] == whole["log"][:2] and part["stopped_after"] == 4 and whole["stopped_after"] is None
    with pytest.raises(InputError, match="^stop_after:"):
        lm.train_cell(tiny_cell(), stop_after=-1)


# --- verdicts --------------------------------------------------------------------------------------


def _run(curve, diverged=False):
    log = [{"step": 10 * i, "valid_bpb": v} for i, v in enumerate(curve)]
    return {
        "log": log,
        "final_bpb": None if diverged else curve[-1],
        "diverged": {"step": 1} if diverged else None,
        "init_bpb": curve[0],
    }


@pytest.mark.parametrize(
    "curve, verdict, ratio",
    [
        ([8, 3.2, 3.1, 3.0, 3.0], "faster", 0.5),  # step 10 against 20
        ([8, 4, 3.2, 3.0, 3.0], "learns", 1.0),  # target 1.1 × 3.0 = 3.3: step 20 like the reference
        ([8, 5, 4, 3.3, 3.1], "slower", 1.5),  # step 30 against 20
        ([8, 6, 5, 4.0, 3.5], "fails", None),  # never at or below 3.3
    ],
)
def test_judge_follows_the_numbers(curve, verdict, ratio):
    reference = _run([8, 4, 3.2, 3.0, 3.0])
    assert lm.judge(_run(curve), reference) == (verdict, ratio)
    assert lm.judge(_run([8, 4], diverged=True), reference) == ("diverges", None)
    assert lm.judge(_run(curve), _run([8, 4], diverged=True)) == (None, None)


def test_judge_halfway_reads_the_logs_up_to_that_step():
    """Up to step 20 the reference ends at 3.2 (target 3.52): the run below is there at step 20 too."""
    reference, run = _run([8, 4, 3.2, 3.0, 3.0]), _run([8, 5, 3.5, 3.3, 3.1])
    assert lm.judge(run, reference) == ("slower", 1.5)
    assert lm.judge(run, reference, until=20) == ("learns", 1.0)
    assert lm.judge(_run([8, 5, 4, 3.3, 3.1]), reference, until=20) == ("fails", None)


def test_a_run_that_collapses_to_the_uniform_prediction_is_judged_diverged():
    """8 bits per byte to the end (the uniform prediction over 256 bytes): a divergence from the step
    it got there; step 0 (the initial model, near uniform) and a run that only passes 8 do not count."""
    from attnscale.experiments.training.lm import judging as j

    collapsed = _run([8.07, 4.4, 4.8, 8.000002, 8.000002])
    assert j.collapsed_at(collapsed["log"]) == 30
    judged = j.as_judged(collapsed)
    assert judged["final_bpb"] is None and judged["diverged"]["step"] == 30 and judged["diverged"]["collapsed"]
    assert [e["step"] for e in judged["log"]] == [0, 10, 20]
    assert lm.judge(judged, _run([8, 4, 3.2, 3.0, 3.0])) == ("diverges", None)
    for curve in ([8.0, 8.0005, 5.0], [8.07, 5, 8.0, 3.0], [8.0]):
        assert j.collapsed_at(_run(curve)["log"]) is None and j.as_judged(_run(curve)) == _run(curve)
    nan = _run([8, 4], diverged=True)
    assert j.as_judged(nan) is nan


def _seeds(*curves):
    return {seed: _run(c) for seed, c in enumerate(curves)}


def test_target_holds_is_the_exact_range_of_targets_of_the_same_verdict():
    """Brute force over a fine grid of target factors agrees with the range computed from the logs."""
    from attnscale.experiments.training.lm import judging as j

    refs = _seeds([8, 4, 3.2, 3.0, 3.0], [8, 4.2, 3.1, 2.9, 2.8])
    cases = [
        _seeds([8, 6, 5, 4.0, 3.5], [8, 6, 5, 4.2, 3.6]),  # fails
        _seeds([8, 5, 4, 3.3, 3.1], [8, 5.5, 3.5, 3.2, 3.0]),  # slower
        _seeds([8, 4, 3.2, 3.0, 3.0], [8, 4.2, 3.1, 2.9, 2.8]),
    ]  # learns (the reference itself)
    grid = np.round(np.arange(0.9, 2.5, 0.0005), 6)
    for runs in cases:
        holds = j.target_holds(runs, refs)
        verdict = j.seeds_verdict_at(runs, refs)
        same = [f for f in grid if j.seeds_verdict_at(runs, refs, factor=float(f)) == verdict]
        inside = [
            f
            for f in grid
            if (holds["from"] is None or f >= holds["from"] + 1e-9) and (holds["to"] is None or f < holds["to"] - 1e-9)
        ]
        assert set(inside) <= set(same), (verdict, holds)
        for edge in (holds["from"], holds["to"]):  # just outside the range, the verdict differs
            if edge is not None:
                outside = edge - 1e-6 if edge == holds["from"] else edge + 1e-6
                assert j.seeds_verdict_at(runs, refs, factor=outside) != verdict
    fails = j.target_holds(cases[0], refs)
    # seed 0 gets within 3.5/3.0 of its reference, but the tie then goes to the worse seed: only at
    # 3.6/2.8 does seed 1 get there too, and both are slower
    assert fails["from"] is None and fails["to"] == pytest.approx(3.6 / 2.8)
    assert j.seeds_verdict_at(cases[0], refs, factor=1.2) == "fails"
    assert j.target_holds(cases[0], refs, factor=1.5)["from"] == pytest.approx(3.6 / 2.8)


def test_steps_beyond_extrapolates_the_last_quarter():
    from attnscale.experiments.training.lm import judging as j

    ref = _run([8, 4, 3.2, 3.0, 3.0])  # target 3.3
    # steps 30 -> 40 (the last quarter of 40): 4.0 -> 3.5, 0.05 per step; 0.2 above the target: 4 steps
    assert j.steps_beyond(_run([8, 6, 5, 4.0, 3.5]), ref) == pytest.approx(4.0)
    assert j.steps_beyond(_run([8, 6, 5, 3.5, 3.5]), ref) == math.inf
    assert j.steps_beyond(_run([8, 4, 3.2, 3.0, 3.0]), ref) is None
    assert j.steps_beyond(_run([8, 4], diverged=True), ref) is None


def test_lr_sensitivity_follows_its_definition():
    """Wortsman et al. 2023: E over the grid of min(final, initial) minus the best; a diverged run and
    one that ends worse than it began both count at the initial loss."""
    runs = [
        {"final_bpb": 3.0, "init_bpb": 8.0},
        {"final_bpb": 2.5, "init_bpb": 8.0},
        {"final_bpb": None, "init_bpb": 8.0},
        {"final_bpb": 9.0, "init_bpb": 8.0},
    ]
    scores = [lm.lr_score(r) for r in runs]
    assert scores == [3.0, 2.5, 8.0, 8.0]
    assert training.lr_sensitivity(scores) == pytest.approx((3.0 + 2.5 + 8.0 + 8.0) / 4 - 2.5)
    assert training.lr_sensitivity([2.5, 2.5]) == 0.0


# --- the sweep -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_sweep(tmp_path_factory):
    out = tmp_path_factory.mktemp("lm")
    backend = CountingBackend()
    return run_experiment("lm", TINY, out, backend).data, backend.computed, out


@pytest.mark.slow
def test_sweep_analysis_has_the_contract_verdicts_and_resumes(tiny_sweep):
    summary, computed, out = tiny_sweep
    assert computed == len(TINY.cells()) == 4
    a = summary["analysis"]
    verdicts = a["verdicts"]
    assert {(v["rule"], v["optimiser"]) for v in verdicts} == {
        (r, o) for r in TINY.rules for o in ("adamw", "adamw-own-best", "sgd", "sgd-own-best")
    }
    for v in verdicts:
        assert set(v) >= {"rule", "d_k", "optimiser", "lr", "verdict", "seeds", "seeds_agreeing", "steps_ratio"}
        assert v["verdict"] in lm.VERDICTS
    ref = next(v for v in verdicts if v["rule"] == "inverse_sqrt_dk" and v["optimiser"] == "adamw")
    assert ref["verdict"] == "learns" and ref["steps_ratio"] == 1.0
    assert a["reference_best_interior"] == {"adamw": {"8": False}, "sgd": {"8": False}}  # one rate: never interior
    assert [r["name"] for r in a["baselines"]["rows"]] == ["unigram", "bigram", "trigram", "4-gram"]
    assert a["baselines"]["scored_bytes"] == TINY.eval_windows * TINY.context
    for s in a["lr_sensitivity"]:  # one rate: nothing to be sensitive to
        assert s["lr_sensitivity"] == 0.0
    json.dumps(summary, allow_nan=False)
    again = CountingBackend()
    assert run_experiment("lm", TINY, out, again).data["analysis"] == summary["analysis"]
    assert again.computed == 0


def _envelope(summary):
    from attnscale.results import Envelope

    from attnscale.store import to_jsonable

    return Envelope(kind="train/lm", data=json.loads(json.dumps(summary)), config=to_jsonable(TINY), quick=True)


@pytest.mark.slow
def test_chapter_renders_both_languages(tiny_sweep):
    from attnscale.report.chapters import EXPERIMENT_CHAPTERS
    from attnscale.report.chapters import lm as chapter

    assert "lm" in EXPERIMENT_CHAPTERS and chapter.KIND == "train/lm"
    env = _envelope(tiny_sweep[0])
    pages = {}
    for lang in ("en", "zh"):
        with language(lang):
            pages[lang] = chapter.render(env)
    for page in pages.values():
        assert page.count("<figure") == 3 and page.count("<svg") == 6 and page.count("<table") == 3
        assert lm.PROMPT in page
    assert "bigram" in pages["en"] and "二元" in pages["zh"]
    from helpers.report_data import figures_readable_on_a_phone

    figures_readable_on_a_phone(pages["zh"])


@pytest.mark.slow
def test_chapter_words_follow_the_data(tiny_sweep, monkeypatch):
    from attnscale.report.chapters import lm as chapter

    monkeypatch.setattr(chapter, "curve_panels", lambda *args, **kw: None)  # the words only: no figures
    monkeypatch.setattr(chapter, "responsive_figure", lambda *args, **kw: "")
    env = _envelope(tiny_sweep[0])
    a = env.data["analysis"]
    ref = a["reference_rule"]
    own = {v["optimiser"]: v for v in a["verdicts"] if v["rule"] == "unscaled"}
    for v in a["verdicts"]:
        v["verdict"] = "learns"
    page = lambda: html.unescape(chapter.render(env))  # noqa: E731
    assert "every rule reaches the 1/√dₖ reference's target at every dₖ, with AdamW and with SGD" in page()
    own["adamw-own-best"]["verdict"] = "fails"
    said = chapter.glance_sentence(a["verdicts"], ref)
    assert "unscaled fails or diverges with AdamW at d_k = 8; with SGD every rule reaches the target" in said
    own["sgd-own-best"]["verdict"] = "diverges"
    said = chapter.glance_sentence(a["verdicts"], ref)
    assert "with AdamW at d_k = 8, and with SGD unscaled at d_k = 8" in said and "1 fails and 1 diverges" in said
    # A verdict's cell: its mark, the ratio of the seeds that decided it, each seed when they disagree.
    own["adamw"].update(
        verdict="slower",
        seeds=2,
        seeds_agreeing=1,
        steps_ratio=1.245,
        per_seed=[
            {"seed": 0, "verdict": "learns", "steps_ratio": 1.13, "verdict_halfway": "learns"},
            {"seed": 1, "verdict": "slower", "steps_ratio": 1.36, "verdict_halfway": "slower"},
        ],
    )
    cell = chapter._verdict_cell(own["adamw"], False)
    assert 'class="badge inconclusive">slower</span> ×1.36 (1/2 seeds; each: learns ×1.13 · slower ×1.36)' in cell
    own["adamw"]["per_seed"][0]["verdict"] = "slower"
    assert chapter.decided_ratio(own["adamw"]) == pytest.approx(1.245)
    # A rule's own best rate at the grid's edge is said in its cell.
    for b in a["own_best_lr"]:
        b["edge"] = None
    assert "the grid's edge" not in page()
    edge = next(b for b in a["own_best_lr"] if (b["optimiser"], b["rule"]) == ("sgd", "unscaled"))
    edge["edge"] = "low"
    assert f"(own best rate {own['sgd-own-best']['lr']:g}: the grid's edge)" in page()
    env.data["analysis"]["reference_best_interior"]["adamw"]["8"] = True
    page = chapter.render(env)
    assert "AdamW rate best for 1/√dₖ is inside the grid" in page and "SGD rate best for 1/√dₖ lies at the edge" in page
    curve = next(c for c in env.data["analysis"]["curves"] if c["rule"] == "unscaled" and c["optimiser"] == "adamw")
    curve["max_abs_logit"][-1] = 12345.0
    assert "ends at 1.23e+04 unscaled" in chapter.render(env)


@pytest.mark.slow
def test_chapter_caveat_and_reference_sentence_follow_the_baselines(tiny_sweep):
    """The reference above the bigram: the caveat names the bigram; above the trigram only: it names
    the trigram; below both: no caveat, the highest baseline beaten named. Each optimiser's reference
    on its own: SGD's caveat does not follow AdamW's."""
    from attnscale.report.chapters import lm as chapter

    a = _envelope(tiny_sweep[0]).data["analysis"]
    rows = {r["order"]: r["bpb"] for r in a["baselines"]["rows"]}
    at_best = {
        o: next(
            g
            for g in a["grid"]
            if (g["optimiser"], g["rule"], g["d_k"], g["lr"])
            == (o, a["reference_rule"], 8, a["reference_best_lr"][o]["8"])
        )
        for o in ("adamw", "sgd")
    }
    said = {}
    for name, bpb in (("bigram", rows[2] + 0.1), ("trigram", (rows[2] + rows[3]) / 2), ("none", rows[4] - 0.01)):
        at_best["adamw"]["final_bpb"]["mean"] = bpb
        said[name] = chapter.reference_sentence(a, "adamw")
    assert said["bigram"].startswith("Caveat:") and "not below the bigram baseline at d_k = 8" in said["bigram"]
    assert "early training" in said["bigram"] and "not below the trigram baseline" in said["trigram"]
    assert "Caveat" not in said["none"] and "below the 4-gram baseline at every d_k" in said["none"]
    at_best["sgd"]["final_bpb"]["mean"] = (rows[2] + rows[3]) / 2
    assert "the SGD verdicts then describe early training" in chapter.reference_sentence(a, "sgd")
    at_best["adamw"]["final_bpb"]["mean"] = (rows[3] + rows[4]) / 2
    assert "below the trigram baseline at every d_k" in chapter.reference_sentence(a, "adamw")
    at_best["adamw"]["final_bpb"]["mean"] = rows[2] + 1
    with language("zh"):
        assert "早期" in chapter.reference_sentence(a, "adamw")


@pytest.mark.slow
def test_chapter_seeds_halfway_and_optimiser_sentences_follow_the_verdicts(tiny_sweep):
    from attnscale.report.chapters import lm as chapter

    verdicts = json.loads(json.dumps(tiny_sweep[0]["analysis"]["verdicts"]))
    for v in verdicts:
        v.update(seeds=2, seeds_agreeing=2, verdict_halfway=v["verdict"])
    ref = lm.REFERENCE_RULE
    assert chapter.seeds_sentence(verdicts, 2, ref) == "Every verdict is that of all 2 seeds."
    assert chapter.seeds_sentence(verdicts, 1, ref).startswith("One seed")
    assert "same" in chapter.halfway_sentence(verdicts, 600, ref)
    unscaled = {v["optimiser"]: v for v in verdicts if v["rule"] == "unscaled"}
    unscaled["adamw"].update(seeds_agreeing=1, verdict="slower", verdict_halfway="learns")
    assert "disagree on 1 of the 4 verdicts (unscaled d_k 8 AdamW at the 1/√d_k rate)" in chapter.seeds_sentence(
        verdicts, 2, ref
    )
    halfway = chapter.halfway_sentence(verdicts, 600, ref)
    assert "1 of the 2 verdicts at the reference's rate change" in halfway
    assert "learns like 1/√d_k halfway, learns, but slower at the end" in halfway
    said = {}
    for adam, sgd in (("learns", "learns"), ("faster", "fails"), ("slower", "learns"), ("diverges", "slower")):
        unscaled["adamw-own-best"]["verdict"], unscaled["sgd-own-best"]["verdict"] = adam, sgd
        said[adam, sgd] = chapter.optimisers_sentence(verdicts, 8)
    assert "Neither optimiser shows it stop learning" in said["learns", "learns"]
    assert (
        "learns faster than 1/√d_k with AdamW but does not reach the target within the budget with SGD"
        in said["faster", "fails"]
    )
    assert "the adaptive optimiser is the one that suffers" in said["slower", "learns"]
    assert "neither optimiser recovers" in said["diverges", "slower"]


@pytest.mark.slow
def test_chapter_robustness_words_and_marks_follow_the_verdicts(tiny_sweep):
    from attnscale.report.chapters import lm as chapter

    a = json.loads(json.dumps(tiny_sweep[0]["analysis"]))
    ref, band = lm.REFERENCE_RULE, a["target_band"]
    assert band == pytest.approx([1.05, 1.2])
    verdicts = [v for v in a["verdicts"] if v["verdict"]]
    for v in verdicts:
        v.update(verdict="learns", robust_to_target=True, robust_to_budget=True)
    assert chapter.robustness_sentence(verdicts, band, ref).startswith(
        "Every verdict holds for any target from 1.05× to 1.2×"
    )
    unscaled = {v["optimiser"]: v for v in verdicts if v["rule"] == "unscaled"}
    unscaled["adamw"]["verdict"] = "fails"
    said = chapter.robustness_sentence(verdicts, band, ref)
    assert "those other than learns or faster: unscaled d_k 8 AdamW at the 1/√d_k rate (fails)." in said
    unscaled["sgd"].update(verdict="fails", robust_to_target=False)
    unscaled["sgd-own-best"]["robust_to_budget"] = False
    said = chapter.robustness_sentence(verdicts, band, ref)
    assert said.startswith("2 of the 4 verdicts hold") and "† marks the 1 verdicts" in said and "‡ the 1 that" in said
    assert "SGD" not in said.split("†")[0]
    cell = chapter._verdict_cell(unscaled["sgd"], False)
    assert "†" in cell and "‡" not in cell
    assert "‡" in chapter._verdict_cell(unscaled["sgd-own-best"], False)
    assert "†" not in chapter._verdict_cell(unscaled["adamw"], False)
    with language("zh"):
        assert chapter.robustness_sentence(verdicts, band, ref) != said
    assert chapter.collapse_sentence({"collapse": {"runs": 0}}) is None
    assert chapter.collapse_sentence({"collapse": {"runs": 2, "uniform_bpb": 8.0, "tol": 1e-3}}).startswith(
        "2 run(s) ended at"
    )


DRIVER = """
import sys
from attnscale.experiments.training import lm
from attnscale.experiments.sweeps.runner import SerialBackend
from attnscale.experiments.training.registry import run_experiment

if __name__ == "__main__":
    config = lm.LMConfig(rules=("inverse_sqrt_dk", "logn"), d_ks=(8, 16), seeds=1, adamw_lrs=(3e-3,),
                         sgd_lrs=(0.3,), steps=2, batch=4, context=16, d_model=16, n_layers=1, log_every=1,
                         eval_windows=2)
    run_experiment("lm", config, sys.argv[1], SerialBackend())
"""


@pytest.mark.slow
def test_sigkill_then_rerun_computes_only_missing_cells(tmp_path):
    driver = tmp_path / "driver.py"
    driver.write_text(DRIVER)
    from attnscale import results

    cells_dir = results.cells_dir("train/lm", tmp_path / "out")
    proc = subprocess.Popen(
        [sys.executable, str(driver), str(tmp_path / "out")],
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and len(list(cells_dir.glob("lm-*.json"))) < 2:
            time.sleep(0.05)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the group this test started
        proc.wait()
    finished = len(list(cells_dir.glob("lm-*.json")))
    config = dataclasses.replace(
        TINY, rules=("inverse_sqrt_dk", "logn"), d_ks=(8, 16), steps=2, log_every=1, eval_windows=2
    )  # the driver's
    assert 2 <= finished < len(config.cells()) == 8, "the kill should land mid-sweep"
    backend = CountingBackend()
    run_experiment("lm", config, tmp_path / "out", backend)
    assert backend.computed == len(config.cells()) - finished


# --- the command line ------------------------------------------------------------------------------

TINY_ARGS = [
    "--rules",
    "inverse_sqrt_dk,unscaled",
    "--d-ks",
    "8",
    "--d-model",
    "16",
    "--context",
    "16",
    "--steps",
    "3",
    "--adamw-lrs",
    "3e-3",
    "--sgd-lrs",
    "0.3",
    "--workers",
    "1",
]


@pytest.mark.slow
def test_cli_json_to_stdout_is_strict_and_alone(tmp_path, capsys):
    from attnscale.cli import main

    assert main(["train", "lm", "--quick", "--json", "-", "--results", str(tmp_path / "out"), *TINY_ARGS]) == 0
    out = capsys.readouterr().out
    env = json.loads(out, parse_constant=lambda c: (_ for _ in ()).throw(ValueError(c)))
    assert env["kind"] == "train/lm" and env["quick"] is True
    assert {v["rule"] for v in env["data"]["analysis"]["verdicts"]} == {"inverse_sqrt_dk", "unscaled"}
    from attnscale import results

    out = tmp_path / "out"
    assert results.result_path("train/lm", out, quick=True).is_file()
    assert not results.result_path("train/lm", out).exists()


@pytest.mark.parametrize(
    "args, argument",
    [
        (["--rules", "inverse_sqrt_dk,nonsense"], "--rules"),
        (["--d-ks", "48"], "--d-ks"),
        (["--context", "100000000"], "--context"),
        (["--adamw-lrs", "0"], "--adamw-lrs"),
        (["--adamw-lrs=-1e-3"], "--adamw-lrs"),
        (["--adamw-lrs", "1e-3,1e-3"], "--adamw-lrs"),
        (["--adamw-lrs", "x"], "--adamw-lrs"),
        (["--sgd-lrs", "0"], "--sgd-lrs"),
        (["--steps", "0"], "--steps"),
        (["--sgd-lrs", "0.1,abc"], "--sgd-lrs"),
        (["--text", "MISSING"], "--text"),
        (["--text", "DIR"], "--text"),
        (["--text", "EMPTY"], "--text"),
        (["--text", "LATIN1"], "--text"),
    ],
)
def test_cli_bad_input_is_one_line_exit_2_nothing_written(tmp_path, capsys, args, argument):
    from attnscale.cli import main

    files = {
        "MISSING": tmp_path / "missing.txt",
        "DIR": tmp_path,
        "EMPTY": tmp_path / "empty.txt",
        "LATIN1": tmp_path / "latin1.txt",
    }
    files["EMPTY"].write_bytes(b"")
    files["LATIN1"].write_bytes("naïve café".encode("latin-1"))
    args = [str(files.get(a, a)) for a in args]
    out = tmp_path / "out"
    assert main(["train", "lm", "--quick", "--results", str(out), *args]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"error: {argument}" in err, err
    assert not out.exists()


def test_lm_options_are_refused_for_other_experiments(capsys):
    from attnscale.cli import main

    assert main(["train", "scale-vs-dk", "--quick", "--steps", "5"]) == 2
    assert "--steps: only the lm experiment" in capsys.readouterr().err


def test_sweep_sizes_are_the_budgeted_ones():
    full, quick = lm.LMConfig(), lm.LMConfig.quick()
    assert len(full.cells()) == 144 and full.seeds >= 2 and full.d_ks == (16, 64, 128)
    assert set(full.rules) >= {"inverse_sqrt_dk", "unscaled", "inverse_dk", "qknorm"}
    assert len(quick.cells()) == 48 and quick.seeds == 1 and len(quick.d_ks) == 2 and quick.steps < full.steps
    assert {c.d_model // c.d_k for c in full.cells()} == {8, 2, 1}
    for grid in (full.adamw_lrs, full.sgd_lrs):
        lrs = sorted(grid)
        assert len(lrs) >= 3  # a best rate can be interior
        assert all(2.5 < b / a < 3.5 for a, b in zip(lrs, lrs[1:]))  # half a decade apart


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["serial", "local"])
def test_a_sweep_shows_the_steps_of_its_running_cells(tmp_path, backend):
    """Before any cell ends, the progress callback hears how many steps the running cells have done
    (in this process, and from worker processes through the backend's queue)."""
    from attnscale.experiments.sweeps.runner import LocalBackend, SerialBackend

    config = dataclasses.replace(
        TINY, rules=("inverse_sqrt_dk",), sgd_lrs=(0.3,), steps=2 * lm.PROGRESS_EVERY, log_every=lm.PROGRESS_EVERY
    )
    heard = []
    progress = lambda done, total, label="", running=0.0: heard.append((done, label, running))  # noqa: E731
    chosen = SerialBackend() if backend == "serial" else LocalBackend(1)
    run_experiment("lm", config, tmp_path, chosen, progress)
    steps = [(done, label, running) for done, label, running in heard if label.startswith("steps")]
    first = f"steps {lm.PROGRESS_EVERY}/{config.steps} in the running cells"
    assert (0, first, 0.5) in steps  # the first cell, halfway, before it ended
    assert all(0 < running <= 1 for _, _, running in steps)
    assert heard[-1][0] == len(config.cells())


@pytest.mark.slow
def test_chapter_says_when_a_low_lr_sensitivity_is_a_flat_failure(tiny_sweep):
    """The least sensitive rule flagged only when its best loss is above 1.1 × the reference's best."""
    from attnscale.report.chapters import lm as chapter

    a = json.loads(json.dumps(tiny_sweep[0]["analysis"]))
    for s in a["lr_sensitivity"]:
        s["lr_sensitivity"] = 0.01 if s["rule"] == "unscaled" else 0.3
    score = lambda rule, value: [g.update(score=value) for g in a["grid"] if g["rule"] == rule]  # noqa: E731
    score("inverse_sqrt_dk", 2.0)
    score("unscaled", 2.1)
    assert chapter.flat_sensitivity_sentences(a, TINY.rules, 8) == []
    score("unscaled", 3.0)
    said = chapter.flat_sensitivity_sentences(a, TINY.rules, 8)
    assert (
        len(said) == 2 and "unscaled is the least sensitive (0.010), but its best loss over the grid, 3.000" in said[0]
    )
