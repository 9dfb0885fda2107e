"""`attnscale verify`: exit codes, table, its result in the results folder, --json FILE|-, Chinese text,
bad input."""

import json
import os
import subprocess
import sys

import pytest

from attnscale.claims import VerifyConfig, VerifyReport, run_claims
from attnscale.cli import main
from attnscale.cli.verify import render_table
from attnscale.i18n import language


@pytest.fixture(scope="module")
def report():
    return run_claims(VerifyConfig(quick=True))


@pytest.fixture(autouse=True)
def in_tmp(tmp_path, monkeypatch):
    """Every test runs in its own folder: the default results folder is never the user's."""
    monkeypatch.chdir(tmp_path)


@pytest.fixture
def cached(monkeypatch, report):
    """Run the CLI on a report computed once (the end-to-end run is the subprocess test)."""
    import attnscale.claims

    monkeypatch.setattr(attnscale.claims, "run_claims", lambda config, progress=None: report)
    return report


def _refuse(constant):
    raise ValueError(f"{constant} is not strict JSON")


@pytest.mark.slow
def test_end_to_end_quick_run_writes_json_and_exits_0(tmp_path):
    out = tmp_path / "v.json"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    proc = subprocess.run(
        [sys.executable, "-m", "attnscale", "verify", "--quick", "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    assert "S1.6" in proc.stdout and "POST WRONG" in proc.stdout
    assert "5,184,705,528,587,072,464,087" in proc.stdout
    data = json.loads(out.read_text(), parse_constant=_refuse)  # strict JSON
    assert data["kind"] == "verify" and data["quick"] is True and data["config"]["quick"] is True
    assert len(data["data"]["claims"]) == sum(data["data"]["counts"].values())
    # the same result in the default results folder (the test's cwd), where the report reads it
    from attnscale import results

    env = results.read("verify", tmp_path / results.DEFAULT_ROOT, quick=True)
    assert env.data == data["data"] and "verify/quick.json" in proc.stderr
    assert "█" not in proc.stderr  # no progress bar when stderr is not a terminal


def test_strict_exits_1_when_a_verdict_is_not_holds(cached, capsys):
    assert main(["verify", "--quick", "--strict"]) == 1
    assert main(["verify", "--quick"]) == 0


@pytest.mark.slow
def test_strict_exits_0_when_everything_holds(monkeypatch, report, capsys):
    import attnscale.claims

    good = VerifyReport(
        report.config,
        report.environment,
        [c for c in report.claims if c.verdict == "holds"],
        report.data,
        report.timings,
    )
    monkeypatch.setattr(attnscale.claims, "run_claims", lambda config, progress=None: good)
    assert main(["verify", "--strict"]) == 0


def test_json_to_stdout(cached, capsys):
    assert main(["verify", "--json", "-"]) == 0
    out = capsys.readouterr().out
    data = json.loads(out, parse_constant=_refuse)  # only the JSON: no table
    assert {c["id"] for c in data["data"]["claims"]} >= {"S1.6", "S9.2"}


def test_results_option_and_quick_apart_from_full(cached, tmp_path, capsys):
    from attnscale import results

    root = tmp_path / "elsewhere"
    assert main(["verify", "--quiet", "--results", str(root)]) == 0
    assert main(["verify", "--quiet", "--quick", "--results", str(root)]) == 0
    assert capsys.readouterr().err == ""  # --quiet: nothing on stderr
    full, quick = results.read("verify", root), results.read("verify", root, quick=True)
    assert not full.quick and quick.quick and full.path != quick.path
    # the chapter outline and the stored counts travel with the result (the report computes neither)
    from attnscale.claims.result import CHAPTERS

    assert [c["id"] for c in full.data["chapters"]] == list(CHAPTERS)
    assert full.data["counts"] == cached.counts()


def test_unwritable_json_target_is_refused_before_any_work(monkeypatch, tmp_path, capsys):
    import attnscale.claims

    monkeypatch.setattr(attnscale.claims, "run_claims", lambda *a, **k: pytest.fail("ran before checking --json"))
    assert main(["verify", "--json", str(tmp_path / "no-such-dir" / "v.json")]) == 2
    assert "--json" in capsys.readouterr().err and not (tmp_path / "no-such-dir").exists()


def test_lang_zh_prints_chinese_claims(cached, capsys):
    main(["verify", "--lang", "zh"])
    out = capsys.readouterr().out
    assert "不缩放时" in out and "原文数字有误" in out


@pytest.mark.slow
def test_table_is_a_function_of_the_results(report):
    again = VerifyReport.from_dict(json.loads(json.dumps(report.to_dict())))
    assert render_table(report) == render_table(again)
    assert "timings" not in render_table(report) and "total" not in render_table(report).split("\n")[-2]


def test_bad_input_is_one_line_and_exit_2(capsys):
    assert main(["verify", "--rel-ci-target", "2"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--rel-ci-target: expected a number in (0, 1), got 2.0" in err[0]  # names the option typed


def test_help_exits_0():
    with pytest.raises(SystemExit) as exc:
        main(["verify", "--help"])
    assert exc.value.code == 0


def _with_inconclusive(report):
    """The report with its first claim made inconclusive (the others as they are)."""
    import dataclasses

    claims = [dataclasses.replace(report.claims[0], verdict="inconclusive")] + [
        c for c in report.claims[1:] if c.verdict == "holds"
    ]
    return VerifyReport(report.config, report.environment, claims, report.data, report.timings)


@pytest.mark.slow
def test_inconclusive_is_shown_counted_and_strict(monkeypatch, report, capsys):
    import attnscale.claims

    mixed = _with_inconclusive(report)
    table = render_table(mixed)
    assert f"{mixed.claims[0].id:<6} UNDECIDED" in table
    assert (
        f"{len(mixed.claims)} claims: {len(mixed.claims) - 1} hold, 0 fail, 1 inconclusive, 0 of the blog post's numbers wrong"
        in table
    )
    with language("zh"):
        assert "1 条无定论" in render_table(mixed)
    monkeypatch.setattr(attnscale.claims, "run_claims", lambda config, progress=None: mixed)
    assert main(["verify", "--strict"]) == 1  # not "holds" ⇒ exit 1, as before
    assert main(["verify"]) == 0
    capsys.readouterr()
    assert main(["verify", "--json", "-"]) == 0
    data = json.loads(capsys.readouterr().out)["data"]
    assert data["counts"]["inconclusive"] == 1 and data["claims"][0]["verdict"] == "inconclusive"


@pytest.mark.slow
def test_summary_line_counts_every_verdict(report):
    counts = report.counts()
    assert set(counts) == {"holds", "fails", "inconclusive", "seed number wrong"}
    line = [ln for ln in render_table(report).splitlines() if ln.startswith(f"{len(report.claims)} claims:")][0]
    assert f"{counts['inconclusive']} inconclusive" in line and f"{counts['fails']} fail" in line


def test_only_runs_a_subset_and_keeps_it_out_of_the_results_folder(cached, tmp_path, capsys):
    import dataclasses

    from attnscale import results

    root = tmp_path / "r"
    code = main(["verify", "--only", "S1", "--results", str(root), "--json", "-"])
    err = capsys.readouterr().err
    if "only" not in {f.name for f in dataclasses.fields(VerifyConfig)}:
        assert code == 2 and "--only" in err  # this attnscale's claims take no subset yet
        return
    assert code == 0 and "partial" in err
    with pytest.raises(results.ResultMissing):
        results.read("verify", root)


def test_the_terminal_and_the_page_label_expected_and_measured_with_the_same_words():
    """One table (stored_words.CLAIM_FIELDS) for both: the Chinese page and the CLI once read 期望/测得
    and 预期/实测."""
    from attnscale.cli import verify as cli_verify
    from attnscale.i18n import _, language
    from attnscale.report import verdicts

    claim = {"id": "S0", "claim": "c", "verdict": "holds", "expected": "e", "measured": "m", "method": "closed form"}
    for lang in ("en", "zh"):
        with language(lang):
            labels = [_(label) for key, label in cli_verify.DETAILS if key in ("expected", "measured")]
            card, table = verdicts.claim_card(claim), verdicts.all_claims_table([claim])
        assert len(labels) == 2 and all(f"<b>{label}</b>" in card and label in table for label in labels)
