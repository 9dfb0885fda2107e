"""No silent success on bad state: each case a user can cause is one line naming what is wrong (issue 46).
A corrupt result is named on the terminal while the page still builds; environment variables and
options are checked where they are read; a junk GGUF, an empty row, a closed sink and a sink's missing
folder are one-line errors, not Python tracebacks or folders nobody asked for."""

from __future__ import annotations

import pytest

from attnscale import results
from attnscale.cli import main
from attnscale.errors import InputError


def _one_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    return lines[0]


def _corrupt_lm(root):
    path = root / "train" / "lm" / "result.json"
    path.parent.mkdir(parents=True)
    path.write_text('{"schema": 1, broken', encoding="utf-8")
    return path


def test_a_corrupt_result_is_one_line_naming_its_file(tmp_path, monkeypatch):
    from attnscale.cli.report import unrendered_lines
    from attnscale.report.experiments import render_experiment

    monkeypatch.setenv(results.REFERENCE_ENV, "")
    path = _corrupt_lm(tmp_path)
    chapter = render_experiment("lm", tmp_path)  # what the build does with it: an error box, no exception
    assert chapter.status == "error"
    (line,) = unrendered_lines({"lm": chapter.status, "training": "missing"}, tmp_path)
    assert line.startswith("the chapter lm is not on the page: ") and str(path) in line and "not a strict JSON" in line
    assert unrendered_lines({"lm": "rendered"}, tmp_path) == []


def test_the_report_command_says_so_on_the_terminal_and_still_builds(tmp_path, monkeypatch, capsys):
    from attnscale.cli import report as cli_report
    from attnscale.report import build

    monkeypatch.setenv(results.REFERENCE_ENV, "")
    path = _corrupt_lm(tmp_path / "res")
    page = tmp_path / "site" / "index.html"
    built = build.BuildResult(path=page, seconds=0.0, verify=results.Envelope("verify", {}), experiment_status={})

    def fake_build(config, progress=None):  # the build's own statuses, from the real chapter renderer
        from attnscale.report.experiments import render_experiment

        built.experiment_status = {"lm": render_experiment("lm", config.results).status}
        return built

    monkeypatch.setattr(build, "build_report", fake_build)
    monkeypatch.setattr(cli_report, "current_verify", lambda *a, **k: None)
    code = main(["report", "--quiet", "--results", str(tmp_path / "res"), "--page-dir", str(tmp_path / "site")])
    out, err = capsys.readouterr()
    assert code == 0 and out.strip() == str(page.resolve())  # the page is built and named
    line = _one_line(err)
    assert line.startswith("attnscale report: the chapter lm is not on the page: ") and str(path) in line


@pytest.mark.parametrize("value, what", [("/nonexistent", "nothing there"), (__file__, "a file")])
def test_the_reference_variable_must_name_a_folder(value, what, monkeypatch, tmp_path, capsys):
    monkeypatch.setenv(results.REFERENCE_ENV, value)
    with pytest.raises(InputError, match=f"ATTNSCALE_REFERENCE: expected a folder of reference results .*{what}"):
        results.reference_root()
    # checked before any work, by every command that reads results
    assert main(["verify", "--quick", "--results", str(tmp_path / "r")]) == 2
    line = _one_line(capsys.readouterr().err)
    assert line == (
        "attnscale verify: error: ATTNSCALE_REFERENCE: expected a folder of reference results (or empty for "
        f"none), got {value!r} ({what})"
    )
    assert not (tmp_path / "r").exists()
    monkeypatch.setenv(results.REFERENCE_ENV, "")
    assert results.reference_root() is None  # empty: none, as documented


@pytest.mark.parametrize(
    "argv, said",
    [
        (["telemetry-bench", "--quick", "--threads", "0"], "--threads: expected an integer >= 1, got 0"),
        (["telemetry-bench", "--quick", "--threads", "-2"], "--threads: expected an integer >= 1, got -2"),
        (["telemetry-bench", "--quick", "--repeats", "0"], "--repeats: expected an integer >= 1, got 0"),
        (["train", "lm", "--quick", "--steps", "0"], "--steps: expected an integer >= 1, got 0"),
        (["train", "lm", "--quick", "--d-model", "0"], "--d-model: expected an integer >= 1, got 0"),
        (["verify", "--quick", "--rel-ci-target", "0"], "--rel-ci-target: expected a number in (0, 1), got 0.0"),
    ],
)
def test_options_are_refused_in_one_line_naming_the_option(argv, said, tmp_path, capsys):
    assert main([*argv, "--results", str(tmp_path / "r")]) == 2
    assert _one_line(capsys.readouterr().err) == f"attnscale {argv[0]}: error: {said}"


def test_a_junk_gguf_is_one_line_naming_the_file(tmp_path, capsys):
    pytest.importorskip("gguf")
    pytest.importorskip("transformers")
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"GGUFjunkjunkjunk")  # the magic bytes, then too short for a header: struct.error before
    assert main(["probe", "--model", str(junk), "--results", str(tmp_path / "r")]) == 2
    line = _one_line(capsys.readouterr().err)
    assert line.startswith(
        f"attnscale probe: error: --model: expected a GGUF file transformers can read, got {str(junk)!r}"
    )
    assert "its header cannot be parsed" in line and "16 bytes" in line


@pytest.mark.parametrize("logits", [[], [[], []]])
def test_a_row_without_keys_is_one_line(logits):
    from attnscale.softmax_rows import row_health, softmax

    for f in (row_health, softmax):
        with pytest.raises(InputError, match=r"logits: expected at least one key \(n >= 1\) in the last axis"):
            f(logits)


def test_a_closed_sink_and_a_missing_folder_are_one_line(tmp_path):
    pytest.importorskip("torch")
    from attnscale.torch.sinks import JSONLSink

    path = tmp_path / "a.jsonl"
    sink = JSONLSink(path)
    sink.close()
    with pytest.raises(
        InputError, match=r"JSONLSink: the sink of .*a\.jsonl' is closed; expected write\(\) before close"
    ):
        sink.write(object())
    missing = tmp_path / "missing" / "dir" / "a.jsonl"
    with pytest.raises(
        InputError, match=r"path: the folder .*missing/dir' \(where 'a\.jsonl' would be written\) does not"
    ):
        JSONLSink(missing)
    assert not (tmp_path / "missing").exists()  # no folder the user did not ask for
