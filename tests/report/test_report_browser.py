"""The report in a real browser: Debian's Chromium, headless, driven by Playwright (never a
downloaded browser). One real ``attnscale report --quick`` build is shared by every test here.

Checked: the page opens from file:// without console errors; it requests nothing but itself; every
figure has a size; the slider and the rule selector change the plotted weights and the readouts; the
widget's JavaScript computes exactly what attnscale's Python computes for the same q and k; the reading
path (the answer first, chapters closed until a link or the reader opens them); the layout holds at
1280 px and on a 400 px phone (nothing wider than the screen, nothing clipped)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from attnscale.report.fonts import FAMILY, find_cjk_font

CHROMIUM = "/usr/bin/chromium"
ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
]

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(
        not os.path.exists(CHROMIUM),
        reason=f"Debian's chromium is not installed at {CHROMIUM} (CI installs it: make browser)",
    ),
]


def _build(tmp: Path, site: str, *args: str) -> Path:
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "attnscale",
            "report",
            "--quick",
            "--page-dir",
            str(tmp / site),
            "--results",
            str(tmp / "results"),
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    path = Path(out.stdout.strip().splitlines()[-1])
    assert path.parent == (tmp / site).resolve() and path.exists()
    return path


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("browser_report")


@pytest.fixture(scope="module")
def report(built) -> Path:
    """A real quick report, built once by the CLI (the verification runs for real)."""
    return _build(built, "site")


@pytest.fixture(scope="module")
def report_zh(built, report) -> Path:
    """The Chinese page of the same results (the verification is cached by then)."""
    return _build(built, "site-zh", "--lang", "zh")


@pytest.fixture(scope="module")
def playwright():
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as p:
        yield p


@pytest.fixture(scope="module")
def browser(playwright):
    b = playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS)
    yield b
    b.close()


@pytest.fixture
def open_page(browser, report):
    """open_page(width) → (page, problems, requests): console errors and page errors go to
    ``problems``; every request the page makes goes to ``requests`` (any other than the page itself
    is aborted). Every chapter is opened with the contents' button unless ``open_all`` is false;
    ``path`` (default: the English page) and ``fragment`` pick what is opened."""
    pages = []

    def _open(width: int, open_all: bool = True, path: Path | None = None, fragment: str = ""):
        page = browser.new_page(viewport={"width": width, "height": 900})
        pages.append(page)
        problems, requests = [], []
        url = (path or report).as_uri()
        page.on("console", lambda m: problems.append(m.text) if m.type in ("error", "warning") else None)
        page.on("pageerror", lambda e: problems.append(str(e)))
        page.on("request", lambda r: requests.append(r.url))
        page.route("**/*", lambda route: route.continue_() if route.request.url == url else route.abort())
        page.goto(url + fragment)
        page.wait_for_load_state("load")
        if open_all:
            page.click("#open-all")
        return page, problems, requests

    yield _open
    for page in pages:
        page.close()


def test_opens_without_errors_and_loads_nothing_else(open_page, report):
    page, problems, requests = open_page(1280)
    assert problems == []
    assert requests == [report.as_uri()]
    # nothing the page loads is outside it (images, styles, scripts, fonts: data: URLs only)
    loaded = page.eval_on_selector_all(
        "[src], link[href]",
        "els => els.map(e => e.getAttribute('src') || e.getAttribute('href'))"
        ".filter(u => !(u.startsWith('#') || u.startsWith('data:')))",
    )
    assert loaded == []
    # and a reader's links lead only to the page in the other language and to the blog post
    from attnscale.report.build import PAGE_NAMES
    from attnscale.report.seed_words import SEED_POST

    links = set(
        page.eval_on_selector_all(
            "a[href]", "els => els.map(e => e.getAttribute('href')).filter(u => !u.startsWith('#'))"
        )
    )
    assert links <= set(PAGE_NAMES.values()) | {SEED_POST["url"]}, links


@pytest.mark.parametrize("width", [1280, 420])
def test_every_figure_has_a_size(open_page, width):
    page, _, _ = open_page(width)
    # a responsive figure carries a wide and a narrow drawing; the one that does not fit is hidden
    sizes = page.eval_on_selector_all(
        "figure.fig svg, #widget svg",
        "els => els.filter(e => e.checkVisibility()).map(e => {"
        " const r = e.getBoundingClientRect(); return [r.width, r.height]; })",
    )
    assert len(sizes) >= 10  # the figures of the verification, and the widget
    assert all(w > 50 and h > 50 for w, h in sizes), sizes
    narrow = page.eval_on_selector_all(".fig-narrow", "els => els.filter(e => e.checkVisibility()).length")
    from attnscale.report.narrow import NARROW_BREAKPOINT_PX

    assert (narrow > 0) == (width < NARROW_BREAKPOINT_PX)  # the phone's drawings show on a phone only
    assert page.locator(".error-box").count() == 0


def _widget(page) -> dict:
    return page.evaluate("""() => ({
        weights: Array.from(document.querySelectorAll('#widget rect.bar')).map(r => +r.getAttribute('data-weight')),
        heights: Array.from(document.querySelectorAll('#widget rect.bar')).map(r => +r.getAttribute('height')),
        entropy: document.getElementById('w-entropy').textContent,
        maxw: document.getElementById('w-maxw').textContent,
        dk: document.getElementById('w-dk-out').textContent })""")


def test_slider_and_rule_change_the_weights_and_readouts(open_page):
    page, problems, _ = open_page(1280)
    start = _widget(page)
    assert start["dk"] == "64" and len(start["weights"]) == 16
    assert abs(sum(start["weights"]) - 1) < 1e-12
    page.select_option("#w-rule", "unscaled")
    unscaled64 = _widget(page)
    assert unscaled64["weights"] != start["weights"] and unscaled64["entropy"] != start["entropy"]
    slider = page.locator("#w-dk")
    slider.focus()
    page.keyboard.press("End")  # d_k = 4096, as a user would
    big = _widget(page)
    assert big["dk"] == "4096"
    assert big["weights"] != unscaled64["weights"] and big["heights"] != unscaled64["heights"]
    page.select_option("#w-rule", "inverse_sqrt_dk")
    scaled = _widget(page)
    # Unscaled at d_k = 4096 the row is near one-hot (one row: a near-tie at the top may share it);
    # scaled, the same q and k keep it spread out.
    entropy = lambda w: float(w["entropy"].split("/")[0])  # noqa: E731
    assert max(big["weights"]) > max(scaled["weights"])
    assert entropy(big) < entropy(scaled) / 2 and entropy(scaled) > 1.0
    slider.focus()
    page.keyboard.press("ArrowLeft")
    assert _widget(page)["dk"] == "3444"  # log steps: 2^(47/4) rounded
    page.keyboard.press("Home")
    assert _widget(page)["dk"] == "1"
    page.select_option("#w-n", "128")
    assert len(_widget(page)["weights"]) == 128
    assert problems == []


@pytest.mark.parametrize("d_k", [1, 64, 4096])
def test_widget_matches_the_library(open_page, d_k):
    """The JavaScript widget and attnscale.attention agree on every rule, for the same q and k."""
    from attnscale import AuxRequest
    from attnscale.functional import attention
    from attnscale.scales import RULES, SoftCap, Unscaled

    page, _, _ = open_page(1280)
    rules = {
        "inverse_sqrt_dk": RULES["inverse_sqrt_dk"],
        "unscaled": RULES["unscaled"],
        "inverse_dk": RULES["inverse_dk"],
        "qknorm": RULES["qknorm"],
        "softcap": RULES["softcap"],
        "softcap_unscaled": SoftCap(cap_value=RULES["softcap"].cap_value, base=Unscaled()),
        "logn": RULES["logn"],
    }
    options = page.eval_on_selector_all("#w-rule option", "els => els.map(e => e.value)")
    assert sorted(options) == sorted(rules)
    index = page.evaluate(f"window.attnscaleWidget.dks.indexOf({d_k})")
    page.eval_on_selector("#w-dk", "(el, i) => { el.value = String(i); el.dispatchEvent(new Event('input')); }", index)
    qk = page.evaluate("""() => { const s = window.attnscaleWidget.state, D = 4096;
        return { q: Array.from(s.q.subarray(0, s.dk)),
                 k: Array.from({length: s.n}, (_, j) => Array.from(s.k.subarray(j * D, j * D + s.dk))) }; }""")
    q, k = np.array(qk["q"])[None, :], np.array(qk["k"])
    assert q.shape == (1, d_k) and k.shape == (16, d_k)
    for name, rule in rules.items():
        page.select_option("#w-rule", name)
        got = page.evaluate(
            "() => ({ logits: Array.from(window.attnscaleWidget.state.logits),"
            " weights: Array.from(window.attnscaleWidget.state.weights) })"
        )
        _, res = attention(q, k, np.eye(len(k)), scale=rule, aux=AuxRequest(logits=True, weights=True))
        np.testing.assert_allclose(got["logits"], res.logits[0], rtol=1e-12, atol=1e-12, err_msg=name)
        np.testing.assert_allclose(got["weights"], res.weights[0], rtol=1e-10, atol=1e-15, err_msg=name)


def _widget_rules() -> dict:
    from attnscale.scales import RULES, SoftCap, Unscaled

    return {
        "inverse_sqrt_dk": RULES["inverse_sqrt_dk"],
        "unscaled": RULES["unscaled"],
        "inverse_dk": RULES["inverse_dk"],
        "qknorm": RULES["qknorm"],
        "softcap": RULES["softcap"],
        "softcap_unscaled": SoftCap(cap_value=RULES["softcap"].cap_value, base=Unscaled()),
        "logn": RULES["logn"],
    }


def _real_row_logits(row: dict, rule, d_k: int) -> np.ndarray:
    """A real row at the slider's d_k, in NumPy with attnscale.scales' rule: q·k × √(d_k/D) and the
    squared norms × d_k/D (D the head's own d_k), then the rule's normalisation, factor and cap."""
    t = d_k / row["d_k"]
    dots = np.array(row["qk"]) * np.sqrt(t)
    if rule.normalizes:
        norm = getattr(rule, "base", rule)
        radius = lambda sq: np.sqrt((sq / d_k if norm.norm == "rms" else sq) + norm.eps)  # noqa: E731
        dots = dots / (radius(row["q_norm2"] * t) * radius(np.array(row["k_norm2"]) * t))
    return rule.cap(rule.factor(d_k, len(dots)) * dots)


def _softmax_figures(z: np.ndarray) -> tuple[np.ndarray, float, float]:
    p = np.exp(z - z.max())
    p /= p.sum()
    return p, float(-np.sum(p[p > 0] * np.log(p[p > 0]))), float(p.max())


def _real(page) -> dict:
    return page.evaluate("""() => ({
        config: JSON.parse(document.getElementById('widget-config').textContent).real,
        state: window.attnscaleWidget.state.real.map(r => ({weights: Array.from(r.weights), entropy: r.entropy,
                                                             max_weight: r.max_weight, tag: r.tag})),
        shown: [...document.querySelectorAll('#widget .real-row')].map(e => ({
            title: e.querySelector('.real-title').textContent,
            bars: e.querySelectorAll('rect.real-bar').length,
            entropy: +e.querySelector('[id^=w-entropy-]').textContent.split('/')[0],
            maxw: +e.querySelector('[id^=w-maxw-]').textContent })) })""")


def _set_dk(page, d_k: int) -> None:
    index = page.evaluate(f"window.attnscaleWidget.dks.indexOf({d_k})")
    page.eval_on_selector("#w-dk", "(el, i) => { el.value = String(i); el.dispatchEvent(new Event('input')); }", index)


def _check_real(seen: dict, rule, d_k: int) -> list[tuple[float, float]]:
    """The page's real rows (its script's state and its readouts) against NumPy's; their figures."""
    figures = []
    for row, got, shown in zip(seen["config"], seen["state"], seen["shown"]):
        p, entropy, top = _softmax_figures(_real_row_logits(row, rule, d_k))
        np.testing.assert_allclose(got["weights"], p, rtol=1e-9, atol=1e-13)
        assert got["entropy"] == pytest.approx(entropy, rel=1e-9, abs=1e-13)
        assert got["max_weight"] == pytest.approx(top, rel=1e-12)
        assert shown["entropy"] == pytest.approx(entropy, rel=0.01, abs=6e-4)  # as shown: 3 digits
        assert shown["maxw"] == pytest.approx(top, rel=0.01, abs=6e-4) and shown["bars"] == len(row["qk"])
        figures.append((entropy, top))
    return figures


