"""Report chapter: a real pretrained model's queries and keys against the blog post's assumptions.

Renders a probe result (``attnscale probe``; kind ``probe/minilm`` here, ``probe/smollm2`` in
:mod:`attnscale.report.chapters.probe_smollm2`, and any ``probe/user/<name>`` of the user's own
model): each layer's scale in words (:func:`attnscale.report.model_words.scale_text`), heat maps per layer × head, the per-layer table and
the striking heads. Every number and every choice of words comes from ``env.data`` (its
``analysis`` block); nothing is computed here.
"""

from __future__ import annotations

import math

from attnscale.i18n import N_, _
from attnscale.report import plotting
from attnscale.report.html import bullets, error_box, esc, note, para, table
from attnscale.report.model_words import layer_labels, model_scale_text, scales_sentence, weights_sentence
from attnscale.report.numbers import number
from attnscale.report.plotting import figure_svg
from attnscale.stored_words import STRIKING_KINDS

KIND = "probe/minilm"
TITLE = N_("A real encoder: do its queries and keys obey the blog post's assumptions?")
HOW_TO = "attnscale probe --model minilm"


#: Per-layer table: the figures, in order, each with its column's heading; figures the result lacks
#: are left out.
COLUMNS = {
    "ratio_pair": N_("ratio (pairs)"),
    "ratio_token": N_("ratio (tokens)"),
    "part_uneven_variances": N_("uneven var."),
    "part_means": N_("means"),
    "part_cross_dimension": N_("cross-dim."),
    "part_correlation": N_("q–k corr."),
    "within_row_share": N_("within rows"),
    "normalized_entropy": N_("H/ln n"),
    "normalized_entropy_unscaled": N_("H/ln n, unscaled"),
    "max_weight": N_("max w"),
    "max_weight_unscaled": N_("max w, unscaled"),
    "sink_first": N_("first token"),
    "previous_token": N_("prev."),
    "next_token": N_("next"),
}

# --- the sentences the data chooses among, each beside the small pure function that chooses ---------

#: How the heads' Var(q·k) stands against the iid prediction: see ratio_key.
RATIO_SENTENCES = {
    "all_above": N_(
        "All {n} heads have a larger Var(q·k) than the iid prediction (pair-weighted ratio {lo} to {hi}, median {med})."
    ),
    "all_below": N_(
        "All {n} heads have a smaller Var(q·k) than the iid prediction (pair-weighted ratio {lo} to {hi}, median {med})."
    ),
    "mixed": N_(
        "{above} of {n} heads have a larger Var(q·k) than the iid prediction and {below} a smaller one (pair-weighted ratio {lo} to {hi}, median {med})."
    ),
}


def ratio_key(ratio: dict) -> str:
    """The key of :data:`RATIO_SENTENCES` for the analysis' ``ratio_pair`` (its counts of heads above
    and below 1)."""
    return "all_above" if ratio["below_1"] == 0 else "all_below" if ratio["above_1"] == 0 else "mixed"


#: Token-weighted ratios, by whether both weightings find the same largest head.
TOKEN_SENTENCES = {
    True: N_(
        "Token-weighted, the ratio runs from {lo} to {hi} (heads differ by up to {diff}); the largest head is the same, {top}."
    ),
    False: N_(
        "Token-weighted, the ratio runs from {lo} to {hi} (heads differ by up to {diff}), and the two weightings rank heads differently: the largest is {top} by pairs, {top_t} by tokens."
    ),
}
#: First-token sinks, by whether any head puts more than half its weight there (``over_half`` > 0).
SINK_SENTENCES = {
    True: N_("{k} of {n} heads put more than half of their weight on the first token (up to {hi})."),
    False: N_("No head puts more than half of its weight on the first token (at most {hi})."),
}
#: The float16 margin, by whether the largest unscaled |logit| stays below float16's limit.
FLOAT16_SENTENCES = {
    True: N_(
        "Float16 margin: the largest |logit| is {s} at the model's scale and {u} with the scale removed; float16 holds up to {limit}, so both fit ({m} and {m_u} to spare)."
    ),
    False: N_(
        "Float16 margin: the largest |logit| is {s} at the model's scale but {u} with the scale removed, beyond float16's {limit}."
    ),
}
#: What the mask lets a query attend (see attention_kind).
KINDS = {
    "encoder": N_("bidirectional"),
    "decoder": N_("causal: only the pairs a query may attend count"),
    "encoder_decoder": N_("an encoder-decoder: the decoder's self-attention is causal"),
}


