"""Run the probe on a pretrained model: capture its attention, check the capture, gather statistics.

One code path for encoders (all-MiniLM-L6-v2, BERT), decoders (SmolLM2-135M, Llama, GPT-2, Gemma 2,
Qwen3 ...) and encoder-decoders (T5: the text is the encoder's input and, shifted right by one, the
decoder's): the model runs through :mod:`attnscale.experiments.hf_attention`, which hands over q and
k exactly as its softmax sees them (after the rotary embedding, after a QK-norm), the additive mask
it built (padding, the causal mask, a sliding window: only the pairs it lets through count), its
scale, what else it adds to the logits (T5's position bias) or does to them (Gemma 2's soft-cap),
and its own eager probabilities. Grouped-query heads are handled by
:func:`attnscale.experiments.probe.call_sums`: each query head against its key/value head, the same
mapping as the model's ``repeat_kv``.

What each layer's scale is (:func:`scale_rule`): its value, and what it is in terms of d_k.

The check comes first and gates everything: the probabilities rebuilt in float64 from the captured
q, k, scale and mask must equal the model's own to within ``tolerance`` on every real query row of
every batch and layer. If they do not, the result says so and holds no statistics: figures about a
capture that does not reproduce the model would be about something else.

Each text is one sequence (never split or joined); batches are padded on the right (so positions
count from 0 in every sequence), and the tokenizer's attention mask marks the padding, which the
statistics then leave out (see :mod:`attnscale.experiments.probe`).
"""

from __future__ import annotations

import math
import time
import unicodedata
from importlib import metadata, resources
from typing import Callable

import numpy as np

from attnscale.errors import InputError, check_count, require
from attnscale.experiments.probe import add_sums, call_sums, check_probabilities, head_figures

# How close a scale must be to a closed form to be named by it (relative).
SCALE_RTOL = 1e-6

