"""Report chapter: a real pretrained model's queries and keys against the seed's assumptions.

Renders a probe result (``attnscale probe``; kind ``probe/minilm`` here, ``probe/smollm2`` in
:mod:`attnscale.report.chapters.probe_smollm2`): heat maps per layer × head, the per-layer table and
the striking heads. Every number and every choice of words comes from ``env.data`` (its
``analysis`` block); nothing is computed here.
"""

from __future__ import annotations

import functools
import math

from attnscale.report import figures
from attnscale.report.html import esc, figure_svg, number, table
from attnscale.report.text import localize

KIND = "probe/minilm"
TITLE = {"en": "A real encoder: do its queries and keys obey the seed's assumptions?",
         "zh": "真实编码器：它的 q 与 k 符合原文的假设吗？"}
HOW_TO = "attnscale probe --model minilm"

TEXT = {
    "intro": {
        "en": ("The seed assumes the d_k components of q and k are independent with mean 0 and variance 1, so that "
               "Var(q·k) = d_k. We captured every attention call of {model} ({layers} layers × {heads}, d_k = {d_k}, "
               "scale = {scale}, {kind}) on {n} sequences ({tokens} tokens), padding left out, taking q and k as "
               "the softmax sees them{rope}, and measured how far that holds."),
        "zh": ("原文假设 q 与 k 的 d_k 个分量相互独立、均值 0、方差 1，于是 Var(q·k) = d_k。我们截获了 {model}（{layers} 层 × "
               "{heads}，d_k = {d_k}，缩放 = {scale}，{kind}）在 {n} 个序列（{tokens} 个词元，不计填充）上的每一次注意力计算，"
               "取 softmax 实际看到的 q 与 k{rope}，测量这一假设离现实多远。"),
    },
    "heads_same": {"en": "{n} heads", "zh": "{n} 个头"},
    "heads_gqa": {"en": "{n} query heads sharing {kv} key/value heads", "zh": "{n} 个查询头共享 {kv} 个键/值头"},
    "encoder": {"en": "bidirectional", "zh": "双向"},
    "decoder": {"en": "causal: only the pairs a query may attend count", "zh": "因果：只计查询可关注的词对"},
    "rope": {"en": " (after the rotary embedding)", "zh": "（旋转位置编码之后）"},
    "weights_note": {"en": "Note: {note}.", "zh": "注意（权重）：{note}。"},
    "check_ok": {
        "en": "Check: the probabilities rebuilt from the captured q, k, scale and mask equal the model's own "
              "to {diff} on every one of {rows} rows (tolerance {tol}); every figure below rests on it.",
        "zh": "校验：由截获的 q、k、缩放与掩码重算的注意力概率，在全部 {rows} 行上与模型自身输出相差不超过 {diff}（容差 {tol}）；"
              "下面每个数字都以此为前提。",
    },
    "check_failed": {
        "en": "Check FAILED: the captured attention does not reproduce the model's own probabilities "
              "(largest difference {diff}, tolerance {tol}); no statistics are shown.",
        "zh": "校验失败：截获的注意力无法重现模型自身的概率（最大差 {diff}，容差 {tol}），不显示统计。",
    },
    "weighting": {
        "en": ("Two weightings. Pair-weighted moments count a token once per attended pair it is in (the split "
               "below is exact only for them); token-weighted ones count each token once. Both ratios divide the "
               "same Var(q·k) over attended pairs by d_k σ_q² σ_k²."),
        "zh": "两种加权。按词对加权的矩把每个词元按其参与的词对数计数（下面的分解只对它精确）；按词元加权则每个词元计一次。"
              "两个比值的分子都是所关注词对上的同一个 Var(q·k)，分母为 d_k σ_q² σ_k²。",
    },
    "ratio_all_above": {"en": "All {n} heads have a larger Var(q·k) than the iid prediction (pair-weighted ratio "
                              "{lo} to {hi}, median {med}).",
                        "zh": "全部 {n} 个头的 Var(q·k) 都大于独立同分布的预测（按词对加权比值 {lo} 到 {hi}，中位数 {med}）。"},
    "ratio_all_below": {"en": "All {n} heads have a smaller Var(q·k) than the iid prediction (pair-weighted ratio "
                              "{lo} to {hi}, median {med}).",
                        "zh": "全部 {n} 个头的 Var(q·k) 都小于独立同分布的预测（按词对加权比值 {lo} 到 {hi}，中位数 {med}）。"},
    "ratio_mixed": {"en": "{above} of {n} heads have a larger Var(q·k) than the iid prediction and {below} a smaller "
                          "one (pair-weighted ratio {lo} to {hi}, median {med}).",
                    "zh": "{n} 个头中 {above} 个的 Var(q·k) 大于独立同分布的预测，{below} 个小于它（按词对加权比值 {lo} 到 {hi}，"
                          "中位数 {med}）。"},
    "token_same_top": {"en": "Token-weighted, the ratio runs from {lo} to {hi} (heads differ by up to {diff}); the "
                             "largest head is the same, {top}.",
                       "zh": "按词元加权，比值从 {lo} 到 {hi}（各头最多相差 {diff}）；最大的头相同，为 {top}。"},
    "token_other_top": {"en": "Token-weighted, the ratio runs from {lo} to {hi} (heads differ by up to {diff}), and "
                              "the two weightings rank heads differently: the largest is {top} by pairs, {top_t} by "
                              "tokens.",
                        "zh": "按词元加权，比值从 {lo} 到 {hi}（各头最多相差 {diff}），两种加权给出的排序不同：按词对最大的是 {top}，"
                              "按词元最大的是 {top_t}。"},
    "sinks_some": {"en": "{k} of {n} heads put more than half of their weight on the first token (up to {hi}).",
                   "zh": "{n} 个头中有 {k} 个把一半以上的权重放在第一个词元上（最多 {hi}）。"},
    "sinks_none": {"en": "No head puts more than half of its weight on the first token (at most {hi}).",
                   "zh": "没有一个头把一半以上的权重放在第一个词元上（最多 {hi}）。"},
    "bos_absent": {"en": "The text holds no BOS token (the tokenizer adds none), so there is no BOS sink to show.",
                   "zh": "文本中没有 BOS 词元（分词器不添加），因此没有 BOS 汇聚可示。"},
    "frozen": {"en": "{k} of {n} heads would be frozen (saturation index ≥ 1) with the scale removed, though not "
                     "with it; the median head's entropy / ln n falls from {h} to {h_u} without the scale.",
               "zh": "{n} 个头中有 {k} 个在去掉缩放后会冻结（饱和指数 ≥ 1），而有缩放时不会；各头熵 / ln n 的中位数从 {h} 降到 {h_u}。"},
    "fp16_fits": {"en": "Float16 margin: the largest |logit| is {s} at the model's scale and {u} with the scale removed; "
                        "float16 holds up to 65504, so both fit ({m} and {m_u} to spare).",
                  "zh": "float16 余量：最大的 |logit| 在模型缩放下为 {s}，去掉缩放为 {u}；float16 最大可表示 65504，两者都放得下"
                        "（余量 {m} 与 {m_u}）。"},
    "fp16_over": {"en": "Float16 margin: the largest |logit| is {s} at the model's scale but {u} with the scale removed, "
                        "beyond float16's 65504.",
                  "zh": "float16 余量：最大的 |logit| 在模型缩放下为 {s}，去掉缩放后为 {u}，超出 float16 的 65504。"},
    "split": {
        "en": ("The pair-weighted ratio splits exactly: ratio − 1 = uneven per-dimension variances + non-zero means + "
               "covariance across dimensions + q–k correlation (a ladder of ever fuller predictions). 'Within rows' is "
               "the share of Var(q·k) inside rows, the only part softmax feels. Row figures are over rows with two or "
               "more keys."),
        "zh": ("按词对加权的比值可精确分解：比值 − 1 = 各维方差不均 + 均值非零 + 维度间协方差 + q–k 相关（逐级完善的预测）。"
               "“行内”是 Var(q·k) 落在行内的比例，也是 softmax 唯一能感到的部分。行指标只计含两个及以上键的行。"),
    },
    "striking": {"en": "Striking heads (layer.head, value)", "zh": "值得注意的头（层.头，数值）"},
    "in_all": {"en": "{n} heads in all", "zh": "共 {n} 个头"},
    "ratio_title": {"en": "Var(q·k) / iid prediction (pairs)", "zh": "Var(q·k) / 独立同分布预测（词对）"},
    "sink_title": {"en": "weight on the first token", "zh": "第一个词元上的权重"},
    "ent_scaled": {"en": "entropy / ln n, model's scale", "zh": "熵 / ln n，模型自身缩放"},
    "ent_unscaled": {"en": "entropy / ln n, scale removed", "zh": "熵 / ln n，去掉缩放"},
    "head": {"en": "head", "zh": "头"},
    "layer": {"en": "layer", "zh": "层"},
    "alt_ratio": {"en": "Heat map per layer and head of the variance ratio", "zh": "按层与头的热图：方差比值"},
    "caption_ratio": {"en": "Var(q·k) / (d_k σ_q² σ_k²), pair-weighted, per layer (rows) and head (columns); 1 = the "
                            "seed's variance formula holds.",
                      "zh": "每层（行）每头（列）按词对加权的 Var(q·k) / (d_k σ_q² σ_k²)；1 表示原文的方差公式成立。"},
    "alt_sink": {"en": "Heat map per layer and head of the weight on the first token",
                 "zh": "按层与头的热图：第一个词元上的权重"},
    "caption_sink": {"en": "The mean weight a row puts on the sequence's first token (the attention sink), per layer "
                           "and head.",
                     "zh": "每行放在序列第一个词元上的平均权重（注意力汇聚），按层与头。"},
    "alt_entropy": {"en": "Heat map per layer and head of the normalized entropy with the model's scale",
                    "zh": "按层与头的热图：模型自身缩放下的归一化熵"},
    "caption_entropy": {"en": "Entropy / ln n of the rows (0 = one-hot, 1 = uniform) with the model's scale, {scale}.",
                        "zh": "模型自身缩放 {scale} 下各行的熵 / ln n（0 = 独热，1 = 均匀）。"},
    "alt_entropy_unscaled": {"en": "Heat map per layer and head of the normalized entropy with the scale removed",
                             "zh": "按层与头的热图：去掉缩放后的归一化熵"},
    "caption_entropy_unscaled": {"en": "The same rows' entropy / ln n with the scale removed (logits q·k).",
                                 "zh": "同样各行在去掉缩放（logits 为 q·k）后的熵 / ln n。"},
}

