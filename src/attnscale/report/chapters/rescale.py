"""Report chapter: a trained model with its attention scale × α (``attnscale rescale``).

One renderer for the decoder (kind ``rescale/smollm2``: perplexity against α, continuations) and the
encoder (kind ``rescale/minilm`` in :mod:`attnscale.report.chapters.rescale_minilm`: how far the
sentence embeddings move). Every number and choice of words comes from ``env.data["analysis"]``.
"""

from __future__ import annotations

from attnscale.i18n import N_, _
from attnscale.report import plotting
from attnscale.report.chapters.probe import weights_note
from attnscale.report.html import Verbatim, bullets, error_box, para, table
from attnscale.report.model_words import is_lm, measured_sentence, text_source
from attnscale.report.numbers import number

KIND = "rescale/smollm2"
TITLE = N_("Turning a trained LLM's attention scale: SmolLM2-135M with 1/√d_k × α")
HOW_TO = "attnscale rescale --model smollm2"

#: The greedy continuation against α: see continuation_key.
CONTINUATION_SENTENCES = {
    "all_same": N_("The greedy continuation of “{prompt}” is the same at every α tried."),
    "all_changed": N_("The greedy continuation of “{prompt}” changes at every α other than 1."),
    "some": N_(
        "The greedy continuation of “{prompt}” stays the same as at α = 1 for α = {same} and changes for α = {changed}."
    ),
}


def continuation_key(changed: list, same: list) -> str:
    """The key of :data:`CONTINUATION_SENTENCES` for the α (other than 1) whose continuation changed
    and those whose did not."""
    return "all_same" if not changed else "all_changed" if not same else "some"


def _alphas(values) -> str:
    return ", ".join(f"{a:g}" for a in values) or "—"


def plot(data: dict):
    """Two panels against α (log₂ axis): the measure (perplexity or cosine), and entropy / max weight."""
    rows, a = data["alphas"], data["analysis"]
    alphas = [r["alpha"] for r in rows]
    with plotting.style() as plt:
        fig, (left, right) = plt.subplots(1, 2, figsize=(7.6, 3.3), constrained_layout=True)
        if is_lm(data):
            left.plot(alphas, [r["perplexity"] for r in rows], "o-", color=plotting.SCALED)
            left.set_yscale("log")
            left.set_ylabel(_("perplexity"))
        else:
            left.plot(
                alphas, [r["cosine_mean"] for r in rows], "o-", color=plotting.SCALED, label=_("mean over sentences")
            )
            left.plot(
                alphas,
                [r["cosine_min"] for r in rows],
                "s--",
                color=plotting.UNSCALED,
                label=_("least similar sentence"),
            )
            left.set_ylabel(_("cosine to α = 1"))
            left.legend()
        right.plot(
            alphas,
            [a["mean_normalized_entropy"][f"{x:g}"] for x in alphas],
            "o-",
            color=plotting.SERIES[2],
            label=_("entropy / ln n"),
        )
        right.plot(
            alphas,
            [a["mean_max_weight"][f"{x:g}"] for x in alphas],
            "s--",
            color=plotting.SERIES[3],
            label=_("max weight"),
        )
        right.set_ylim(0, 1)
        right.legend()
        for ax in (left, right):
            ax.set_xscale("log", base=2)
            ax.set_xticks(alphas, [f"{x:g}" if x >= 1 else f"1/{1 / x:g}" for x in alphas])
            ax.minorticks_off()
            ax.set_xlabel(_("α (× the model's scale)"))
            ax.axvline(1.0, color=plotting.NEUTRAL, lw=0.9, ls=":")
            if data["unscaled_alpha"] is not None:
                ax.axvline(data["unscaled_alpha"], color=plotting.UNSCALED, lw=0.9, ls=":")
        left.annotate(
            _("model's own scale"),
            (1.0, 0.98),
            xycoords=("data", "axes fraction"),
            ha="right",
            va="top",
            fontsize=8.5,
            color=plotting.NEUTRAL,
            rotation=90,
        )
        if data["unscaled_alpha"] is not None:
            left.annotate(
                _("no scale"),
                (data["unscaled_alpha"], 0.98),
                xycoords=("data", "axes fraction"),
                ha="right",
                va="top",
                fontsize=8.5,
                color=plotting.UNSCALED,
                rotation=90,
            )
    return fig


