"""The telemetry benchmark experiment, its result, its terminal and Markdown tables and its chapter:
tiny shapes, one repeat (speed itself is measured only by benchmarks/telemetry.py)."""

import copy
import dataclasses
import json
import math
from pathlib import Path

import statistics

import pytest

torch = pytest.importorskip("torch")

from attnscale import results  # noqa: E402
from attnscale.cli import main  # noqa: E402
from attnscale.cli.telemetry import format_markdown, format_table  # noqa: E402
from attnscale.errors import InputError  # noqa: E402
from attnscale.experiments.telemetry import (  # noqa: E402
    TARGETS,
    TelemetryBenchConfig,
    attended_pairs,
    attention_flops,
    run_telemetry_bench,
)
from attnscale.experiments.telemetry_monitor import monitor_layers  # noqa: E402
from attnscale.i18n import language  # noqa: E402
from attnscale.report.chapters import telemetry as chapter  # noqa: E402


PEAK_N = 128  # a small GEMM: the tests check the figures' arithmetic, not the machine's speed


@pytest.fixture(scope="module")
def envelope(tmp_path_factory):
    root = tmp_path_factory.mktemp("results")
    config = TelemetryBenchConfig(shapes=((1, 2, 64, 16),), memory_shapes=(), repeats=1, peak_gemm_n=PEAK_N)
    data = run_telemetry_bench(config)
    return results.write("telemetry", data, config={"repeats": 1}, seed=0, quick=True, root=root)


def test_every_ratio_is_a_median_over_sdpa_from_the_same_run(envelope):
    data = envelope.data
    assert {(r["pass"], r["causal"]) for r in data["rows"]} == {
        (p, c) for p in ("forward", "forward+backward") for c in (False, True)
    }
    for row in data["rows"]:
        assert set(row["median_s"]) == set(data["variants"][row["pass"]])
        for name, ratio in row["ratio_to_sdpa"].items():
            assert math.isfinite(ratio) and ratio > 0
            assert ratio == pytest.approx(row["median_s"][name] / row["median_s"]["sdpa"], rel=1e-12)
            assert row["cpu_ratio_to_sdpa"][name] == pytest.approx(
                row["cpu_median_s"][name] / row["cpu_median_s"]["sdpa"], rel=1e-12
            )
    time_targets = [t for t in TARGETS if t["measure"] == "time"]
    assert len(data["verdicts"]) == len(time_targets) * 2  # no memory rows: no memory verdicts
    for v in data["verdicts"]:
        row = next(r for r in data["rows"] if r["pass"] == v["pass"] and r["causal"] == v["causal"])
        assert v["ratio"] == row["ratio_to_sdpa"]["kernel"] and v["met"] == (v["ratio"] <= v["target"])


def test_the_result_is_strict_json_and_reads_back(envelope):
    text = envelope.path.read_text()
    json.loads(text, parse_constant=lambda name: pytest.fail(f"{name} in the result"))
    back = results.read_preferred("telemetry", envelope.path.parents[1])
    assert back.quick and back.data == envelope.data


def test_tables_and_chapter_show_the_figures_and_change_with_them(envelope):
    text, markdown = format_table(envelope), format_markdown(envelope)
    assert "time ÷ plain SDPA" in text and "(1, 2, 64, 16)" in text
    assert (
        markdown.startswith(f"Measured {envelope.created[:10]} on ") and "| forward+backward: time ÷ SDPA |" in markdown
    )
    for lang in ("en", "zh"):
        with language(lang):
            html = chapter.render(envelope)
        assert "<table" in html and "(1, 2, 64, 16)" in html
    changed = copy.deepcopy(envelope)
    v = changed.data["verdicts"][0]
    v.update(ratio=2.0, met=False, excess=2.0 / v["target"] - 1)
    assert "missed by 90%" in format_markdown(changed) and "missed by 90%" in chapter.render(changed)
    v.update(ratio=0.5, met=True, excess=0.5 / v["target"] - 1)
    assert "— met." in chapter.render(changed) and "0.500× met" in format_table(changed)


@pytest.mark.slow
def test_peak_memory_in_fresh_processes():
    config = TelemetryBenchConfig(
        shapes=(),
        memory_shapes=((1, 2, 128, 16),),
        memory_variants=("sdpa", "kernel"),
        causal=(False,),
        backward=False,
        peak_gemm_n=PEAK_N,
    )
    row = run_telemetry_bench(config)["memory"][0]
    assert set(row["peak_rise_bytes"]) == {"sdpa", "kernel"} and not row["failures"], row
    assert all(isinstance(n, int) and n >= 0 for n in row["peak_rise_bytes"].values())


