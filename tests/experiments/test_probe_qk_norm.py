"""The probe on QK-norm designs: the logit std predicted from a checkpoint's q/k-norm gains against the
one measured on text, and the verdict. Tiny random-weight Qwen3- and Gemma-3-style models (transformers
configs, nothing downloaded) with the bundled MiniLM's tokenizer, at scaling 1.0 and 1/√d."""

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from helpers.lazy import lazy_module  # noqa: E402

transformers = lazy_module("transformers")  # imported by the first test that uses it

from attnscale.cli import main  # noqa: E402
from attnscale.experiments.pretrained import pinned  # noqa: E402
from attnscale.experiments.pretrained.probe import design as qk_design  # noqa: E402
from attnscale.experiments.pretrained.probe import run as probe_run  # noqa: E402
from attnscale.i18n import language  # noqa: E402
from helpers.tiny_hf import llama_config  # noqa: E402

TEXTS = [
    "The cat sat on the mat.",
    "A second, longer line: it has more words, and punctuation!",
    "Short one.",
    "Attention divides the scores by the square root of the key width.",
]
D = 256  # head_dim: Gemma 4's, where scaling 1 gives logits of std 16
# Random-weight models satisfy the prediction's assumptions (independent, isotropic q and k directions)
# up to sampling: the measured logit std over the attended pairs of TEXTS (about 800) is within this
# (relative) of the prediction. A short text also keeps the check's float32 error at scaling 1 (logits
# of std 16) at half its tolerance, Intel and AVX2 alike (5e-6 against 1e-5).
TOLERANCE = 0.1


@pytest.fixture(scope="module")
def tokenizer():
    return transformers.AutoTokenizer.from_pretrained(str(pinned._minilm_folder()), local_files_only=True)


def _gemma3(tokenizer, query_pre_attn_scalar):
    # Gemma3Attention: self.scaling = config.query_pre_attn_scalar ** -0.5; Gemma3RMSNorm's gain is 1 + weight.
    config = transformers.Gemma3TextConfig(
        hidden_size=256,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=D,
        intermediate_size=64,
        query_pre_attn_scalar=query_pre_attn_scalar,
        max_position_embeddings=128,
        sliding_window=512,
        vocab_size=len(tokenizer),
        pad_token_id=0,
    )
    torch.manual_seed(0)
    return transformers.Gemma3ForCausalLM(config).eval()


def _qwen3(tokenizer):
    # Qwen3Attention: self.scaling = head_dim ** -0.5; Qwen3RMSNorm's gain is its weight.
    config = transformers.Qwen3Config(
        hidden_size=256,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=D,
        intermediate_size=64,
        max_position_embeddings=128,
        vocab_size=len(tokenizer),
    )
    torch.manual_seed(0)
    return transformers.Qwen3ForCausalLM(config).eval()