@pytest.fixture(scope="module")
def widget_pages(tmp_path_factory) -> dict[str, Path]:
    """language → a page built from a hand-made verification (stand-in figures, no experiment
    chapters) and the probe results shipped with attnscale, whose captured rows its widget shows: the
    real build above has none (the suite runs without the shipped references), and drawing the probe
    chapters would cost it half a minute."""
    from attnscale import results
    from attnscale.report import chapters, seed
    from attnscale.report.build import build_report
    from helpers.report_data import prime, report_config

    tmp = tmp_path_factory.mktemp("widget_pages")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(results.REFERENCE_ENV, str(results.shipped_reference()))
        mp.setattr(chapters, "EXPERIMENT_CHAPTERS", ())
        mp.setattr(seed, "figure_html", lambda block, data, keys=None, values=None: "")
        config = report_config(tmp)
        prime(config)
        return {lang: build_report(report_config(tmp, lang=lang)).path for lang in ("en", "zh")}


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_real_rows_render_and_follow_the_slider(open_page, widget_pages, lang):
    """The probe's captured rows, under the slider: at the start (d_k = 64, 1/√d_k) each is its
    model's own softmax row as its probe result recorded it; under 1/√d_k they stay so at every
    d_k; unscaled, the slider grows them and their entropy and largest weight move as NumPy's do."""
    from attnscale import results

    page, problems, _ = open_page(1280, path=widget_pages[lang])
    rules, seen = _widget_rules(), _real(page)
    assert [r["model"] for r in seen["config"]] == ["all-MiniLM-L6-v2"] * 3 + ["SmolLM2-135M-Instruct"] * 3
    assert len(seen["shown"]) == 6 and all(("平均熵" in s["title"]) is (lang == "zh") for s in seen["shown"])
    start = _check_real(seen, rules["inverse_sqrt_dk"], 64)
    recorded = [
        row
        for kind in ("probe/minilm", "probe/smollm2")
        for row in results.read(kind, results.shipped_reference()).data["rows"]["rows"]
    ]
    for row, got in zip(recorded, seen["state"]):
        np.testing.assert_allclose(got["weights"], _softmax_figures(np.array(row["logits"]))[0], atol=2e-6)
        assert got["tag"] == "own"
    _set_dk(page, 4096)
    np.testing.assert_allclose(_check_real(_real(page), rules["inverse_sqrt_dk"], 4096), start, rtol=1e-9, atol=1e-12)
    page.select_option("#w-rule", "unscaled")
    big = _check_real(_real(page), rules["unscaled"], 4096)
    _set_dk(page, 64)
    at64 = _check_real(_real(page), rules["unscaled"], 64)
    assert all(e1 < e0 and m1 > m0 for (e0, m0), (e1, m1) in zip(at64, big) if m0 < 0.999)
    assert sum(m0 < 0.999 for _, m0 in at64) >= 3  # rows that had room to sharpen
    for name, rule in rules.items():  # every rule, at the smallest d_k too
        page.select_option("#w-rule", name)
        _set_dk(page, 1)
        _check_real(_real(page), rule, 1)
    phone, more, _ = open_page(400, path=widget_pages[lang])  # on a phone, nothing wider than the screen
    seen = phone.evaluate(OVERFLOW)
    assert seen["scroll"] <= 400 and seen["wide"] == [] and seen["clipped"] == [], seen
    assert problems == [] and more == []