def findings(data: dict) -> list[str]:
    """The sentences about the figures, each chosen by the analysis."""
    a, rows = data["analysis"], data["alphas"]
    out = []
    if is_lm(data):
        if a["best_alpha"] == 1.0:
            out.append(
                _(
                    "The model's own scale is the best of those tried: perplexity {ppl} at α = 1.",
                    ppl=number(a["perplexity_alpha1"]),
                )
            )
        else:
            out.append(
                _(
                    "The lowest perplexity is at α = {best} ({best_ppl}), not at the model's own scale ({ppl} at α = 1).",
                    best=f"{a['best_alpha']:g}",
                    best_ppl=number(a["best_perplexity"]),
                    ppl=number(a["perplexity_alpha1"]),
                )
            )
        if a["has_unscaled"]:
            out.append(
                _(
                    "Without the scale (α = {a}) the perplexity is {ppl}, {ratio} times that at α = 1.",
                    a=f"{data['unscaled_alpha']:g}",
                    ppl=number(a["perplexity_unscaled"]),
                    ratio=number(a["perplexity_ratio"][f"{data['unscaled_alpha']:g}"]),
                )
            )
        changed, same = a["alphas_changed_continuation"], a["alphas_same_continuation"]
        out.append(
            _(
                CONTINUATION_SENTENCES[continuation_key(changed, same)],
                prompt=data["prompt"],
                same=_alphas(same),
                changed=_alphas(changed),
            )
        )
    else:
        out.append(
            _(
                "The embeddings move most at α = {a}: the least similar sentence keeps a cosine of {cos} to its α = 1 embedding.",
                a=f"{a['worst_alpha']:g}",
                cos=number(a["worst_cosine_min"]),
            )
        )
        if a["has_unscaled"]:
            out.append(
                _(
                    "Without the scale (α = {a}) the least similar sentence keeps a cosine of {cos}.",
                    a=f"{data['unscaled_alpha']:g}",
                    cos=number(a["cosine_min_unscaled"]),
                )
            )
    lo, hi = f"{rows[0]['alpha']:g}", f"{rows[-1]['alpha']:g}"
    ent, top = a["mean_normalized_entropy"], a["mean_max_weight"]
    out.append(
        _(
            "Mean entropy / ln n over layers, heads and rows: {lo} at α = {a_lo}, {one} at α = 1, {hi} at α = {a_hi}; mean max weight {w_lo}, {w_one}, {w_hi}.",
            a_lo=lo,
            a_hi=hi,
            lo=number(ent[lo]),
            one=number(ent["1"]),
            hi=number(ent[hi]),
            w_lo=number(top[lo]),
            w_one=number(top["1"]),
            w_hi=number(top[hi]),
        )
    )
    return out


# The check at α = 1, by (a language model?, passed?): what was compared and, only when it passed, that
# the two agree.
CHECK = {
    (True, True): N_(
        "Check: at α = 1 our cross-entropy {ours} equals the model's own loss {own} (relative difference {rel}, tolerance {tol})."
    ),
    (True, False): N_(
        "our cross-entropy {ours} against the model's own loss {own}: relative difference {rel}, tolerance {tol}"
    ),
    (False, True): N_("Check: at α = 1 our sentence embeddings equal the model's own to {diff} (tolerance {tol})."),
    (False, False): N_("our sentence embeddings differ from the model's own by {diff}, tolerance {tol}"),
}


def _check(data: dict) -> str:
    check, lm = data["check"], is_lm(data)
    if lm:
        detail = dict(
            ours=number(check["our_loss"], ".6f"),
            own=number(check["own_loss"], ".6f"),
            rel=number(check["relative_difference"], ".1e"),
            tol=f"{check['tolerance']:g}",
        )
    else:
        detail = dict(diff=number(check["max_abs_difference"], ".1e"), tol=f"{check['tolerance']:g}")
    said = _(CHECK[(lm, bool(check["passed"]))], **detail)
    if check["passed"]:
        return para(said)
    return error_box(
        _(
            "Check FAILED: at α = 1 the intervention does not reproduce the model ({detail}); the figures below are not to be trusted.",
            detail=said,
        )
    )


def render(env) -> str:
    data = env.data
    model, text = data["model"], data["text"]
    parts = [para(measured_sentence(data))]
    if model.get("weights_note"):
        parts.append(weights_note(model))
    lm = is_lm(data)
    if lm:
        about = _(
            "Text: {source}, {tokens} tokens in {windows} causal window(s) of up to {window} tokens, {predicted} of them predicted.",
            source=text_source(text["source"]),
            tokens=text["n_tokens"],
            windows=text["windows"],
            window=text["window"],
            predicted=text["tokens_predicted"],
        )
    else:
        about = _(
            "Text: {source}, {n} sentences, {tokens} tokens.",
            source=text_source(text["source"]),
            n=text["n_sequences"],
            tokens=text["n_tokens"],
        )
    parts.append(para(about))
    parts.append(_check(data))
    parts.append(bullets(findings(data)))
    parts.append(
        plotting.responsive_figure(
            lambda: plot(data),
            _("The measure against α on a logarithmic axis, and the mean entropy and max weight"),
            _(
                "Left: next-token perplexity against α (both axes logarithmic). "
                "Right: mean entropy / ln n and max weight of the attention rows."
            )
            if lm
            else _(
                "Left: cosine of each sentence embedding to its α = 1 embedding (mean and least similar), α on a logarithmic axis. "
                "Right: mean entropy / ln n and max weight of the attention rows."
            ),
        )
    )
    a = data["analysis"]
    if lm:
        header = ["α", "CE", _("perplexity"), "H/ln n", _("max weight"), _("continuation")]
        rows = [
            [
                f"{r['alpha']:g}",
                number(r["cross_entropy"], ".4f"),
                number(r["perplexity"], ".4g"),
                number(a["mean_normalized_entropy"][f"{r['alpha']:g}"]),
                number(a["mean_max_weight"][f"{r['alpha']:g}"]),
                Verbatim(data["prompt"] + r["continuation"]),
            ]
            for r in data["alphas"]
        ]
    else:
        header = ["α", _("mean over sentences"), _("least similar sentence"), "H/ln n", _("max weight")]
        rows = [
            [
                f"{r['alpha']:g}",
                number(r["cosine_mean"], ".4f"),
                number(r["cosine_min"], ".4f"),
                number(a["mean_normalized_entropy"][f"{r['alpha']:g}"]),
                number(a["mean_max_weight"][f"{r['alpha']:g}"]),
            ]
            for r in data["alphas"]
        ]
    parts.append(table(header, rows))
    return "\n".join(parts)
