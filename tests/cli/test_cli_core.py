"""The ``attnscale`` command, run as a subprocess (as pytest-benchmark tests its CLI): exit codes,
--help, --version, ``python -m attnscale``, and bad input as one line + exit code 2, never a traceback."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

import attnscale

SCRIPT = Path(sys.executable).with_name("attnscale")  # the console script, installed next to python


def run(*args: str, module: bool = True) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "attnscale", *args] if module else [str(SCRIPT), *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


def test_help_lists_subcommands_and_examples():
    res = run("--help")
    assert res.returncode == 0, res.stderr
    assert "softmax" in res.stdout and "rules" in res.stdout
    assert "examples:" in res.stdout and "attnscale softmax 14 10 12" in res.stdout


@pytest.mark.parametrize("module", [True, False], ids=["python -m attnscale", "console script"])
def test_version(module):
    if not module and not SCRIPT.exists():
        pytest.skip(f"console script not installed at {SCRIPT}")
    res = run("--version", module=module)
    assert res.returncode == 0
    assert res.stdout.strip() == f"attnscale {attnscale.__version__}"


def test_no_command_prints_help_and_exits_2():
    res = run()
    assert res.returncode == 2 and "usage: attnscale" in res.stdout


def test_softmax_json_gives_the_seed_numbers():
    res = run("softmax", "14", "10", "12", "--scale", "0.125", "--json", "-")
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)
    assert data["logits"] == [1.75, 1.25, 1.5]
    assert [round(p, 3) for p in data["weights"]] == [0.419, 0.254, 0.326]
    e = [math.exp(x) for x in (1.75, 1.25, 1.5)]
    assert data["weights"] == pytest.approx([x / math.fsum(e) for x in e], rel=1e-15)
    assert data["health"]["n"] == 3
    assert data["health"]["entropy"] == pytest.approx(-sum(p * math.log(p) for p in data["weights"]), rel=1e-14)


def test_softmax_table():
    res = run("softmax", "5", "1", "0.5")
    assert res.returncode == 0, res.stderr
    assert "0.9714" in res.stdout and "0.0178" in res.stdout and "0.0108" in res.stdout
    assert "largest weight" in res.stdout and "‖J‖ spectral" in res.stdout


def test_rules_lists_every_rule():
    res = run("rules", "--json", "-")
    assert res.returncode == 0, res.stderr
    rows = json.loads(res.stdout)
    assert [r["name"] for r in rows] == list(attnscale.RULES)
    assert all(r["formula"] and r["citation"] for r in rows)
    text = run("rules")
    assert text.returncode == 0 and "Vaswani" in text.stdout


@pytest.mark.parametrize(
    "args, words",
    [
        (["softmax", "1", "nan", "2"], ["logits", "NaN"]),
        (["softmax", "1", "inf"], ["logits", "+inf"]),
        (["softmax", "1", "2", "--scale", "nan"], ["--scale nan", "finite"]),
        (["softmax", "1", "2", "--scale", "inf"], ["--scale inf", "finite"]),
        (["softmax", "1", "2", "--scale", "1e400"], ["--scale 1e400", "finite"]),
        (["softmax", "1", "2", "--scale", "big"], ["--scale", "'big'"]),
        (["softmax", "1e300", "2", "--scale", "1e10"], ["--scale 1e10", "overflows"]),
        (["softmax", "1", "two"], ["logits", "'two'", "number 2"]),
        (["softmax", "1", "2", "--json", "/nonexistent-dir/x.json"], ["--json", "/nonexistent-dir", "does not exist"]),
    ],
)
def test_bad_input_is_one_line_and_exit_code_2(args, words):
    res = run(*args)
    assert res.returncode == 2
    assert "Traceback" not in res.stderr and res.stdout == ""
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    assert lines[0].startswith("attnscale softmax: error: ")
    for word in words:
        assert word in lines[0]


def test_json_to_a_missing_folder_creates_nothing(tmp_path):
    res = run("softmax", "1", "2", "--json", str(tmp_path / "no" / "such" / "x.json"))
    assert res.returncode == 2 and not (tmp_path / "no").exists()


def test_json_to_a_file_writes_strict_json_and_still_prints_the_table(tmp_path):
    target = tmp_path / "row.json"
    res = run("softmax", "14", "10", "12", "--json", str(target))
    assert res.returncode == 0 and "weight" in res.stdout
    assert json.loads(target.read_text())["logits"] == [14, 10, 12]


@pytest.mark.slow
def test_softmax_reads_numbers_from_stdin():
    for args in ([], ["-"]):
        res = subprocess.run(
            [sys.executable, "-m", "attnscale", "softmax", *args, "--scale", "0.125", "--json", "-"],
            input="14, 10\n12\n",
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert res.returncode == 0, res.stderr
        assert json.loads(res.stdout)["logits"] == [1.75, 1.25, 1.5]
    bad = subprocess.run(
        [sys.executable, "-m", "attnscale", "softmax"], input="1 x", capture_output=True, text=True, timeout=60
    )
    assert bad.returncode == 2 and bad.stderr.strip().splitlines() == [
        "attnscale softmax: error: logits (stdin): expected numbers, got 'x' (number 2)"
    ]
    empty = subprocess.run(
        [sys.executable, "-m", "attnscale", "softmax"], input="", capture_output=True, text=True, timeout=60
    )
    assert empty.returncode == 2 and "at least one number" in empty.stderr


def test_masked_logits_are_null_in_json_with_their_indices():
    """The issue's `softmax --json -- 1 -inf -1e3` (here `--json -`): strict JSON, -inf written as null."""
    res = run("softmax", "--json", "-", "--", "1", "-inf", "-1e3")
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout, parse_constant=lambda c: pytest.fail(f"non-JSON constant {c}"))
    assert data["logits"] == [1.0, None, -1000.0] and data["masked"] == [1]
    assert data["weights"] == [1.0, 0.0, 0.0]