def test_the_answer_comes_first_and_chapters_open_where_a_reader_goes(open_page, report):
    page, problems, _ = open_page(1280, open_all=False)
    # the answer, then the cards, all in the first screen; every chapter closed below
    top = page.evaluate(
        """() => ['.hero .answer', '.glance'].map(s => document.querySelector(s).getBoundingClientRect().top)"""
    )
    assert top[0] < top[1] < 900 and "has variance dₖ" in page.inner_text(".hero .answer")
    opened = (
        "() => [...document.querySelectorAll('details.chapter-body')].filter(d => d.open).map(d => d.parentElement.id)"
    )
    assert page.evaluate(opened) == [] and page.locator("figure.fig svg").first.is_visible() is False
    page.click('nav.toc a[href="#variance"]')  # the contents open the chapter they lead to
    assert page.evaluate(opened) == ["variance"]
    assert page.locator("#variance figure.fig").first.is_visible()
    page.click("#variance summary")  # and a reader closes it again
    assert page.evaluate(opened) == []
    button = page.locator("#open-all")
    assert button.inner_text() == "Open every chapter"
    button.click()
    assert len(page.evaluate(opened)) == page.locator("details.chapter-body").count() > 10
    assert button.inner_text() == "Close every chapter"
    # a link from outside, with a fragment, opens its chapter too
    linked, more, _ = open_page(1280, open_all=False, fragment="#exp-training")
    assert linked.evaluate(opened) == ["exp-training"]
    assert problems == [] and more == []