# Per-layer table: (figure, English header, Chinese header); figures the result lacks are left out.
COLUMNS = (
    ("ratio_pair", "ratio (pairs)", "比值（词对）"), ("ratio_token", "ratio (tokens)", "比值（词元）"),
    ("part_uneven_variances", "uneven var.", "方差不均"), ("part_means", "means", "均值"),
    ("part_cross_dimension", "cross-dim.", "维间协方差"), ("part_correlation", "q–k corr.", "q–k 相关"),
    ("within_row_share", "within rows", "行内"), ("normalized_entropy", "H/ln n", "H/ln n"),
    ("normalized_entropy_unscaled", "H/ln n, unscaled", "H/ln n 不缩放"), ("max_weight", "max w", "最大权重"),
    ("max_weight_unscaled", "max w, unscaled", "最大权重 不缩放"), ("sink_first", "first token", "首词元"),
    ("previous_token", "prev.", "前一词"), ("next_token", "next", "后一词"),
)

_t = functools.partial(localize, TEXT)


def _cell_text(value: float, digits: int) -> str:
    text = f"{value:.{digits}f}"
    return text[1:] if text.startswith("0.") else text       # ".81": narrow enough for a phone


def heatmap(grid, title: str, lang: str, cmap: str, limits, digits: int):
    """One layer × head heat map, sized to be read on a phone and on a desktop alike (one panel per
    figure, the value in each cell, a colour bar). ``grid``: lists of layers × heads, None = missing."""
    import numpy as np

    data = np.array([[math.nan if v is None else v for v in row] for row in grid], dtype=float)
    n_layers, n_heads = data.shape
    with figures.style() as plt:
        fig, ax = plt.subplots(figsize=(4.6, max(2.6, 0.2 * n_layers + 1.2)), constrained_layout=True)
        image = ax.imshow(data, cmap=cmap, vmin=limits[0], vmax=limits[1], aspect="auto", interpolation="nearest")
        for (i, j), value in np.ndenumerate(data):
            if math.isfinite(value):
                shade = (value - limits[0]) / (limits[1] - limits[0]) if limits[1] > limits[0] else 0.5
                dark = shade > 0.55 if cmap.endswith("_r") else shade < 0.55
                ax.text(j, i, _cell_text(value, digits), ha="center", va="center", fontsize=6.5,
                        color="white" if dark else "#1d2330")
        ax.set_title(title)
        ax.set_xlabel(_t("head", lang))
        ax.set_ylabel(_t("layer", lang))
        ax.grid(False)
        ax.set_xticks(range(n_heads))
        ax.set_yticks(range(0, n_layers, 1 if n_layers <= 12 else 2))
        fig.colorbar(image, ax=ax, shrink=0.85, pad=0.02)
    return fig


