"""Building the report: the verification's result is read from the results folder (never computed
by the report), every chapter renders, a missing or malformed experiment result becomes a note or a
named error, a quick result is labelled, the page is self-contained, bilingual (two pages side by
side) and reproducible from a copied results folder, and writing is atomic (an interrupted build
leaves the previous report intact).

These tests write a hand-made verification result through attnscale.results, so they run in
seconds; tests/report/test_report_browser.py builds a real one."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import types
from pathlib import Path

import pytest

from attnscale.i18n import current_lang, language
from attnscale import results
from attnscale.report.build import ReportConfig, build_report, write_site_atomic
from helpers.report_data import fake_verify, write_verify
from helpers.report_data import prime as _prime
from helpers.report_data import report_config as _config


@pytest.fixture(scope="module")
def built_en(tmp_path_factory):
    """One real English build from the hand-made verification (figures included), shared."""
    tmp_path = tmp_path_factory.mktemp("built_en")
    with pytest.MonkeyPatch.context() as mp:
        import attnscale.claims

        mp.setattr(attnscale.claims, "run_claims", None)  # calling it would fail: the result must answer
        config = _config(tmp_path)
        _prime(config)
        seen = []
        result = build_report(config, progress=lambda d, t, label: seen.append((d, t, label)))
    return config, result, seen


@pytest.mark.slow
def test_build_reads_the_verification_result_and_writes_one_page(built_en):
    config, result, seen = built_en
    assert result.verify.kind == "verify" and result.verify.quick
    assert result.path == config.out / "index.html" and result.path.exists()
    assert sorted(p.name for p in config.out.iterdir()) == ["index.html"]
    page = result.path.read_text(encoding="utf-8")
    assert 'class="error-box"' not in page
    # every claim of the verification is on the page, in its chapter
    for claim in fake_verify()["claims"]:
        assert f'data-claim="{claim["id"]}"' in page
    chapter = re.search(r'<section class="chapter" id="variance">(.*?)</section>', page, re.S).group(1)
    assert 'data-claim="T3.0"' in chapter and 'data-claim="T2.0"' not in chapter
    # verdict badges, the wrong number with its correction, HTML in notes escaped
    assert 'class="badge fails"' in page and 'class="badge wrong"' in page
    assert "0.868" in page and "&lt;b&gt;not bold&lt;/b&gt;" in page
    # one inline SVG per figure of each chapter (the blog post's examples appear in two), plus the widget
    from attnscale.report.seed import BEYOND_PARTS, CHAPTER_FIGURES

    n_figures = sum(len(f) for f in CHAPTER_FIGURES.values()) + len(BEYOND_PARTS)
    assert len(re.findall(r'<figure class="fig[^"]*"[^>]*>(?:<div class="fig-wide">)?<svg', page)) == n_figures
    assert {b for f in CHAPTER_FIGURES.values() for b, _ in f} | {b for _, b in BEYOND_PARTS} == set(
        fake_verify()["data"]
    )
    assert 'id="widget"' in page
    # the prose's settings and the hero's numbers come from the data (the fake has n = 16 and 128)
    assert "for n = 16 and 128 keys" in page and "n = 16, 128, 1024" not in page
    glance = re.search(r'<div class="glance">(.*?)</header>', page, re.S).group(1)
    assert '<span class="glance-value">256</span>' in glance  # Var at the largest d_k given
    assert '<span class="glance-value">0.8</span>' in glance  # unscaled median max weight at d_k = 64
    # progress went up to its total, one tick per chapter
    assert seen and seen[-1][0] == seen[-1][1]
    # provenance: versions and machine of the verification's result, its date as the page's date
    footer = page[page.index("<footer") :]
    env = result.verify
    for text in (
        env.environment["numpy"],
        env.environment["python"],
        "a quick verification (--quick)",
        env.created.replace("T", " ").replace("Z", " UTC"),
    ):
        assert text in footer
    # every chapter of the blog post carries the quick-run label, and says where its numbers come from
    assert page.count(" · quick run</h2>") == len(env.data["chapters"])
    assert "From verify/quick.json: a quick run computed" in page
    assert "while this page was built" not in page  # the results were computed earlier, elsewhere maybe
    # no raw markup, one spelling of d_k in the prose
    assert "_{" not in re.sub(r"<(script|style|svg)\b.*?</\1>", "", page, flags=re.S)


def test_typed_numbers_in_the_prose_come_from_the_result(tmp_path, no_engine, fast_figures):
    """The confidence level, the d_k range and the number of the blog post's chapters follow the data."""
    v = fake_verify()
    v["config"]["confidence"] = 0.95
    config = _config(tmp_path)
    env = _prime(config, v)
    page = build_report(config).path.read_text(encoding="utf-8")
    variance = re.search(r'id="variance">(.*?)</section>', page, re.S).group(1)
    d_ks = next(iter(v["data"]["variance_vs_dk"].values()))["d_k"]
    assert "95% confidence intervals" in variance and "99%" not in variance
    assert f"from {min(d_ks)} to {max(d_ks)}" in variance
    n_seed = sum(c["part"] == "seed" for c in env.data["chapters"])
    assert f"in {n_seed} sections" in page