# Wide tables scroll inside their own box (.table-wrap: a visible scrollbar and a shadow on the side
# that has more columns): the one deliberate scroll container, so the elements inside it may end past
# the screen's edge. Nothing else may, and no other box may hide part of what it holds.
OVERFLOW = """() => {
    const W = document.documentElement.clientWidth;
    const shown = e => e.getClientRects().length > 0;
    const wide = [...document.querySelectorAll('body *')]
        .filter(e => shown(e) && !e.closest('.table-wrap') && e.getBoundingClientRect().right > W + 0.5)
        .map(e => e.tagName + '.' + e.className + ': ' + (e.textContent || '').slice(0, 60));
    const clipped = [...document.querySelectorAll('body *')]
        .filter(e => shown(e) && !e.matches('.table-wrap') && getComputedStyle(e).overflowX !== 'visible'
                     && e.scrollWidth > e.clientWidth + 1)
        .map(e => e.tagName + '.' + e.className + ': ' + (e.textContent || '').slice(0, 60));
    return {wide, clipped, scroll: document.documentElement.scrollWidth, body: document.body.scrollWidth, W};
}"""


@pytest.mark.parametrize("width, lang", [(1280, "en"), (400, "en"), (400, "zh")])
def test_layout_holds_nothing_wider_than_the_screen_or_clipped(open_page, report_zh, width, lang):
    page, problems, _ = open_page(width, path=report_zh if lang == "zh" else None)
    seen = page.evaluate(OVERFLOW)
    assert seen["W"] == width and seen["scroll"] <= width and seen["body"] <= width, seen
    assert seen["wide"] == [] and seen["clipped"] == [], seen
    # the hero formula shows all of itself, "· V" included
    formula = page.locator(".hero .formula")
    assert formula.evaluate("f => f.scrollWidth <= f.clientWidth") and "· V" in formula.inner_text()
    if width == 400:
        # the all-verdicts table is wider than a phone: it scrolls inside its box
        assert page.eval_on_selector(
            "table.all-verdicts", "t => t.parentElement.scrollWidth > t.parentElement.clientWidth"
        )
    assert problems == []