def _cell_text(value: float, digits: int) -> str:
    text = f"{value:.{digits}f}"
    return text[1:] if text.startswith("0.") else text  # ".81": narrow enough for a phone


def heatmap(grid, title: str, cmap: str, limits, digits: int, labels: list[str] | None = None):
    """One layer × head heat map, sized to be read on a phone and on a desktop alike (one panel per
    figure, the value in each cell, a colour bar). ``grid``: lists of layers × heads, None = missing;
    ``labels``: the layers' names (default: their numbers)."""
    import numpy as np

    data = np.array([[math.nan if v is None else v for v in row] for row in grid], dtype=float)
    n_layers, n_heads = data.shape
    with plotting.style() as plt:
        fig, ax = plt.subplots(figsize=(4.6, max(2.6, 0.2 * n_layers + 1.2)), constrained_layout=True)
        image = ax.imshow(data, cmap=cmap, vmin=limits[0], vmax=limits[1], aspect="auto", interpolation="nearest")
        for (i, j), value in np.ndenumerate(data):
            if math.isfinite(value):
                shade = (value - limits[0]) / (limits[1] - limits[0]) if limits[1] > limits[0] else 0.5
                dark = shade > 0.55 if cmap.endswith("_r") else shade < 0.55
                ax.text(
                    j,
                    i,
                    _cell_text(value, digits),
                    ha="center",
                    va="center",
                    fontsize=6.5,
                    color="white" if dark else "#1d2330",
                )
        ax.set_title(title)
        ax.set_xlabel(_("head"))
        ax.set_ylabel(_("layer"))
        ax.grid(False)
        ax.set_xticks(range(n_heads))
        rows = range(0, n_layers, 1 if n_layers <= 12 else 2)
        ax.set_yticks(rows, None if labels is None else [labels[i] for i in rows])
        fig.colorbar(image, ax=ax, shrink=0.85, pad=0.02)
    return fig


def head_grid(data: dict, figure: str) -> list[list]:
    """``data["heads"]`` (one dict per layer × head) laid out as a layer × head grid; None = missing."""
    n_layers, n_heads = data["model"]["n_layers"], data["model"]["n_heads_q"]
    grid = [[None] * n_heads for layer in range(n_layers)]
    for row in data["heads"]:
        grid[row["layer"]][row["head"]] = row.get(figure)
    return grid


def heatmaps(data: dict) -> list[tuple[object, str, str]]:
    """(figure, alt, caption) for the ratio, the first-token weight, and the entropy with and without
    the scale, each per layer × head."""
    a = data["analysis"]
    labels = layer_labels(data["model"])
    # The ratio's colour scale includes 1 (the blog post's prediction).
    ratio_limits = (min(1.0, a["ratio_pair"]["min"]), max(1.0, a["ratio_pair"]["max"]))
    return [
        (
            heatmap(
                head_grid(data, "ratio_pair"),
                _("Var(q·k) / iid prediction (pairs)"),
                "magma_r",
                ratio_limits,
                1,
                labels,
            ),
            _("Heat map per layer and head of the variance ratio"),
            _(
                "Var(q·k) / (d_k σ_q² σ_k²), pair-weighted, per layer (rows) and head (columns); 1 = the blog post's variance formula holds."
            ),
        ),
        (
            heatmap(head_grid(data, "sink_first"), _("weight on the first token"), "cividis", (0.0, 1.0), 2, labels),
            _("Heat map per layer and head of the weight on the first token"),
            _("The mean weight a row puts on the sequence's first token (the attention sink), per layer and head."),
        ),
        (
            heatmap(
                head_grid(data, "normalized_entropy"),
                _("entropy / ln n, model's scale"),
                "viridis",
                (0.0, 1.0),
                2,
                labels,
            ),
            _("Heat map per layer and head of the normalized entropy with the model's scale"),
            entropy_caption(data["model"]),
        ),
        (
            heatmap(
                head_grid(data, "normalized_entropy_unscaled"),
                _("entropy / ln n, scale removed"),
                "viridis",
                (0.0, 1.0),
                2,
                labels,
            ),
            _("Heat map per layer and head of the normalized entropy with the scale removed"),
            _("The same rows' entropy / ln n with the scale removed (logits q·k)."),
        ),
    ]


