"""The report's data → figure functions: fed hand-made data, they must plot exactly that data (they
draw, they never estimate), in both languages. Also home of the hand-made verification report the
other report tests use (``fake_verify``)."""

from __future__ import annotations

import math

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from attnscale.i18n import language
from attnscale.claims.result import VERDICTS  # noqa: E402
from attnscale.report import figures, narrow, plotting  # noqa: E402
from attnscale.report.plotting import figure_svg  # noqa: E402

D_KS = [1, 4, 16, 64, 256]


def fake_data() -> dict:
    """Every figure block, in the shapes the verification engine writes, with made-up numbers that
    no estimator would produce (so a figure that recomputes instead of plotting is caught)."""

    def fam(f):
        return {
            "d_k": D_KS,
            "estimate": [d * f for d in D_KS],
            "ci_low": [d * f * 0.9 for d in D_KS],
            "ci_high": [d * f * 1.1 for d in D_KS],
            "n_samples": [1000] * 5,
            "converged": [True] * 5,
            "scaled": {"estimate": [f] * 5, "ci_low": [f - 0.05] * 5, "ci_high": [f + 0.05] * 5},
        }

    hist = {}
    for d, counts in ((4, [1, 5, 9, 5, 1]), (64, [2, 6, 7, 6, 2]), (512, [3, 5, 6, 5, 3])):
        edges = [-2.5 * math.sqrt(d) + i * math.sqrt(d) for i in range(6)]
        hist[str(d)] = {
            "d_k": d,
            "n_samples": sum(counts),
            "edges_unscaled": edges,
            "edges_scaled": [e / math.sqrt(d) for e in edges],
            "counts": counts,
            "outside": 0,
            "std_unscaled": 1.0,
            "std_scaled": 1.0,
        }
    examples = {
        "[14, 10, 12]": {
            "logits": [14.0, 10.0, 12.0],
            "weights": [0.7, 0.1, 0.2],
            "logits_scaled": [1.75, 1.25, 1.5],
            "weights_scaled": [0.4, 0.3, 0.3],
            "scale": 0.125,
        },
        "[50, 10, 5]": {
            "logits": [50.0, 10.0, 5.0],
            "weights": [1.0, 0.0, 0.0],
            "logits_scaled": [6.25, 1.25, 0.625],
            "weights_scaled": [0.98, 0.01, 0.01],
            "scale": 0.125,
        },
        "[5, 1, 0.5]": {
            "logits": [5.0, 1.0, 0.5],
            "weights": [0.9, 0.06, 0.04],
            "logits_scaled": [0.625, 0.125, 0.0625],
            "weights_scaled": [0.5, 0.25, 0.25],
            "scale": 0.125,
        },
    }

    def summary(q10, median, q90, mean=None):
        return {
            "median": [median] * 5,
            "median_ci": [[median - 0.01, median + 0.01]] * 5,
            "q10": [q10] * 5,
            "q90": [q90] * 5,
            "mean": [mean if mean is not None else median] * 5,
            "mean_ci": [[median - 0.02, median + 0.02]] * 5,
        }

    def rows(figs):
        return {
            "d_k": D_KS,
            "rows": 300,
            "by_n": {
                n: {mode: {f: summary(*vals[mode]) for f, vals in figs.items()} for mode in ("unscaled", "scaled")}
                for n in ("16", "128")
            },
        }

    sigmas = [0.5, 1.0, 2.0, 3.0]
    return {
        "variance_vs_dk": {"gaussian": fam(1.0), "uniform": fam(1.02)},
        "dot_histograms": hist,
        "seed_softmax_examples": examples,
        "saturation": rows(
            {
                "max_weight": {"unscaled": (0.1, 0.8, 0.9), "scaled": (0.1, 0.3, 0.5)},
                "entropy": {"unscaled": (0.1, 0.5, 2.0), "scaled": (1.0, 2.0, 2.5)},
                "normalized_entropy": {"unscaled": (0.05, 0.2, 0.7), "scaled": (0.6, 0.8, 0.9)},
            }
        ),
        "jacobian": rows({"jacobian_frobenius": {"unscaled": (1e-9, 1e-3, 0.3, 0.05), "scaled": (0.2, 0.4, 0.5)}}),
        "phase": {
            "sigma": sigmas,
            "n": [16, 128],
            "mc": {"16": [0.9, 0.7, 0.3, 0.1], "128": [0.95, 0.8, 0.5, 0.2]},
            "mc_ci": {
                "16": [[v - 0.01, v + 0.01] for v in (0.9, 0.7, 0.3, 0.1)],
                "128": [[v - 0.01, v + 0.01] for v in (0.95, 0.8, 0.5, 0.2)],
            },
            "asymptote": {"16": [0.95, 0.8, 0.2, 0.0], "128": [0.97, 0.9, 0.6, 0.1]},
            "boundary": {"16": 2.35, "128": 3.11},
            "rows": {"16": 2048, "128": 256},
        },
        "broken_assumptions": [
            {"case": "non-zero means", "d_k": 64, "estimate": 96.0, "ci_low": 90.0, "ci_high": 102.0, "formula": 100.0},
            {
                "case": "correlated q and k",
                "d_k": 512,
                "estimate": 640.0,
                "ci_low": 600.0,
                "ci_high": 680.0,
                "formula": 650.0,
            },
        ],
        "ssmax": {
            "n": [10, 100, 1000, 100000],
            "softmax": [0.94, 0.6, 0.13, 0.0015],
            "ssmax": [0.99, 0.98, 0.97, 0.96],
            "s": 0.43,
        },
        "error_vs_samples": {
            "d_k": 64,
            "replicates": 30,
            "slope": -0.49,
            "points": [
                {"n_samples": n, "rms_error": 90 / n**0.5 * 1.1, "predicted": 90 / n**0.5, "mean_error": 0.1}
                for n in (64, 256, 1024)
            ],
        },
        "give_away": {
            "n": 16,
            "logit": [-10.0, 0.0, 10.0],
            "softmax_total_measured": [1.0, 1.0, 0.9999999],
            "softmax1_total": [0.0007, 0.94, 0.99999],
        },
    }