__all__ = ["builtin_sentences", "read_texts", "run_probe", "probe_model", "result_kind", "scale_rule",
           "model_inputs", "striking_heads", "analysis", "FIGURES", "FLOAT16_MAX", "WEIGHTING"]

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
    ``MASKED_BELOW``; the mask's value there (0 in these models) is kept as a bias, and so is the
    model's own additive bias (T5's position bias)."""
    attended = call.attended().cpu().numpy()
    bias = None
    if call.mask is not None and call.mask.dtype.is_floating_point:
        bias = np.where(attended, call.mask.double().cpu().numpy(), 0.0)
    if call.bias is not None:
        bias = call.bias.double().cpu().numpy() + (0.0 if bias is None else bias)
    return {"q": call.q.double().cpu().numpy(), "k": call.k.double().cpu().numpy(),
            "scale": call.scale, "attended": attended, "bias": bias, "softcap": call.softcap}


def rebuilt_probabilities(q, k, scale: float, attended, bias=None, softcap=None) -> np.ndarray:
    """float64 softmax(scale·q·kᵀ + bias) over attended keys, or softmax(cap·tanh(scale·q·kᵀ/cap) +
    bias) with a soft-cap; q: (B, H, L, d), k: (B, H_kv, S, d), each query head against key/value
    head h // (H / H_kv). Returns (B, H, L, S)."""
    from attnscale.softmax_rows import softmax

    k = np.repeat(k, q.shape[1] // k.shape[1], axis=1)
    logits = scale * (q @ np.swapaxes(k, -1, -2))
    if softcap is not None:
        logits = softcap * np.tanh(logits / softcap)
    logits = logits + (0.0 if bias is None else bias)
    return softmax(logits, np.broadcast_to(attended, logits.shape))


def scale_rule(scale: float, d_k: int, *, softcap: float | None = None, qk_norm: bool = False) -> dict:
    """What a layer's scale is, in terms of d_k: ``rule`` is "1/sqrt(d_k)", "1" (no scale),
    "1/sqrt(c)" (c = 1/scale², a whole number other than d_k: Gemma 2's query_pre_attn_scalar, GPT-2's
    scale by inverse layer index) or "constant"; ``times_sqrt_d_k`` is scale·√d_k (1 for the standard
    scale); ``softcap`` the cap of a soft-capped logit (None: none); ``qk_norm`` whether q and k are
    normalised before the product.

    >>> scale_rule(0.125, 64)["rule"], scale_rule(1.0, 64)["rule"], scale_rule(256 ** -0.5, 32)["c"]
    ('1/sqrt(d_k)', '1', 256)
    """
    c = 1.0 / scale ** 2 if scale > 0 else None
    if math.isclose(scale, d_k ** -0.5, rel_tol=SCALE_RTOL):
        rule, c = "1/sqrt(d_k)", d_k
    elif math.isclose(scale, 1.0, rel_tol=SCALE_RTOL):
        rule, c = "1", None
    elif c is not None and round(c) >= 1 and math.isclose(c, round(c), rel_tol=SCALE_RTOL):
        rule, c = "1/sqrt(c)", int(round(c))
    else:
        rule, c = "constant", None
    return {"value": scale, "d_k": d_k, "rule": rule, "c": c, "times_sqrt_d_k": scale * math.sqrt(d_k),
            "softcap": softcap, "qk_norm": bool(qk_norm)}


def _is_causal(attended) -> bool:
    """Bool (B, 1 or H, L, S) with L == S: no query attends a key after it."""
    L, S = attended.shape[-2:]
    return L == S and L > 1 and not np.any(attended & np.triu(np.ones((L, S), bool), 1))


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


def _model_facts(loaded, layers: list[dict], biased: bool) -> dict:
    """What the claims and the report need to know about the model (contract: name, d_k, n_layers,
    n_heads_q, n_heads_kv, causal; ``scale_rules``: :func:`scale_rule` per layer)."""
    config = loaded.model.config
    rope = getattr(config, "rope_parameters", None) or {}
    positions = ("rotary (RoPE)" if rope else "relative position bias" if biased else "learned absolute")
    return {"name": loaded.name, "architecture": type(loaded.model).__name__,
            "model_type": getattr(config, "model_type", None), "family": loaded.family, "user": loaded.user,
            "n_parameters": sum(p.numel() for p in loaded.model.parameters()),
            "package_version": loaded.version, "weights_sha256": loaded.sha256,
            "weights_note": loaded.weights_note or None,
            "d_k": layers[0]["d_k"], "n_layers": len(layers), "n_heads_q": layers[0]["n_heads_q"],
            "n_heads_kv": layers[0]["n_heads_kv"], "causal": loaded.causal,
            "positions": positions, "rope_theta": rope.get("rope_theta"),
            "scale": layers[0]["scale"], "scales": [layer["scale"] for layer in layers],
            "scale_rules": [layer["rule"] for layer in layers],
            "causal_layers": [layer["causal"] for layer in layers],
            "cross_layers": [layer["cross"] for layer in layers]}


def _layer_of(call) -> dict:
    return {"name": call.name, "n_heads_q": int(call.q.shape[1]), "n_heads_kv": int(call.k.shape[1]),
            "d_k": int(call.q.shape[-1]), "scale": call.scale, "cross": call.cross,
            "causal": _is_causal(call.attended().cpu().numpy()),
            "rule": scale_rule(call.scale, int(call.q.shape[-1]), softcap=call.softcap, qk_norm=call.qk_norm)}


def _forward(loaded, enc: dict) -> dict:
    """Run the model on one batch; returns the decoder's input ids (None but for an encoder-decoder,
    which reads the text shifted right by one: its start token, then every token but the last)."""
    model = loaded.model
    if loaded.family != "encoder-decoder":
        model.base_model(**enc)                          # no language-model head: its logits are not needed
        return None
    decoder_ids = _shifted_right(model.config, enc["input_ids"], enc["attention_mask"])
    model(**enc, decoder_input_ids=decoder_ids, decoder_attention_mask=enc["attention_mask"])
    return decoder_ids


def _shifted_right(config, ids, mask):
    """(B, L) → the decoder's input: the start token, then ids[:, :-1]; padding where ``mask`` is 0."""
    import torch

    start = getattr(config, "decoder_start_token_id", None)
    pad = getattr(config, "pad_token_id", None)
    if start is None or pad is None:
        raise InputError(f"model: {config.model_type} has no decoder_start_token_id or pad_token_id in its config; "
                         "expected both for an encoder-decoder")
    shifted = torch.cat([torch.full_like(ids[:, :1], start), ids[:, :-1]], dim=1)
    return torch.where(mask.bool(), shifted, torch.full_like(shifted, pad))


def model_inputs(config, enc) -> dict:
    """The tokenizer's output a model of ``config`` takes: ids and attention mask, and token type ids
    only for a model with token types (BERT); another tokenizer's would be read wrongly (GPT-2 adds
    them as word embeddings) or refused (Llama)."""
    keys = ("input_ids", "attention_mask") + (("token_type_ids",) if getattr(config, "type_vocab_size", 0) else ())
    return {key: enc[key] for key in keys if key in enc}


def result_kind(loaded) -> str:
    """The results kind of a probe of ``loaded``: ``probe/<name>`` for a bundled model (minilm,
    smollm2), ``probe/user/<slug of its name>`` for the user's own."""
    from attnscale import results
    from attnscale.experiments.pretrained import MODELS, model_slug

    if not loaded.user:
        return "probe/" + next(short for short, full in MODELS.items() if full == loaded.name)
    return results.user_kind("probe", model_slug(loaded.name))


def probe_model(model, tokenizer, texts: list[str] | None = None, *, name: str | None = None,
                **options) -> dict:
    """Probe an already-loaded transformers model (encoder, decoder or encoder-decoder) with its
    tokenizer, e.g. in a notebook: the same data as ``attnscale probe --model PATH`` writes (the
    envelope's ``data``). ``texts``: one sequence each (default: the built-in sentences); ``name``:
    the model's name in the result (default: its ``config.name_or_path``); ``options``: those of
    :func:`run_probe`. The model is put in eval mode; its attention implementation is restored.

    To keep it where the report and ``--json`` look::

        data = probe_model(model, tokenizer)
        results.write(data["kind"], data, config=data["config"])    # probe/user/<name>
    """
    from attnscale.experiments.pretrained import wrap

    loaded = wrap(model, tokenizer, name)
    return run_probe(loaded, builtin_sentences() if texts is None else texts, **options)


def run_probe(loaded, texts: list[str], *, batch_size: int = 32, tolerance: float = 1e-5,
              max_pairs: int = 1 << 18, source: str = "built-in sentences",
              progress: Callable[[int, int, str], None] | None = None) -> dict:
    """Probe ``loaded`` (a :class:`attnscale.experiments.pretrained.LoadedModel`) on ``texts``.

    Each text is one sequence. Batches hold at most ``batch_size`` sequences and ``max_pairs``
    (sequences × padded length²). Returns the result's data (plain, strict-JSON-ready): ``kind``
    (where the CLI writes it, :func:`result_kind`), ``config``, ``model`` (with each layer's
    :func:`scale_rule`), ``check`` and, when the check passed, ``heads`` (one dict per layer × head,
    see FIGURES; a figure no row had is None, its reason in ``nulls``), ``per_layer``, ``float16``
    and ``striking_heads``. When the check failed ``heads`` is empty. Raises
    :class:`~attnscale.experiments.hf_attention.UnsupportedAttention` for a model whose attention
    cannot be captured and rebuilt.
    """
    import torch

    from attnscale.experiments.hf_attention import UnsupportedAttention, attention_calls

    threadpool_limits = require("threadpoolctl", "probe").threadpool_limits
    if not texts:
        raise InputError("texts: expected at least one sequence, got none")
    check_count("batch_size", batch_size)
    started = time.perf_counter()
    model, tokenizer = loaded.model, loaded.tokenizer
    model_type = getattr(model.config, "model_type", None) or type(model).__name__
    if tokenizer.pad_token is None:                       # padding is masked: any token will do
        tokenizer.pad_token = tokenizer.eos_token
    limit = int(getattr(model.config, "max_position_embeddings", None) or 512)
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
    biased = False
    check = {"tolerance": tolerance, "max_abs_diff_per_layer": [], "passed": True, "rows_checked": 0,
             "what": "max |p rebuilt in float64 from the captured q, k, scale, mask (and soft-cap, position bias) − "
                     "the model's own eager probabilities| over every real query row"}
    padding_side, tokenizer.padding_side = tokenizer.padding_side, "right"   # positions count from 0
    try:
        for b, indices in enumerate(batches):
            enc = tokenizer([texts[i] for i in indices], padding=True, truncation=False, return_tensors="pt")
            enc = model_inputs(model.config, enc)
            query_valid = enc["attention_mask"].numpy().astype(bool)
            calls: list = []
            with torch.no_grad(), attention_calls(model, on_call=calls.append):
                decoder_ids = _forward(loaded, enc)
            if not calls:
                raise UnsupportedAttention(f"model: {model_type} is not supported: no attention call of "
                                           f"{type(model).__name__} went through transformers' attention interface")
            if not layers:
                layers = [_layer_of(c) for c in calls]
                if len({(layer["n_heads_q"], layer["n_heads_kv"]) for layer in layers}) > 1:
                    raise UnsupportedAttention(f"model: {model_type} is not supported: its layers have different "
                                               "numbers of heads (the per-head tables need the same in every layer)")
                check["max_abs_diff_per_layer"] = [0.0] * len(layers)
                sums = [None] * len(layers)
            kinds = _key_kinds(tokenizer, vocab_punct, enc["input_ids"].numpy(), query_valid)
            decoder_kinds = (None if decoder_ids is None else
                             _key_kinds(tokenizer, vocab_punct, decoder_ids.numpy(), query_valid))
            present |= {name for name, mask in kinds.items() if mask.any()}
            # Small matrices: one BLAS thread is many times faster than several fighting torch's threads.
            with threadpool_limits(limits=1, user_api="blas"):
                for i, call in enumerate(calls):
                    arrays = _arrays_of(call)
                    biased = biased or call.bias is not None
                    diff = check_probabilities(rebuilt_probabilities(**arrays), call.weights.double().cpu().numpy(),
                                               query_valid)
                    check["max_abs_diff_per_layer"][i] = max(check["max_abs_diff_per_layer"][i], diff)
                    check["rows_checked"] += int(query_valid.sum()) * layers[i]["n_heads_q"]
                    # A decoder's self-attention reads the decoder's (shifted) tokens as keys.
                    own_side = decoder_kinds is not None and not call.cross and "decoder" in call.name.lower()
                    sums[i] = add_sums(sums[i], call_sums(
                        **arrays, query_valid=query_valid, key_kinds=decoder_kinds if own_side else kinds,
                        key_offset=None if call.cross else 0))
            check["max_abs_diff"] = max(check["max_abs_diff_per_layer"])
            if check["max_abs_diff"] > tolerance:
                check["passed"] = False
                break
            if progress is not None:
                progress(b + 1, len(batches), f"batch {b + 1}/{len(batches)}")
    finally:
        tokenizer.padding_side = padding_side

    data = {
        "kind": result_kind(loaded),
        "config": {"model": loaded.name, "model_version": loaded.version, "weights_sha256": loaded.sha256,
                   "text": source, "n_sequences": len(texts), "n_tokens": sum(lengths),
                   "batch_size": batch_size, "max_pairs": max_pairs, "tolerance": tolerance,
                   "transformers": metadata.version("transformers")},
        "model": _model_facts(loaded, layers, biased),
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
        if all(layer["causal"] for layer in layers):
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
