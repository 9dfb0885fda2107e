"""The user's own model through `--model PATH`: tiny random checkpoints of each architecture family,
built here from transformers configs (nothing downloaded), saved to a temporary folder with the
bundled MiniLM's tokenizer and loaded back offline. Per architecture: the probe's rebuilt
probabilities match the model's own, `rescale` at α = 1 reproduces the model's own loss, and the
recorded scale is the one its transformers source applies (the formula beside each config below is
read from that source, transformers 5.24)."""

import json
import math
import re

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from helpers.lazy import lazy_module  # noqa: E402

transformers = lazy_module("transformers")  # imported by the first test that uses it

# E402: the imports below need torch and transformers, so they follow the importorskip above
from attnscale import results  # noqa: E402
from attnscale.cli import main  # noqa: E402
from attnscale.errors import InputError  # noqa: E402
from attnscale.experiments.pretrained import loading as pretrained, model_run as probe_capture, pinned  # noqa: E402
from attnscale.experiments.pretrained.probe import run as probe_run  # noqa: E402
from attnscale.experiments.pretrained.hf_attention import UnsupportedAttention, attention_calls  # noqa: E402
from attnscale.i18n import language  # noqa: E402
from helpers.tiny_hf import llama_config  # noqa: E402

TEXTS = [
    "The cat sat on the mat.",
    "A second, longer line: it has more words, and punctuation!",
    "Short one.",
    "Attention divides the scores by the square root of the key width.",
]


def _llama():
    # LlamaAttention: self.scaling = self.head_dim ** -0.5; rotary; 4 query heads on 2 key/value heads.
    config = llama_config(vocab_size=32000, intermediate_size=48, max_position_embeddings=128)
    return config, transformers.LlamaForCausalLM, lambda i: 8**-0.5, None


def _gpt2_layer_scaled():
    # GPT2Attention: scaling = head_dim ** -0.5 if scale_attn_weights, then /= (layer_idx + 1) if
    # scale_attn_by_inverse_layer_idx; Conv1D projections; reorder_and_upcast_attn bypasses the
    # interface only under "eager" (ours is another implementation, so the interface is used).
    config = transformers.GPT2Config(
        n_embd=32,
        n_layer=2,
        n_head=4,
        n_positions=128,
        scale_attn_by_inverse_layer_idx=True,
        reorder_and_upcast_attn=True,
    )
    return config, transformers.GPT2LMHeadModel, lambda i: 8**-0.5 / (i + 1), None


def _gpt2_unscaled():
    config = transformers.GPT2Config(n_embd=32, n_layer=2, n_head=4, n_positions=128, scale_attn_weights=False)
    return config, transformers.GPT2LMHeadModel, lambda i: 1.0, None


def _bert():
    # BertSelfAttention: self.scaling = self.attention_head_size ** -0.5; bidirectional encoder.
    config = transformers.BertConfig(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=48, max_position_embeddings=128
    )
    return config, transformers.BertModel, lambda i: 8**-0.5, None


def _t5():
    # T5Attention: self.scaling = 1.0 ("does not scale the query/key dot product"); the relative
    # position bias is added to the logits; encoder, causal decoder and cross-attention.
    config = transformers.T5Config(
        d_model=32, d_kv=8, d_ff=48, num_layers=2, num_heads=4, decoder_start_token_id=0, pad_token_id=0
    )
    return config, transformers.T5ForConditionalGeneration, lambda i: 1.0, None


def _gemma2():
    # Gemma2Attention: self.scaling = config.query_pre_attn_scalar ** -0.5, softcap =
    # config.attn_logit_softcapping (cap·tanh(logit/cap) before the mask); layer 0 slides (window 4).
    config = transformers.Gemma2Config(
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        intermediate_size=48,
        query_pre_attn_scalar=16,
        attn_logit_softcapping=2.0,
        sliding_window=4,
        max_position_embeddings=128,
        pad_token_id=0,
    )
    return config, transformers.Gemma2ForCausalLM, lambda i: 16**-0.5, 2.0