def head_grid(data: dict, figure: str) -> list[list]:
    """``data["heads"]`` (one dict per layer × head) laid out as a layer × head grid; None = missing."""
    n_layers, n_heads = data["model"]["n_layers"], data["model"]["n_heads_q"]
    grid = [[None] * n_heads for _ in range(n_layers)]
    for row in data["heads"]:
        grid[row["layer"]][row["head"]] = row.get(figure)
    return grid


def heatmaps(data: dict, lang: str) -> list[tuple[object, str, str]]:
    """(figure, alt, caption) for the ratio, the first-token weight, and the entropy with and without
    the scale, each per layer × head."""
    a = data["analysis"]
    # The ratio's colour scale includes 1 (the seed's prediction).
    ratio_limits = (min(1.0, a["ratio_pair"]["min"]), max(1.0, a["ratio_pair"]["max"]))
    scale = _scale_text(data["model"]["scale"], data["model"]["d_k"])
    return [
        (heatmap(head_grid(data, "ratio_pair"), _t("ratio_title", lang), lang, "magma_r", ratio_limits, 1),
         _t("alt_ratio", lang), _t("caption_ratio", lang)),
        (heatmap(head_grid(data, "sink_first"), _t("sink_title", lang), lang, "cividis", (0.0, 1.0), 2),
         _t("alt_sink", lang), _t("caption_sink", lang)),
        (heatmap(head_grid(data, "normalized_entropy"), _t("ent_scaled", lang), lang, "viridis", (0.0, 1.0), 2),
         _t("alt_entropy", lang), _t("caption_entropy", lang, scale=scale)),
        (heatmap(head_grid(data, "normalized_entropy_unscaled"), _t("ent_unscaled", lang), lang, "viridis",
                 (0.0, 1.0), 2), _t("alt_entropy_unscaled", lang), _t("caption_entropy_unscaled", lang)),
    ]


