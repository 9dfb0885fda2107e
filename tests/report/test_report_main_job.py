"""The main job's pages in a real browser (Debian's Chromium, headless): the pages ``make report``
builds, English and Chinese, with every chapter of the contents filled (an experiment chapter with
figures or tables, never "no result yet"; a chapter of the blog post with its figures or its verdict
cards), the headline answers linking to their chapters, and each experiment chapter's line saying which
result it shows. (A chapter whose kind has no reference result yet, the language model's until its
full run is added to src/attnscale/reference_results, is expected to say so.)

CI (``.ci/run``) runs ``make report`` before ``make test``, so the pages it built in the checkout's
``attnscale-report/`` are the ones checked. Where they are missing (a test run without ``make
report``) the same commands build them here: the MiniLM probe, then both pages on the reference
results, with the quick verification (seconds instead of a minute; the chapters checked do not
depend on it)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from attnscale import results

CHROMIUM = "/usr/bin/chromium"
ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
]
REPO = Path(__file__).resolve().parents[2]
MADE = REPO / "attnscale-report"

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(
        not os.path.exists(CHROMIUM),
        reason=f"Debian's chromium is not installed at {CHROMIUM} (CI installs it: make browser)",
    ),
]


@pytest.fixture(scope="module")
def pages(tmp_path_factory) -> dict[str, Path]:
    if all((MADE / name).is_file() for name in ("index.html", "index.zh.html")):
        return {"en": MADE / "index.html", "zh": MADE / "index.zh.html"}
    tmp = tmp_path_factory.mktemp("main_job")
    env = {**os.environ, results.REFERENCE_ENV: str(results.shipped_reference())}

    def run(*a):
        return subprocess.run(
            [sys.executable, "-m", "attnscale", *a],
            capture_output=True,
            text=True,
            timeout=600,
            env=env,
            cwd=tmp,
        )

    for argv in (("probe", "--quiet"), ("report", "--quick"), ("report", "--quick", "--lang", "zh")):
        out = run(*argv)
        assert out.returncode == 0, out.stderr
    return {"en": tmp / "attnscale-report" / "index.html", "zh": tmp / "attnscale-report" / "index.zh.html"}


def _chapter_kinds() -> dict[str, str]:
    import importlib

    from attnscale.report.chapters import EXPERIMENT_CHAPTERS

    return {name: importlib.import_module(f"attnscale.report.chapters.{name}").KIND for name in EXPERIMENT_CHAPTERS}


@pytest.fixture(scope="module")
def browser():
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield b
        b.close()


@pytest.mark.parametrize("lang, missing", [("en", "has no result yet"), ("zh", "还没有结果")])
def test_every_chapter_in_the_contents_is_filled(browser, pages, lang, missing):
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.goto(pages[lang].as_uri())
    chapters = page.eval_on_selector_all("nav.toc a", "els => els.map(a => a.getAttribute('href').slice(1))")
    assert len(chapters) >= 15
    empty = page.evaluate(
        """ids => ids.filter(id => {
        const s = document.getElementById(id);
        return !s || s.querySelectorAll('figure svg, table, #widget, .verdicts').length === 0; })""",
        chapters,
    )
    unshipped = [
        f"exp-{name.replace('_', '-')}"
        for name, kind in _chapter_kinds().items()
        if results.stored_path(results.result_path(kind, results.shipped_reference())) is None
    ]
    assert [c for c in empty if c not in unshipped] == []
    experiments = [c for c in chapters if c.startswith("exp-")]
    assert len(experiments) == len(_chapter_kinds())
    for chapter in experiments:
        if chapter in unshipped:
            continue
        text = page.inner_text(f"#{chapter}")
        assert missing not in text, chapter
        assert page.locator(f"#{chapter} .provenance-line").count() == 1, chapter
        assert page.locator(f"#{chapter} figure svg, #{chapter} table").count() > 0, chapter
    # the headline answers link to their chapters
    links = page.eval_on_selector_all("a.headline-card", "els => els.map(a => a.getAttribute('href'))")
    answered = {"#exp-training": "exp-training", "#exp-rescale": "exp-rescale", "#exp-lm": "exp-lm"}
    assert {href for href, c in answered.items() if c not in unshipped} <= set(links) <= {f"#{c}" for c in chapters}
    other = {"en": "index.zh.html", "zh": "index.html"}[lang]
    assert page.locator(f'a[href="{other}"]').count() == 1
    page.close()