def _qwen3():
    # Qwen3Attention: self.scaling = self.head_dim ** -0.5, q_norm and k_norm (RMSNorm over head_dim)
    # before the rotary embedding.
    config = transformers.Qwen3Config(
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        intermediate_size=48,
        max_position_embeddings=128,
    )
    return config, transformers.Qwen3ForCausalLM, lambda i: 8**-0.5, None


def _olmo2():
    # Olmo2Attention: self.scaling = self.head_dim ** -0.5; q_norm, k_norm over all heads together.
    config = transformers.Olmo2Config(
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=48,
        max_position_embeddings=128,
    )
    return config, transformers.Olmo2ForCausalLM, lambda i: 8**-0.5, None


ARCHITECTURES = {
    "llama": _llama,
    "gpt2-layer-scaled": _gpt2_layer_scaled,
    "gpt2-unscaled": _gpt2_unscaled,
    "bert": _bert,
    "t5": _t5,
    "gemma2": _gemma2,
    "qwen3": _qwen3,
    "olmo2": _olmo2,
}
QK_NORMED = {"qwen3", "olmo2"}


@pytest.fixture(scope="module")
def tokenizer():
    folder = pinned._minilm_folder()
    return transformers.AutoTokenizer.from_pretrained(str(folder), local_files_only=True)


@pytest.fixture(scope="module")
def saved(tmp_path_factory, tokenizer):
    """name → folder of a tiny random checkpoint (config.json, model.safetensors, tokenizer files)."""
    root = tmp_path_factory.mktemp("models")
    folders = {}
    for name, make in ARCHITECTURES.items():
        config, cls, _, _ = make()
        config.vocab_size = len(tokenizer)
        torch.manual_seed(0)
        model = cls(config).eval()
        if name == "gemma2":  # logits of a few units, so that the soft-cap at 2 bites
            with torch.no_grad():
                for layer in model.model.layers:
                    layer.self_attn.q_proj.weight.mul_(40)
                    layer.self_attn.k_proj.weight.mul_(40)
        folders[name] = root / name
        model.save_pretrained(folders[name])
        tokenizer.save_pretrained(folders[name])
    return folders


def _probe(folder, out, *extra):
    text = out / "texts.txt"
    text.write_text("\n".join(TEXTS) + "\n", encoding="utf-8")
    code = main(
        [
            "probe",
            "--model",
            str(folder),
            "--text",
            str(text),
            "--results",
            str(out),
            "--quiet",
            "--name",
            folder.name,
            *extra,
        ]
    )
    return code, results.read(f"probe/user/{folder.name}", out).data


class Runs:
    """Each architecture probed and rescaled once through the CLI, into one results folder."""

    def __init__(self, saved, out):
        self.saved, self.out, self.codes = saved, out, {}

    def probe(self, name):
        if ("probe", name) not in self.codes:
            self.codes["probe", name], _ = _probe(self.saved[name], self.out)
        return self.codes["probe", name], results.read(f"probe/user/{name}", self.out).data

    def rescale(self, name):
        if ("rescale", name) not in self.codes:
            windows = [] if name == "bert" else ["--max-tokens", "48", "--window", "24"]  # an encoder has none
            self.codes["rescale", name] = main(
                [
                    "rescale",
                    "--model",
                    str(self.saved[name]),
                    "--alphas",
                    "1/2,1,2",
                    *windows,
                    "--results",
                    str(self.out),
                    "--quiet",
                    "--name",
                    name,
                ]
            )
        return self.codes["rescale", name], results.read(f"rescale/user/{name}", self.out).data


@pytest.fixture(scope="module")
def runs(saved, tmp_path_factory):
    return Runs(saved, tmp_path_factory.mktemp("results"))