def _hand_gains(seed):
    """Gains log-normal around 1, equal on the channels RoPE rotates together (i and i + d/2), where the
    prediction is exact."""
    half = np.exp(0.4 * np.random.default_rng(seed).standard_normal(D // 2))
    return np.concatenate([half, half])


def _set_gains(model, offset: float):
    """q/k-norm gains set by hand on every layer; ``offset`` 1 for Gemma's (1 + weight); returns them."""
    g_q, g_k = _hand_gains(1), _hand_gains(2)
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.q_norm.weight.copy_(torch.tensor(g_q - offset))
            layer.self_attn.k_norm.weight.copy_(torch.tensor(g_k - offset))
    return g_q, g_k


def _probe(model, tokenizer):
    return probe_run.probe_model(model, tokenizer, TEXTS, name="tiny")


@pytest.mark.parametrize(
    "make, scaling, gains",
    [
        ("gemma3", 1.0, False),
        ("gemma3", D**-0.5, False),
        ("gemma3", 1.0, True),
        ("qwen3", D**-0.5, True),
        ("qwen3", 1.0, True),  # Qwen3's scaling set to 1.0 on the modules: the scale the call applies
    ],
)
def test_prediction_within_tolerance_of_the_measurement(make, scaling, gains, tokenizer):
    model = _gemma3(tokenizer, 1 if scaling == 1.0 else D) if make == "gemma3" else _qwen3(tokenizer)
    g_q, g_k = _set_gains(model, 1.0 if make == "gemma3" else 0.0) if gains else (np.ones(D), np.ones(D))
    if make == "qwen3" and scaling == 1.0:
        for layer in model.model.layers:
            layer.self_attn.scaling = 1.0
    data = _probe(model, tokenizer)
    assert data["check"]["passed"]
    rows = data["qk_design"]
    assert [r["layer"] for r in rows] == [0, 1]
    expected = scaling * math.sqrt(float(np.sum(g_q**2 * g_k**2)))
    for r in rows:
        assert r["scale"] == pytest.approx(scaling)
        assert r["predicted_logit_std"] == pytest.approx(expected, rel=1e-5)  # gains read back from the checkpoint
        assert r["measured_logit_std"] == pytest.approx(r["predicted_logit_std"], rel=TOLERANCE)
        saturated = r["predicted_logit_std"] > r["boundary"]
        assert r["verdict"] == ("design_and_text" if saturated else "neither")
        assert (r["entropy_bits"] < 1.0) == saturated


def test_no_design_lines_without_a_per_head_qk_norm(tokenizer):
    config = llama_config(num_hidden_layers=1, num_key_value_heads=4, intermediate_size=48, vocab_size=len(tokenizer))
    data = _probe(transformers.LlamaForCausalLM(config).eval(), tokenizer)
    assert data["qk_design"] is None
    assert qk_design.design_text(data, ["0"]) == []


def test_verdict_follows_the_numbers():
    assert qk_design.saturation_verdict(7.8, 6.6) == "design_and_text"
    assert qk_design.saturation_verdict(7.8, 0.4) == "design_only"
    assert qk_design.saturation_verdict(0.5, 1.2) == "text_only"
    assert qk_design.saturation_verdict(0.5, 0.4) == "neither"
    assert qk_design.saturation_verdict(0.5, None) == "neither"
    row = {
        "layer": 0,
        "predicted_logit_std": 16.0,
        "measured_logit_std": 15.9,
        "entropy_bits": 0.25,
        "boundary": 2.05,
        "mean_keys": 8.2,
        "verdict": "design_only",
    }
    text = qk_design.design_text({"qk_design": [row]}, ["L0"])
    assert "predicted 16, measured 15.9" in text[1] and text[1].endswith("saturated by design, not on text")
    with language("zh"):
        assert "设计上饱和，文本上不饱和" in qk_design.design_text({"qk_design": [{**row}]}, ["L0"])[1]
    text = qk_design.design_text({"qk_design": [{**row, "verdict": "neither"}]}, ["L0"])
    assert text[1].endswith("not saturated")


@pytest.mark.parametrize(
    "query_pre_attn_scalar, predicted, verdict",
    [(1, "16", "saturated by design and on text"), (D, "1", "not saturated")],
)
def test_cli_prints_the_prediction_and_verdict(query_pre_attn_scalar, predicted, verdict, tokenizer, tmp_path, capsys):
    folder = tmp_path / "tiny-gemma3"
    _gemma3(tokenizer, query_pre_attn_scalar).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    text = tmp_path / "texts.txt"
    text.write_text("\n".join(TEXTS) + "\n", encoding="utf-8")
    code = main(
        [
            "probe",
            "--model",
            str(folder),
            "--text",
            str(text),
            "--results",
            str(tmp_path / "results"),
            "--quiet",
            "--name",
            "tiny",
        ]
    )
    out = capsys.readouterr().out
    assert code == 0
    lines = [line for line in out.splitlines() if ": predicted " in line]
    assert len(lines) == 2, out
    for line in lines:
        assert f"predicted {predicted}," in line and line.endswith(verdict), line
