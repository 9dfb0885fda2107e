"""The probe's summaries over heads, once the check has passed (:func:`summarise`): one row per layer ×
head, per-layer means, the float16 margins, the striking heads (:func:`striking_heads`) and the figures
the report's sentences are chosen by (:func:`analysis`); what each figure means (:data:`FIGURES`)."""

from __future__ import annotations

import numpy as np

from attnscale.softmax_rows import FLOAT16_MAX
from attnscale.stored_words import STRIKING_FROZEN, STRIKING_RANKINGS, STRIKING_RULES

__all__ = ["summarise", "striking_heads", "analysis", "FIGURES", "FLOAT16_MAX", "WEIGHTING"]


WEIGHTING = (
    "q_mean, q_var, k_mean, k_var, ratio_pair and its split are pair-weighted (each token counts once "
    "per attended pair it is in); the *_token moments and ratio_token count each token once. Both "
    "ratios divide the same Var(q·k) over attended pairs."
)

# What each per-head figure means; the report and the JSON carry these descriptions.
FIGURES = {
    "q_mean": "mean of the q components (pair-weighted)",
    "q_var": "variance of the q components, pooled over dimensions (pair-weighted)",
    "k_mean": "mean of the k components (pair-weighted)",
    "k_var": "variance of the k components, pooled over dimensions (pair-weighted)",
    "q_mean_token": "mean of the q components (token-weighted: each real query once)",
    "q_var_token": "variance of the q components, pooled (token-weighted)",
    "k_mean_token": "mean of the k components (token-weighted: each attended key once)",
    "k_var_token": "variance of the k components, pooled (token-weighted)",
    "qk_mean": "mean of q·k over attended pairs",
    "qk_var": "measured Var(q·k) over attended pairs",
    "qk_var_iid": "the blog post's prediction d_k·σ_q²·σ_k² (pair-weighted σ²)",
    "ratio_pair": "Var(q·k) / (d_k·σ_q²·σ_k²), pair-weighted σ²; 1 if the blog post's assumption held",
    "ratio_token": "Var(q·k) / (d_k·σ_q²·σ_k²), token-weighted σ²; 1 if the blog post's assumption held",
    "part_uneven_variances": "ratio_pair share: uneven per-dimension variances",
    "part_means": "ratio_pair share: non-zero per-dimension means",
    "part_cross_dimension": "ratio_pair share: covariance across dimensions within q and within k",
    "part_correlation": "ratio_pair share: dependence between a query and the keys it meets",
    "within_row_share": "share of the variance of q·k within rows (what softmax feels)",
    "entropy": "row entropy (nats), model's scale",
    "normalized_entropy": "row entropy / ln n, model's scale",
    "max_weight": "largest weight of a row, model's scale",
    "saturation_index": "std(logits)/√(2 ln n), model's scale (≥ 1: frozen)",
    "entropy_unscaled": "row entropy (nats), scale removed",
    "normalized_entropy_unscaled": "row entropy / ln n, scale removed",
    "max_weight_unscaled": "largest weight of a row, scale removed",
    "saturation_index_unscaled": "std(logits)/√(2 ln n), scale removed",
    "sink_first": "mean weight on the sequence's first token",
    "sink_bos": "mean weight on the BOS token",
    "sink_cls": "mean weight on [CLS]",
    "sink_sep": "mean weight on [SEP]",
    "sink_punct": "mean weight on punctuation tokens",
    "sink_any": "mean weight on the first token, special tokens or punctuation",
    "previous_token": "mean weight on the previous token",
    "next_token": "mean weight on the next token",
    "max_abs_logit": "largest |logit| over attended pairs, model's scale (float16 holds up to 65504)",
    "max_abs_logit_unscaled": "largest |q·k| over attended pairs, scale removed",
}


def summarise(per_head: list[dict], layers: list[dict], present: set[str]) -> dict:
    """The result's ``heads`` (one dict per layer × head), ``nulls`` (why a figure is None),
    ``figures`` (the meanings of those it has), ``absent`` (figures the text or the model cannot
    have), ``per_layer``, ``float16``, ``striking_heads`` and ``analysis``. ``per_head``: per layer,
    :func:`~attnscale.experiments.pretrained.probe.stats.head_figures`; ``layers``: per layer its facts (``causal``,
    ``n_heads_q``, ``n_heads_kv``); ``present``: the sink-candidate kinds the text holds."""
    absent = {
        f"sink_{name}": f"no {name} token in the text"
        for name in ("bos", "cls", "sep")
        if f"sink_{name}" in per_head[0] and name not in present
    }
    if all(layer["causal"] for layer in layers):
        absent["next_token"] = "causal: no query attends the next token"
    names = [f for f in FIGURES if f in per_head[0] and f not in absent]
    groups = layers[0]["n_heads_q"] // layers[0]["n_heads_kv"]
    heads, nulls = _heads(per_head, names, groups)
    grids = {f: np.array([layer[f] for layer in per_head]) for f in names}
    return {
        "heads": heads,
        "nulls": nulls,
        "figures": {f: FIGURES[f] for f in names},
        "absent": absent,
        "per_layer": {f: [_mean_of_finite(layer[f]) for layer in per_head] for f in names},
        "float16": _float16(grids),
        "striking_heads": striking_heads(grids),
        "analysis": analysis(grids),
    }


