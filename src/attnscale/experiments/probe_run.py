"""Run the probe on a pretrained model: capture its attention, check the capture, gather statistics.

One code path for the encoder (all-MiniLM-L6-v2) and the decoder (SmolLM2-135M): the model runs
through :mod:`attnscale.experiments.hf_attention`, which hands over q and k exactly as its softmax
sees them (after the rotary embedding in a Llama), the additive mask it built (padding, and the
causal mask in a decoder: only the causal pairs count), its scale and its own eager probabilities.
Grouped-query heads are handled by :func:`attnscale.experiments.probe.call_sums`: each query head
against its key/value head, the same mapping as the model's ``repeat_kv``.

The check comes first and gates everything: the probabilities rebuilt in float64 from the captured
q, k, scale and mask must equal the model's own to within ``tolerance`` on every real query row of
every batch and layer. If they do not, the result says so and holds no statistics: figures about a
capture that does not reproduce the model would be about something else.

Each text is one sequence (never split or joined); batches are padded on the right (so positions
count from 0 in every sequence), and the tokenizer's attention mask marks the padding, which the
statistics then leave out (see :mod:`attnscale.experiments.probe`).
"""

from __future__ import annotations

import time
import unicodedata
from importlib import metadata, resources
from typing import Callable

import numpy as np

from attnscale.errors import InputError, check_count, require
from attnscale.experiments.probe import add_sums, call_sums, check_probabilities, head_figures

__all__ = ["builtin_sentences", "read_texts", "run_probe", "striking_heads", "analysis", "FIGURES",
           "FLOAT16_MAX", "WEIGHTING"]

FLOAT16_MAX = 65504.0

WEIGHTING = ("q_mean, q_var, k_mean, k_var, ratio_pair and its split are pair-weighted (each token counts once "
             "per attended pair it is in); the *_token moments and ratio_token count each token once. Both "
             "ratios divide the same Var(q·k) over attended pairs.")

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
    "qk_var_iid": "the seed's prediction d_k·σ_q²·σ_k² (pair-weighted σ²)",
    "ratio_pair": "Var(q·k) / (d_k·σ_q²·σ_k²), pair-weighted σ²; 1 if the seed's assumption held",
    "ratio_token": "Var(q·k) / (d_k·σ_q²·σ_k²), token-weighted σ²; 1 if the seed's assumption held",
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


def builtin_sentences() -> list[str]:
    """The built-in varied English sentences, one per line of the package's sentences.txt."""
    text = resources.files("attnscale.experiments").joinpath("sentences.txt").read_text(encoding="utf-8")
    return [line for line in text.splitlines() if line.strip()]


def read_texts(path) -> list[str]:
    """One sequence per line of a UTF-8 file; blank lines skipped; lines are never split or joined."""
    try:
        with open(path, encoding="utf-8") as f:
            texts = [line.rstrip("\r\n") for line in f if line.strip()]
    except (OSError, UnicodeDecodeError) as err:
        raise InputError(f"text: cannot read {str(path)!r} as UTF-8 text: {err}") from None
    if not texts:
        raise InputError(f"text: expected at least one non-blank line in {str(path)!r}, got none")
    return texts



def _is_punctuation(token: str) -> bool:
    # WordPiece marks word-inner pieces with "##", byte-level BPE a leading space with "Ġ".
    token = token.removeprefix("##").removeprefix("Ġ")
    return bool(token) and all(unicodedata.category(c).startswith("P") for c in token)


def _punctuation_ids(tokenizer) -> np.ndarray:
    """Bool (vocabulary size,): which token ids are punctuation."""
    return np.array([_is_punctuation(t) for t in tokenizer.convert_ids_to_tokens(list(range(len(tokenizer))))])


def _key_kinds(tokenizer, vocab_punct: np.ndarray, input_ids: np.ndarray, valid: np.ndarray) -> dict:
    """Bool (B, S) masks of the sink candidates: the first real token, the special tokens the
    tokenizer defines ([CLS], [SEP], BOS), punctuation."""
    first = np.zeros_like(valid)
    first[np.arange(len(valid)), valid.argmax(axis=1)] = True
    kinds = {"first": first}
    for name, token_id in (("cls", tokenizer.cls_token_id), ("sep", tokenizer.sep_token_id),
                           ("bos", tokenizer.bos_token_id)):
        if token_id is not None:
            kinds[name] = (input_ids == token_id) & valid
    kinds["punct"] = vocab_punct[input_ids] & valid
    return kinds


def _arrays_of(call) -> dict:
    """A captured :class:`~attnscale.experiments.hf_attention.AttentionCall` as the float64 NumPy
    arguments of :func:`call_sums`: a key is attended where the additive mask is above
    ``MASKED_BELOW``; the mask's value there (0 in these models) is kept as a bias."""
    attended = call.attended().cpu().numpy()
    bias = None
    if call.mask is not None and call.mask.dtype.is_floating_point:
        bias = np.where(attended, call.mask.double().cpu().numpy(), 0.0)
    return {"q": call.q.double().cpu().numpy(), "k": call.k.double().cpu().numpy(),
            "scale": call.scale, "attended": attended, "bias": bias}