def test_monitor_layers_aggregate_the_heads():
    heads = [
        {"layer": "l0", "head": 0, "entropy_mean": 1.0, "entropy_median": 0.9, "entropy_min": 0.1, "max_logit": 3.0},
        {"layer": "l0", "head": 1, "entropy_mean": 0.5, "entropy_median": 0.4, "entropy_min": 0.2, "max_logit": 7.0},
        {
            "layer": "l1",
            "head": 0,
            "entropy_mean": None,
            "entropy_median": None,
            "entropy_min": None,
            "max_logit": None,
        },
    ]
    l0, l1 = monitor_layers(heads)
    assert (l0["entropy_mean"], l0["entropy_median_of_medians"], l0["entropy_min"], l0["max_logit"]) == (
        0.75,
        0.65,
        0.1,
        7.0,
    )
    assert (l0["lowest_head"], l0["lowest_head_entropy_mean"]) == (1, 0.5)
    assert l1["entropy_mean"] is None and l1["lowest_head"] is None


@pytest.mark.parametrize(
    "device,expected",
    [("tpu", "--device: expected 'cpu' or 'cuda', got 'tpu'"), ("cuda", "--device: 'cuda' is not available here")],
)
def test_an_unavailable_device_is_one_line_and_exit_2(device, expected, capsys, tmp_path):
    if device == "cuda" and torch.cuda.is_available():
        pytest.skip("this machine has a CUDA GPU")
    code = main(["telemetry-bench", "--device", device, "--no-model", "--results", str(tmp_path)])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and expected in err, err
    assert not any(tmp_path.iterdir())


def test_markdown_without_a_result_says_which_command_makes_it(capsys, tmp_path):
    assert main(["telemetry-bench", "--markdown", "--results", str(tmp_path)]) == 2
    assert (
        "no telemetry result here yet, full, quick or reference (attnscale telemetry-bench)" in capsys.readouterr().err
    )


def test_markdown_renders_a_written_result(envelope, capsys):
    assert main(["telemetry-bench", "--markdown", "--results", str(envelope.path.parents[1])]) == 0
    assert capsys.readouterr().out.strip() == format_markdown(envelope)


@pytest.mark.parametrize("folder", ["docs/results", "docs/results/amd-epyc"])
def test_the_benchmark_page_shows_what_the_committed_result_renders(folder):
    """The documentation's benchmark page of each committed run (the Intel Xeon's in docs/results, the
    AMD EPYC's in docs/results/amd-epyc; docs/hooks.py makes one page per result when the site is built)
    holds what `attnscale telemetry-bench --markdown --results FOLDER` prints there."""
    import importlib.util

    repo = Path(__file__).parents[2]
    spec = importlib.util.spec_from_file_location("docs_hooks", repo / "docs" / "hooks.py")
    hooks = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hooks)
    env = results.read("telemetry", path=repo / folder / "telemetry" / "result.json")
    relative = dataclasses.replace(env, path=env.path.relative_to(repo))  # as the command run there names it
    page = hooks.benchmark_pages(repo / folder)[f"benchmarks/{hooks.benchmark_name(env)}.md"]
    assert format_markdown(relative) in page


def test_the_monitor_sentence_says_yes_or_no_in_each_language():
    m = {
        "model": "m",
        "n_sequences": 2,
        "padded_length": 8,
        "ratio": 1.1,
        "outputs_bitwise_equal": True,
        "float16_overflow_calls": 0,
        "calls_per_forward": 6,
        "layers": [],
    }
    assert "unmonitored model: yes;" in chapter._monitor(m)[0]
    m["outputs_bitwise_equal"] = False
    assert "unmonitored model: no;" in chapter._monitor(m)[0]
    with language("zh"):
        assert "False" not in chapter._monitor(m)[0]


def test_quick_fields_can_be_given():
    """benchmarks/telemetry.py --quick --no-memory gives memory_shapes=() to quick (it was a TypeError)."""
    assert TelemetryBenchConfig.quick(memory_shapes=()).memory_shapes == ()
    assert TelemetryBenchConfig.quick().shapes == TelemetryBenchConfig.QUICK_SHAPES


def test_attention_flops_are_the_closed_forms():
    # (B, H, L, d) = (2, 3, 5, 4): one product over P pairs is 2·2·3·P·4 = 48·P flops.
    assert attention_flops((2, 3, 5, 4), False, "forward") == 2 * 48 * 25
    assert attention_flops((2, 3, 5, 4), False, "forward+backward") == 7 * 48 * 25
    assert attention_flops((2, 3, 5, 4), True, "forward") == 2 * 48 * 15  # L(L+1)/2 = 15 pairs
    assert attention_flops((2, 3, 5, 4), True, "forward+backward") == 7 * 48 * 15
    assert attention_flops((2, 3, 5, 4), False, "forward", kv_length=3) == 2 * 48 * 15
    # causal, top-left: query i attends min(i+1, S) keys
    assert attention_flops((2, 3, 5, 4), True, "forward", kv_length=3) == 2 * 48 * (1 + 2 + 3 + 3 + 3)
    assert attention_flops((2, 3, 3, 4), True, "forward", kv_length=5) == 2 * 48 * (1 + 2 + 3)
    assert attended_pairs(8192, 8192, True) == 8192 * 8193 // 2


