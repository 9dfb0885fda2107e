"""The ``attnscale`` command, run as a subprocess (as pytest-benchmark tests its CLI): exit codes,
--help, --version, ``python -m attnscale``, and bad input as one line + exit code 2, never a traceback."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

import attnscale

SCRIPT = Path(sys.executable).with_name("attnscale")      # the console script, installed next to python


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
    res = run("softmax", "14", "10", "12", "--scale", "0.125", "--json")
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
    assert "max_weight" in res.stdout and "jacobian_spectral" in res.stdout


def test_rules_lists_every_rule():
    res = run("rules", "--json")
    assert res.returncode == 0, res.stderr
    rows = json.loads(res.stdout)
    assert [r["name"] for r in rows] == list(attnscale.RULES)
    assert all(r["formula"] and r["citation"] for r in rows)
    text = run("rules")
    assert text.returncode == 0 and "Vaswani" in text.stdout


@pytest.mark.parametrize("args, words", [
    (["softmax", "1", "nan", "2"], ["logits", "NaN"]),
    (["softmax", "1", "inf"], ["logits", "+inf"]),
    (["softmax", "1", "2", "--scale", "nan"], ["logits", "NaN"]),
])
def test_bad_input_is_one_line_and_exit_code_2(args, words):
    res = run(*args)
    assert res.returncode == 2
    assert "Traceback" not in res.stderr and res.stdout == ""
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    assert lines[0].startswith("attnscale softmax: error: ")
    for word in words:
        assert word in lines[0]


def test_unparsable_argument_is_an_argparse_error_not_a_traceback():
    res = run("softmax", "one", "two")
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert "invalid float value: 'one'" in res.stderr


def test_main_in_process_returns_2_on_library_error(capsys):
    from attnscale.cli import main

    assert main(["softmax", "1", "nan"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "logits" in err


def test_softmax_json_is_strict_json_with_null_for_undefined_figures():
    res = run("softmax", "3", "--json")
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
    assert main(["report", "--quick", "--out", str(blocker / "sub")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "a-file" in err