def test_the_tally_and_the_chapter_order_come_from_the_result(tmp_path, no_engine, fast_figures):
    """The page counts nothing: the tally is the result's stored counts, the order its outline."""
    config = _config(tmp_path)
    env = _prime(config)
    data = dict(env.data)
    data["counts"] = {"holds": 41, "fails": 3, "inconclusive": 2, "seed number wrong": 1}
    data["chapters"] = list(reversed(data["chapters"]))
    results.write("verify", data, config=env.config, seed=0, quick=True, root=config.results)
    page = build_report(config).path.read_text(encoding="utf-8")
    tally = re.search(r'<div class="tally">(.*?)</div>', page, re.S).group(1)
    assert ">41 claims hold<" in tally and ">3 fail<" in tally and ">2 inconclusive<" in tally
    ids = re.findall(r'<section class="chapter" id="([a-z-]+)">', page)
    assert ids[:2] == ["beyond", "faq"]


@pytest.mark.slow
def test_the_timings_table_total_is_the_sum_of_its_rows(built_en):
    page = built_en[1].path.read_text(encoding="utf-8")
    table = re.search(r'<table class="timings">(.*?)</table>', page, re.S).group(1)
    rows = re.findall(r"<tr><td>(.*?)</td><td>(?:<b>)?([\d.]+) s", table)
    *listed, (label, total) = rows
    assert "total" in label and listed
    assert float(total) == pytest.approx(sum(float(s) for _, s in listed), abs=0.05 * len(listed))


def test_the_report_never_imports_the_producers():
    src = Path(build_report.__code__.co_filename).parent
    offending = [
        f"{p.name}:{i}"
        for p in src.rglob("*.py")
        for i, line in enumerate(p.read_text().splitlines(), 1)
        if "attnscale.claims" in line or "attnscale.experiments" in line
    ]
    assert offending == []


def test_missing_verification_is_a_clear_error_not_a_computation(tmp_path, no_engine):
    with pytest.raises(results.ResultMissing, match="verify"):
        build_report(_config(tmp_path))


@pytest.mark.slow
def test_a_copied_results_folder_builds_the_same_page(tmp_path, no_engine, monkeypatch):
    """Another folder, another working directory, no cache: the same bytes (the date is the results')."""
    import shutil

    config = _config(tmp_path / "a", lang="zh")
    _prime(config)
    first = build_report(config).path.read_bytes()
    copy = tmp_path / "elsewhere" / "copied-results"
    shutil.copytree(config.results, copy)
    monkeypatch.chdir(tmp_path / "elsewhere")
    second = build_report(ReportConfig(out="site", results="copied-results", quick=True, lang="zh")).path.read_bytes()
    assert second == first


def test_interrupted_build_leaves_the_previous_report_intact(tmp_path, no_engine, monkeypatch):
    from attnscale.report import seed

    config = _config(tmp_path)
    _prime(config)
    monkeypatch.setattr(seed, "figure_html", lambda block, data, keys=None, values=None: "<figure></figure>")
    first = build_report(config).path.read_bytes()

    def interrupted(block, data, keys=None, values=None):
        if block == "saturation":  # half-way through the chapters
            raise KeyboardInterrupt
        return "<figure></figure>"

    monkeypatch.setattr(seed, "figure_html", interrupted)
    with pytest.raises(KeyboardInterrupt):
        build_report(_config(tmp_path, seed=3))
    assert (config.out / "index.html").read_bytes() == first
    assert [p.name for p in tmp_path.iterdir() if ".building-" in p.name] == []