# --- the Chinese page on a machine without CJK fonts ----------------------------------------------

FONTS_CONF = """<?xml version="1.0"?><!DOCTYPE fontconfig SYSTEM "fonts.dtd">
<fontconfig><dir>/usr/share/fonts/truetype/dejavu</dir><cachedir>{cache}</cachedir></fontconfig>"""


@pytest.fixture(scope="module")
def latin_only_browser(playwright, tmp_path_factory):
    """Chromium whose fontconfig sees DejaVu only: a machine without any CJK font, whatever this one
    has installed (checked with fc-list :lang=zh, as a newcomer would)."""
    if not os.path.isdir("/usr/share/fonts/truetype/dejavu"):
        pytest.skip("DejaVu (fonts-dejavu-core) is not installed")
    tmp = tmp_path_factory.mktemp("fontconfig")
    conf = tmp / "fonts.conf"
    conf.write_text(FONTS_CONF.format(cache=tmp / "cache"))
    env = {**os.environ, "FONTCONFIG_FILE": str(conf)}
    listed = subprocess.run(["fc-list", ":lang=zh"], env=env, capture_output=True, text=True)
    assert listed.returncode == 0 and listed.stdout.strip() == "", listed.stdout
    b = playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS, env=env)
    yield b
    b.close()


def _glyph_shots(browser, path: Path, chars: str, svg_font: bool = False) -> list[bytes]:
    """Screenshots of each character, alone in a span set in the page's body font (or, with
    ``svg_font``, in the font family a figure's text names), on ``path``."""
    page = browser.new_page(viewport={"width": 420, "height": 900})
    try:
        page.goto(path.as_uri())
        page.wait_for_load_state("load")
        page.evaluate("document.fonts.ready")
        shots = []
        for c in chars:
            page.evaluate(
                """c => { let s = document.getElementById('glyph-probe');
                if (!s) { s = document.createElement('span'); s.id = 'glyph-probe';
                          s.style.cssText = 'position:fixed;top:0;left:0;font-size:40px;background:#fff;z-index:9';
                          document.body.appendChild(s); }
                s.textContent = c; }""",
                c,
            )
            if svg_font:
                page.evaluate("""() => { const t = document.querySelector('figure.fig svg text');
                    document.getElementById('glyph-probe').style.fontFamily = getComputedStyle(t).fontFamily; }""")
            shots.append(page.locator("#glyph-probe").screenshot())
        embedded = page.evaluate(
            "f => [...document.fonts].some(x => x.family.replace(/[\"']/g, '') === f && x.status === 'loaded')", FAMILY
        )
        return shots, embedded
    finally:
        page.close()


