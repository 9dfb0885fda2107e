"""Building the report: the verification is read from its cache (or recomputed with --fresh), every
chapter renders, a broken experiment chapter becomes an error box, the page is self-contained and
bilingual, and writing is atomic (an interrupted build leaves the previous report intact).

These tests feed a hand-made verification report through the real cache, so they run in seconds;
tests/test_report_browser.py builds a real one."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import types
from pathlib import Path

import pytest

from attnscale.report import build as build_mod
from attnscale.report.build import ReportConfig, build_report, verify_cache_key, write_site_atomic
from attnscale.store import ResultCache
from test_report_figures import fake_verify


def _config(tmp_path, **kw) -> ReportConfig:
    return ReportConfig(out=tmp_path / "site", results=tmp_path / "results", quick=True, **kw)


def _prime_cache(config: ReportConfig, verify: dict | None = None) -> Path:
    return ResultCache(config.cache_dir).put("verify", verify_cache_key(config),
                                             {"report": verify or fake_verify(), "seconds": 12.5})


@pytest.fixture(autouse=True)
def stable_code(monkeypatch, request):
    """Pin the code fingerprint: the verification's sources may change while the tests run."""
    if request.node.name != "test_cache_key_follows_seed_quick_and_code":
        monkeypatch.setattr(build_mod, "code_fingerprint", lambda: "pinned")


@pytest.fixture
def no_engine(monkeypatch):
    """Fail loudly if the build runs the verification instead of reading the cache."""
    import attnscale.claims

    def boom(*a, **k):
        raise AssertionError("the verification ran although its result was cached")

    monkeypatch.setattr(attnscale.claims, "run_claims", boom)


@pytest.fixture
def fast_figures(monkeypatch):
    """Stand-in figures for tests about everything but figures (matplotlib takes seconds)."""
    from attnscale.report import seed

    monkeypatch.setattr(seed, "figure_html", lambda block, data, lang, keys=None: f'<figure class="fig" data-block="{block}"></figure>')


@pytest.fixture(scope="module")
def built_en(tmp_path_factory):
    """One real English build from the hand-made verification (figures included), shared."""
    tmp_path = tmp_path_factory.mktemp("built_en")
    with pytest.MonkeyPatch.context() as mp:
        import attnscale.claims

        mp.setattr(build_mod, "code_fingerprint", lambda: "pinned")
        mp.setattr(attnscale.claims, "run_claims", None)   # calling it would fail: the cache must answer
        config = _config(tmp_path)
        _prime_cache(config)
        seen = []
        result = build_report(config, progress=lambda d, t, label: seen.append((d, t, label)))
    return config, result, seen


def test_build_reads_the_cached_verification_and_writes_one_page(built_en):
    config, result, seen = built_en
    assert result.verify_cached
    assert result.path == config.out / "index.html" and result.path.exists()
    assert sorted(p.name for p in config.out.iterdir()) == ["index.html"]
    page = result.path.read_text(encoding="utf-8")
    assert 'class="error-box"' not in page
    # every claim of the verification is on the page, in its chapter
    for claim in fake_verify()["claims"]:
        assert f'data-claim="{claim["id"]}"' in page
    chapter = re.search(r'<section class="chapter" id="variance">(.*?)</section>', page, re.S).group(1)
    assert 'data-claim="T3.0"' in chapter and 'data-claim="T2.0"' not in chapter
    # verdict badges, the seed's wrong number with its correction, HTML in notes escaped
    assert 'class="badge fails"' in page and 'class="badge wrong"' in page
    assert "0.868" in page and "&lt;b&gt;not bold&lt;/b&gt;" in page
    # one inline SVG per figure of each chapter (the seed's examples appear in two), plus the widget
    from attnscale.report.seed import BEYOND_PARTS, CHAPTER_FIGURES

    n_figures = sum(len(f) for f in CHAPTER_FIGURES.values()) + len(BEYOND_PARTS)
    assert len(re.findall(r'<figure class="fig"[^>]*><svg', page)) == n_figures
    assert {b for f in CHAPTER_FIGURES.values() for b, _ in f} | {b for _, b in BEYOND_PARTS} == set(fake_verify()["data"])
    assert 'id="widget"' in page
    # the prose's settings and the hero's numbers come from the data (the fake has n = 16 and 128)
    assert "for n = 16 and 128 keys" in page and "n = 16, 128, 1024" not in page
    glance = re.search(r'<div class="glance">(.*?)</header>', page, re.S).group(1)
    assert '<span class="glance-value">256</span>' in glance          # Var at the largest d_k given
    assert '<span class="glance-value">0.8</span>' in glance          # unscaled median max weight at d_k = 64
    # progress went up to its total, one tick per chapter
    assert seen and seen[-1][0] == seen[-1][1]
    # provenance footer: seed, versions from the verification's environment, cache note, timings
    footer = page[page.index('<footer'):]
    for text in ("9.9-test", "3.x-test", "TestOS", "12.5", "quick=True"):
        assert text in footer


