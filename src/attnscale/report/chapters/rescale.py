"""Report chapter: a trained model with its attention scale × α (``attnscale rescale``).

One renderer for the decoder (kind ``rescale/smollm2``: perplexity against α, continuations) and the
encoder (kind ``rescale/minilm`` in :mod:`attnscale.report.chapters.rescale_minilm`: how far the
sentence embeddings move). Every number and choice of words comes from ``env.data["analysis"]``.
"""

from __future__ import annotations

import functools

from attnscale.report import figures
from attnscale.report.html import esc, figure_svg, number, table
from attnscale.report.text import localize

KIND = "rescale/smollm2"
TITLE = {"en": "Turning a trained LLM's attention scale: SmolLM2-135M with 1/√d_k × α",
         "zh": "调节训练好的大模型的注意力缩放：SmolLM2-135M，1/√d_k × α"}
HOW_TO = "attnscale rescale --model smollm2"

TEXT = {
    "what": {"en": ("What this measures: {model} was trained with the scale 1/√d_k = {scale}; here every attention "
                    "layer's scale is multiplied by α at inference, nothing else changed, and α = {unscaled} removes "
                    "the scale altogether. It shows how sensitive a model trained with 1/√d_k is to its scale — not "
                    "what training without the scale would give (the training chapters answer that)."),
             "zh": ("这里测的是什么：{model} 训练时使用缩放 1/√d_k = {scale}；这里在推理时把每个注意力层的缩放乘以 α，其余不变，"
                    "α = {unscaled} 即完全去掉缩放。它显示的是用 1/√d_k 训练出的模型对缩放有多敏感，而不是不缩放训练会得到什么"
                    "（那由训练实验的章节回答）。")},
    "weights_note": {"en": "Note: {note}.", "zh": "注意（权重）：{note}。"},
    "text_decoder": {"en": "Text: {source}, {tokens} tokens in {windows} causal window(s) of up to {window} tokens, "
                           "{predicted} of them predicted.",
                     "zh": "文本：{source}，{tokens} 个词元，分为 {windows} 个最长 {window} 词元的因果窗口，其中 {predicted} 个被预测。"},
    "text_encoder": {"en": "Text: {source}, {n} sentences, {tokens} tokens.",
                     "zh": "文本：{source}，{n} 个句子，{tokens} 个词元。"},
    "check_loss": {"en": "Check: at α = 1 our cross-entropy {ours} equals the model's own loss {own} (relative "
                         "difference {rel}, tolerance {tol}).",
                   "zh": "校验：α = 1 时我们算出的交叉熵 {ours} 与模型自身的损失 {own} 一致（相对差 {rel}，容差 {tol}）。"},
    "check_embedding": {"en": "Check: at α = 1 our sentence embeddings equal the model's own to {diff} (tolerance {tol}).",
                        "zh": "校验：α = 1 时我们得到的句向量与模型自身的相差不超过 {diff}（容差 {tol}）。"},
    "check_failed": {"en": "Check FAILED: at α = 1 the intervention does not reproduce the model ({detail}); the "
                           "figures below are not to be trusted.",
                     "zh": "校验失败：α = 1 时干预未能重现模型（{detail}），下面的数字不可信。"},
    "best_is_one": {"en": "The model's own scale is the best of those tried: perplexity {ppl} at α = 1.",
                    "zh": "在所试的缩放中，模型自身的缩放最好：α = 1 时困惑度为 {ppl}。"},
    "best_other": {"en": "The lowest perplexity is at α = {best} ({best_ppl}), not at the model's own scale ({ppl} at "
                         "α = 1).",
                   "zh": "困惑度最低的是 α = {best}（{best_ppl}），而不是模型自身的缩放（α = 1 时为 {ppl}）。"},
    "unscaled": {"en": "Without the scale (α = {a}) the perplexity is {ppl}, {ratio} times that at α = 1.",
                 "zh": "去掉缩放（α = {a}）时困惑度为 {ppl}，是 α = 1 时的 {ratio} 倍。"},
    "same_continuation": {"en": "The greedy continuation of “{prompt}” stays the same as at α = 1 for α = {same} and "
                                "changes for α = {changed}.",
                          "zh": "对“{prompt}”的贪心续写在 α = {same} 时与 α = 1 相同，在 α = {changed} 时改变。"},
    "all_changed": {"en": "The greedy continuation of “{prompt}” changes at every α other than 1.",
                    "zh": "对“{prompt}”的贪心续写在 α = 1 以外的每个 α 下都改变。"},
    "all_same": {"en": "The greedy continuation of “{prompt}” is the same at every α tried.",
                 "zh": "对“{prompt}”的贪心续写在所试的每个 α 下都相同。"},
    "worst_cosine": {"en": "The embeddings move most at α = {a}: the least similar sentence keeps a cosine of {cos} to "
                           "its α = 1 embedding.",
                     "zh": "句向量在 α = {a} 时移动最大：最不相似的句子与其 α = 1 句向量的余弦为 {cos}。"},
    "unscaled_cosine": {"en": "Without the scale (α = {a}) the least similar sentence keeps a cosine of {cos}.",
                        "zh": "去掉缩放（α = {a}）时，最不相似的句子余弦为 {cos}。"},
    "entropy": {"en": "Mean entropy / ln n over layers, heads and rows: {lo} at α = {a_lo}, {one} at α = 1, {hi} at "
                      "α = {a_hi}; mean max weight {w_lo}, {w_one}, {w_hi}.",
                "zh": "各层、各头、各行的平均熵 / ln n：α = {a_lo} 时 {lo}，α = 1 时 {one}，α = {a_hi} 时 {hi}；"
                      "平均最大权重依次为 {w_lo}、{w_one}、{w_hi}。"},
    "alpha": {"en": "α (× the model's scale)", "zh": "α（× 模型自身缩放）"},
    "perplexity": {"en": "perplexity", "zh": "困惑度"},
    "cosine": {"en": "cosine to α = 1", "zh": "与 α = 1 的余弦"},
    "cos_mean": {"en": "mean over sentences", "zh": "句子平均"},
    "cos_min": {"en": "least similar sentence", "zh": "最不相似的句子"},
    "ent_axis": {"en": "mean entropy / ln n, max weight", "zh": "平均熵 / ln n、最大权重"},
    "ent": {"en": "entropy / ln n", "zh": "熵 / ln n"},
    "maxw": {"en": "max weight", "zh": "最大权重"},
    "own_scale": {"en": "model's own scale", "zh": "模型自身缩放"},
    "no_scale": {"en": "no scale", "zh": "无缩放"},
    "alt": {"en": "The measure against α on a logarithmic axis, and the mean entropy and max weight",
            "zh": "各项指标随 α（对数轴）的变化，以及平均熵与最大权重"},
    "caption_decoder": {"en": "Left: next-token perplexity against α (both axes logarithmic). Right: mean entropy / ln n "
                              "and max weight of the attention rows.",
                        "zh": "左：下一个词元的困惑度随 α 的变化（双对数轴）。右：注意力各行的平均熵 / ln n 与最大权重。"},
    "caption_encoder": {"en": "Left: cosine of each sentence embedding to its α = 1 embedding (mean and least similar), "
                              "α on a logarithmic axis. Right: mean entropy / ln n and max weight of the attention rows.",
                        "zh": "左：每个句向量与其 α = 1 句向量的余弦（平均与最不相似），α 为对数轴。右：注意力各行的平均熵 / ln n 与最大权重。"},
    "continuation": {"en": "continuation", "zh": "续写"},
}