def _fake_chapter(monkeypatch, name, render, kind="demo"):
    mod = types.ModuleType(f"attnscale.report.chapters.{name}")
    mod.TITLE = f"Experiment {name}"  # an English title: these pages are built in English only
    mod.KIND = kind
    mod.HOW_TO = f"attnscale train --{name}"
    mod.render = render
    monkeypatch.setitem(sys.modules, mod.__name__, mod)
    return mod


def test_experiment_chapters_render_note_or_error_box(tmp_path, no_engine, monkeypatch, fast_figures):
    import attnscale.report.chapters as chapters

    config = _config(tmp_path)
    _prime(config)
    results.write("demo", {"answer": [3.0, 2.5]}, config={"n": 2}, seed=0, quick=False, root=config.results)
    _fake_chapter(monkeypatch, "fake_ok", lambda env: f"<p>losses {env.data['answer']} in {current_lang()}</p>")

    def broken(env):
        raise KeyError("loss_curve")

    _fake_chapter(monkeypatch, "fake_broken", broken)
    _fake_chapter(monkeypatch, "fake_missing", lambda env: "never", kind="train/lm")
    monkeypatch.setattr(chapters, "EXPERIMENT_CHAPTERS", ("fake_ok", "fake_broken", "fake_missing", "fake_absent"))
    result = build_report(config)
    assert result.experiment_status == {
        "fake_ok": "rendered",
        "fake_broken": "error",
        "fake_missing": "missing",
        "fake_absent": "error",
    }
    page = result.path.read_text(encoding="utf-8")
    assert "<p>losses [3.0, 2.5] in en</p>" in page
    assert "Experiment fake_ok</h2>" in page  # a full result: no quick label
    broken_html = re.search(r'id="exp-fake-broken">(.*?)</section>', page, re.S).group(1)
    assert 'class="error-box"' in broken_html and "loss_curve" in broken_html
    missing_html = re.search(r'id="exp-fake-missing">(.*?)</section>', page, re.S).group(1)
    assert "attnscale train --fake_missing" in missing_html
    # the chapters after the broken one and the footer are still there, with each file's provenance
    assert 'id="all-verdicts"' in page and "<footer" in page
    assert "From demo/result.json: a full run computed" in page


def test_a_malformed_result_is_named_in_its_chapter_and_a_quick_one_labelled(
    tmp_path, no_engine, monkeypatch, fast_figures
):
    """A renamed key fails where the result is read (file and field named), not while rendering."""
    import attnscale.report.chapters as chapters

    config = _config(tmp_path)
    _prime(config)
    env = results.write("demo", {"answer": 1}, seed=0, quick=True, root=config.results)
    rendered = []
    _fake_chapter(monkeypatch, "fake", lambda env: rendered.append(env) or "<p>fine</p>")
    monkeypatch.setattr(chapters, "EXPERIMENT_CHAPTERS", ("fake",))
    page = build_report(config).path.read_text(encoding="utf-8")
    assert "Experiment fake · quick run</h2>" in page and "<p>fine</p>" in page and rendered[0].quick
    raw = json.loads(env.path.read_text())
    raw["data"]["answr"] = raw["data"].pop("answer")
    env.path.write_text(json.dumps(raw))
    result = build_report(config)
    assert result.experiment_status == {"fake": "error"} and len(rendered) == 1  # render never ran
    box = re.search(r'id="exp-fake">(.*?)</section>', result.path.read_text(encoding="utf-8"), re.S).group(1)
    assert 'class="error-box"' in box and "data.answer" in box and "quick.json" in box
    # and the build says why, for the command to name on the terminal
    assert list(result.experiment_errors) == ["fake"]
    assert "data.answer" in result.experiment_errors["fake"] and "quick.json" in result.experiment_errors["fake"]


def test_chinese_page_beside_the_english_one_each_linking_the_other(tmp_path, no_engine, fast_figures):
    config = _config(tmp_path, lang="zh")
    _prime(config)
    english = build_report(_config(tmp_path)).path
    path = build_report(config).path
    assert path.name == "index.zh.html" and english.exists() and english.parent == path.parent
    page = path.read_text(encoding="utf-8")
    assert '<html lang="zh-CN">' in page and '<a href="index.html" hreflang="en">' in page
    assert '<a href="index.zh.html" hreflang="zh">' in english.read_text(encoding="utf-8")
    for text in (
        "注意力公式（快速回顾）",
        "大的点积对 softmax 的影响",
        "论断 3.0：variance",
        "原文数字有误",
        "成立",
        "快速运行",
    ):
        assert text in page
    assert "What happens without scaling?" not in page


