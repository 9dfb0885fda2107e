"""Report chapter: a trained model with its attention scale × α (``attnscale rescale``).

One renderer for the decoder (kind ``rescale/smollm2``: perplexity against α, continuations) and the
encoder (kind ``rescale/minilm`` in :mod:`attnscale.report.chapters.rescale_minilm`: how far the
sentence embeddings move). Every number and choice of words comes from ``env.data["analysis"]``.
"""

from __future__ import annotations

from attnscale.report import figures, text
from attnscale.report.html import bullets, error_box, note, number, para, table
from attnscale.report.text import t

KIND = "rescale/smollm2"
TITLE = text.entry("rescale", "title")
_t = text.words("rescale")
HOW_TO = "attnscale rescale --model smollm2"

def _alphas(values) -> str:
    return ", ".join(f"{a:g}" for a in values) or "—"


def plot(data: dict, lang: str):
    """Two panels against α (log₂ axis): the measure (perplexity or cosine), and entropy / max weight."""
    rows, a = data["alphas"], data["analysis"]
    alphas = [r["alpha"] for r in rows]
    with figures.style() as plt:
        fig, (left, right) = plt.subplots(1, 2, figsize=(7.6, 3.3), constrained_layout=True)
        if _is_lm(data):
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
            if data["unscaled_alpha"] is not None:
                ax.axvline(data["unscaled_alpha"], color=figures.UNSCALED, lw=0.9, ls=":")
        left.annotate(_t("own_scale", lang), (1.0, 0.98), xycoords=("data", "axes fraction"), ha="right", va="top",
                      fontsize=8.5, color=figures.NEUTRAL, rotation=90)
        if data["unscaled_alpha"] is not None:
            left.annotate(_t("no_scale", lang), (data["unscaled_alpha"], 0.98), xycoords=("data", "axes fraction"),
                          ha="right", va="top", fontsize=8.5, color=figures.UNSCALED, rotation=90)
    return fig


def findings(data: dict, lang: str) -> list[str]:
    """The sentences about the figures, each chosen by the analysis."""
    a, rows = data["analysis"], data["alphas"]
    out = []
    if _is_lm(data):
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
    if _is_lm(data):
        detail = dict(ours=number(check["our_loss"], ".6f"), own=number(check["own_loss"], ".6f"),
                      rel=number(check["relative_difference"], ".1e"), tol=f"{check['tolerance']:g}")
        ok = _t("check_loss", lang, **detail)
    else:
        ok = _t("check_embedding", lang, diff=number(check["max_abs_difference"], ".1e"), tol=f"{check['tolerance']:g}")
    if check["passed"]:
        return para(ok)
    return error_box(_t("check_failed", lang, detail=ok))


def _is_lm(data: dict) -> bool:
    """A language model's result (a decoder, or an encoder-decoder's decoder): cross-entropy per α
    (a result without ``family`` was written when only decoders were causal)."""
    model = data["model"]
    return model.get("family", "decoder" if model["causal"] else "encoder") != "encoder"


def _what(data: dict, lang: str) -> str:
    """What the intervention measures: the bundled words for a model scaled by 1/√d_k in every layer,
    else the scales it applies, named (and why no α removes them, when none does)."""
    from attnscale.report.chapters.probe import scales_sentence

    model = data["model"]
    rules = model.get("scale_rules") or []
    if all(rule["rule"] == "1/sqrt(d_k)" for rule in rules) and data["unscaled_alpha"] is not None:
        return _t("what", lang, model=model["name"], scale=number(model["scale"], ".4g"),
                  unscaled=f"{data['unscaled_alpha']:g}")
    removal = (_t("removes", lang, a=f"{data['unscaled_alpha']:g}") if data["unscaled_alpha"] is not None else
               _t(f"removes_none_{data['unscaled_alpha_none']}", lang))
    return _t("what_own", lang, model=model["name"], scales=scales_sentence(model, lang), removal=removal)


def render(env, lang: str) -> str:
    data = env.data
    model, text = data["model"], data["text"]
    parts = [para(_what(data, lang))]
    if model.get("weights_note"):
        parts.append(note(t("weights_note", lang).format(note=model["weights_note"])))
    lm = _is_lm(data)
    if lm:
        about = _t("text_decoder", lang, source=text["source"], tokens=text["n_tokens"], windows=text["windows"],
                   window=text["window"], predicted=text["tokens_predicted"])
    else:
        about = _t("text_encoder", lang, source=text["source"], n=text["n_sequences"], tokens=text["n_tokens"])
    parts.append(para(about))
    parts.append(_check(data, lang))
    parts.append(bullets(findings(data, lang)))
    parts.append(figures.responsive_figure(lambda: plot(data, lang), _t("alt", lang),
                                           _t("caption_decoder" if lm else "caption_encoder", lang)))
    a = data["analysis"]
    if lm:
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
