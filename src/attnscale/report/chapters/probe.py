"""Report chapter: a real pretrained model's queries and keys against the seed's assumptions.

Reads ``probe/summary.json`` (written by ``attnscale probe``) and only draws it: heat maps per
layer × head of the Var(q·k) ratio and of the normalized entropy with and without the scale, the
per-layer table, and the striking heads.
"""

from __future__ import annotations

import functools
import math
import warnings

from attnscale.report.html import esc, figure_svg, number, table
from attnscale.report.text import localize

TITLE = {"en": "A real model: do its queries and keys obey the seed's assumptions?",
         "zh": "真实模型：它的 q 与 k 符合原文的假设吗？"}
KIND = "probe/minilm"
HOW_TO = "attnscale probe"

TEXT = {
    "intro": {
        "en": ("The seed assumes the d_k components of q and k are independent with mean 0 and variance 1, "
               "so that Var(q·k) = d_k. We captured every attention call of {model} ({layers} layers × "
               "{heads} heads, d_k = {d_k}, scale = {scale:.4g}) on {n} sequences ({tokens} tokens), padding "
               "left out, and measured how far that holds. A ratio Var(q·k) / (d_k σ_q² σ_k²) of 1 means "
               "the assumption's variance formula holds with the measured component variances."),
        "zh": ("原文假设 q 与 k 的 d_k 个分量相互独立、均值 0、方差 1，于是 Var(q·k) = d_k。我们截获了 {model}"
               "（{layers} 层 × {heads} 头，d_k = {d_k}，缩放 = {scale:.4g}）在 {n} 个序列（{tokens} 个词元，"
               "不计填充）上的每一次注意力计算，测量这一假设离现实多远。比值 Var(q·k) / (d_k σ_q² σ_k²) "
               "为 1 表示按实测分量方差，方差公式成立。"),
    },
    "check_ok": {
        "en": "Check: the probabilities rebuilt from the captured q, k, scale and mask equal the model's own "
              "to {diff:.1e} (tolerance {tol:g}).",
        "zh": "校验：由截获的 q、k、缩放与掩码重算的注意力概率与模型自身输出相差不超过 {diff:.1e}（容差 {tol:g}）。",
    },
    "check_failed": {
        "en": "Check FAILED: the captured attention does not reproduce the model's own probabilities "
              "(largest difference {diff:.2g}, tolerance {tol:g}); no statistics are shown.",
        "zh": "校验失败：截获的注意力无法重现模型自身的概率（最大差 {diff:.2g}，容差 {tol:g}），不显示统计。",
    },
    "split": {
        "en": ("The ratio splits exactly: ratio − 1 = uneven per-dimension variances + non-zero means + "
               "covariance across dimensions + q–k correlation (a ladder of ever fuller predictions; "
               "each part is what its departure adds to the ones before it). 'Uneven variances' can be "
               "negative: the pooled σ² also counts the spread of the per-dimension means, which the next "
               "step hands back as 'means'. 'Within' is the share of Var(q·k) inside rows, the only part "
               "softmax feels."),
        "zh": ("比值可精确分解：比值 − 1 = 各维方差不均 + 均值非零 + 维度间协方差 + q–k 相关（逐级完善的预测，"
               "每一项是该偏离在前几项之上增加的部分）。“方差不均”可以为负：合并计算的 σ² 也包含了各维均值的离散，"
               "下一步把这部分作为“均值”加回。“行内”是 Var(q·k) 落在行内的比例，也是 softmax 唯一能感到的部分。"),
    },
    "striking": {"en": "Striking heads (layer.head, value)", "zh": "值得注意的头（层.头，数值）"},
    "in_all": {"en": "{n} heads in all", "zh": "共 {n} 个头"},
    "ratio_title": {"en": "Var(q·k) / (d_k σ_q² σ_k²)", "zh": "Var(q·k) / (d_k σ_q² σ_k²)"},
    "ent_scaled": {"en": "entropy / ln n, model's scale", "zh": "熵 / ln n，模型自身缩放"},
    "ent_unscaled": {"en": "entropy / ln n, scale removed", "zh": "熵 / ln n，去掉缩放"},
    "head": {"en": "head", "zh": "头"},
    "layer": {"en": "layer", "zh": "层"},
    "alt_ratio": {"en": "Heat map per layer and head of the variance ratio",
                  "zh": "按层与头的热图：方差比值"},
    "caption_ratio": {"en": "Var(q·k) / (d_k σ_q² σ_k²) per layer (rows) and head (columns); 1 = the seed's "
                            "variance formula holds.",
                      "zh": "每层（行）每头（列）的 Var(q·k) / (d_k σ_q² σ_k²)；1 表示原文的方差公式成立。"},
    "alt_entropy": {"en": "Heat maps per layer and head of the normalized entropy with and without the scale",
                    "zh": "按层与头的热图：有与没有缩放时的归一化熵"},
    "caption_entropy": {"en": "Entropy / ln n of the model's rows (0 = one-hot, 1 = uniform), with its own "
                              "scale, {scale} (left), and with the scale removed (right).",
                        "zh": "模型各行的熵 / ln n（0 = 独热，1 = 均匀），左为模型自身的缩放 {scale}，右为去掉缩放。"},
}