def _scale_text(scale: float, d_k: int) -> str:
    """The recorded scale, named 1/√d_k only when it is that number."""
    if d_k > 0 and math.isclose(scale, 1.0 / math.sqrt(d_k), rel_tol=1e-6):
        return f"{scale:.4g} = 1/√{d_k}"
    return f"{scale:.4g}"


def _head(where: dict) -> str:
    return f"L{where['layer']}H{where['head']} ({number(where['value'])})"


def findings(data: dict, lang: str) -> list[str]:
    """The sentences about the figures, each chosen by the analysis."""
    a, f16, n = data["analysis"], data["float16"], data["analysis"]["n_heads"]
    r, tok = a["ratio_pair"], a["ratio_token"]
    key = "ratio_all_above" if r["below_1"] == 0 else "ratio_all_below" if r["above_1"] == 0 else "ratio_mixed"
    out = [_t(key, lang, n=n, above=r["above_1"], below=r["below_1"], lo=number(r["min"]), hi=number(r["max"]),
              med=number(r["median"]))]
    same = (a["top_pair"]["layer"], a["top_pair"]["head"]) == (a["top_token"]["layer"], a["top_token"]["head"])
    out.append(_t("token_same_top" if same else "token_other_top", lang, lo=number(tok["min"]), hi=number(tok["max"]),
                  diff=number(a["max_abs_pair_minus_token"]), top=_head(a["top_pair"]), top_t=_head(a["top_token"])))
    sink = a["sink_first"]
    out.append(_t("sinks_some" if sink["over_half"] else "sinks_none", lang, k=sink["over_half"], n=n,
                  hi=number(sink["max"])))
    if "sink_bos" in data.get("absent", {}):
        out.append(_t("bos_absent", lang))
    out.append(_t("frozen", lang, k=a["frozen_only_unscaled"], n=n, h=number(a["normalized_entropy"]["median"]),
                  h_u=number(a["normalized_entropy_unscaled"]["median"])))
    fits = f16["max_abs_logit_unscaled"] < f16["limit"]
    out.append(_t("fp16_fits" if fits else "fp16_over", lang, s=number(f16["max_abs_logit"]),
                  u=number(f16["max_abs_logit_unscaled"]), m=f"×{number(f16['margin'])}",
                  m_u=f"×{number(f16['margin_unscaled'])}"))
    return out