_t = functools.partial(localize, TEXT)


def _alphas(values) -> str:
    return ", ".join(f"{a:g}" for a in values) or "—"


def plot(data: dict, lang: str):
    """Two panels against α (log₂ axis): the measure (perplexity or cosine), and entropy / max weight."""
    rows, a = data["alphas"], data["analysis"]
    alphas = [r["alpha"] for r in rows]
    with figures.style() as plt:
        fig, (left, right) = plt.subplots(1, 2, figsize=(7.6, 3.3), constrained_layout=True)
        if data["model"]["causal"]:
            left.plot(alphas, [r["perplexity"] for r in rows], "o-", color=figures.SCALED)
            left.set_yscale("log")
            left.set_ylabel(_t("perplexity", lang))
        else:
            left.plot(alphas, [r["cosine_mean"] for r in rows], "o-", color=figures.SCALED, label=_t("cos_mean", lang))
            left.plot(alphas, [r["cosine_min"] for r in rows], "s--", color=figures.UNSCALED, label=_t("cos_min", lang))
            left.set_ylabel(_t("cosine", lang))
            left.legend()
        right.plot(alphas, [a["mean_normalized_entropy"][f"{x:g}"] for x in alphas], "o-", color=figures.SERIES[2],
                   label=_t("ent", lang))
        right.plot(alphas, [a["mean_max_weight"][f"{x:g}"] for x in alphas], "s--", color=figures.SERIES[3],
                   label=_t("maxw", lang))
        right.set_ylim(0, 1)
        right.legend()
        for ax in (left, right):
            ax.set_xscale("log", base=2)
            ax.set_xticks(alphas, [f"{x:g}" if x >= 1 else f"1/{1 / x:g}" for x in alphas])
            ax.minorticks_off()
            ax.set_xlabel(_t("alpha", lang))
            ax.axvline(1.0, color=figures.NEUTRAL, lw=0.9, ls=":")
            ax.axvline(data["unscaled_alpha"], color=figures.UNSCALED, lw=0.9, ls=":")
        left.annotate(_t("own_scale", lang), (1.0, 0.98), xycoords=("data", "axes fraction"), ha="right", va="top",
                      fontsize=8.5, color=figures.NEUTRAL, rotation=90)
        left.annotate(_t("no_scale", lang), (data["unscaled_alpha"], 0.98), xycoords=("data", "axes fraction"),
                      ha="right", va="top", fontsize=8.5, color=figures.UNSCALED, rotation=90)
    return fig