def entropy_caption(model: dict) -> str:
    """The caption of the entropy heat map at the model's scale, which it names."""
    return _(
        "Entropy / ln n of the rows (0 = one-hot, 1 = uniform) with the model's scale, {scale}.",
        scale=model_scale_text(model),
    )


def weights_note(model: dict) -> str:
    """The note on where the model's weights came from (a result stores it in English)."""
    return note(weights_sentence(model))


def _head(where: dict) -> str:
    return f"L{where['layer']}H{where['head']} ({number(where['value'])})"


def findings(data: dict) -> list[str]:
    """The sentences about the figures, each chosen by the analysis."""
    a, f16, n = data["analysis"], data["float16"], data["analysis"]["n_heads"]
    r, tok = a["ratio_pair"], a["ratio_token"]
    out = [
        _(
            RATIO_SENTENCES[ratio_key(r)],
            n=n,
            above=r["above_1"],
            below=r["below_1"],
            lo=number(r["min"]),
            hi=number(r["max"]),
            med=number(r["median"]),
        )
    ]
    same = (a["top_pair"]["layer"], a["top_pair"]["head"]) == (a["top_token"]["layer"], a["top_token"]["head"])
    out.append(
        _(
            TOKEN_SENTENCES[same],
            lo=number(tok["min"]),
            hi=number(tok["max"]),
            diff=number(a["max_abs_pair_minus_token"]),
            top=_head(a["top_pair"]),
            top_t=_head(a["top_token"]),
        )
    )
    sink = a["sink_first"]
    out.append(_(SINK_SENTENCES[sink["over_half"] > 0], k=sink["over_half"], n=n, hi=number(sink["max"])))
    if "sink_bos" in data.get("absent", {}):
        out.append(_("The text holds no BOS token (the tokenizer adds none), so there is no BOS sink to show."))
    out.append(
        _(
            "{k} of {n} heads would be frozen (saturation index ≥ 1) with the scale removed, though not with it; the median head's entropy / ln n falls from {h} to {h_u} without the scale.",
            k=a["frozen_only_unscaled"],
            n=n,
            h=number(a["normalized_entropy"]["median"]),
            h_u=number(a["normalized_entropy_unscaled"]["median"]),
        )
    )
    fits = f16["max_abs_logit_unscaled"] < f16["limit"]
    out.append(
        _(
            FLOAT16_SENTENCES[fits],
            limit=f"{f16['limit']:g}",
            s=number(f16["max_abs_logit"]),
            u=number(f16["max_abs_logit_unscaled"]),
            m=f"×{number(f16['margin'])}",
            m_u=f"×{number(f16['margin_unscaled'])}",
        )
    )
    return out


def attention_kind(model: dict) -> str:
    """The key of :data:`KINDS` for the model's attention."""
    if model.get("family") == "encoder-decoder":
        return "encoder_decoder"
    return "decoder" if model["causal"] else "encoder"


# The chapter's opening, by whether the model rotates q and k (RoPE) before the softmax sees them.
INTRO = {
    False: N_(
        "The blog post assumes the d_k components of q and k are independent with mean 0 and variance 1, so that Var(q·k) = d_k. "
        "We captured every attention call of {model} ({layers} layers × {heads}, d_k = {d_k}, scale = {scale}, {kind}) on {n} sequences ({tokens} tokens), padding left out, taking q and k as the softmax sees them, and measured how far that holds."
    ),
    True: N_(
        "The blog post assumes the d_k components of q and k are independent with mean 0 and variance 1, so that Var(q·k) = d_k. "
        "We captured every attention call of {model} ({layers} layers × {heads}, d_k = {d_k}, scale = {scale}, {kind}) on {n} sequences ({tokens} tokens), padding left out, taking q and k as the softmax sees them (after the rotary embedding), and measured how far that holds."
    ),
}


def render(env) -> str:
    data = env.data
    parts = _introduction(data)
    if not data["check"]["passed"]:
        parts.append(error_box(check_failed_sentence(data["check"])))
        return "\n".join(parts)
    parts.append(para(check_sentence(data["check"])))
    parts.append(
        para(
            _(
                "Two weightings. "
                "Pair-weighted moments count a token once per attended pair it is in (the split below is exact only for them); token-weighted ones count each token once. "
                "Both ratios divide the same Var(q·k) over attended pairs by d_k σ_q² σ_k²."
            )
        )
    )
    parts.append(bullets(findings(data)))
    parts.append(_heatmap_row(data))
    parts.append(
        para(
            _(
                "The pair-weighted ratio splits exactly: ratio − 1 = uneven per-dimension variances + non-zero means + covariance across dimensions + q–k correlation (a ladder of ever fuller predictions). "
                "'Within rows' is the share of Var(q·k) inside rows, the only part softmax feels. "
                "Row figures are over rows with two or more keys."
            )
        )
    )
    parts.append(_per_layer_table(data))
    parts += _striking_heads(data)
    return "\n".join(parts)