def fake_claims() -> list[dict]:
    chapters = (
        "formula",
        "without_scaling",
        "why_grows",
        "variance",
        "proof",
        "softmax_large",
        "why_sqrt",
        "real_numbers",
        "faq",
        "beyond",
    )
    verdicts = ("holds", "holds", "fails", "seed number wrong")
    out = []
    for i, ch in enumerate(chapters):
        for j in range(2):
            v = verdicts[(i + j) % 4]
            out.append(
                {
                    "id": f"T{i}.{j}",
                    "chapter": ch,
                    "claim_en": f"claim {i}.{j} about d_k in {ch}",
                    "claim_zh": f"论断 {i}.{j}：{ch}",
                    "seed_value": "0.867" if j else None,
                    "method": "Monte Carlo" if j else "exact arithmetic",
                    "expected": "d_k",
                    "measured": f"{63.9 + i:.1f}",
                    "estimate": 63.9 + i,
                    "ci_low": 63.0 + i,
                    "ci_high": 64.8 + i,
                    "n_samples": 123456 if j else None,
                    "verdict": v,
                    "correct_value": "0.868" if v == "seed number wrong" else None,
                    "note": "<b>not bold</b>" if i == 0 else "",
                }
            )
    return out


def fake_verify() -> dict:
    """A VerifyReport.to_dict() made by hand."""
    claims = fake_claims()
    return {
        "config": {
            "seed": 0,
            "quick": True,
            "rel_ci_target": 0.01,
            "confidence": 0.99,
            "max_draws": None,
            "groups": None,
        },
        "environment": {
            "attnscale": "0.1.0",
            "python": "3.x-test",
            "numpy": "9.9-test",
            "torch": None,
            "matplotlib": "3.x",
            "platform": "TestOS",
            "machine": "x86_64",
            "processor": None,
            "cpu_count": 2,
        },
        "counts": {v: sum(c["verdict"] == v for c in claims) for v in VERDICTS},
        "claims": claims,
        "data": fake_data(),
        "timings": {"total": 1.5},
    }


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def _errorbar_points(ax):
    """(x, y) of every errorbar's markers on ``ax``."""
    out = []
    for container in ax.containers:
        line = container.lines[0]
        out.append((list(line.get_xdata()), list(line.get_ydata())))
    return out


@pytest.mark.parametrize("lang", ["en", "zh"], indirect=True)
def test_variance_plots_the_given_estimates_and_the_slope_one_line(lang):
    data = fake_data()["variance_vs_dk"]
    fig = figures.variance_vs_dk(data)
    left, right = fig.axes[:2]
    assert left.get_xscale() == "log" and left.get_yscale() == "log"
    ref = left.lines[0]
    assert list(ref.get_xdata()) == D_KS and list(ref.get_ydata()) == D_KS  # Var = d_k, slope 1
    assert list(right.lines[0].get_ydata()) == [1.0] * 5  # Var = 1 after scaling
    points = _errorbar_points(left)
    assert [p[1] for p in points] == [data["gaussian"]["estimate"], data["uniform"]["estimate"]]
    assert [p[1] for p in _errorbar_points(right)] == [[1.0] * 5, [1.02] * 5]
    # Side by side, but at the right d_k (within 10%).
    for xs, _ in points:
        assert np.allclose(xs, D_KS, rtol=0.1)