def findings(data: dict, lang: str) -> list[str]:
    """The sentences about the figures, each chosen by the analysis."""
    a, rows = data["analysis"], data["alphas"]
    out = []
    if data["model"]["causal"]:
        if a["best_alpha"] == 1.0:
            out.append(_t("best_is_one", lang, ppl=number(a["perplexity_alpha1"])))
        else:
            out.append(_t("best_other", lang, best=f"{a['best_alpha']:g}", best_ppl=number(a["best_perplexity"]),
                          ppl=number(a["perplexity_alpha1"])))
        if a["has_unscaled"]:
            out.append(_t("unscaled", lang, a=f"{data['unscaled_alpha']:g}", ppl=number(a["perplexity_unscaled"]),
                          ratio=number(a["perplexity_ratio"][f"{data['unscaled_alpha']:g}"])))
        changed, same = a["alphas_changed_continuation"], a["alphas_same_continuation"]
        key = "all_same" if not changed else "all_changed" if not same else "same_continuation"
        out.append(_t(key, lang, prompt=data["prompt"], same=_alphas(same), changed=_alphas(changed)))
    else:
        out.append(_t("worst_cosine", lang, a=f"{a['worst_alpha']:g}", cos=number(a["worst_cosine_min"])))
        if a["has_unscaled"]:
            out.append(_t("unscaled_cosine", lang, a=f"{data['unscaled_alpha']:g}", cos=number(a["cosine_min_unscaled"])))
    lo, hi = f"{rows[0]['alpha']:g}", f"{rows[-1]['alpha']:g}"
    ent, top = a["mean_normalized_entropy"], a["mean_max_weight"]
    out.append(_t("entropy", lang, a_lo=lo, a_hi=hi, lo=number(ent[lo]), one=number(ent["1"]), hi=number(ent[hi]),
                  w_lo=number(top[lo]), w_one=number(top["1"]), w_hi=number(top[hi])))
    return out


def _check(data: dict, lang: str) -> str:
    check = data["check"]
    if data["model"]["causal"]:
        detail = dict(ours=number(check["our_loss"], ".6f"), own=number(check["own_loss"], ".6f"),
                      rel=number(check["relative_difference"], ".1e"), tol=f"{check['tolerance']:g}")
        ok = _t("check_loss", lang, **detail)
    else:
        ok = _t("check_embedding", lang, diff=number(check["max_abs_difference"], ".1e"), tol=f"{check['tolerance']:g}")
    if check["passed"]:
        return f"<p>{esc(ok)}</p>"
    return f'<div class="error-box" role="alert"><p>{esc(_t("check_failed", lang, detail=ok))}</p></div>'


def render(env, lang: str) -> str:
    data = env.data
    model, text = data["model"], data["text"]
    what = _t("what", lang, model=model["name"], scale=number(model["scale"], ".4g"), unscaled=f"{data['unscaled_alpha']:g}")
    parts = [f"<p>{esc(what)}</p>"]
    if model.get("weights_note"):
        parts.append(f'<p class="note">{esc(_t("weights_note", lang, note=model["weights_note"]))}</p>')
    if model["causal"]:
        about = _t("text_decoder", lang, source=text["source"], tokens=text["n_tokens"], windows=text["windows"],
                   window=text["window"], predicted=text["tokens_predicted"])
    else:
        about = _t("text_encoder", lang, source=text["source"], n=text["n_sequences"], tokens=text["n_tokens"])
    parts.append(f"<p>{esc(about)}</p>")
    parts.append(_check(data, lang))
    parts.append("<ul>" + "".join(f"<li>{esc(s)}</li>" for s in findings(data, lang)) + "</ul>")
    parts.append(figure_svg(plot(data, lang), _t("alt", lang),
                            _t("caption_decoder" if model["causal"] else "caption_encoder", lang)))
    a = data["analysis"]
    if model["causal"]:
        header = ["α", "CE", _t("perplexity", lang), "H/ln n", _t("maxw", lang), _t("continuation", lang)]
        rows = [[f"{r['alpha']:g}", number(r["cross_entropy"], ".4f"), number(r["perplexity"], ".4g"),
                 number(a["mean_normalized_entropy"][f"{r['alpha']:g}"]), number(a["mean_max_weight"][f"{r['alpha']:g}"]),
                 data["prompt"] + r["continuation"]] for r in data["alphas"]]
    else:
        header = ["α", _t("cos_mean", lang), _t("cos_min", lang), "H/ln n", _t("maxw", lang)]
        rows = [[f"{r['alpha']:g}", number(r["cosine_mean"], ".4f"), number(r["cosine_min"], ".4f"),
                 number(a["mean_normalized_entropy"][f"{r['alpha']:g}"]), number(a["mean_max_weight"][f"{r['alpha']:g}"])]
                for r in data["alphas"]]
    parts.append(table(header, rows))
    return "\n".join(parts)