@pytest.mark.parametrize("name", ARCHITECTURES)
def test_probe_rebuilds_the_models_own_probabilities_and_records_its_scale(name, runs):
    code, data = runs.probe(name)
    config, _, expected_scale, softcap = ARCHITECTURES[name]()
    assert code == 0 and data["check"]["passed"], data["check"]
    assert data["check"]["max_abs_diff"] <= data["check"]["tolerance"] == 1e-5
    rules = data["model"]["scale_rules"]
    n_calls = 3 * config.num_layers if name == "t5" else config.num_hidden_layers  # T5: enc, dec self, cross
    assert len(rules) == n_calls and data["model"]["user"] is True and data["heads"]
    for i, rule in enumerate(rules):
        layer = i if name != "t5" else 0  # every T5 layer: 1.0
        assert math.isclose(rule["value"], expected_scale(layer), rel_tol=1e-12), (i, rule)
        assert rule["softcap"] == softcap and rule["qk_norm"] is (name in QK_NORMED)
        assert math.isclose(rule["times_sqrt_d_k"], rule["value"] * math.sqrt(8), rel_tol=1e-12)
    named = {
        "llama": "1/sqrt(d_k)",
        "bert": "1/sqrt(d_k)",
        "qwen3": "1/sqrt(d_k)",
        "olmo2": "1/sqrt(d_k)",
        "t5": "1",
        "gpt2-unscaled": "1",
        "gemma2": "1/sqrt(c)",
    }
    if name in named:
        assert {rule["rule"] for rule in rules} == {named[name]}
    if name == "gemma2":
        assert rules[0]["c"] == 16
    if name == "gpt2-layer-scaled":  # 1/√8, then 1/(2√8) = 1/√32
        assert [rule["rule"] for rule in rules] == ["1/sqrt(d_k)", "1/sqrt(c)"] and rules[1]["c"] == 32
    causal = data["model"]["causal_layers"]
    assert all(causal) is (name not in {"bert", "t5"})
    if name == "t5":  # the encoder sees both ways, the decoder only back
        assert data["model"]["cross_layers"].count(True) == 2 and causal.count(True) == 2
        assert data["model"]["positions"] == "relative position bias"


def _calls(folder, enc):
    loaded = pretrained.load_local(folder)
    calls = []
    with torch.no_grad(), attention_calls(loaded.model, on_call=calls.append):
        probe_capture.forward(loaded, probe_capture.model_inputs(loaded.model.config, enc))
    return calls


@pytest.mark.parametrize("name, drop", [("t5", "bias"), ("gemma2", "softcap")])
def test_the_check_needs_what_the_model_adds_to_its_logits(name, drop, saved, tokenizer):
    """Left out, T5's position bias or Gemma 2's soft-cap makes the rebuilt probabilities wrong: the
    check would catch a capture that missed them."""
    enc = tokenizer(TEXTS[:2], padding=True, return_tensors="pt")
    calls = _calls(saved[name], enc)
    worst_with = worst_without = 0.0
    for call in calls:
        arrays = probe_capture.arrays_of(call)
        own = call.weights.double().numpy()
        valid = enc["attention_mask"].numpy().astype(bool)
        worst_with = max(
            worst_with, probe_run.check_probabilities(probe_run.rebuilt_probabilities(**arrays), own, valid)
        )
        if drop == "bias":
            arrays["bias"] = None if call.mask is None else np.where(arrays["attended"], call.mask.double().numpy(), 0)
        else:
            arrays["softcap"] = None
        worst_without = max(
            worst_without, probe_run.check_probabilities(probe_run.rebuilt_probabilities(**arrays), own, valid)
        )
    assert worst_with < 1e-6 and worst_without > 1e-3


def test_gemma2_sliding_window_is_in_the_captured_mask(saved, tokenizer):
    enc = tokenizer([TEXTS[1]], return_tensors="pt")
    sliding, full = _calls(saved["gemma2"], enc)[:2]
    n_keys = sliding.attended()[0, 0].sum(-1).numpy()
    L = n_keys.size
    np.testing.assert_array_equal(n_keys, np.minimum(np.arange(1, L + 1), 4))  # window 4, causal
    np.testing.assert_array_equal(full.attended()[0, 0].sum(-1).numpy(), np.arange(1, L + 1))