def render(env, lang: str) -> str:
    data = env.data
    cfg, check, model = data["config"], data["check"], data["model"]
    worst = max(check["max_abs_diff_per_layer"]) if check["max_abs_diff_per_layer"] else None
    heads = (_t("heads_same", lang, n=model["n_heads_q"]) if model["n_heads_q"] == model["n_heads_kv"] else
             _t("heads_gqa", lang, n=model["n_heads_q"], kv=model["n_heads_kv"]))
    intro = _t("intro", lang, model=model["name"], layers=model["n_layers"], heads=heads, d_k=model["d_k"],
               scale=_scale_text(model["scale"], model["d_k"]), kind=_t("decoder" if model["causal"] else "encoder", lang),
               n=cfg["n_sequences"], tokens=cfg["n_tokens"], rope=_t("rope", lang) if model.get("rope_theta") else "")
    parts = [f"<p>{esc(intro)}</p>"]
    if model.get("weights_note"):
        parts.append(f'<p class="note">{esc(_t("weights_note", lang, note=model["weights_note"]))}</p>')
    if not check["passed"]:
        failed = _t("check_failed", lang, diff=number(worst), tol=f"{check['tolerance']:g}")
        parts.append(f'<div class="error-box" role="alert"><p>{esc(failed)}</p></div>')
        return "\n".join(parts)
    ok = _t("check_ok", lang, diff=f"{worst:.1e}", rows=check["rows_checked"], tol=f"{check['tolerance']:g}")
    parts.append(f"<p>{esc(ok)}</p>")
    parts.append(f"<p>{esc(_t('weighting', lang))}</p>")
    parts.append("<ul>" + "".join(f"<li>{esc(s)}</li>" for s in findings(data, lang)) + "</ul>")
    # Side by side on a wide screen, one under the other on a phone: each map stays legible at both.
    cells = "".join(f'<div style="flex:1 1 340px;min-width:0">{figure_svg(fig, alt, caption)}</div>'
                    for fig, alt, caption in heatmaps(data, lang))
    parts.append(f'<div style="display:flex;flex-wrap:wrap;gap:0 1.5em">{cells}</div>')
    parts.append(f"<p>{esc(_t('split', lang))}</p>")
    per_layer = data["per_layer"]
    columns = [c for c in COLUMNS if c[0] in per_layer]
    header = [_t("layer", lang)] + [zh if lang == "zh" else en for _, en, zh in columns]
    rows = [[str(i)] + [number(per_layer[f][i]) for f, _, _ in columns] for i in range(model["n_layers"])]
    parts.append(table(header, rows, cls="numeric"))
    by_kind: dict[str, list[dict]] = {}
    for entry in data.get("striking_heads", []):
        by_kind.setdefault(entry["what"], []).append(entry)
    items = []
    for what, entries in by_kind.items():
        found = ", ".join(f"{e['layer']}.{e['head']} ({number(e['value'])})" for e in entries)
        counted = entries[0].get("of") or 0
        more = f" — {_t('in_all', lang, n=counted)}" if counted > len(entries) else ""
        items.append(f"<li>{esc(what)}: {esc(found + more)}</li>")
    if items:
        parts.append(f"<p>{esc(_t('striking', lang))}</p><ul>{''.join(items)}</ul>")
    return "\n".join(parts)