def rebuilt_probabilities(q, k, scale: float, attended, bias=None) -> np.ndarray:
    """float64 softmax(scale·q·kᵀ + bias) over attended keys; q: (B, H, L, d), k: (B, H_kv, S, d),
    each query head against key/value head h // (H / H_kv). Returns (B, H, L, S)."""
    from attnscale.softmax import softmax

    k = np.repeat(k, q.shape[1] // k.shape[1], axis=1)
    logits = scale * (q @ np.swapaxes(k, -1, -2)) + (0.0 if bias is None else bias)
    return softmax(logits, np.broadcast_to(attended, logits.shape))


def _batches(lengths: list[int], batch_size: int, max_pairs: int) -> list[list[int]]:
    """Consecutive indices, at most ``batch_size`` sequences and ``max_pairs`` = B·L² (padded) each,
    so a file of long lines cannot exhaust memory (the figures hold a few (B, H, L, L) arrays)."""
    batches: list[list[int]] = []
    current: list[int] = []
    longest = 0
    for i, n in enumerate(lengths):
        grown = max(longest, n)
        if current and (len(current) == batch_size or (len(current) + 1) * grown ** 2 > max_pairs):
            batches.append(current)
            current, grown = [], n
        current.append(i)
        longest = grown
    batches.append(current)
    return batches


def _model_facts(loaded, layers: list[dict]) -> dict:
    """What the claims and the report need to know about the model (contract: name, d_k, n_layers,
    n_heads_q, n_heads_kv, causal)."""
    config = loaded.model.config
    rope = getattr(config, "rope_parameters", None) or {}
    return {"name": loaded.name, "architecture": type(loaded.model).__name__,
            "package_version": loaded.version, "weights_sha256": loaded.sha256,
            "weights_note": loaded.weights_note or None,
            "d_k": layers[0]["d_k"], "n_layers": len(layers), "n_heads_q": layers[0]["n_heads_q"],
            "n_heads_kv": layers[0]["n_heads_kv"], "causal": loaded.causal,
            "positions": "rotary (RoPE)" if rope else "learned absolute",
            "rope_theta": rope.get("rope_theta"),
            "scale": layers[0]["scale"], "scales": [layer["scale"] for layer in layers]}


def run_probe(loaded, texts: list[str], *, batch_size: int = 32, tolerance: float = 1e-5,
              max_pairs: int = 1 << 18, source: str = "built-in sentences",
              progress: Callable[[int, int, str], None] | None = None) -> dict:
    """Probe ``loaded`` (a :class:`attnscale.experiments.pretrained.LoadedModel`) on ``texts``.

    Each text is one sequence. Batches hold at most ``batch_size`` sequences and ``max_pairs``
    (sequences × padded length²). Returns the result's data (plain, strict-JSON-ready): ``config``,
    ``model``, ``check`` and, when the check passed, ``heads`` (one dict per layer × head, see
    FIGURES; a figure no row had is None, its reason in ``nulls``), ``per_layer``, ``float16`` and
    ``striking_heads``. When the check failed ``heads`` is empty.
    """
    import torch

    from attnscale.experiments.hf_attention import attention_calls

    threadpool_limits = require("threadpoolctl", "probe").threadpool_limits
    if not texts:
        raise InputError("texts: expected at least one sequence, got none")
    check_count("batch_size", batch_size)
    started = time.perf_counter()
    model, tokenizer = loaded.model, loaded.tokenizer
    if tokenizer.pad_token is None:                       # padding is masked: any token will do
        tokenizer.pad_token = tokenizer.eos_token
    limit = int(getattr(model.config, "max_position_embeddings", 512))
    lengths = [len(ids) for ids in tokenizer(texts, truncation=False)["input_ids"]]
    for line, n in enumerate(lengths, start=1):
        if n > limit:
            raise InputError(f"texts: line {line} has {n} tokens, expected at most {limit} "
                             "(the model's limit; lines are never split)")
    batches = _batches(lengths, batch_size, max_pairs)
    vocab_punct = _punctuation_ids(tokenizer)
    sums: list[dict | None] = []
    layers: list[dict] = []
    present: set[str] = set()
    check = {"tolerance": tolerance, "max_abs_diff_per_layer": [], "passed": True, "rows_checked": 0,
             "what": "max |p rebuilt in float64 from the captured q, k, scale and mask − the model's own "
                     "eager probabilities| over every real query row"}
    for b, indices in enumerate(batches):
        enc = tokenizer([texts[i] for i in indices], padding=True, truncation=False, return_tensors="pt")
        query_valid = enc["attention_mask"].numpy().astype(bool)
        calls: list = []
        with torch.no_grad(), attention_calls(model, on_call=calls.append):
            model.base_model(**enc)                      # no language-model head: its logits are not needed
        if not calls:
            raise InputError(f"model: no attention call of {type(model).__name__} went through the attention "
                             "interface; expected a Hugging Face model that uses it")
        if not layers:
            layers = [{"name": c.name, "n_heads_q": int(c.q.shape[1]), "n_heads_kv": int(c.k.shape[1]),
                       "d_k": int(c.q.shape[-1]), "scale": c.scale} for c in calls]
            check["max_abs_diff_per_layer"] = [0.0] * len(layers)
            sums = [None] * len(layers)
        kinds = _key_kinds(tokenizer, vocab_punct, enc["input_ids"].numpy(), query_valid)
        present |= {name for name, mask in kinds.items() if mask.any()}
        # Small matrices: one BLAS thread is many times faster than several fighting torch's threads.
        with threadpool_limits(limits=1, user_api="blas"):
            for i, call in enumerate(calls):
                arrays = _arrays_of(call)
                diff = check_probabilities(rebuilt_probabilities(**arrays), call.weights.double().cpu().numpy(),
                                           query_valid)
                check["max_abs_diff_per_layer"][i] = max(check["max_abs_diff_per_layer"][i], diff)
                check["rows_checked"] += int(query_valid.sum()) * layers[i]["n_heads_q"]
                sums[i] = add_sums(sums[i], call_sums(**arrays, query_valid=query_valid, key_kinds=kinds,
                                                      key_offset=0))
        check["max_abs_diff"] = max(check["max_abs_diff_per_layer"])
        if check["max_abs_diff"] > tolerance:
            check["passed"] = False
            break
        if progress is not None:
            progress(b + 1, len(batches), f"batch {b + 1}/{len(batches)}")

    data = {
        "config": {"model": loaded.name, "model_version": loaded.version, "weights_sha256": loaded.sha256,
                   "text": source, "n_sequences": len(texts), "n_tokens": sum(lengths),
                   "batch_size": batch_size, "max_pairs": max_pairs, "tolerance": tolerance,
                   "transformers": metadata.version("transformers")},
        "model": _model_facts(loaded, layers),
        "check": check,
        "layers": [layer["name"] for layer in layers],
        "weighting": WEIGHTING,
        "figures": FIGURES,
        "heads": [],
    }
    if check["passed"]:
        per_head = [head_figures(s) for s in sums]
        absent = {f"sink_{name}": f"no {name} token in the text" for name in ("bos", "cls", "sep")
                  if f"sink_{name}" in per_head[0] and name not in present}
        if loaded.causal:
            absent["next_token"] = "causal: no query attends the next token"
        names = [f for f in FIGURES if f in per_head[0] and f not in absent]
        groups = layers[0]["n_heads_q"] // layers[0]["n_heads_kv"]
        data["heads"], data["nulls"] = _heads(per_head, names, groups)
        data["figures"] = {f: FIGURES[f] for f in names}
        data["absent"] = absent
        data["per_layer"] = {f: [_mean_of_finite(layer[f]) for layer in per_head] for f in names}
        grids = {f: np.array([layer[f] for layer in per_head]) for f in names}
        data["float16"] = _float16(grids)
        data["striking_heads"] = striking_heads(grids)
        data["analysis"] = analysis(grids)
    data["seconds"] = {"load": loaded.seconds, "probe": time.perf_counter() - started}
    return data


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
    return {"limit": FLOAT16_MAX, "max_abs_logit": scaled, "max_abs_logit_unscaled": unscaled,
            "margin": FLOAT16_MAX / scaled if scaled > 0 else None,
            "margin_unscaled": FLOAT16_MAX / unscaled if unscaled > 0 else None}


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
        "top_pair": _where(pair, int(np.nanargmax(pair))), "top_token": _where(token, int(np.nanargmax(token))),
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
    kinds = [("largest Var(q·k) ratio (pair-weighted)", "ratio_pair", everyone, -ratio),
             ("smallest Var(q·k) ratio (pair-weighted)", "ratio_pair", everyone, ratio),
             ("largest Var(q·k) ratio (token-weighted)", "ratio_token", everyone, -figure["ratio_token"])]
    rules = [("mostly attends to the previous token", "previous_token", 0.5),
             ("mostly attends to the next token", "next_token", 0.5),
             ("attention sink: most weight on the first token", "sink_first", 0.5),
             ("attention sink: most weight on the first token, special tokens or punctuation", "sink_any", 0.5),
             ("near one-hot rows with the model's scale (max weight > 0.9)", "max_weight", 0.9)]
    for what, name, threshold in rules:
        if name in figure:
            kinds.append((what, name, figure[name] > threshold, -figure[name]))
    if "saturation_index_unscaled" in figure:
        frozen = (figure["saturation_index_unscaled"] >= 1) & (figure["saturation_index"] < 1)
        kinds.append(("frozen (saturation ≥ 1) only without the scale", "saturation_index_unscaled",
                      frozen, -figure["saturation_index_unscaled"]))
    found = []
    for what, name, meets, key in kinds:
        chosen = [i for i in np.argsort(np.where(meets, key, np.inf), axis=None, kind="stable") if meets.flat[i]]
        for flat in chosen[:limit]:
            layer, head = np.unravel_index(flat, ratio.shape)
            found.append({"layer": int(layer), "head": int(head), "what": what, "figure": name,
                          "value": float(figure[name][layer, head]),
                          "of": None if meets is everyone else len(chosen)})
    return found
