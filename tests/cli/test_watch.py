"""``attnscale watch LOG.jsonl``: a log written by the real JSONLSink, replayed; exit 1 with an alert,
0 without, 2 on bad input; the alerts in English and Chinese, as JSON, and a dashboard written whole,
which a real browser (Debian's Chromium, headless, driven by Playwright, as
tests/report/test_report_browser.py does) opens without a console error, requesting nothing but
itself, drawing every heatmap (coloured pixels, the alert ringed in red) and the loss."""

from __future__ import annotations

import json
import math
import os
import re

import numpy as np
import pytest

from attnscale.cli import main
from attnscale.early_warning import DetectorConfig


def write_log(path, steps=40, jump_at=None, loss=False, heads=3):
    """A JSONL log of ``steps`` steps written by JSONLSink from real Step records (2 layers × ``heads``);
    the largest logit of layer 1's head 2 jumps ×5 from ``jump_at`` on."""
    from attnscale.torch.monitor.records import HeadFigures, Step
    from attnscale.torch.sinks import JSONLSink

    rng = np.random.default_rng(0)
    with JSONLSink(path) as sink:
        for s in range(steps):
            figures = []
            for layer in ("blocks.0.attn", "blocks.1.attn"):
                for h in range(heads):
                    logit = 8.0 * (1 + 0.01 * rng.standard_normal())
                    if jump_at is not None and s >= jump_at and (layer, h) == ("blocks.1.attn", 2):
                        logit *= 5
                    figures.append(
                        HeadFigures(
                            layer=layer,
                            head=h,
                            calls=1,
                            rows=64,
                            rows_empty=0,
                            rows_broken=0,
                            saturated_rows=0,
                            float16_overflow_rows=0,
                            entropy_mean=2.0,
                            entropy_median=math.nan,
                            entropy_min=1.0 + 0.01 * rng.standard_normal(),
                            max_logit=logit,
                            min_logit=-logit,
                            max_abs_logit=logit,
                            first_key_weight=0.2,
                        )
                    )
            sink.write(Step(step=s, calls=2, fallbacks={}, heads=figures))
    if loss:  # a training loop's own scalar beside the figures (the dashboard draws it)
        records = [json.loads(line) for line in path.read_text().splitlines()]
        path.write_text("".join(json.dumps({**r, "loss": 3.0 - 0.01 * r["step"]}) + "\n" for r in records))
    return path