def test_histograms_plot_the_given_counts_as_densities():
    data = fake_data()["dot_histograms"]
    fig = figures.dot_histograms(data)
    left, right = fig.axes[:2]
    for ax, which in ((left, "unscaled"), (right, "scaled")):
        stairs = [p for p in ax.patches if hasattr(p, "get_data")]
        assert len(stairs) == 3
        for patch, h in zip(stairs, data.values()):
            values, edges = patch.get_data()[:2]
            expected_edges = h[f"edges_{which}"]
            width = expected_edges[1] - expected_edges[0]
            assert np.allclose(edges, expected_edges)
            assert np.allclose(values, np.array(h["counts"]) / (h["n_samples"] * width))
    # the scaled densities integrate to the share of samples inside the bins (all of them here)
    v, e = [p for p in right.patches if hasattr(p, "get_data")][0].get_data()[:2]
    assert math.isclose(float(np.sum(v * np.diff(e))), 1.0)


def test_seed_examples_bars_are_the_given_weights():
    data = fake_data()["seed_softmax_examples"]
    fig = figures.seed_softmax_examples(data)
    assert len(fig.axes) == 3
    for ax, ex in zip(fig.axes, data.values()):
        heights = [round(b.get_height(), 12) for b in ax.patches]
        assert heights == ex["weights"] + ex["weights_scaled"]
        labels = [t.get_text() for t in ax.get_xticklabels()]
        assert labels == [f"{z:g}" for z in ex["logits"]]
        assert any("÷ 8" in t.get_text() for t in fig.axes[-1].get_legend().get_texts())


def _lines_y(ax, ls=None):
    return [list(line.get_ydata()) for line in ax.lines if ls is None or line.get_linestyle() == ls]


def test_saturation_draws_medians_and_bands_per_n_and_rule():
    data = fake_data()["saturation"]
    fig = figures.saturation(data)
    maxw, ent = fig.axes[:2]
    expected = [data["by_n"][n][mode]["max_weight"]["median"] for n in data["by_n"] for mode in ("unscaled", "scaled")]
    assert _lines_y(maxw) == expected
    assert _lines_y(ent) == [
        data["by_n"][n][mode]["normalized_entropy"]["median"] for n in data["by_n"] for mode in ("unscaled", "scaled")
    ]
    assert len(maxw.collections) == 4  # one quantile band per (n, rule)
    band = maxw.collections[0].get_paths()[0].vertices[:, 1]
    assert min(band) == pytest.approx(0.1) and max(band) == pytest.approx(0.9)  # q10 … q90, as given


def test_jacobian_draws_medians_and_the_unscaled_mean_on_log_axes():
    data = fake_data()["jacobian"]
    fig = figures.jacobian(data)
    ax = fig.axes[0]
    assert ax.get_yscale() == "log"
    medians = [data["by_n"][n][m]["jacobian_frobenius"]["median"] for n in data["by_n"] for m in ("unscaled", "scaled")]
    assert [y for y in _lines_y(ax) if y in medians] == medians
    assert data["by_n"]["16"]["unscaled"]["jacobian_frobenius"]["mean"] in _lines_y(ax, ":")
    assert ax.get_ylim()[0] == pytest.approx(1e-9 / 3)  # the smallest value given, not a made-up floor


def test_phase_draws_the_grid_the_boundary_and_the_asymptote():
    data = fake_data()["phase"]
    with language("zh"):
        fig = figures.phase(data)
    heat, curves = fig.axes[0], fig.axes[1]
    mesh = heat.collections[0]
    assert np.allclose(np.asarray(mesh.get_array()).ravel(), data["mc"]["16"] + data["mc"]["128"])
    assert list(heat.lines[-1].get_xdata()) == [2.35, 3.11]  # σ_c(n), as given
    assert data["mc"]["128"] in _lines_y(curves) and data["asymptote"]["128"] in _lines_y(curves, "--")


