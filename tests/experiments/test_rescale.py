"""attnscale rescale: bad input refused in one line before any model loads; the MiniLM intervention;
the rescale and probe chapters' sentences follow hand-made data."""

import copy
import json
import re
from html import unescape

import pytest

from attnscale.i18n import language
from attnscale import results
from attnscale.cli import main
from attnscale.errors import InputError
from attnscale.experiments.pretrained.rescale import ALPHAS, RescaleConfig, check_alphas, default_text


@pytest.mark.parametrize("alphas", ["0,1", "-1,1", "inf,1", "nan,1", "1,x", "1/0,1"])
def test_bad_alphas_are_one_line_and_exit_2(alphas, capsys, tmp_path):
    assert main(["rescale", f"--alphas={alphas}", "--results", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--alphas" in err
    assert not any(tmp_path.iterdir())  # nothing written


def test_row_figures_are_row_health_of_the_models_own_weights():
    """The per-layer row figures, taken from the model's float32 weights in torch, are those of the
    reference (attnscale.row_health on the logits) over the real rows with two or more keys: causal
    row 0 and padded queries out, a weight that underflowed to 0 still counted in ln n."""
    import types

    import numpy as np
    import torch

    from attnscale.experiments.pretrained.rescale_alphas import row_figures
    from attnscale.softmax_rows import row_health

    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(2, 3, 6, 6, generator=gen, dtype=torch.float64) * 4
    logits[0, 1, 5] = torch.tensor([0.0, -200.0, 1.0, -200.0, 2.0, 0.5], dtype=torch.float64)  # two underflow
    attended = torch.ones(6, 6, dtype=torch.bool).tril()
    masked = logits.masked_fill(~attended, -torch.inf)
    call = types.SimpleNamespace(weights=torch.softmax(masked, -1).float(), attended=lambda: attended[None, None])
    valid = torch.tensor([[1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 0, 0]])
    assert float(call.weights[0, 1, 5, 1]) == 0.0
    sums, rows = row_figures(call, valid)
    health = row_health(masked.numpy(), spectral=False)
    keep = (health.n >= 2) & valid.bool().numpy()[:, None, :]
    expected = [health.entropy[keep].sum(), health.normalized_entropy[keep].sum(), health.max_weight[keep].sum()]
    assert rows == int(keep.sum()) == 2 * 3 * 5 - 3 * 2
    np.testing.assert_allclose(sums, expected, rtol=1e-6)  # float32 weights against float64 logits


def test_alphas_must_be_finite_positive_and_hold_1():
    assert check_alphas(ALPHAS) == ALPHAS and ALPHAS[0] == 1 / 8 and ALPHAS[-1] == 8
    with pytest.raises(InputError, match="expected 1 among the values"):
        RescaleConfig(alphas=(0.5, 2.0))
    with pytest.raises(InputError, match="alpha: expected finite numbers > 0"):
        RescaleConfig(alphas=(1.0, float("inf")))


@pytest.mark.parametrize(
    "make, expected",
    [
        (lambda p: p.write_bytes(b"\xff\xfe not utf-8 \xc3"), "as UTF-8 text"),
        (lambda p: p.mkdir(), "as UTF-8 text"),
        (lambda p: p.write_text("   \n", encoding="utf-8"), "holds no text"),
    ],
)
def test_bad_text_is_one_line_and_exit_2(make, expected, capsys, tmp_path):
    path = tmp_path / "text"
    make(path)
    assert main(["rescale", "--text", str(path), "--results", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and expected in err and not (tmp_path / "out").exists()


def test_the_default_text_is_real_english_shipped_with_python():
    text, source = default_text()
    assert len(text) > 5000 and "pydoc_data.topics['objects']" in source and "Python 3." in source
    assert text.count(" the ") > 50


@pytest.mark.model
def test_minilm_embeddings_move_away_from_alpha_1_and_alpha_1_is_the_model():
    pytest.importorskip("transformers")
    from attnscale.experiments.pretrained import loading as pretrained
    from attnscale.experiments.pretrained.rescale import run_rescale

    loaded = pretrained.load_encoder()
    texts = ["The cat sat on the mat.", "Stock prices fell sharply on Monday.", "Rain again."]
    data = run_rescale(loaded, RescaleConfig(alphas=(0.5, 1.0, 2.0)), texts=texts, source="test")
    assert data["check"]["passed"] and data["check"]["max_abs_difference"] <= 1e-5
    alphas = [r["alpha"] for r in data["alphas"]]
    assert alphas == pytest.approx([0.5, 1.0, 2.0, 32**0.5])  # α = √d_k added: no scale at all
    by = {r["alpha"]: r for r in data["alphas"]}
    assert by[1.0]["cosine_min"] == pytest.approx(1.0, abs=1e-12)
    unscaled = by[data["unscaled_alpha"]]
    assert by[2.0]["cosine_min"] < 0.999 and unscaled["cosine_min"] < by[2.0]["cosine_mean"]
    # Sharper rows as α grows: the max weight rises in every layer.
    assert all(a < b for a, b in zip(by[1.0]["max_weight_per_layer"], by[2.0]["max_weight_per_layer"]))
    json.loads(results.dumps(data))


# ---- chapters on hand-made data: the words follow the figures -------------------------------------


def decoder_data():
    rows = []
    for alpha, ce, cont in [
        (0.5, 3.2, " Paris."),
        (1.0, 3.0, " Paris."),
        (2.0, 3.6, " Paris, the"),
        (8.0, 7.0, " the the"),
    ]:
        rows.append(
            {
                "alpha": alpha,
                "scale": alpha / 8,
                "cross_entropy": ce,
                "perplexity": 2.718281828**ce,
                "continuation": cont,
                "entropy_per_layer": [1.0, 2.0],
                "max_weight_per_layer": [0.5, 0.4],
                "normalized_entropy_per_layer": [0.5, 0.6],
            }
        )
    data = {
        "alphas": rows,
        "prompt": "The capital of France is",
        "unscaled_alpha": 8.0,
        "model": {"name": "TinyLM", "d_k": 64, "scale": 0.125, "causal": True, "weights_note": "de-quantised"},
        "check": {"passed": True, "our_loss": 3.0, "own_loss": 3.0, "relative_difference": 1e-7, "tolerance": 1e-4},
        "text": {"source": "test", "n_tokens": 100, "windows": 1, "window": 512, "tokens_predicted": 99},
    }
    data["analysis"] = {
        "best_alpha": 1.0,
        "best_perplexity": rows[1]["perplexity"],
        "perplexity_alpha1": rows[1]["perplexity"],
        "has_unscaled": True,
        "perplexity_unscaled": rows[3]["perplexity"],
        "perplexity_ratio": {"0.5": 1.2, "1": 1.0, "2": 1.8, "8": 54.6},
        "alphas_same_continuation": [0.5],
        "alphas_changed_continuation": [2.0, 8.0],
        "mean_normalized_entropy": {"0.5": 0.8, "1": 0.55, "2": 0.3, "8": 0.05},
        "mean_max_weight": {"0.5": 0.2, "1": 0.45, "2": 0.7, "8": 0.95},
    }
    return data


def sentences(html: str) -> list[str]:
    return [unescape(re.sub("<[^>]+>", "", s)) for s in re.findall(r"<li>.*?</li>", html)]


@pytest.mark.slow
def test_rescale_chapter_words_follow_the_data():
    from attnscale.report.chapters import EXPERIMENT_CHAPTERS, rescale, rescale_minilm

    assert {"rescale", "rescale_minilm", "probe_smollm2"} <= set(EXPERIMENT_CHAPTERS)
    assert (rescale.KIND, rescale_minilm.KIND) == ("rescale/smollm2", "rescale/minilm")
    data = decoder_data()
    html = rescale.render(results.Envelope(kind=rescale.KIND, data=data))
    words = sentences(html)
    assert words[0].startswith("The model's own scale is the best") and "54.6 times" in words[1]
    assert "for α = 0.5 and changes for α = 2, 8" in words[2]
    assert "not what training without the scale would give" in html and "de-quantised" in html
    assert html.count("<figure") == 1 and html.count("<svg") == 2 and "<table" in html
    from helpers.report_data import figures_readable_on_a_phone

    figures_readable_on_a_phone(html)
    altered = copy.deepcopy(data)
    altered["analysis"].update(
        best_alpha=0.5, best_perplexity=20.0, alphas_changed_continuation=[], alphas_same_continuation=[0.5, 2.0, 8.0]
    )
    words = sentences(rescale.render(results.Envelope(kind=rescale.KIND, data=altered)))
    assert words[0].startswith("The lowest perplexity is at α = 0.5 (20)")
    assert words[2].startswith("The greedy continuation of “The capital of France is” is the same at every α")
    altered["analysis"].update(alphas_changed_continuation=[0.5, 2.0, 8.0], alphas_same_continuation=[])
    words = sentences(rescale.render(results.Envelope(kind=rescale.KIND, data=altered)))
    assert words[2] == "The greedy continuation of “The capital of France is” changes at every α other than 1."
    failed = copy.deepcopy(data)
    failed["check"]["passed"] = False
    with language("zh"):
        failed_zh = rescale.render(results.Envelope(kind=rescale.KIND, data=failed))
    assert "Check FAILED" in failed_zh or "校验失败" in failed_zh
    failed_en = rescale.render(results.Envelope(kind=rescale.KIND, data=failed))
    assert (
        "Check FAILED" in failed_en and "equals the model's own loss" not in failed_en
    )  # a failed check says no agreement


def test_rescale_chapter_for_an_encoder():
    from attnscale.report.chapters import rescale_minilm

    data = decoder_data()
    data["model"].update(causal=False, name="TinyBERT")
    data["check"] = {"passed": True, "max_abs_difference": 0.0, "tolerance": 1e-5}
    data["text"] = {"source": "test", "n_sequences": 3, "n_tokens": 30}
    for r, cos in zip(data["alphas"], (0.9, 1.0, 0.8, 0.5)):
        r.update(cosine_mean=cos, cosine_min=cos - 0.05)
    data["analysis"].update(worst_alpha=8.0, worst_cosine_min=0.45, cosine_min_unscaled=0.45)
    words = sentences(rescale_minilm.render(results.Envelope(kind="rescale/minilm", data=data)))
    assert words[0] == (
        "The embeddings move most at α = 8: the least similar sentence keeps a cosine of 0.45 to its α = 1 embedding."
    )


def probe_data():
    heads = []
    for layer in range(2):
        for head in range(3):
            heads.append(
                {
                    "layer": layer,
                    "head": head,
                    "ratio_pair": 1.5 + layer + head / 10,
                    "ratio_token": 1.4 + layer + head / 10,
                    "sink_first": 0.3 * head,
                    "normalized_entropy": 0.5,
                    "normalized_entropy_unscaled": 0.1,
                }
            )
    per_layer = {"ratio_pair": [1.6, 2.6], "ratio_token": [1.5, 2.5], "sink_first": [0.3, 0.3]}
    return {
        "config": {"n_sequences": 4, "n_tokens": 40},
        "check": {
            "passed": True,
            "max_abs_diff_per_layer": [1e-7, 2e-7],
            "max_abs_diff": 2e-7,
            "tolerance": 1e-5,
            "rows_checked": 240,
        },
        "model": {
            "name": "TinyLM",
            "d_k": 64,
            "n_layers": 2,
            "n_heads_q": 3,
            "n_heads_kv": 1,
            "causal": True,
            "scale": 0.125,
            "rope_theta": 1e4,
            "weights_note": "weights de-quantised from 4 bits",
        },
        "heads": heads,
        "per_layer": per_layer,
        "absent": {"sink_bos": "no bos token in the text"},
        "float16": {
            "limit": 65504.0,
            "max_abs_logit": 40.0,
            "max_abs_logit_unscaled": 320.0,
            "margin": 1637.6,
            "margin_unscaled": 204.7,
        },
        "striking_heads": [
            {
                "layer": 1,
                "head": 2,
                "what": "largest Var(q·k) ratio (pair-weighted)",
                "figure": "ratio_pair",
                "value": 2.7,
                "of": None,
            }
        ],
        "analysis": {
            "n_heads": 6,
            "ratio_pair": {"min": 1.5, "median": 2.05, "max": 2.7, "above_1": 6, "below_1": 0},
            "ratio_token": {"min": 1.4, "median": 1.95, "max": 2.6, "above_1": 6, "below_1": 0},
            "top_pair": {"layer": 1, "head": 2, "value": 2.7},
            "top_token": {"layer": 1, "head": 2, "value": 2.6},
            "max_abs_pair_minus_token": 0.1,
            "sink_first": {"min": 0.0, "median": 0.3, "max": 0.6, "over_half": 2},
            "normalized_entropy": {"min": 0.5, "median": 0.5, "max": 0.5},
            "normalized_entropy_unscaled": {"min": 0.1, "median": 0.1, "max": 0.1},
            "frozen_only_unscaled": 4,
        },
    }


@pytest.mark.slow
def test_probe_chapter_words_follow_the_data():
    from attnscale.report.chapters import probe, probe_smollm2

    assert probe_smollm2.KIND == "probe/smollm2" and probe_smollm2.render is probe.render
    data = probe_data()
    html = probe.render(results.Envelope(kind="probe/smollm2", data=data))
    words = sentences(html)
    assert (
        words[0].startswith("All 6 heads have a larger Var(q·k)") and "the largest head is the same, L1H2" in words[1]
    )
    assert words[2] == "2 of 6 heads put more than half of their weight on the first token (up to 0.6)."
    assert "no BOS token" in words[3] and "so both fit" in words[5]
    assert "3 query heads sharing 1 key/value heads" in html and "after the rotary embedding" in html
    assert "de-quantised from 4 bits" in html and "Pair-weighted moments" in html and html.count("<svg") == 4
    altered = copy.deepcopy(data)
    altered["analysis"]["ratio_pair"].update(above_1=4, below_1=2, min=0.4)
    altered["analysis"]["top_token"] = {"layer": 0, "head": 1, "value": 3.0}
    altered["analysis"]["sink_first"].update(over_half=0)
    altered["float16"]["max_abs_logit_unscaled"] = 70000.0
    words = sentences(probe.render(results.Envelope(kind="probe/smollm2", data=altered)))
    assert words[0].startswith("4 of 6 heads have a larger Var(q·k) than the iid prediction and 2 a smaller one")
    assert "rank heads differently: the largest is L1H2 (2.7) by pairs, L0H1 (3) by tokens" in words[1]
    assert words[2].startswith("No head puts more than half")
    assert "beyond float16's 65504" in words[5]
    altered["float16"]["limit"] = 60000.0  # the limit the result records, not one typed in
    assert "beyond float16's 60000" in sentences(probe.render(results.Envelope(kind="probe/smollm2", data=altered)))[5]
    for lang in ("en", "zh"):
        with language(lang):
            probe.render(results.Envelope(kind="probe/smollm2", data=altered))


@pytest.mark.model
def test_cli_json_dash_prints_strict_json_and_no_table(capsys, tmp_path):
    pytest.importorskip("transformers")
    text = tmp_path / "s.txt"
    text.write_text("The cat sat on the mat.\nRain again, all day.\n", encoding="utf-8")
    args = [
        "rescale",
        "--model",
        "minilm",
        "--text",
        str(text),
        "--alphas",
        "1,2",
        "--results",
        str(tmp_path),
        "--quiet",
    ]
    assert main(args + ["--json", "-"]) == 0
    out = capsys.readouterr().out
    env = json.loads(out, parse_constant=lambda c: pytest.fail(f"not strict JSON: {c}"))
    assert env["kind"] == "rescale/minilm" and [r["alpha"] for r in env["data"]["alphas"]][:2] == [1.0, 2.0]
    assert results.read("rescale/minilm", tmp_path).data == env["data"]
    assert main(args) == 0
    table = capsys.readouterr().out
    assert "not what training without the scale would give" in table and "cos mean" in table


def test_rescale_help_runs():
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "attnscale", "rescale", "--help"], capture_output=True, text=True)
    assert done.returncode == 0 and "smollm2|minilm|PATH" in done.stdout and "--max-tokens N" in done.stdout
    words = " ".join(done.stdout.split())
    assert "not training without it" in words
    # --text and the description apply to any decoder or encoder, not only to the two bundled models.
    assert "a decoder or encoder-decoder reads it whole, an encoder one sentence per line" in words
    assert "SmolLM2:" not in words and "(MiniLM)" not in words