@pytest.mark.parametrize(
    "why, make",
    [
        ("no verification result", lambda root: None),
        ("written by attnscale 0.0.0-old", lambda root: _rewrite(root, version="0.0.0-old")),
        ("its random seed is 5", lambda root: _rewrite(root, seed=5)),
    ],
)
def test_cli_runs_the_verification_first_when_missing_or_stale(tmp_path, monkeypatch, capsys, fast_figures, why, make):
    import attnscale.claims
    from attnscale.claims import VerifyReport
    from attnscale.cli import main

    root = tmp_path / "results"
    make(root)
    calls = []

    def fake_run(cfg, progress=None):
        calls.append(cfg)
        return VerifyReport.from_dict(fake_verify())

    monkeypatch.setattr(attnscale.claims, "run_claims", fake_run)
    assert main(["report", "--quick", "--page-dir", str(tmp_path / "site"), "--results", str(root)]) == 0
    err = capsys.readouterr().err
    assert len(calls) == 1 and calls[0].quick and calls[0].seed == 0
    assert "running the verification first" in err and why in err
    env = results.read("verify", root, quick=True)
    assert env.seed == 0 and env.quick
    # now current: the next report reads it
    assert main(["report", "--quick", "--page-dir", str(tmp_path / "site"), "--results", str(root)]) == 0
    assert len(calls) == 1


def _rewrite(root, **fields):
    env = write_verify(root)
    raw = json.loads(env.path.read_text())
    raw.update(fields)
    env.path.write_text(json.dumps(raw))


def test_open_opens_the_page_or_says_there_is_no_browser(tmp_path, no_engine, monkeypatch, capsys, fast_figures):
    import webbrowser

    from attnscale.cli import main

    config = _config(tmp_path)
    _prime(config)
    opened = []
    monkeypatch.setattr(webbrowser, "open", lambda url: opened.append(url) or True)
    args = ["report", "--quick", "--open", "--page-dir", str(config.out), "--results", str(config.results)]
    assert main(args) == 0
    assert opened == [(config.out / "index.html").resolve().as_uri()]
    monkeypatch.setattr(webbrowser, "open", lambda url: False)
    assert main(args) == 0
    assert "no web browser" in capsys.readouterr().err