def test_broken_assumptions_plots_variance_per_unit_of_d_k():
    data = fake_data()["broken_assumptions"]
    fig = figures.broken_assumptions(data)
    ax = fig.axes[0]
    xs = [float(x) for x in ax.containers[0].lines[0].get_xdata()]
    assert xs == [96.0 / 64, 640.0 / 512]  # Var(q·k)/d_k = Var(q·k/√d_k)
    formula_x = [float(p[0]) for p in ax.collections[0].get_offsets()]
    assert formula_x == [100.0 / 64, 650.0 / 512]
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert sorted(labels) == ["correlated q and k, dₖ = 512", "non-zero means, dₖ = 64"]


def test_ssmax_error_and_give_away_plot_their_values():
    data = fake_data()
    with language("zh"):
        ax = figures.ssmax(data["ssmax"]).axes[0]
    assert _lines_y(ax) == [data["ssmax"]["softmax"], data["ssmax"]["ssmax"]]
    ax = figures.error_vs_samples(data["error_vs_samples"]).axes[0]
    pts = data["error_vs_samples"]["points"]
    assert _lines_y(ax) == [[p["predicted"] for p in pts], [p["rms_error"] for p in pts]]
    assert "-0.49" in ax.get_legend().get_texts()[1].get_text()
    ax = figures.give_away(data["give_away"]).axes[0]
    assert _lines_y(ax) == [data["give_away"]["softmax_total_measured"], data["give_away"]["softmax1_total"]]


@pytest.mark.parametrize("block", list(fake_data()))
def test_every_figure_becomes_inline_svg_with_text_kept_as_text(block):
    data = fake_data()[block]
    with language("zh"):
        html = figure_svg(getattr(figures, block)(data), alt="alt", caption="cap")
    assert html.startswith('<figure class="fig"><svg ') and "</svg>" in html
    assert "<text" in html  # svg.fonttype = none: the browser sets the (Chinese) text
    # Rasterised parts (a colour bar) are embedded as data: URIs, never linked.
    assert 'href="http' not in html and "href='http" not in html


# --- readable at 1280 px and at 420 px ------------------------------------------------------------

FIGURES = (
    "variance_vs_dk",
    "dot_histograms",
    "seed_softmax_examples",
    "saturation",
    "jacobian",
    "phase",
    "broken_assumptions",
    "ssmax",
    "error_vs_samples",
    "give_away",
)


def _text_px(svg: str, column_px: float, max_px: float | None = None) -> list[float]:
    """The size in CSS px of every text of an inline SVG shown ``column_px`` wide (or ``max_px``)."""
    import re

    view_w = float(re.search(r'viewBox="[\d.]+ [\d.]+ ([\d.]+) [\d.]+"', svg).group(1))
    shown = min(column_px, max_px) if max_px else column_px
    return [float(s) * shown / view_w for s in re.findall(r"font-size: ?([\d.]+)px", svg)]


def figures_readable_on_a_phone(html: str) -> None:
    """Every figure of a chapter has a phone's drawing, whose text is at least ~8 px (median ≥ 10)
    in a 420 px phone's 388 px column."""
    import re
    import statistics

    shown = re.findall(r'<figure class="fig[^"]*".*?</figure>', html, flags=re.S)
    assert shown and all("fig-responsive" in f for f in shown)
    for f in shown:
        narrow = re.search(r'<div class="fig-narrow">(<svg .*?</svg>)', f, flags=re.S).group(1)
        sizes = _text_px(narrow, 388)
        assert sizes and min(sizes) >= 8 and statistics.median(sizes) >= 10, sorted(sizes)[:5]


@pytest.mark.parametrize("name", FIGURES)
def test_every_figure_is_readable_on_a_desktop_and_on_a_phone(name):
    """The text of each figure, where the page shows it: the wide variant in the 736 px column (at
    most 130 px per inch drawn), the narrow one in a 420 px phone's 388 px column. Median ≥ 10 px,
    none under 8 px (the issue measured 3-5 px at 420 px before)."""
    import re

    html = plotting.responsive_figure(lambda: getattr(figures, name)(fake_data()[name]), name, "c", px_per_inch=130)
    wide, narrow = re.findall(r"<svg .*?</svg>", html, flags=re.S)
    max_px = float(re.search(r"--fig-max:(\d+)px", html).group(1))
    for svg, column, cap in ((wide, 736, max_px), (narrow, 388, None)):
        sizes = _text_px(svg, column, cap)
        assert sizes and min(sizes) >= 8 and float(np.median(sizes)) >= 10, (name, column, sorted(sizes)[:5])


