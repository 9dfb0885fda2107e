"""The probe's captured rows (the result's ``rows``, which the report's widget shows): picked by the
stated rule, and the very rows the model's own softmax weighed, checked against its eager attention
weights (transformers' ``output_attentions``), on a tiny random BERT and a tiny random Llama (grouped
query heads, causal) with the bundled MiniLM's tokenizer: nothing downloaded, a second each."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from attnscale.experiments.pretrained import pinned  # noqa: E402
from attnscale.experiments.pretrained.probe import rows as probe_rows  # noqa: E402
from attnscale.experiments.pretrained.probe.run import probe_model  # noqa: E402
from helpers.tiny_hf import llama_config  # noqa: E402

TEXTS = ["The cat sat on the mat.", "A second line, longer than the first one is.", "Short."]


@pytest.fixture(scope="module")
def tokenizer():
    return transformers.AutoTokenizer.from_pretrained(str(pinned._minilm_folder()), local_files_only=True)


def _model(kind: str, vocab: int):
    torch.manual_seed(0)
    if kind == "bert":
        config = transformers.BertConfig(
            vocab_size=vocab, hidden_size=24, num_hidden_layers=2, num_attention_heads=3, intermediate_size=40
        )
        model = transformers.BertModel(config)
    else:
        model = transformers.LlamaModel(llama_config(vocab_size=vocab, max_position_embeddings=64))
    model.set_attn_implementation("eager")
    return model.eval()


@pytest.fixture(scope="module", params=["bert", "llama"])
def probed(request, tokenizer):
    model = _model(request.param, len(tokenizer))
    return request.param, model, probe_model(model, tokenizer, TEXTS, name=f"tiny-{request.param}")


def test_the_rows_are_the_models_own_softmax_rows(probed, tokenizer):
    kind, model, data = probed
    block = data["rows"]
    enc = tokenizer(TEXTS[:1], return_tensors="pt")
    if kind == "llama":
        enc.pop("token_type_ids", None)
    with torch.no_grad():
        attentions = model(**enc, output_attentions=True).attentions
    ids = enc["input_ids"][0].tolist()
    assert block["tokens"] == tokenizer.convert_ids_to_tokens(ids) and block["sequence"] == 0
    # the query: the last token that is not special ([SEP] closes the line for this tokenizer)
    assert ids[-1] == tokenizer.sep_token_id and block["query"] == len(ids) - 2
    scale = data["model"]["scale"]
    for row in block["rows"]:
        own = attentions[row["layer"]][0, row["head"], block["query"]].double().numpy()
        attended = np.flatnonzero(own > 0) if kind == "llama" else np.arange(len(ids))
        assert row["keys"] == attended.tolist()  # causal: the keys up to the query
        z = np.array(row["logits"])
        p = np.exp(z - z.max())
        np.testing.assert_allclose(p / p.sum(), own[row["keys"]], rtol=1e-5, atol=1e-7)
        np.testing.assert_allclose(z, scale * np.array(row["qk"]), rtol=1e-6, atol=1e-7)
        # the squared norms bound q·k (Cauchy–Schwarz) and are those of vectors of this dimension
        assert np.all(np.abs(row["qk"]) <= np.sqrt(row["q_norm2"] * np.array(row["k_norm2"])) * (1 + 1e-6))


def test_the_heads_are_the_lowest_median_and_highest_mean_entropy(probed):
    _, _, data = probed
    ranked = sorted(data["heads"], key=lambda h: h["normalized_entropy"])
    chosen = [(r["pick"], r["layer"], r["head"]) for r in data["rows"]["rows"]]
    expected = [ranked[0], ranked[(len(ranked) - 1) // 2], ranked[-1]]
    assert chosen == [(p, h["layer"], h["head"]) for p, h in zip(probe_rows.PICKS, expected)]
    assert [r["normalized_entropy"] for r in data["rows"]["rows"]] == [h["normalized_entropy"] for h in expected]


def test_the_query_falls_back_to_the_last_real_token_when_all_are_special(tokenizer):
    ids = [tokenizer.cls_token_id, tokenizer.sep_token_id, 0]
    assert probe_rows.first_query(tokenizer, ids, [True, True, False]) == (1, ["[CLS]", "[SEP]"])
    assert probe_rows.captured_rows([], [], 0, []) is None