def _heads(per_head: list[dict], names: list[str], groups: int) -> tuple[list[dict], dict]:
    """One dict per layer × head (kv_head: the key/value head it reads); NaN → None, with why."""
    heads, nulls = [], {}
    for layer, figures in enumerate(per_head):
        n_heads = len(figures["pairs"])
        for head in range(n_heads):
            row = {"layer": layer, "head": head, "kv_head": head // groups, "pairs": int(figures["pairs"][head])}
            for f in names:
                value = float(figures[f][head])
                row[f] = value if np.isfinite(value) else None
                if row[f] is None:
                    nulls[f] = "no row with a choice (two or more keys) had this figure"
            heads.append(row)
    return heads, nulls


def _mean_of_finite(values) -> float | None:
    """Mean over heads of a figure, NaN heads (no rows had it) left out; None if none has it."""
    a = np.asarray(values, dtype=float)
    a = a[np.isfinite(a)]
    return float(a.mean()) if a.size else None


def _float16(grids: dict) -> dict:
    """The model's largest |logit| with and without its scale, against float16's largest number."""
    scaled, unscaled = float(np.max(grids["max_abs_logit"])), float(np.max(grids["max_abs_logit_unscaled"]))
    return {
        "limit": FLOAT16_MAX,
        "max_abs_logit": scaled,
        "max_abs_logit_unscaled": unscaled,
        "margin": FLOAT16_MAX / scaled if scaled > 0 else None,
        "margin_unscaled": FLOAT16_MAX / unscaled if unscaled > 0 else None,
    }


def _spread(values: np.ndarray) -> dict:
    v = values[np.isfinite(values)]
    return {"min": float(v.min()), "median": float(np.median(v)), "max": float(v.max())}


def _where(grid: np.ndarray, flat: int) -> dict:
    layer, head = np.unravel_index(flat, grid.shape)
    return {"layer": int(layer), "head": int(head), "value": float(grid[layer, head])}


def analysis(grids: dict[str, np.ndarray]) -> dict:
    """The figures the report's sentences are chosen by (the report computes nothing): spreads and
    counts over all heads. ``grids``: figure → (layers, heads) array."""
    pair, token = grids["ratio_pair"], grids["ratio_token"]
    sink = grids["sink_first"]
    frozen = (grids["saturation_index_unscaled"] >= 1) & (grids["saturation_index"] < 1)
    return {
        "n_heads": int(pair.size),
        "ratio_pair": {**_spread(pair), "above_1": int((pair > 1).sum()), "below_1": int((pair < 1).sum())},
        "ratio_token": {**_spread(token), "above_1": int((token > 1).sum()), "below_1": int((token < 1).sum())},
        "top_pair": _where(pair, int(np.nanargmax(pair))),
        "top_token": _where(token, int(np.nanargmax(token))),
        "max_abs_pair_minus_token": float(np.nanmax(np.abs(pair - token))),
        "sink_first": {**_spread(sink), "over_half": int((sink > 0.5).sum())},
        "normalized_entropy": _spread(grids["normalized_entropy"]),
        "normalized_entropy_unscaled": _spread(grids["normalized_entropy_unscaled"]),
        "frozen_only_unscaled": int(frozen.sum()),
    }


def striking_heads(figure: dict[str, np.ndarray], limit: int = 3) -> list[dict]:
    """Heads that stand out, at most ``limit`` per kind, strongest first; ``of`` says how many heads
    meet the kind's condition in all (None for the rankings). ``figure``: name → (layers, heads)
    array. Kinds: the largest and smallest variance ratios, previous- and next-token heads,
    attention sinks, near one-hot rows, and heads frozen only without the scale."""
    ratio = figure["ratio_pair"]
    everyone = np.ones_like(ratio, bool)
    kinds = [(what, name, everyone, sign * figure[name]) for what, name, sign in STRIKING_RANKINGS]
    for what, name, threshold in STRIKING_RULES:
        if name in figure:
            kinds.append((what, name, figure[name] > threshold, -figure[name]))
    if "saturation_index_unscaled" in figure:
        frozen = (figure["saturation_index_unscaled"] >= 1) & (figure["saturation_index"] < 1)
        kinds.append((STRIKING_FROZEN, "saturation_index_unscaled", frozen, -figure["saturation_index_unscaled"]))
    found = []
    for what, name, meets, key in kinds:
        chosen = [i for i in np.argsort(np.where(meets, key, np.inf), axis=None, kind="stable") if meets.flat[i]]
        for flat in chosen[:limit]:
            layer, head = np.unravel_index(flat, ratio.shape)
            found.append(
                {
                    "layer": int(layer),
                    "head": int(head),
                    "what": what,
                    "figure": name,
                    "value": float(figure[name][layer, head]),
                    "of": None if meets is everyone else len(chosen),
                }
            )
    return found