def test_narrow_variant_stacks_side_by_side_panels_and_keeps_the_callers_axes_order():
    seen = {}

    def draw():
        with plotting.style() as p:
            fig, axes = p.subplots(1, 2, figsize=(7.6, 3.5), squeeze=False, gridspec_kw={"width_ratios": [2, 1]})
            axes[0][0].set_title("first")
            axes[0][1].set_title("second")
            fig.canvas.draw()
            seen.setdefault("shapes", []).append(np.shape(axes))
            seen.setdefault("boxes", []).append([a.get_position().bounds for a in axes[0]])
            seen.setdefault("widths", []).append(fig.get_figwidth())
            return fig

    html = plotting.responsive_figure(draw, "alt", "a caption")
    assert seen["shapes"] == [(1, 2), (1, 2)]
    (w0, w1), (n0, n1) = seen["boxes"]
    assert abs(w0[1] - w1[1]) < 1e-6 and w0[0] < w1[0]  # wide: side by side, same row
    assert abs(n0[0] - n1[0]) < 0.05 and n0[1] > n1[1]  # narrow: one above the other
    assert n0[3] > 1.5 * n1[3]  # the width ratios became height ratios
    assert seen["widths"][1] == narrow.NARROW_WIDTH_IN < seen["widths"][0]
    assert html.count("<svg ") == 2 and 'class="fig-wide"' in html and 'class="fig-narrow"' in html
    assert html.count("<figcaption>a caption</figcaption>") == 1


def test_narrow_variant_stacks_grids_in_one_column_and_squeezes_like_pyplot():
    with narrow.drawing_narrow(), plotting.style() as p:
        _, grid = p.subplots(2, 3, sharex="col", sharey="row")
        _, row = p.subplots(1, 3)
        _, one = p.subplots()
        _, shared = p.subplots(1, 2, sharey=True)
    assert grid.shape == (2, 3) and row.shape == (3,) and not isinstance(one, np.ndarray)
    # the caller's sharing holds: y shared side by side stays y shared when stacked; "col" follows the columns
    assert shared[0].get_shared_y_axes().joined(shared[0], shared[1])
    assert not shared[0].get_shared_x_axes().joined(shared[0], shared[1])
    assert grid[0][1].get_shared_x_axes().joined(grid[0][1], grid[1][1])
    assert not grid[0][0].get_shared_x_axes().joined(grid[0][0], grid[0][1])
    assert grid[1][0].get_shared_y_axes().joined(grid[1][0], grid[1][2])
    assert not grid[0][0].get_shared_y_axes().joined(grid[0][0], grid[1][0])
    # a grid of rows and columns becomes one column of full-width panels, the caller's columns in turn
    boxes = {(r, c): grid[r][c].get_position() for r in range(2) for c in range(3)}
    assert len({round(b.x0, 6) for b in boxes.values()}) == 1
    order = sorted(boxes, key=lambda rc: -boxes[rc].y0)
    assert order == [(0, 0), (1, 0), (0, 1), (1, 1), (0, 2), (1, 2)]


def test_stacked_panels_keep_the_title_and_y_label_of_their_grid_place():
    import re

    def draw():
        with plotting.style() as p:
            fig, axes = p.subplots(2, 2, figsize=(8.0, 6.0), squeeze=False, constrained_layout=True)
            for c, title in enumerate(("left column", "right column")):
                axes[0][c].set_title(title)
            for r, ylabel in enumerate(("top measure", "bottom measure")):
                axes[r][0].set_ylabel(ylabel)
            for ax in axes.ravel():
                ax.plot([0, 1], [0, 1])
            return fig

    html = plotting.responsive_figure(draw, "alt")
    wide, narrow = re.findall(r"<svg .*?</svg>", html, flags=re.S)
    count = lambda svg, words: svg.count(f">{words}</text>")  # noqa: E731  (text stays SVG text)
    assert [count(wide, w) for w in ("left column", "right column", "top measure", "bottom measure")] == [1, 1, 1, 1]
    assert [count(narrow, w) for w in ("left column", "right column", "top measure", "bottom measure")] == [2, 2, 2, 2]


def test_table_with_details_keeps_the_summary_short_and_the_full_table_behind_details():
    from attnscale.report.html import table_with_details

    rows = [[f"r{i}", i] for i in range(30)]
    with language("zh"):
        html = table_with_details(["name", "value"], rows, summary_rows=[rows[7]])
    short, full = html.split("<details", 1)
    assert short.count("<tr>") == 2 and "r7" in short  # header and the one summary row
    assert full.count("<tr>") == 31 and "全部 30 行" in full
    assert table_with_details(["a"], [[1], [2]]).count("<details") == 0
    default = table_with_details(["a"], [[i] for i in range(20)], limit=5)
    assert default.split("<details", 1)[0].count("<tr>") == 6 and "All 20 rows" in default