def test_lang_zh_translates_the_tables():
    en, zh = (
        run("softmax", "14", "10", "12", "--scale", "0.125"),
        run("softmax", "14", "10", "12", "--scale", "0.125", "--lang", "zh"),
    )
    assert zh.returncode == 0 and "权重" in zh.stdout and "最大权重" in zh.stdout and "已乘以" in zh.stdout
    assert "weight" not in zh.stdout and "weight" in en.stdout
    # the same numbers in both
    number = lambda text: [x for x in text.split() if x[0].isdigit()]  # noqa: E731
    assert number(en.stdout) == number(zh.stdout)
    rules = run("rules", "--lang", "zh")
    assert rules.returncode == 0 and "规则" in rules.stdout and "出处" in rules.stdout and "不缩放" in rules.stdout


def test_broken_pipe_is_silent():
    res = subprocess.run(
        f"{sys.executable} -m attnscale rules --json - | head -c 1 >/dev/null",
        shell=True,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "Traceback" not in res.stderr and "error" not in res.stderr


def test_check_out_folder_refuses_before_work_and_creates_nothing(tmp_path):
    from attnscale.cli.output import check_out_folder
    from attnscale.errors import InputError

    assert check_out_folder(tmp_path / "new", "--page-dir") == tmp_path / "new" and not (tmp_path / "new").exists()
    with pytest.raises(InputError, match="--page-dir: the folder .* does not exist"):
        check_out_folder(tmp_path / "missing" / "new", "--page-dir")
    assert check_out_folder(tmp_path / "missing" / "new", "--page-dir", named=False)  # a default may make parents
    (tmp_path / "file").write_text("x")
    with pytest.raises(InputError, match="is a file"):
        check_out_folder(tmp_path / "file", "--results")
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    if os.geteuid() != 0:  # root writes anywhere
        with pytest.raises(InputError, match="permission denied"):
            check_out_folder(locked / "out", "--results")
    assert not list(tmp_path.glob("missing"))


def test_main_in_process_returns_2_on_library_error(capsys):
    from attnscale.cli import main

    assert main(["softmax", "1", "nan"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "logits" in err


def test_softmax_json_is_strict_json_with_null_for_undefined_figures():
    res = run("softmax", "3", "--json", "-")
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout, parse_constant=lambda c: pytest.fail(f"non-JSON constant {c}"))
    assert data["health"]["n"] == 1 and data["health"]["normalized_entropy"] is None
    assert data["health"]["saturation_index"] is None and data["health"]["entropy"] == 0.0


def test_negative_logits_after_double_dash():
    res = run("softmax", "--", "1", "-inf", "-1e3")
    assert res.returncode == 0, res.stderr
    assert "1.0000" in res.stdout and "-inf" in res.stdout


def test_unwritable_path_is_one_line_and_exit_code_2(tmp_path, capsys):
    from attnscale.cli import main

    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    assert main(["report", "--quick", "--page-dir", str(blocker / "sub"), "--results", str(tmp_path / "results")]) == 2
    err = capsys.readouterr().err
    # checked before any work: one line and nothing else (no verification ran, nothing was written)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("attnscale report: error: ") and "a-file" in lines[0]
    assert not (tmp_path / "results").exists()


def test_main_puts_the_callers_sigint_handler_back(capsys):
    import signal

    from attnscale.cli import main

    before = signal.getsignal(signal.SIGINT)
    assert main(["rules", "--json", "-"]) == 0
    assert signal.getsignal(signal.SIGINT) is before