def test_a_log_with_an_alert_exits_1_and_names_it_and_one_without_exits_0(tmp_path, capsys):
    assert main(["watch", str(write_log(tmp_path / "quiet.jsonl"))]) == 0
    assert capsys.readouterr().out == "no alert over 40 steps of 6 heads\n"
    assert main(["watch", str(write_log(tmp_path / "jump.jsonl", jump_at=30))]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("step 30, blocks.1.attn head 2: the largest |logit| rose to 4")
    assert lines[-1] == "one alert over 40 steps of 6 heads"
    assert main(["watch", str(tmp_path / "jump.jsonl"), "--lang", "zh"]) == 1
    zh = capsys.readouterr().out.splitlines()
    assert zh[0].startswith("第 30 步，blocks.1.attn 头 2：最大 |logit|升至 4") and zh[-1] == "40 步、6 个头：1 条警报"


def test_the_options_reach_the_detector_and_json_carries_the_alerts(tmp_path, capsys):
    log = str(write_log(tmp_path / "jump.jsonl", jump_at=30))
    # A warm-up longer than the 30 steps before the jump: the window never judges it.
    assert main(["watch", log, "--warmup", "31", "--json", "-"]) == 0
    assert json.loads(capsys.readouterr().out)["alerts"] == []
    assert main(["watch", log, "--json", "-"]) == 1
    data = json.loads(capsys.readouterr().out)
    (alert,) = data["alerts"]
    assert (alert["step"], alert["layer"], alert["head"], alert["figure"]) == (30, "blocks.1.attn", 2, "max_abs_logit")
    defaults = DetectorConfig()
    assert data["config"]["z"] == defaults.z and data["config"]["window"] == defaults.window


@pytest.mark.parametrize(
    "content, args, message",
    [
        ('{"step": 0, "heads": []}\nnot json\n{"step": 2, "heads": []}\n', [], "line 2 is not JSON"),
        ('{"step": 0}\n', [], "line 1 is not a step record: expected a JSON object with 'step' and 'heads'"),
        ('{"step": 0, "heads": []}\n', [], "holds no step record with heads"),
        (None, ["--z", "-1"], "--z: expected a finite number > 0, got -1.0"),
        (None, ["--warmup", "200"], "--warmup: expected at most window = 128 values, got 200"),
        (None, ["--html", "/nonexistent-dir/x.html"], "--html: the folder '/nonexistent-dir' does not exist"),
    ],
)
def test_bad_input_exits_2_with_one_line(tmp_path, capsys, content, args, message):
    log = tmp_path / "log.jsonl"
    if content is None:
        write_log(log, steps=3)
    else:
        log.write_text(content)
    assert main(["watch", str(log), *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith("attnscale watch: error: ") and message in err and err.count("\n") == 1


def test_a_missing_log_exits_2_and_a_half_written_last_line_is_a_killed_run(tmp_path, capsys):
    assert main(["watch", str(tmp_path / "absent.jsonl")]) == 2
    assert "absent.jsonl" in capsys.readouterr().err
    log = write_log(tmp_path / "killed.jsonl", steps=5)
    with open(log, "a") as f:
        f.write('{"step": 5, "heads": [{"lay')  # no newline: the run died writing it
    assert main(["watch", str(log)]) == 0
    assert capsys.readouterr().out == "no alert over 5 steps of 6 heads\n"


def test_the_dashboard_is_one_self_contained_page_with_the_alerts_and_the_loss(tmp_path, capsys):
    page = tmp_path / "watch.html"
    log = write_log(tmp_path / "jump.jsonl", jump_at=30, loss=True)
    assert main(["watch", str(log), "--html", str(page), "--lang", "zh"]) == 1
    text = page.read_text(encoding="utf-8")
    assert '<html lang="zh">' in text and "注意力预警" in text
    assert "http://" not in text and "https://" not in text and "<link" not in text and " src=" not in text
    data = json.loads(text.split('<script type="application/json" id="data">')[1].split("</script>")[0])
    assert data["loss"][:2] == [3.0, 2.99] and len(data["steps"]) == 40 and len(data["rows"]) == 6
    (mark,) = data["figures"]["max_abs_logit"]["alerts"]
    assert (mark["row"], mark["col"]) == (5, 30) and mark["text"].startswith("第 30 步")
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temporary file left


def test_a_long_log_is_binned_to_the_value_nearest_the_alarm():
    from attnscale.early_warning.dashboard import MAX_COLUMNS, dashboard_data

    records = [
        {
            "step": s,
            "heads": [
                {"layer": "L", "head": 0, "max_abs_logit": 9.0 if s == 7 else 1.0, "entropy_min": 2.0 - (s == 8)}
            ],
        }
        for s in range(MAX_COLUMNS * 2 + 1)
    ]
    data = dashboard_data(records, [])
    assert data["binned"] == 3 and len(data["steps"]) == 401 and data["steps"][:3] == [0, 3, 6]
    assert data["figures"]["max_abs_logit"]["values"][0][2] == 9.0  # the spike, not a mean
    assert data["figures"]["entropy_min"]["values"][0][2] == 1.0  # a falling figure keeps its least
    assert "loss" not in data


CHROMIUM = "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update"]


# Per canvas: its size, how many distinct colours it has, and how many pure alert-red pixels.
CANVASES = """() => [...document.querySelectorAll('canvas')].map(c => {
  const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
  const colours = new Set(); let red = 0;
  for (let i = 0; i < d.length; i += 4) {
    colours.add((d[i] << 16) | (d[i + 1] << 8) | d[i + 2]);
    if (d[i] === 228 && d[i + 1] === 0 && d[i + 2] === 43) red++;
  }
  return {cls: c.className, section: c.closest('section').id, w: c.width, h: c.height,
          colours: colours.size, red, drawn: c.dataset.drawn};
})"""


def open_in_chromium(browser, url: str):
    """(canvases, hover tip, problems, requests) of the page at ``url``: console errors and warnings
    and page errors in problems; every request in requests (any but the page itself aborted)."""
    page = browser.new_page(viewport={"width": 1100, "height": 900})
    problems, requests = [], []
    page.on("console", lambda m: problems.append(m.text) if m.type in ("error", "warning") else None)
    page.on("pageerror", lambda e: problems.append(str(e)))
    page.on("request", lambda r: requests.append(r.url))
    page.route("**/*", lambda route: route.continue_() if route.request.url == url else route.abort())
    page.goto(url)
    page.wait_for_load_state("load")
    canvases = page.evaluate(CANVASES)
    page.hover("section#max_abs_logit canvas.heatmap", position={"x": 5, "y": 5})
    tip = page.text_content("#tip")
    page.close()
    return canvases, tip, problems, requests


@pytest.mark.browser
@pytest.mark.skipif(not os.path.exists(CHROMIUM), reason=f"Debian's chromium is not installed at {CHROMIUM}")
def test_the_dashboard_renders_its_heatmaps_and_loss_without_a_console_error(tmp_path):
    sync_api = pytest.importorskip("playwright.sync_api")
    log = write_log(tmp_path / "log.jsonl", jump_at=30, loss=True)
    seen = {}
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            for lang in ("en", "zh"):
                page = tmp_path / f"watch.{lang}.html"
                assert main(["watch", str(log), "--html", str(page), "--lang", lang, "--quiet"]) == 1
                seen[lang] = (page.as_uri(), *open_in_chromium(browser, page.as_uri()))
        finally:
            browser.close()
    for url, canvases, tip, problems, requests in seen.values():
        assert problems == [] and requests == [url]
        heatmaps = [c for c in canvases if c["cls"] == "heatmap"]
        assert [c["section"] for c in heatmaps] == [
            "max_abs_logit",
            "float16_headroom",
            "entropy_min",
            "saturated_fraction",
            "first_key_weight",
            "rows_broken",
        ]
        assert all(c["w"] > 0 and c["h"] > 0 for c in canvases) and len(canvases) == 12  # a loss strip under each
        # Noisy figures draw many colours; the one alert is ringed on its own figure only.
        assert min(c["colours"] for c in heatmaps if c["section"] in ("max_abs_logit", "entropy_min")) > 20
        assert [(c["section"], c["drawn"]) for c in heatmaps if c["red"]] == [("max_abs_logit", "1")]
        assert all(c["drawn"] == "1" and c["colours"] > 1 for c in canvases if c["cls"] == "loss")
        # The hovered cell: step 0 of the first row, its largest |logit| (8 with 1 % noise) to 4 digits.
        assert re.fullmatch(r"\S+ 0 · blocks\.0\.attn · 0: [78]\.\d{1,3}", tip), tip
    assert seen["zh"][2].startswith("步 0") and seen["en"][2].startswith("step 0")