def test_fresh_recomputes_and_refreshes_the_cache(tmp_path, monkeypatch, fast_figures):
    import attnscale.claims

    config = _config(tmp_path, fresh=True)
    _prime_cache(config)
    calls = []

    class FakeReport:
        def to_dict(self):
            v = fake_verify()
            v["claims"] = v["claims"][:3]
            return v

    def fake_run(cfg, progress=None):
        calls.append(cfg)
        if progress:
            progress(1, 1, "fake")
        return FakeReport()

    monkeypatch.setattr(attnscale.claims, "run_claims", fake_run)
    result = build_report(config)
    assert len(calls) == 1 and calls[0].quick and calls[0].seed == 0
    assert not result.verify_cached
    cached = ResultCache(config.cache_dir).get("verify", verify_cache_key(config))
    assert len(cached["report"]["claims"]) == 3
    # without --fresh the next build reads what --fresh wrote
    again = build_report(ReportConfig(out=config.out, results=config.results, quick=True))
    assert again.verify_cached and len(calls) == 1


def test_cache_key_follows_seed_quick_and_code(tmp_path, monkeypatch):
    a = verify_cache_key(_config(tmp_path))
    assert a == verify_cache_key(_config(tmp_path))
    assert a != verify_cache_key(ReportConfig(out=tmp_path / "s", results=tmp_path / "r", quick=True, seed=1))
    assert a != verify_cache_key(ReportConfig(out=tmp_path / "s", results=tmp_path / "r", quick=False))
    monkeypatch.setattr(build_mod, "code_fingerprint", lambda: "other code")
    assert a != verify_cache_key(_config(tmp_path))


def test_interrupted_build_leaves_the_previous_report_intact(tmp_path, no_engine, monkeypatch):
    from attnscale.report import seed

    config = _config(tmp_path)
    _prime_cache(config)
    monkeypatch.setattr(seed, "figure_html", lambda block, data, lang, keys=None: "<figure></figure>")
    first = build_report(config).path.read_bytes()

    def interrupted(block, data, lang, keys=None):
        if block == "saturation":          # half-way through the chapters
            raise KeyboardInterrupt
        return "<figure></figure>"

    monkeypatch.setattr(seed, "figure_html", interrupted)
    with pytest.raises(KeyboardInterrupt):
        build_report(_config(tmp_path, lang="zh"))
    assert (config.out / "index.html").read_bytes() == first
    assert [p.name for p in tmp_path.iterdir() if ".building-" in p.name] == []


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
    _prime_cache(config)
    out = config.out
    write_site_atomic(out, {"index.html": b"previous report"})
    script = (
        "import sys, time, os\n"
        "from attnscale.report import build, figures\n"
        "build.code_fingerprint = lambda: 'pinned'\n"
        "def slow(*a, **k):\n"
        "    print('rendering', flush=True); time.sleep(60)\n"
        "figures.jacobian = slow\n"
        "from attnscale.cli import main\n"
        f"sys.exit(main(['report', '--quick', '--out', {str(out)!r}, '--results', {str(config.results)!r}]))\n")
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "rendering"
    finally:
        proc.kill()
        proc.wait(timeout=30)
    assert (out / "index.html").read_bytes() == b"previous report"


def _fake_chapter(monkeypatch, name, render, result_path="exp/summary.json"):
    mod = types.ModuleType(f"attnscale.report.chapters.{name}")
    mod.TITLE = {"en": f"Experiment {name}", "zh": f"实验 {name}"}
    mod.RESULT_PATH = result_path
    mod.HOW_TO = f"attnscale train --{name}"
    mod.render = render
    monkeypatch.setitem(sys.modules, mod.__name__, mod)
    return mod


def test_experiment_chapters_render_note_or_error_box(tmp_path, no_engine, monkeypatch, fast_figures):
    import attnscale.report.chapters as chapters
    from attnscale.store import write_json_atomic

    config = _config(tmp_path)
    _prime_cache(config)
    write_json_atomic(config.results / "exp" / "summary.json", {"loss": [3.0, 2.5]})
    _fake_chapter(monkeypatch, "fake_ok", lambda result, lang: f"<p>losses {result['loss']} in {lang}</p>")

    def broken(result, lang):
        raise KeyError("loss_curve")

    _fake_chapter(monkeypatch, "fake_broken", broken)
    _fake_chapter(monkeypatch, "fake_missing", lambda r, l: "never", result_path="nothing/here.json")
    monkeypatch.setattr(chapters, "EXPERIMENT_CHAPTERS", ("fake_ok", "fake_broken", "fake_missing", "fake_absent"))
    result = build_report(config)
    assert result.experiment_status == {"fake_ok": "rendered", "fake_broken": "error", "fake_missing": "missing",
                                        "fake_absent": "error"}
    page = result.path.read_text(encoding="utf-8")
    assert "<p>losses [3.0, 2.5] in en</p>" in page
    broken_html = re.search(r'id="exp-fake-broken">(.*?)</section>', page, re.S).group(1)
    assert 'class="error-box"' in broken_html and "loss_curve" in broken_html
    missing_html = re.search(r'id="exp-fake-missing">(.*?)</section>', page, re.S).group(1)
    assert "attnscale train --fake_missing" in missing_html
    # the chapters after the broken one and the footer are still there
    assert 'id="all-verdicts"' in page and "<footer" in page
    assert str(config.results / "exp" / "summary.json") in page   # the file it read, in the provenance


