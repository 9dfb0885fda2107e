"""The report's data → figure functions: fed hand-made data, they must plot exactly that data (they
draw, they never estimate), in both languages. The hand-made data they are fed:
tests/helpers/report_data.py."""

from __future__ import annotations

import math

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from attnscale.i18n import language
from attnscale.report import figures, figures_beyond, narrow, plotting  # noqa: E402
from attnscale.report.seed import figure_function  # noqa: E402
from attnscale.report.plotting import figure_svg  # noqa: E402
from helpers.report_data import D_KS, fake_data, text_px  # noqa: E402


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
        fig = figures_beyond.phase(data)
    heat, curves = fig.axes[0], fig.axes[1]
    mesh = heat.collections[0]
    assert np.allclose(np.asarray(mesh.get_array()).ravel(), data["mc"]["16"] + data["mc"]["128"])
    assert list(heat.lines[-1].get_xdata()) == [2.35, 3.11]  # σ_c(n), as given
    assert data["mc"]["128"] in _lines_y(curves) and data["asymptote"]["128"] in _lines_y(curves, "--")


def test_broken_assumptions_plots_variance_per_unit_of_d_k():
    data = fake_data()["broken_assumptions"]
    fig = figures_beyond.broken_assumptions(data)
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
        ax = figures_beyond.ssmax(data["ssmax"]).axes[0]
    assert _lines_y(ax) == [data["ssmax"]["softmax"], data["ssmax"]["ssmax"]]
    ax = figures.error_vs_samples(data["error_vs_samples"]).axes[0]
    pts = data["error_vs_samples"]["points"]
    assert _lines_y(ax) == [[p["predicted"] for p in pts], [p["rms_error"] for p in pts]]
    assert "-0.49" in ax.get_legend().get_texts()[1].get_text()
    ax = figures_beyond.give_away(data["give_away"]).axes[0]
    assert _lines_y(ax) == [data["give_away"]["softmax_total_measured"], data["give_away"]["softmax1_total"]]


@pytest.mark.parametrize("block", list(fake_data()))
def test_every_figure_becomes_inline_svg_with_text_kept_as_text(block):
    data = fake_data()[block]
    with language("zh"):
        html = figure_svg(figure_function(block)(data), alt="alt", caption="cap")
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


@pytest.mark.slow
@pytest.mark.parametrize("name", FIGURES)
def test_every_figure_is_readable_on_a_desktop_and_on_a_phone(name):
    """The text of each figure, where the page shows it: the wide variant in the 736 px column (at
    most 130 px per inch drawn), the narrow one in a 420 px phone's 388 px column. Median ≥ 10 px,
    none under 8 px (the issue measured 3-5 px at 420 px before)."""
    import re

    html = plotting.responsive_figure(lambda: figure_function(name)(fake_data()[name]), name, "c", px_per_inch=130)
    wide, narrow = re.findall(r"<svg .*?</svg>", html, flags=re.S)
    max_px = float(re.search(r"--fig-max:(\d+)px", html).group(1))
    for svg, column, cap in ((wide, 736, max_px), (narrow, 388, None)):
        sizes = text_px(svg, column, cap)
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