@pytest.mark.parametrize("L,S", [(1, 1), (4, 4), (7, 3), (3, 7), (16, 1), (1, 16)])
def test_causal_pairs_are_the_top_left_mask(L, S):
    """The count against the mask the benchmark's causal variants apply (key j > query i masked)."""
    mask = torch.ones(L, S, dtype=torch.bool).triu(1)
    assert attended_pairs(L, S, True) == int((~mask).sum())
    assert attended_pairs(L, S, False) == L * S


def test_an_unknown_pass_has_no_flop_count():
    with pytest.raises(InputError, match="pass_"):
        attention_flops((1, 1, 4, 4), False, "backward")


def test_each_row_s_share_of_the_peak_is_its_gflops_over_the_gemm_s(envelope):
    data = envelope.data
    peak = data["peak"]
    assert (peak["measure"], peak["n"], len(peak["times_s"])) == ("float32 GEMM", PEAK_N, data["repeats"])
    assert peak["gflops"] == pytest.approx(2 * PEAK_N**3 / statistics.median(peak["times_s"]) / 1e9, rel=1e-12)
    for row in data["rows"]:
        assert row["flops"] == attention_flops(row["shape"], row["causal"], row["pass"])
        assert set(row["gflops"]) == set(row["ratio_to_peak"]) == set(row["median_s"])
        for name, share in row["ratio_to_peak"].items():
            assert row["gflops"][name] == pytest.approx(row["flops"] / row["median_s"][name] / 1e9, rel=1e-12)
            assert share == pytest.approx(row["gflops"][name] / peak["gflops"], rel=1e-12)
            assert math.isfinite(share) and share > 0


def test_tables_and_chapter_show_the_peak_and_each_share(envelope):
    changed = copy.deepcopy(envelope)
    changed.data["peak"]["gflops"] = 123.45
    row = next(r for r in changed.data["rows"] if r["pass"] == "forward" and not r["causal"])
    row["ratio_to_peak"].update(sdpa=0.25, kernel=0.125)
    text, markdown = format_table(changed), format_markdown(changed)
    assert f"float32 GEMM peak ({PEAK_N}×{PEAK_N} torch.mm): 123.5 GFLOP/s" in text
    share_line = next(line for line in text.splitlines() if "% of GEMM peak" in line)
    assert "25.0%" in share_line and "12.5%" in share_line
    assert "123.5 GFLOP/s" in markdown.splitlines()[0]
    assert "| SDPA % of GEMM peak | kernel % of GEMM peak |" in markdown
    assert "| 25.0% | 12.5% |" in markdown
    html = chapter.render(changed)
    assert "123.5 GFLOP/s" in html and "kernel: % of GEMM peak" in html and "12.5%" in html
    with language("zh"):
        html = chapter.render(changed)
    assert "123.5 GFLOP/s" in html and "kernel：占 GEMM 峰值的百分比" in html


def test_a_result_from_before_the_peak_reads_as_before(envelope):
    old = copy.deepcopy(envelope)
    del old.data["peak"]
    for row in old.data["rows"]:
        del row["flops"], row["gflops"], row["ratio_to_peak"]
    text, markdown = format_table(old), format_markdown(old)
    assert "time ÷ plain SDPA" in text and "| forward: time ÷ SDPA |" in markdown
    for lang in ("en", "zh"):
        with language(lang):
            html = chapter.render(old)
        assert "<table" in html and "GFLOP/s" not in html and "GEMM" not in html
    assert "GEMM" not in text and "GEMM" not in markdown


@pytest.mark.parametrize("n", [0, -1, 2.5, True])
def test_a_bad_peak_gemm_size_is_refused_by_name(n):
    with pytest.raises(InputError, match="peak_gemm_n"):
        TelemetryBenchConfig(peak_gemm_n=n)


def test_the_command_records_its_run_time(envelope, monkeypatch, tmp_path, capsys):
    """The result says how long its command ran (the README's table of reference results reads it):
    the benchmark's seconds, as the clock saw them around the run."""
    import attnscale.experiments.telemetry as telemetry

    def slow_run(config, progress=None):
        clock[0] += 2.5  # the run "takes" 2.5 s of the clock below
        return copy.deepcopy(envelope.data)

    clock = [100.0]
    monkeypatch.setattr(telemetry, "run_telemetry_bench", slow_run)
    monkeypatch.setattr("attnscale.cli.telemetry.time.perf_counter", lambda: clock[0])
    assert main(["telemetry-bench", "--quick", "--no-model", "--quiet", "--results", str(tmp_path)]) == 0
    capsys.readouterr()
    env = results.read("telemetry", tmp_path, quick=True)
    assert env.data["seconds"] == {"benchmark": 2.5}
    assert results.recorded_seconds(env) == 2.5