def test_chinese_page(tmp_path, no_engine):
    config = _config(tmp_path, lang="zh")
    _prime_cache(config)
    page = build_report(config).path.read_text(encoding="utf-8")
    assert '<html lang="zh-CN">' in page
    for text in ("注意力公式（快速回顾）", "大的点积对 softmax 的影响", "论断 3.0：variance", "原文数字有误", "成立"):
        assert text in page
    assert "What happens without scaling?" not in page


def test_page_is_self_contained(built_en):
    page = built_en[1].path.read_text(encoding="utf-8")
    assert re.findall(r'(?:src|href)\s*=\s*["\']?\s*(?:https?:)?//', page, re.I) == []
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
    _prime_cache(config)
    assert main(["report", "--quick", "--out", str(config.out), "--results", str(config.results)]) == 0
    printed = capsys.readouterr().out.strip()
    assert Path(printed) == (config.out / "index.html").resolve()


def test_cli_help_and_bad_arguments():
    run = lambda *a: subprocess.run([sys.executable, "-m", "attnscale", *a], capture_output=True, text=True)  # noqa: E731
    ok = run("report", "--help")
    assert ok.returncode == 0 and "--lang" in ok.stdout and "--fresh" in ok.stdout
    bad = run("report", "--lang", "fr")
    assert bad.returncode == 2 and "--lang" in bad.stderr
    bad = run("report", "--seed", "-3")
    assert bad.returncode == 2 and "non-negative" in bad.stderr


REAL_FINGERPRINT = build_mod.code_fingerprint


def test_code_fingerprint_covers_masks_and_store(tmp_path, monkeypatch):
    import shutil
    from importlib import resources

    pkg = tmp_path / "attnscale"
    shutil.copytree(resources.files("attnscale"), pkg, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(build_mod.resources, "files", lambda name: pkg)
    before = REAL_FINGERPRINT()
    for name in ("masks.py", "store.py"):
        (pkg / name).write_text((pkg / name).read_text() + "\n# changed\n")
        after = REAL_FINGERPRINT()
        assert after != before, name
        before = after


def test_inconclusive_verdict_badges_tally_and_judged_interval():
    from attnscale.report.verdicts import all_claims_table, badge, claim_card, claim_list, tally_badges

    claims = [{"id": "T.1", "chapter": "faq", "claim_en": "c1", "claim_zh": "论断", "method": "Monte Carlo",
               "expected": "e", "measured": "m", "verdict": "inconclusive", "ci_low": 0.857, "ci_high": 0.955,
               "ci_level": 0.99, "n_samples": 300},
              {"id": "T.2", "chapter": "faq", "claim_en": "c2", "claim_zh": "论断", "method": "Monte Carlo",
               "expected": "e", "measured": "m", "verdict": "holds", "ci_low": 60.0, "ci_high": 70.0,
               "ci_level": 1 - 0.01 / 52, "n_samples": 300},
              {"id": "T.3", "chapter": "faq", "claim_en": "c3", "claim_zh": "论断", "method": "symbolic",
               "expected": "e", "measured": "m", "verdict": "holds"}]
    assert 'class="badge inconclusive" title=' in badge("inconclusive", "en") and "inconclusive" in badge("inconclusive", "en")
    assert "无定论" in badge("inconclusive", "zh")
    tally = tally_badges(claims, "en")
    assert '<span class="badge inconclusive" title="the interval does not decide the criterion at this sample size">1 inconclusive' in tally and '<span class="badge holds">2 ' in tally
    assert "1 个无定论" in tally_badges(claims, "zh")
    assert "99% CI (judged)" in claim_card(claims[0], "en")
    assert "99.9808% CI (judged)" in claim_card(claims[1], "en")   # the Bonferroni interval, labelled as such
    assert "(99.9808%)" in all_claims_table(claims, "en")
    # problems first: the inconclusive card before the ones that hold
    html = claim_list(claims, "en")
    assert html.index('data-claim="T.1"') < html.index('data-claim="T.2"')
    from pathlib import Path as _P
    css = (_P(build_mod.__file__).parent / "style.css").read_text()
    assert ".badge.inconclusive" in css


def test_prose_claims_only_what_is_checked():
    from attnscale.report.text import CHAPTERS

    faq = " ".join(CHAPTERS["faq"]["en"]["paras"])
    assert "Who introduced the factor? The seed's answers, checked." not in faq and "nothing here checks it" in faq
    assert "almost on top of each other" in " ".join(CHAPTERS["why_grows"]["en"]["paras"])