def _introduction(data: dict) -> list[str]:
    """The model, its attention and scale, what was probed; the scales of its layers and a note on its
    weights where it has them."""
    cfg, model = data["config"], data["model"]
    heads = (
        _("{n} heads", n=model["n_heads_q"])
        if model["n_heads_q"] == model["n_heads_kv"]
        else _("{n} query heads sharing {kv} key/value heads", n=model["n_heads_q"], kv=model["n_heads_kv"])
    )
    intro = _(
        INTRO[bool(model.get("rope_theta"))],
        model=model["name"],
        layers=model["n_layers"],
        heads=heads,
        d_k=model["d_k"],
        scale=model_scale_text(model),
        kind=_(KINDS[attention_kind(model)]),
        n=cfg["n_sequences"],
        tokens=cfg["n_tokens"],
    )
    parts = [para(intro)]
    scales = scales_sentence(model)
    if scales:
        parts.append(para(scales))
    if model.get("weights_note"):
        parts.append(weights_note(model))
    return parts


def check_failed_sentence(check: dict) -> str:
    """That the captured attention does not reproduce the model's probabilities: no statistics follow."""
    return _(
        "Check FAILED: the captured attention does not reproduce the model's own probabilities (largest difference {diff}, tolerance {tol}); no statistics are shown.",
        diff=number(check["max_abs_diff"]),
        tol=f"{check['tolerance']:g}",
    )


def check_sentence(check: dict) -> str:
    """That the probabilities rebuilt from the capture equal the model's own, to how much."""
    return _(
        "Check: the probabilities rebuilt from the captured q, k, scale and mask equal the model's own to {diff} on every one of {rows} rows (tolerance {tol}); every figure below rests on it.",
        diff=f"{check['max_abs_diff']:.1e}",
        rows=check["rows_checked"],
        tol=f"{check['tolerance']:g}",
    )


def _heatmap_row(data: dict) -> str:
    """The per-head heatmaps side by side on a wide screen, one under the other on a phone: each map
    stays legible at both."""
    cells = "".join(
        f'<div style="flex:1 1 340px;min-width:0">{figure_svg(fig, alt, caption)}</div>'
        for fig, alt, caption in heatmaps(data)
    )
    return f'<div style="display:flex;flex-wrap:wrap;gap:0 1.5em">{cells}</div>'


def _per_layer_table(data: dict) -> str:
    """A row per layer, a column per figure of :data:`COLUMNS` the result has."""
    model = data["model"]
    per_layer = data["per_layer"]
    columns = [f for f in COLUMNS if f in per_layer]
    header = [_("layer")] + [_(COLUMNS[f]) for f in columns]
    labels = layer_labels(model)
    rows = [[labels[i]] + [number(per_layer[f][i]) for f in columns] for i in range(model["n_layers"])]
    return table(header, rows, cls="numeric")


def _striking_heads(data: dict) -> list[str]:
    """The striking heads by kind (layer.head and value), with how many heads are of that kind in all;
    none when the result names none."""
    by_kind: dict[str, list[dict]] = {}
    for entry in data.get("striking_heads", []):
        by_kind.setdefault(entry["what"], []).append(entry)
    items = []
    for what, entries in by_kind.items():
        found = ", ".join(f"{e['layer']}.{e['head']} ({number(e['value'])})" for e in entries)
        counted = entries[0].get("of") or 0
        more = f" — {_('{n} heads in all', n=counted)}" if counted > len(entries) else ""
        kind = _(what) if what in STRIKING_KINDS else what  # a result of an older attnscale: as stored
        items.append(f"<li>{esc(_('{kind}: {heads}', msgctxt='striking', kind=kind, heads=found + more))}</li>")
    if not items:
        return []
    return [f"<p>{esc(_('Striking heads (layer.head, value)'))}</p><ul>{''.join(items)}</ul>"]
