"""Run the probe on a pretrained encoder: capture its attention, check the capture, gather statistics.

The check comes first and gates everything: the probabilities rebuilt from the captured q, k, scale
and mask must equal the model's own (``output_attentions=True`` in its eager implementation) to
within ``tolerance`` on every real query row of every batch. If they do not, the result says so and
holds no statistics: figures about a capture that does not reproduce the model would be about
something else.

Each text is one sequence (never split or joined); batches are padded, and the tokenizer's
attention mask marks the padding, which the statistics then leave out (see
:mod:`attnscale.experiments.probe`).
"""

from __future__ import annotations

import time
import unicodedata
from importlib import metadata, resources
from typing import Callable

import numpy as np

from attnscale.errors import InputError
from attnscale.experiments.probe import add_sums, call_sums, check_probabilities, head_figures

__all__ = ["builtin_sentences", "read_texts", "run_probe", "striking_heads", "FIGURES"]

# What each per-head figure means; the report and the JSON carry these descriptions.
FIGURES = {
    "q_mean": "mean of the q components (pair-weighted)",
    "q_var": "variance of the q components, pooled over dimensions (pair-weighted)",
    "k_mean": "mean of the k components (pair-weighted)",
    "k_var": "variance of the k components, pooled over dimensions (pair-weighted)",
    "qk_mean": "mean of q·k over attended pairs",
    "qk_var": "measured Var(q·k) over attended pairs",
    "qk_var_iid": "the seed's prediction d_k·σ_q²·σ_k²",
    "ratio": "Var(q·k) / (d_k·σ_q²·σ_k²); 1 if the seed's assumption held",
    "part_uneven_variances": "ratio share: uneven per-dimension variances",
    "part_means": "ratio share: non-zero per-dimension means",
    "part_cross_dimension": "ratio share: covariance across dimensions within q and within k",
    "part_correlation": "ratio share: dependence between a query and the keys it meets",
    "within_row_share": "share of the variance of q·k within rows (what softmax feels)",
    "entropy": "row entropy (nats), model's scale",
    "normalized_entropy": "row entropy / ln n, model's scale",
    "max_weight": "largest weight of a row, model's scale",
    "saturation_index": "std(logits)/√(2 ln n), model's scale (≥ 1: frozen)",
    "entropy_unscaled": "row entropy (nats), scale removed",
    "normalized_entropy_unscaled": "row entropy / ln n, scale removed",
    "max_weight_unscaled": "largest weight of a row, scale removed",
    "saturation_index_unscaled": "std(logits)/√(2 ln n), scale removed",
    "sink_cls": "mean weight on [CLS]",
    "sink_sep": "mean weight on [SEP]",
    "sink_punct": "mean weight on punctuation tokens",
    "sink_any": "mean weight on [CLS], [SEP] or punctuation",
    "previous_token": "mean weight on the previous token",
    "next_token": "mean weight on the next token",
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
    token = token.removeprefix("##")
    return bool(token) and all(unicodedata.category(c).startswith("P") for c in token)


def _punctuation_ids(tokenizer) -> np.ndarray:
    """Bool (vocabulary size,): which token ids are punctuation."""
    return np.array([_is_punctuation(t) for t in tokenizer.convert_ids_to_tokens(list(range(len(tokenizer))))])


def _key_kinds(tokenizer, vocab_punct: np.ndarray, input_ids: np.ndarray) -> dict[str, np.ndarray]:
    """Bool (B, S) masks of [CLS], [SEP] and punctuation keys."""
    return {"cls": input_ids == tokenizer.cls_token_id, "sep": input_ids == tokenizer.sep_token_id,
            "punct": vocab_punct[input_ids]}


def _arrays_of(call) -> dict:
    """The captured call as the float64 NumPy arguments of :func:`call_sums`."""
    attended = call.attended().cpu().numpy()
    bias = None
    if call.attn_mask is not None and call.attn_mask.dtype.is_floating_point:
        bias = np.where(attended, call.attn_mask.double().cpu().numpy(), 0.0)
    return {"q": call.q.double().cpu().numpy(), "k": call.keys_for_queries().cpu().numpy(),
            "scale": call.scale, "attended": attended, "bias": bias}


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


def run_probe(loaded, texts: list[str], *, batch_size: int = 32, tolerance: float = 1e-5,
              max_pairs: int = 1 << 18, progress: Callable[[int, int, str], None] | None = None) -> dict:
    """Probe ``loaded`` (a :class:`attnscale.experiments.pretrained.LoadedModel`) on ``texts``.

    Each text is one sequence. Batches hold at most ``batch_size`` sequences and ``max_pairs``
    (sequences × padded length²). Returns plain data: config, environment, the check, and per
    layer × head figures (see FIGURES); without figures when the check failed.
    """
    import torch

    from attnscale.provenance import environment
    from attnscale.torch.capture import capture_sdpa

    if not texts:
        raise InputError("texts: expected at least one sequence, got none")
    if not isinstance(batch_size, int) or batch_size < 1:
        raise InputError(f"batch_size: expected a positive integer, got {batch_size!r}")
    started = time.perf_counter()
    model, tokenizer = loaded.model, loaded.tokenizer
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
    check = {"tolerance": tolerance, "max_abs_diff_per_layer": [], "passed": True, "rows_checked": 0}
    for b, indices in enumerate(batches):
        enc = tokenizer([texts[i] for i in indices], padding=True, truncation=False, return_tensors="pt")
        query_valid = enc["attention_mask"].numpy().astype(bool)
        with torch.no_grad(), capture_sdpa(model) as cap:
            own = model(**enc, output_attentions=True).attentions
        if cap.skipped or own is None or len(cap.calls) != len(own) or not own:
            raise InputError(
                f"model: captured {len(cap.calls)} attention calls but the model returned "
                f"{0 if own is None else len(own)} attention maps (skipped: {cap.skipped}); "
                "expected a BERT-style encoder in its eager attention implementation")
        if not layers:
            layers = [{"name": c.name, "n_heads": int(c.q.shape[1]), "d_k": int(c.q.shape[-1]), "scale": c.scale}
                      for c in cap.calls]
            check["max_abs_diff_per_layer"] = [0.0] * len(layers)
            sums = [None] * len(layers)
        kinds = _key_kinds(tokenizer, vocab_punct, enc["input_ids"].numpy())
        for i, (call, weights) in enumerate(zip(cap.calls, own)):
            diff = check_probabilities(call.probabilities().cpu().numpy(), weights.double().cpu().numpy(),
                                       query_valid)
            check["max_abs_diff_per_layer"][i] = max(check["max_abs_diff_per_layer"][i], diff)
            check["rows_checked"] += int(query_valid.sum()) * layers[i]["n_heads"]
            sums[i] = add_sums(sums[i], call_sums(**_arrays_of(call), query_valid=query_valid,
                                                  key_kinds=kinds, key_offset=0))
        if max(check["max_abs_diff_per_layer"]) > tolerance:
            check["passed"] = False
            break
        if progress is not None:
            progress(b + 1, len(batches), f"batch {b + 1}/{len(batches)}")

    result = {
        "kind": "probe",
        "config": {"model": loaded.name, "model_version": loaded.version, "weights_sha256": loaded.sha256,
                   "n_sequences": len(texts), "n_tokens": sum(lengths), "batch_size": batch_size,
                   "max_pairs": max_pairs, "tolerance": tolerance,
                   "transformers": metadata.version("transformers")},
        "seed": None,  # nothing random: eval mode, no dropout, fixed texts
        "environment": environment(),
        "check": check,
        "layers": [layer["name"] for layer in layers],
        "n_heads": layers[0]["n_heads"],
        "d_k": layers[0]["d_k"],
        "scale": layers[0]["scale"],
        "scales": [layer["scale"] for layer in layers],
        "figures": FIGURES,
    }
    if check["passed"]:
        per_head = [head_figures(s) for s in sums]
        result["per_head"] = {f: [layer[f].tolist() for layer in per_head] for f in FIGURES if f in per_head[0]}
        result["per_layer"] = {f: [_mean_of_finite(row) for row in rows] for f, rows in result["per_head"].items()}
        result["striking_heads"] = striking_heads(result["per_head"])
    result["seconds"] = time.perf_counter() - started
    return result


def _mean_of_finite(values) -> float:
    """Mean over heads of a figure, NaN heads (no rows had it) left out; NaN if none has it."""
    a = np.asarray(values, dtype=float)
    a = a[np.isfinite(a)]
    return float(a.mean()) if a.size else float("nan")


def striking_heads(per_head: dict[str, list[list[float]]], limit: int = 3) -> list[dict]:
    """Heads that stand out, at most ``limit`` per kind, strongest first; ``of`` says how many heads
    meet the kind's condition in all (None for the rankings). Kinds: the largest and smallest variance
    ratios, previous- and next-token heads, attention sinks, near one-hot rows, and heads frozen
    only without the scale."""
    figure = {f: np.asarray(v, dtype=float) for f, v in per_head.items()}
    ratio = figure["ratio"]
    everyone = np.ones_like(ratio, bool)
    kinds = [("largest Var(q·k) ratio", "ratio", everyone, -ratio),
             ("smallest Var(q·k) ratio", "ratio", everyone, ratio)]
    rules = [("mostly attends to the previous token", "previous_token", 0.5),
             ("mostly attends to the next token", "next_token", 0.5),
             ("attention sink: most weight on [CLS]/[SEP]/punctuation", "sink_any", 0.5),
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