# Per-layer table: (figure, English header, Chinese header).
COLUMNS = (
    ("ratio", "ratio", "比值"), ("part_uneven_variances", "uneven var.", "方差不均"),
    ("part_means", "means", "均值"), ("part_cross_dimension", "cross-dim.", "维间协方差"),
    ("part_correlation", "q–k corr.", "q–k 相关"), ("within_row_share", "within rows", "行内"),
    ("normalized_entropy", "H/ln n", "H/ln n"), ("normalized_entropy_unscaled", "H/ln n, unscaled", "H/ln n 不缩放"),
    ("max_weight", "max w", "最大权重"), ("max_weight_unscaled", "max w, unscaled", "最大权重 不缩放"),
    ("saturation_index", "saturation", "饱和指数"), ("saturation_index_unscaled", "sat., unscaled", "饱和 不缩放"),
    ("sink_any", "sink", "汇聚"), ("previous_token", "prev.", "前一词"), ("next_token", "next", "后一词"),
)


_t = functools.partial(localize, TEXT)


_fmt = number


def _heatmap(ax, fig, data, title: str, lang: str, cmap: str, limits, digits: int) -> None:
    import numpy as np

    vmin, vmax = limits
    image = ax.imshow(data, cmap=cmap, vmin=vmin, vmax=vmax, aspect="auto")
    for (i, j), value in np.ndenumerate(data):
        shade = (value - vmin) / (vmax - vmin) if vmax > vmin else 0.5
        dark = shade > 0.55 if cmap.endswith("_r") else shade < 0.55
        ax.text(j, i, f"{value:.{digits}f}", ha="center", va="center", fontsize=8,
                color="white" if dark else "#1d2330")
    ax.set_title(title)
    ax.set_xlabel(_t("head", lang))
    ax.set_ylabel(_t("layer", lang))
    ax.set_xticks(range(data.shape[1]))
    ax.set_yticks(range(data.shape[0]))
    fig.colorbar(image, ax=ax, shrink=0.9)


def heatmaps(result: dict, lang: str):
    """Two figures, layer × head: the variance ratio; normalized entropy with and without the scale."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt
    import numpy as np

    from attnscale.report.figures import RC

    ratio = np.asarray(result["per_head"]["ratio"], dtype=float)
    with plt.rc_context({**RC, "axes.grid": False}):
        fig_ratio, ax = plt.subplots(figsize=(7.5, 3.6), constrained_layout=True)
        # The colour scale starts at 1 (the seed's prediction) when every head is above it.
        _heatmap(ax, fig_ratio, ratio, _t("ratio_title", lang), lang, "magma_r",
                 (min(1.0, np.nanmin(ratio)), np.nanmax(ratio)), 1)
        fig_entropy, axes = plt.subplots(1, 2, figsize=(11, 3.6), constrained_layout=True)
        for ax, (figure, title) in zip(axes, [("normalized_entropy", "ent_scaled"),
                                               ("normalized_entropy_unscaled", "ent_unscaled")]):
            data = np.asarray(result["per_head"][figure], dtype=float)
            _heatmap(ax, fig_entropy, data, _t(title, lang), lang, "viridis", (0.0, 1.0), 2)
    return fig_ratio, fig_entropy


def _scale_text(scale: float, d_k: int) -> str:
    """The recorded scale, named 1/√d_k only when it is that number."""
    if d_k > 0 and math.isclose(scale, 1.0 / math.sqrt(d_k), rel_tol=1e-6):
        return f"{scale:.4g} = 1/√{d_k}"
    return f"{scale:.4g}"


def render(env, lang: str) -> str:
    result = {**env.data, "config": env.config}
    cfg, check = result["config"], result["check"]
    worst = max(check["max_abs_diff_per_layer"]) if check["max_abs_diff_per_layer"] else float("nan")
    intro = _t("intro", lang, model=cfg["model"], layers=len(result["layers"]), heads=result["n_heads"],
               d_k=result["d_k"], scale=result["scale"], n=cfg["n_sequences"], tokens=cfg["n_tokens"])
    parts = [f"<p>{esc(intro)}</p>"]
    if not check["passed"]:
        failed = _t("check_failed", lang, diff=worst, tol=check["tolerance"])
        parts.append(f'<div class="error-box" role="alert"><p>{esc(failed)}</p></div>')
        return "\n".join(parts)
    parts.append(f"<p>{esc(_t('check_ok', lang, diff=worst, tol=check['tolerance']))}</p>")
    with warnings.catch_warnings():
        # Chinese glyphs are missing from matplotlib's own font; the SVG keeps text and the browser sets it.
        warnings.filterwarnings("ignore", message="Glyph .* missing from font")
        fig_ratio, fig_entropy = heatmaps(result, lang)
        parts.append(figure_svg(fig_ratio, _t("alt_ratio", lang), _t("caption_ratio", lang)))
        parts.append(figure_svg(fig_entropy, _t("alt_entropy", lang),
                                _t("caption_entropy", lang, scale=_scale_text(result["scale"], result["d_k"]))))
    parts.append(f"<p>{esc(_t('split', lang))}</p>")
    header = [_t("layer", lang)] + [zh if lang == "zh" else en for _, en, zh in COLUMNS]
    per_layer = result["per_layer"]
    rows = [[str(i)] + [_fmt(per_layer[f][i]) for f, _, _ in COLUMNS if f in per_layer]
            for i in range(len(result["layers"]))]
    parts.append(table(header, rows, cls="numeric"))
    items = []
    by_kind: dict[str, list[dict]] = {}
    for entry in result.get("striking_heads", []):
        by_kind.setdefault(entry["what"], []).append(entry)
    for what, entries in by_kind.items():
        heads = ", ".join(f"{e['layer']}.{e['head']} ({e['value']:.2f})" for e in entries)
        counted = entries[0].get("of") or 0
        more = f" — {_t('in_all', lang, n=counted)}" if counted > len(entries) else ""
        items.append(f"<li>{esc(what)}: {esc(heads + more)}</li>")
    if items:
        parts.append(f"<p>{esc(_t('striking', lang))}</p><ul>{''.join(items)}</ul>")
    return "\n".join(parts)