@pytest.mark.skipif(find_cjk_font() is None, reason="no CJK font to embed here (make setup installs fonts-noto-cjk)")
def test_chinese_page_shows_glyphs_without_system_cjk_fonts(latin_only_browser, report_zh, tmp_path):
    """With the page's embedded font, different characters look different; with the @font-face
    removed, the same browser draws each as the same missing-glyph box."""
    html = report_zh.read_text(encoding="utf-8")
    title = html.split("<h1>", 1)[1].split("</h1>", 1)[0]
    chars = "".join(dict.fromkeys(c for c in title if "\u4e00" <= c <= "\u9fff"))[:4]
    assert len(chars) == 4, title
    with_font, embedded = _glyph_shots(latin_only_browser, report_zh, chars)
    stripped = tmp_path / "no-font.html"
    start = html.index("<style>@font-face")
    stripped.write_text(html[:start] + html[html.index("</style>", start) + len("</style>") :], encoding="utf-8")
    boxes, embedded_after = _glyph_shots(latin_only_browser, stripped, chars)
    assert embedded and not embedded_after
    assert len(set(boxes)) == 1, "without the font every character should be the same box"
    assert len(set(with_font)) == len(chars) and not set(with_font) & set(boxes)
    # the figures' text names the same family: their Chinese labels get the glyphs too
    svg_with, _ = _glyph_shots(latin_only_browser, report_zh, chars, svg_font=True)
    svg_boxes, _ = _glyph_shots(latin_only_browser, stripped, chars, svg_font=True)
    assert FAMILY in html[html.index("<svg") :] and len(set(svg_boxes)) == 1
    assert len(set(svg_with)) == len(chars) and not set(svg_with) & set(svg_boxes)


@pytest.mark.skipif(find_cjk_font() is None, reason="no CJK font to embed here")
def test_english_page_footer_chinese_is_embedded(report):
    """The English page's language switch is Chinese: its few characters are carried too."""
    html = report.read_text(encoding="utf-8")
    assert "<style>@font-face" in html and f'font-family:"{FAMILY}"' in html


# --- figures at 1280 px and at 420 px -------------------------------------------------------------


@pytest.mark.parametrize("width, shown", [(1280, "fig-wide"), (420, "fig-narrow")])
def test_responsive_figure_shows_the_variant_that_fits_with_readable_text(browser, tmp_path, width, shown):
    from attnscale.report import figures_beyond, plotting
    from attnscale.report.page import stylesheet

    data = {
        "n": [10, 100, 1000, 100000],
        "softmax": [0.94, 0.6, 0.13, 0.0015],
        "ssmax": [0.99, 0.98, 0.97, 0.96],
        "s": 0.43,
    }
    fig = plotting.responsive_figure(lambda: figures_beyond.ssmax(data), "alt", "caption", px_per_inch=130)
    path = tmp_path / "fig.html"
    path.write_text(
        '<!doctype html><html><head><meta charset="utf-8"><meta name="viewport" '
        f'content="width=device-width, initial-scale=1"><style>{stylesheet()}</style></head><body>'
        f'<div class="layout"><nav class="toc"></nav><main>{fig}</main></div></body></html>',
        encoding="utf-8",
    )
    page = browser.new_page(viewport={"width": width, "height": 900})
    try:
        page.goto(path.as_uri())
        seen = page.evaluate("""() => [...document.querySelectorAll('.fig-responsive > div')].map(d => ({
            cls: d.className, width: d.getBoundingClientRect().width,
            text: [...d.querySelectorAll('text')].map(t => t.getBoundingClientRect().height).filter(h => h > 0) }))""")
    finally:
        page.close()
    visible = [d for d in seen if d["width"] > 0]
    assert [d["cls"] for d in visible] == [shown]
    heights = sorted(visible[0]["text"])
    # a glyph box is ~1.15x the font size: the median label is at least ~10 px, none under ~8 px
    assert heights and heights[len(heights) // 2] >= 11 and heights[0] >= 9, heights