@pytest.mark.slow
@pytest.mark.parametrize("name", ARCHITECTURES)
def test_rescale_at_alpha_1_reproduces_the_models_own_loss(name, runs):
    code, data = runs.rescale(name)
    check = data["check"]
    assert code == 0 and check["passed"], check
    if name == "bert":  # an encoder has no loss: its embeddings are checked
        assert check["max_abs_difference"] <= 1e-5
    else:
        assert check["relative_difference"] <= 1e-4 and check["tolerance"] == 1e-4
        assert check["own_loss"] > 0
    _, _, expected_scale, _ = ARCHITECTURES[name]()
    by_alpha = {row["alpha"]: row for row in data["alphas"]}
    first = data["model"]["scales"][0]
    assert math.isclose(first, expected_scale(0), rel_tol=1e-12)
    assert math.isclose(by_alpha[2.0]["scale"], 2 * first, rel_tol=1e-12)  # α × the scale it applies
    if name in {"t5", "gpt2-unscaled"}:
        assert data["unscaled_alpha"] is None and data["unscaled_alpha_none"] == "no_scale"
    elif name == "gpt2-layer-scaled":
        assert data["unscaled_alpha"] is None and data["unscaled_alpha_none"] == "layers_differ"
    else:
        assert math.isclose(data["unscaled_alpha"], 1 / first) and data["unscaled_alpha"] in by_alpha


@pytest.mark.parametrize("name", ["gemma2", "t5", "gpt2-unscaled"])
def test_rescale_changes_the_loss_away_from_alpha_1(name, runs):
    """The scale really moves inside the model, whatever it is: α = 1/2 and 2 give other losses."""
    rows = {r["alpha"]: r["cross_entropy"] for r in runs.rescale(name)[1]["alphas"]}
    assert abs(rows[0.5] - rows[1.0]) > 1e-6 and abs(rows[2.0] - rows[1.0]) > 1e-6


def test_python_api_returns_what_the_cli_writes(saved, runs, tokenizer):
    _, written = runs.probe("llama")
    model = transformers.AutoModelForCausalLM.from_pretrained(str(saved["llama"]), attn_implementation="sdpa")
    data = probe_run.probe_model(model, tokenizer, TEXTS, name="llama")
    assert data["kind"] == "probe/user/llama" and model.config._attn_implementation == "sdpa"
    same = json.loads(results.dumps(data))
    assert same["heads"] == written["heads"] and same["model"]["scale_rules"] == written["model"]["scale_rules"]
    assert same["check"]["max_abs_diff"] == written["check"]["max_abs_diff"]


def test_a_half_precision_model_is_refused_by_the_python_api(saved, tokenizer):
    model = transformers.AutoModelForCausalLM.from_pretrained(str(saved["llama"]), dtype=torch.bfloat16)
    with pytest.raises(InputError, match="weights are bfloat16, expected float32 or float64 .* model.float()"):
        probe_run.probe_model(model, tokenizer, TEXTS)


def test_rescale_python_api_on_a_loaded_encoder_decoder(saved, tokenizer):
    from attnscale.experiments.pretrained.rescale import RescaleConfig, rescale_model

    model = transformers.AutoModelForSeq2SeqLM.from_pretrained(str(saved["t5"]))
    data = rescale_model(
        model, tokenizer, RescaleConfig(alphas=(1.0, 4.0), max_tokens=24, window=24, new_tokens=3), text=" ".join(TEXTS)
    )
    assert data["kind"].startswith("rescale/user/t5-") and data["check"]["passed"]  # t5 + its config's digest
    assert data["model"]["family"] == "encoder-decoder" and {r["alpha"] for r in data["alphas"]} == {1.0, 4.0}


