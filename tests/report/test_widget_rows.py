"""The widget's real rows, read from probe results (the report loads no model): which result they come
from, when a row is its model's own logits, what the page says when a result has none, and the
frames the page gives them. The script that draws them runs in tests/report/test_report_browser.py."""

import json
import re

import pytest

from attnscale import results
from attnscale.i18n import language
from attnscale.report.widget import widget_html
from attnscale.report.widget_rows import REAL_KINDS, RealRows, read_real_rows, rows_note, widget_row

SCALE = 32**-0.5


def _row(pick: str, head: int, qk: list[float], scale: float = SCALE) -> dict:
    return {
        "pick": pick,
        "layer": 1,
        "head": head,
        "normalized_entropy": 0.5,
        "keys": list(range(len(qk))),
        "logits": [scale * x for x in qk],
        "qk": qk,
        "q_norm2": 40.0,
        "k_norm2": [30.0] * len(qk),
    }


def _model(rule: str = "1/sqrt(d_k)", softcap: float | None = None) -> dict:
    layer = {"value": SCALE, "d_k": 32, "rule": rule, "softcap": softcap}
    return {"name": "tiny", "scale_rules": [layer, layer]}


def _probe(rows: list[dict] | None) -> dict:
    block = None if rows is None else {"query": 2, "tokens": ["[CLS]", "Ġcat", "."], "rows": rows}
    return {"model": _model(), "heads": [], "check": {"max_abs_diff": 0.0}, "rows": block}


@pytest.fixture
def root(tmp_path, monkeypatch):
    monkeypatch.setenv(results.REFERENCE_ENV, "")  # no shipped references: only what the test writes
    return tmp_path


def test_rows_come_from_each_bundled_probe_with_its_tokens(root):
    rows = [_row("lowest", 0, [1.0, -2.0, 3.0]), _row("highest", 2, [0.5, 0.1, -0.2])]
    for kind in REAL_KINDS:
        results.write(kind, _probe(rows), root=root)
    real = read_real_rows(root)
    assert real.lacking == [] and len(real.rows) == 4
    assert real.sources == [f"{kind}/result.json (full run)" for kind in REAL_KINDS]
    first = real.rows[0]
    assert (first["model"], first["layer"], first["head"], first["d_k"]) == ("tiny", 1, 0, 32)
    assert first["own"] and first["pick"] == "lowest mean entropy"
    assert first["keys"] == ["[CLS]", " cat", "."] and first["query"] == "."  # Ġ is a space
    with language("zh"):
        assert read_real_rows(root).rows[0]["pick"] == "平均熵最低"


def test_a_result_without_rows_is_named_with_the_command_that_records_them(root):
    results.write("probe/minilm", _probe([_row("median", 1, [1.0, 2.0])]), root=root)
    results.write("probe/smollm2", _probe(None), root=root)  # made before the probe recorded rows
    real = read_real_rows(root)
    assert [r["model"] for r in real.rows] == ["tiny"] and real.lacking == ["probe/smollm2"]
    note = rows_note(real)
    assert "No captured rows for probe/smollm2" in note and "attnscale probe --model smollm2" in note
    assert "probe/minilm/result.json (full run)" in note
    # no result at all: the page says which probes have not run, and shows no row
    none = read_real_rows(root / "elsewhere")
    assert none.rows == [] and none.missing == list(REAL_KINDS) and none.lacking == []
    assert rows_note(none) == (
        "No real rows from probe/minilm and probe/smollm2: not run here yet "
        "(attnscale probe --model minilm and attnscale probe --model smollm2)."
    )
    assert rows_note(RealRows()) == ""


@pytest.mark.parametrize(
    "model, logits_scale, own",
    [
        (_model(), SCALE, True),
        (_model(softcap=50.0), SCALE, False),  # its softmax saw a capped logit
        (_model(rule="1"), 1.0, False),  # another scale
        (_model(), SCALE * 1.001, False),  # something besides scale·q·k (a bias)
    ],
)
def test_a_row_is_its_models_own_only_under_a_plain_inverse_sqrt_scale(model, logits_scale, own):
    row = _row("lowest", 0, [1.0, -2.0])
    row["logits"] = [logits_scale * x for x in row["qk"]]
    assert widget_row(model, {"query": 1, "tokens": ["a", "b"]}, row)["own"] is own


def test_rows_of_unequal_lengths_are_refused():
    row = _row("lowest", 0, [1.0, -2.0])
    row["k_norm2"] = [1.0]
    with pytest.raises(ValueError, match="layer 1 head 0"):
        widget_row(_model(), {"query": 1, "tokens": ["a", "b"]}, row)


def test_the_widget_frames_each_row_and_carries_it_to_the_script(root):
    results.write("probe/minilm", _probe([_row("lowest", 0, [1.0, -2.0, 3.0])]), root=root)
    real = read_real_rows(root)
    html = widget_html(0, real)
    config = json.loads(re.search(r'id="widget-config">(.*?)</script>', html).group(1))
    assert config["real"] == real.rows
    assert html.count('class="real-row"') == 1 and 'id="w-real-0"' in html and 'id="w-maxw-0"' in html
    assert "tiny, layer 1, head 0 (lowest mean entropy), query “.”" in html
    assert "No real rows from probe/smollm2: not run here yet" in html
    assert "real-rows" not in widget_html(0)  # without rows read, the widget is the iid row alone


def test_the_built_page_shows_the_rows_of_the_probe_results_it_reads(root, monkeypatch, no_engine, fast_figures):
    """build_report → the post's chapters → the widget: the rows of the results folder it reads."""
    from attnscale.report import chapters
    from attnscale.report.build import build_report
    from helpers.report_data import prime, report_config

    monkeypatch.setattr(chapters, "EXPERIMENT_CHAPTERS", ())  # the probe chapters cost seconds; not theirs to test
    config = report_config(root)
    prime(config)
    results.write("probe/minilm", _probe([_row("lowest", 0, [1.0, -2.0, 3.0])]), root=config.results)
    page = build_report(config).path.read_text(encoding="utf-8")
    config_json = json.loads(re.search(r'id="widget-config">(.*?)</script>', page).group(1))
    assert [row["pick"] for row in config_json["real"]] == ["lowest mean entropy"]
    assert page.count('class="real-row"') == 1 and "No real rows from probe/smollm2: not run here yet" in page