def test_failure_while_moving_into_place_leaves_old_files_and_no_temp_folder(tmp_path, monkeypatch):
    out = tmp_path / "site"
    write_site_atomic(out, {"index.html": b"old"})
    assert (out / "index.html").read_bytes() == b"old"

    def failing_replace(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", failing_replace)
    with pytest.raises(OSError):
        write_site_atomic(out, {"index.html": b"new"})
    assert (out / "index.html").read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["site"]
    monkeypatch.undo()
    write_site_atomic(out, {"index.html": b"new"})
    assert (out / "index.html").read_bytes() == b"new"


def test_a_kill_during_the_build_leaves_the_previous_report(tmp_path):
    """A real SIGKILL in the middle of a build (not a Python exception): the old page survives."""
    config = _config(tmp_path)
    _prime(config)
    out = config.out
    write_site_atomic(out, {"index.html": b"previous report"})
    script = (
        "import sys, time, os\n"
        "from attnscale.report import build, figures\n"
        "def slow(*a, **k):\n"
        "    print('rendering', flush=True); time.sleep(60)\n"
        "figures.jacobian = slow\n"
        "from attnscale.cli import main\n"
        f"sys.exit(main(['report', '--quick', '--page-dir', {str(out)!r}, '--results', {str(config.results)!r}]))\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "rendering"
    finally:
        proc.kill()
        proc.wait(timeout=30)
    assert (out / "index.html").read_bytes() == b"previous report"


@pytest.mark.slow
def test_page_is_self_contained(built_en):
    page = built_en[1].path.read_text(encoding="utf-8")
    # nothing is loaded from elsewhere; the one external address is a link a reader may follow (the blog post)
    assert re.findall(r'src\s*=\s*["\']?\s*(?:https?:)?//', page, re.I) == []
    from attnscale.report.seed_words import SEED_POST

    assert re.findall(r'href\s*=\s*["\']?\s*((?:https?:)?//[^"\' >]*)', page, re.I) == [SEED_POST["url"]]
    assert re.search(r'<a href="' + re.escape(SEED_POST["url"]) + '">', page)
    assert "<link" not in page and "<script src" not in page and "@import" not in page
    assert re.findall(r"url\(\s*['\"]?(?!data:|#)", page) == []


def test_bad_configuration_is_named(tmp_path):
    with pytest.raises(ValueError, match="lang"):
        ReportConfig(lang="fr")
    with pytest.raises(ValueError, match="seed"):
        ReportConfig(seed=-1)
    (tmp_path / "file").write_text("x")
    with pytest.raises(ValueError, match="out"):
        ReportConfig(out=tmp_path / "file")


def test_cli_builds_and_prints_the_path(tmp_path, no_engine, capsys, fast_figures):
    from attnscale.cli import main

    config = _config(tmp_path)
    _prime(config)
    assert main(["report", "--quick", "--page-dir", str(config.out), "--results", str(config.results)]) == 0
    out = capsys.readouterr()
    assert Path(out.out.strip()) == (config.out / "index.html").resolve()
    assert "running the verification" not in out.err  # it was current: read, not rerun
    # --json -: what was built, instead of the path
    assert (
        main(
            [
                "report",
                "--quick",
                "--quiet",
                "--json",
                "-",
                "--page-dir",
                str(config.out),
                "--results",
                str(config.results),
            ]
        )
        == 0
    )
    built = json.loads(capsys.readouterr().out)
    assert built["page"] == str((config.out / "index.html").resolve()) and built["verify"]["quick"] is True
    from attnscale.report.chapters import EXPERIMENT_CHAPTERS

    assert set(built["chapters"]) == set(EXPERIMENT_CHAPTERS)


def test_cli_help_and_bad_arguments():
    run = lambda *a: subprocess.run([sys.executable, "-m", "attnscale", *a], capture_output=True, text=True)  # noqa: E731
    ok = run("report", "--help")
    assert ok.returncode == 0 and "--lang" in ok.stdout and "--fresh" in ok.stdout and "--open" in ok.stdout
    bad = run("report", "--lang", "fr")
    assert bad.returncode == 2 and "--lang" in bad.stderr
    bad = run("report", "--seed", "-3")
    assert bad.returncode == 2 and "non-negative" in bad.stderr


def test_inconclusive_verdict_badges_tally_and_judged_interval():
    from attnscale.report.verdicts import all_claims_table, badge, claim_card, claim_list, tally_badges

    claims = [
        {
            "id": "T.1",
            "chapter": "faq",
            "claim_en": "c1",
            "claim_zh": "论断",
            "method": "Monte Carlo",
            "expected": "e",
            "measured": "m",
            "verdict": "inconclusive",
            "ci_low": 0.857,
            "ci_high": 0.955,
            "ci_level": 0.99,
            "n_samples": 300,
        },
        {
            "id": "T.2",
            "chapter": "faq",
            "claim_en": "c2",
            "claim_zh": "论断",
            "method": "Monte Carlo",
            "expected": "e",
            "measured": "m",
            "verdict": "holds",
            "ci_low": 60.0,
            "ci_high": 70.0,
            "ci_level": 1 - 0.01 / 52,
            "n_samples": 300,
        },
        {
            "id": "T.3",
            "chapter": "faq",
            "claim_en": "c3",
            "claim_zh": "论断",
            "method": "symbolic",
            "expected": "e",
            "measured": "m",
            "verdict": "holds",
        },
    ]
    assert 'class="badge inconclusive" title=' in badge("inconclusive") and "inconclusive" in badge("inconclusive")
    with language("zh"):
        assert "无定论" in badge("inconclusive")
    counts = {"holds": 2, "fails": 0, "inconclusive": 1, "seed number wrong": 0}
    tally = tally_badges(counts)
    assert (
        '<span class="badge inconclusive" title="the interval does not decide the criterion at this sample size">1 inconclusive'
        in tally
        and '<span class="badge holds">2 ' in tally
    )
    with language("zh"):
        assert "1 个无定论" in tally_badges(counts)
    assert "99% CI (judged)" in claim_card(claims[0])
    assert "99.9808% CI (judged)" in claim_card(claims[1])  # the Bonferroni interval, labelled as such
    assert "(99.9808%)" in all_claims_table(claims)
    # problems first: the inconclusive card before the ones that hold
    html = claim_list(claims)
    assert html.index('data-claim="T.1"') < html.index('data-claim="T.2"')
    from pathlib import Path as _P

    css = (_P(build_report.__code__.co_filename).parent / "style.css").read_text()
    assert ".badge.inconclusive" in css


def test_prose_claims_only_what_is_checked():
    from attnscale.report.seed_words import paragraphs

    faq = " ".join(paragraphs("faq", {}))
    assert "Who introduced the factor? The blog post's answers, checked." not in faq and "nothing here checks it" in faq
    assert "almost on top of each other" in " ".join(paragraphs("why_grows", {"hist_dks": "4", "n_hist": "1"}))


def test_the_verification_is_stale_when_a_result_it_judged_from_was_replaced(tmp_path):
    from attnscale.cli.report import current_verify

    root = tmp_path / "results"
    train = results.write(
        "train/scale-vs-dk", {"cells": [], "analysis": {"table": [], "verdicts": []}}, seed=0, root=root
    )
    env = write_verify(root)
    data = dict(env.data)
    data["claims"] = [
        {**data["claims"][0], "sources": [{"kind": "train/scale-vs-dk", "quick": False, "created": train.created}]}
    ] + data["claims"][1:]
    results.write("verify", data, config=env.config, seed=0, quick=True, root=root)
    assert current_verify(root, quick=True, seed=0, fresh=False) is None
    raw = json.loads(train.path.read_text())
    raw["created"] = "2099-01-01T00:00:00Z"  # rerun since
    train.path.write_text(json.dumps(raw))
    reason = current_verify(root, quick=True, seed=0, fresh=False)
    assert "T0.0" in reason and "train/scale-vs-dk" in reason and "2099" in reason
    assert "--fresh" in current_verify(root, quick=True, seed=0, fresh=True)


def test_the_jacobian_caption_reads_the_curve_from_the_data():
    """Change the crossover in the data and the caption's words change with it."""
    from attnscale.report.seed_words import caption, facts

    data = {"jacobian": {"crossover": {"16": {"d_k": 64}, "1024": {"d_k": None}}, "peak_d_k": {"16": 16, "1024": 256}}}
    _, cap = caption("jacobian", facts(data))  # the words; the page typesets d_k (html.esc)
    assert "n = 16: below the scaled one from d_k = 64 on, peaks at d_k = 16" in cap
    assert "n = 1024: never below the scaled one on this grid, peaks at d_k = 256" in cap
    data["jacobian"]["crossover"]["16"]["d_k"] = 256
    assert "from d_k = 256 on" in caption("jacobian", facts(data))[1]
    assert "collapses" not in cap
    with language("zh"):
        assert "dₖ = 64 起低于" in caption("jacobian", facts({"jacobian": {"crossover": {"16": {"d_k": 64}}}}))[1]


def test_the_chinese_page_shows_a_rows_chinese_words_and_an_older_rows_english():
    from attnscale.report.verdicts import all_claims_table

    row = {
        "id": "S9.9",
        "claim_en": "a claim",
        "claim_zh": "一个论断",
        "verdict": "holds",
        "expected": "the exact value",
        "expected_zh": "精确值",
        "measured": "2.718",
        "note": "a note",
    }
    with language("zh"):
        zh = all_claims_table([row])
    en = all_claims_table([row])
    assert "精确值" in zh and "the exact value" not in zh
    assert "the exact value" in en and "精确值" not in en
    older = {k: v for k, v in row.items() if k != "expected_zh"}  # written before rows had Chinese
    with language("zh"):
        assert "the exact value" in all_claims_table([older])


@pytest.mark.slow
def test_the_page_typesets_d_k_everywhere_it_shows_text(built_en):
    """One wrapper (html.esc) applies the typography: no text of the page, a claim's worded values,
    captions and alt texts included, shows the ASCII d_k (scripts and the widget's data aside)."""
    page = built_en[1].path.read_text(encoding="utf-8")
    shown = re.sub(r"<script.*?</script>|<style.*?</style>", " ", page, flags=re.S)
    assert "dₖ" in shown
    assert [m.group(0) for m in re.finditer(r".{0,40}d_k.{0,40}", shown)] == []