@pytest.fixture(scope="module")
def refused(tmp_path_factory, tokenizer):
    """DeBERTa-v2 computes its disentangled attention itself, outside transformers' interface."""
    folder = tmp_path_factory.mktemp("refused") / "deberta"
    config = transformers.DebertaV2Config(
        vocab_size=len(tokenizer),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=48,
        max_position_embeddings=128,
    )
    torch.manual_seed(0)
    transformers.DebertaV2Model(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.mark.parametrize("command", ["probe", "rescale"])
def test_an_architecture_outside_the_interface_is_refused_in_one_line(command, refused, tmp_path, capsys):
    assert main([command, "--model", str(refused), "--results", str(tmp_path), "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "deberta-v2 is not supported" in err
    assert "does not go through transformers' attention interface" in err
    assert not (tmp_path / command / "user").exists()  # nothing written


def test_learned_sinks_are_refused_naming_the_option(tmp_path, tokenizer):
    """GPT-OSS adds a learned sink logit per head to the softmax: the capture cannot rebuild it."""
    config = transformers.GptOssConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        intermediate_size=32,
        num_local_experts=2,
        num_experts_per_tok=1,
        sliding_window=4,
        max_position_embeddings=128,
    )
    torch.manual_seed(0)
    model = transformers.GptOssForCausalLM(config).eval()
    with pytest.raises(UnsupportedAttention, match=r"gpt_oss is not supported: .*sink logit per head"):
        probe_run.probe_model(model, tokenizer, TEXTS[:1])


@pytest.mark.parametrize(
    "make, expected",
    [
        (lambda p: p / "nowhere", "no such file or folder"),
        (lambda p: p, "expected a folder holding config.json"),
        (
            lambda p: (p / "weights.bin").write_bytes(b"x") and p / "weights.bin",
            "expected a folder holding config.json or a .gguf file, got the file",
        ),
        (
            lambda p: (p / "broken.gguf").write_bytes(b"not a gguf file at all") and p / "broken.gguf",
            "expected a GGUF file transformers can read",
        ),
        (
            lambda p: (p / "config.json").write_text("{not json", encoding="utf-8") and p,
            "expected a transformers config.json",
        ),
    ],
)
def test_bad_model_paths_are_one_line_and_exit_2(make, expected, tmp_path, capsys):
    target = make(tmp_path)
    assert main(["probe", "--model", str(target), "--results", str(tmp_path / "out"), "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and err.startswith("attnscale probe: error: --model: ") and expected in err


def test_a_checkpoint_without_tokenizer_files_is_refused_in_one_line(saved, tmp_path, capsys):
    for name in ("config.json", "model.safetensors"):
        (tmp_path / name).write_bytes((saved["llama"] / name).read_bytes())
    assert main(["probe", "--model", str(tmp_path), "--results", str(tmp_path / "out"), "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "model: expected tokenizer files" in err


def test_a_model_too_large_for_memory_is_refused_before_loading(tmp_path, capsys):
    """A 70B-parameter Llama config without its weights: refused from the config alone."""
    config = transformers.LlamaConfig(
        hidden_size=8192,
        num_hidden_layers=80,
        num_attention_heads=64,
        num_key_value_heads=8,
        intermediate_size=28672,
        vocab_size=128256,
        architectures=["LlamaForCausalLM"],
    )
    config.save_pretrained(tmp_path)
    assert main(["probe", "--model", str(tmp_path), "--results", str(tmp_path / "out"), "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "70,55" in err and "GiB to load in float32, expected at most" in err


def test_the_memory_estimate_counts_the_parameters_exactly(saved):
    config = transformers.AutoConfig.from_pretrained(str(saved["llama"]))
    model = transformers.AutoModelForCausalLM.from_pretrained(str(saved["llama"]))
    assert pretrained.parameter_count(config, "decoder") == sum(p.numel() for p in model.parameters())
    with pytest.raises(InputError, match="needing about .* GiB"):
        pretrained.load_local(saved["llama"], available=1 << 20)


def test_slugs_and_user_kinds():
    assert pretrained.model_slug("My Model v2 (final)") == "my-model-v2-final"
    assert results.user_kind("probe", "tiny.llama_2") == "probe/user/tiny.llama_2"
    with pytest.raises(InputError, match="slug: expected"):
        results.user_kind("probe", "../escape")


@pytest.mark.slow
def test_user_results_render_in_the_report_chapters(runs):
    from attnscale.report.chapters import probe as probe_chapter
    from attnscale.report.chapters import rescale as rescale_chapter

    for name in ("gemma2", "t5"):
        runs.probe(name), runs.rescale(name)
    assert {"probe/user/gemma2", "probe/user/t5"} <= set(results.user_kinds("probe", runs.out))
    gemma = probe_chapter.render(results.read("probe/user/gemma2", runs.out))
    assert "0.25 = 1/√16, not 1/√dₖ = 1/√8, soft-capped: 2·tanh(logit/2)" in gemma  # the page typesets d_k
    with language("zh"):
        t5 = probe_chapter.render(results.read("probe/user/t5", runs.out))
    assert "1（不缩放" in t5
    words = rescale_chapter.render(results.read("rescale/user/t5", runs.out))
    assert "it applies no scale (1), so there is none to remove" in words


def test_scale_words_follow_each_layers_rule():
    from attnscale.report.model_words import scales_sentence

    rule = probe_run.scale_rule
    same = {"scale_rules": [rule(0.125, 64), rule(0.125, 64)]}
    assert scales_sentence(same) == (
        "All 2 attention layers multiply q·k by the same scale, 0.125 = 1/√64 (as recorded from each call)."
    )
    mixed = {"scale_rules": [rule(0.125, 64, qk_norm=True), rule(0.3, 64)]}
    assert (
        "layer 0: 0.125 = 1/√64, after q and k are normalised (QK-norm); layer 1: 0.3 = 2.4 × 1/√64"
        in scales_sentence(mixed)
    )
    assert scales_sentence({"scale": 0.125}) is None  # a result from before the rules


@pytest.mark.model
@pytest.mark.slow
def test_a_gguf_file_is_read_through_model_path(tmp_path):
    """The bundled SmolLM2 GGUF file, given as a path: loaded offline as the user's own model."""
    path = pinned._smollm2_file()
    loaded = pretrained.load_local(path)
    assert loaded.name == path.stem and loaded.family == "decoder" and loaded.sha256 == pretrained.SMOLLM2_SHA256
    data = probe_run.run_probe(loaded, TEXTS[:2])
    assert data["check"]["passed"] and data["kind"] == f"probe/user/{pretrained.result_name(path)}"
    assert {r["rule"] for r in data["model"]["scale_rules"]} == {"1/sqrt(d_k)"} and len(data["model"]["scales"]) == 30


def test_two_checkpoints_with_the_same_folder_name_keep_both_results(saved, tmp_path, capsys):
    """runA/checkpoint-1000 and runB/checkpoint-1000, as a trainer names them: each its own result."""
    import shutil

    folders = [
        shutil.copytree(saved[arch], tmp_path / run / "checkpoint-1000")
        for run, arch in (("runA", "llama"), ("runB", "qwen3"))
    ]
    out = tmp_path / "results"
    for folder in folders:
        assert main(["probe", "--model", str(folder), "--results", str(out), "--quiet"]) == 0
    kinds = results.user_kinds("probe", out)
    assert kinds == sorted(f"probe/user/{pretrained.result_name(f)}" for f in folders) and len(kinds) == 2
    types = {results.read(k, out).data["model"]["model_type"] for k in kinds}
    assert types == {"llama", "qwen3"}
    assert all(k.startswith("probe/user/checkpoint-1000-") for k in kinds)


def test_a_name_taken_by_another_model_is_refused_before_work(saved, tmp_path, capsys):
    out = tmp_path / "results"
    assert main(["probe", "--model", str(saved["llama"]), "--results", str(out), "--quiet", "--name", "mine"]) == 0
    # The same model again under its name: its own result, replaced.
    assert main(["probe", "--model", str(saved["llama"]), "--results", str(out), "--quiet", "--name", "mine"]) == 0
    capsys.readouterr()
    for command in ("probe", "rescale"):  # rescale's result of that name would be paired with it
        assert main([command, "--model", str(saved["qwen3"]), "--results", str(out), "--quiet", "--name", "mine"]) == 2
        err = capsys.readouterr().err.strip()
        assert "\n" not in err and err.startswith(f"attnscale {command}: error: --name 'mine': ")
        assert "already holds the result of another model" in err and str(saved["llama"].resolve()) in err
    assert results.read("probe/user/mine", out).data["model"]["model_type"] == "llama"  # never qwen3's
    assert not (out / "rescale").exists()


@pytest.mark.parametrize(
    "argv, expected",
    [
        (
            ["probe", "--model", "minilm", "--name", "x"],
            "--name: names the results of your own model (--model PATH), "
            "got --name 'x' with --model minilm, whose result is always probe/minilm",
        ),
        (
            ["rescale", "--model", "{llama}", "--name", "Bad Name"],
            "--name: expected 1 to 64 of a-z, 0-9, '.', '_', '-' (starting with a letter or digit), got 'Bad Name'",
        ),
        (["probe", "--model", "{llama}", "--results", "/proc/nope"], "--results: cannot write under '/proc'"),
    ],
)
def test_name_and_results_are_checked_before_loading(argv, expected, saved, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(pretrained, "load_local", lambda *a, **k: pytest.fail("loaded before the check"))
    argv = [a.replace("{llama}", str(saved["llama"])) for a in argv]
    if "--results" not in argv:
        argv += ["--results", str(tmp_path)]
    assert main([*argv, "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and expected in err


@pytest.mark.slow
def test_the_report_lists_the_users_models_with_a_comparison_in_both_languages(saved, tmp_path, capsys):
    """Two of the user's checkpoints probed (one rescaled too) into a results folder: the page has each
    model's chapters, titled with its name and architecture, listed in the contents, T5's layers named
    by their side, and one comparison row per model, in English and in Chinese."""
    from attnscale.report.build import ReportConfig, build_report
    from helpers.report_data import write_verify

    out = tmp_path / "results"
    for name in ("llama", "t5"):
        assert main(["probe", "--model", str(saved[name]), "--results", str(out), "--quiet"]) == 0
    assert (
        main(
            [
                "rescale",
                "--model",
                str(saved["t5"]),
                "--alphas",
                "1,8",
                "--max-tokens",
                "48",
                "--window",
                "24",
                "--results",
                str(out),
                "--quiet",
            ]
        )
        == 0
    )
    write_verify(out)
    names = {arch: pretrained.result_name(saved[arch]) for arch in ("llama", "t5")}
    ppl8 = results.read(f"rescale/user/{names['t5']}", out).data["analysis"]["perplexity_ratio"]["8"]
    for lang, words in {
        "en": (
            "Your model llama (LlamaForCausalLM)",
            "Your model t5 (T5ForConditionalGeneration)",
            "Your models beside the bundled ones",
            "encoder layer 0",
            "decoder layer 1",
            "cross-attention layer 1",
            "yours",
        ),
        "zh": (
            "你的模型 llama（LlamaForCausalLM）",
            "你的模型 t5（T5ForConditionalGeneration）",
            "你的模型与内置模型并列",
            "编码器第 0 层",
            "解码器第 1 层",
            "交叉注意力第 1 层",
            "你的",
        ),
    }.items():
        page = build_report(ReportConfig(out=tmp_path / "site", results=out, quick=True, lang=lang)).path.read_text(
            encoding="utf-8"
        )
        for word in words:
            assert word in page, (lang, word)
        for family, arch in (("probe", "llama"), ("probe", "t5"), ("rescale", "t5")):
            anchor = f"own-{family}-{names[arch]}"
            assert f'href="#{anchor}"' in page and f'id="{anchor}"' in page, (lang, anchor)
        assert f'id="own-rescale-{names["llama"]}"' not in page  # never rescaled
        compared = page.split('id="own-models-compared"', 1)[1].split("</section>", 1)[0]
        rows = re.findall(r"<tr>(.*?)</tr>", compared, re.S)
        assert [r for r in rows if ">llama<" in r] and [r for r in rows if ">t5<" in r]
        t5_row = next(r for r in rows if ">t5<" in r)
        assert f">{ppl8:.3g}<" in t5_row  # α = 8 over α = 1, read


@pytest.mark.slow
def test_rescale_keeps_its_window_within_the_models_positions(saved, tmp_path, capsys):
    """GPT-2 with 128 positions: the default 512-token window is clipped to them, with a note; a typed
    --window past them is refused before any work."""
    out = tmp_path / "results"
    argv = [
        "rescale",
        "--model",
        str(saved["gpt2-unscaled"]),
        "--alphas",
        "1,2",
        "--max-tokens",
        "300",
        "--results",
        str(out),
        "--name",
        "g",
    ]
    assert main([*argv, "--window", "129", "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "--window 129: expected at most 128, the positions gpt2-unscaled has" in err
    assert not out.exists() or not list(out.rglob("*.json"))
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert "note: --window 128, the positions gpt2-unscaled has (the default 512 would run past them)" in err
    text = results.read("rescale/user/g", out).data["text"]
    assert text["window"] == 128 and text["windows"] == 3


@pytest.mark.parametrize(
    "argv, expected",
    [
        (
            ["probe", "--model", "meta-llama/Llama-3.1-8B"],
            "--model: got 'meta-llama/Llama-3.1-8B', no such folder or file here: attnscale loads local folders and GGUF "
            "files; download it first with: hf download meta-llama/Llama-3.1-8B --local-dir DIR",
        ),
        (
            ["probe", "--model", "{invalid}"],
            "--model: expected a transformers config.json, got '{invalid}': "
            "The hidden size (999999) is not a multiple of the number of attention heads (8)",
        ),
        (["rescale", "--max-tokens", "1"], "--max-tokens: expected an integer >= 2, got 1"),
        (["rescale", "--window", "0"], "--window: expected an integer >= 2, got 0"),
        (
            ["rescale", "--alphas", "2,4"],
            "--alphas: expected 1 among the values (the model's own scale, the reference), got '2,4'",
        ),
        (["report", "--page-dir", "{file}"], "--page-dir: expected a folder for index.html, got the existing file"),
        (["softmax", "-inf", "-inf", "--scale", "x"], "--scale"),
    ],
)
def test_bad_command_lines_are_one_line_naming_the_option_exit_2(argv, expected, saved, tmp_path, capsys):
    import json as json_

    invalid = tmp_path / "invalid"
    invalid.mkdir()
    config = transformers.LlamaConfig(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=4, architectures=["LlamaForCausalLM"]
    ).to_dict()
    (invalid / "config.json").write_text(json_.dumps({**config, "hidden_size": 999999, "num_attention_heads": 8}))
    (tmp_path / "file").write_text("x")
    fill = {"{invalid}": str(invalid), "{bert}": str(saved["bert"]), "{file}": str(tmp_path / "file")}
    argv = [fill.get(a, a) for a in argv]
    expected = expected.replace("{invalid}", str(invalid))
    if argv[0] in ("probe", "rescale"):
        argv += ["--results", str(tmp_path / "results"), "--quiet"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err and expected in err, err


def test_negative_and_infinite_logits_are_softmax_arguments(capsys):
    assert main(["softmax", "-inf", "-inf"]) == 0 and main(["softmax", "-1e3", "2", "-inf"]) == 0
    out = capsys.readouterr().out
    assert "-inf" in out and "-1000" in out


def test_options_an_encoder_ignores_are_noted(saved, tmp_path, capsys):
    assert (
        main(
            [
                "rescale",
                "--model",
                str(saved["bert"]),
                "--alphas",
                "1,2",
                "--max-tokens",
                "100",
                "--results",
                str(tmp_path),
                "--quiet",
            ]
        )
        == 0
    )
    err = capsys.readouterr().err.strip()
    assert err == (
        "attnscale rescale: note: --max-tokens 100 ignored: only a decoder or encoder-decoder reads one "
        "text in causal windows; bert is an encoder (it reads one sentence per line)"
    )


@pytest.mark.parametrize("name", ARCHITECTURES)
def test_the_rows_for_the_reports_widget_are_what_each_models_softmax_took(name, runs):
    """The probe's three rows (probe.rows) in every architecture: scale·q·k, soft-capped in Gemma 2,
    with T5's position bias added in its self-attention; only the keys a sliding window lets through."""
    _, data = runs.probe(name)
    rows = data["rows"]["rows"]
    assert [r["pick"] for r in rows] == ["lowest", "median", "highest"]
    for row in rows:
        rule = data["model"]["scale_rules"][row["layer"]]
        z = rule["value"] * np.array(row["qk"])
        if rule["softcap"]:
            z = rule["softcap"] * np.tanh(z / rule["softcap"])
        if name == "t5" and not data["model"]["cross_layers"][row["layer"]]:
            assert not np.allclose(row["logits"], z)  # the position bias
        else:
            np.testing.assert_allclose(row["logits"], z, rtol=1e-6, atol=1e-7)
        if name == "gemma2" and row["layer"] == 0:  # its window of 4
            assert len(row["keys"]) <= 4
