"""Run the probe on a pretrained model: capture its attention, check the capture, gather statistics.

One code path for encoders (all-MiniLM-L6-v2, BERT), decoders (SmolLM2-135M, Llama, GPT-2, Gemma 2,
Qwen3 ...) and encoder-decoders (T5: the text is the encoder's input and, shifted right by one, the
decoder's): the model runs through :mod:`attnscale.experiments.pretrained.hf_attention`, which hands over q and
k exactly as its softmax sees them (after the rotary embedding, after a QK-norm), the additive mask
it built (padding, the causal mask, a sliding window: only the pairs it lets through count), its
scale, what else it adds to the logits (T5's position bias) or does to them (Gemma 2's soft-cap),
and its own eager probabilities. Grouped-query heads are handled by
:func:`attnscale.experiments.pretrained.probe.stats.call_sums`: each query head against its key/value head, the same
mapping as the model's ``repeat_kv``.

What each layer's scale is (:func:`scale_rule`): its value, and what it is in terms of d_k.

The check comes first and gates everything: the probabilities rebuilt in float64 from the captured
q, k, scale and mask must equal the model's own to within ``tolerance`` on every real query row of
every batch and layer. If they do not, the result says so and holds no statistics: figures about a
capture that does not reproduce the model would be about something else.

Each text is one sequence (never split or joined); batches are padded on the right (so positions
count from 0 in every sequence), and the tokenizer's attention mask marks the padding, which the
statistics then leave out (see :mod:`attnscale.experiments.pretrained.probe.stats`).

This module runs the probe (:func:`run_probe`, :func:`probe_model`); its parts, by job:
:mod:`~attnscale.experiments.pretrained.texts` (the texts and their sink-candidate tokens),
:mod:`~attnscale.experiments.pretrained.model_run` (the model's run and the captured call as NumPy, shared
with rescale), :mod:`~attnscale.experiments.pretrained.probe.stats` (the per-head sums and figures) and
:mod:`~attnscale.experiments.pretrained.probe.summary` (the summaries over heads).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import metadata

import numpy as np

from attnscale.errors import InputError, check_count, require
from attnscale.experiments.pretrained.probe.design import design, norm_gains
from attnscale.experiments.pretrained.probe.rows import captured_rows, first_query, head_rows
from attnscale.experiments.pretrained.probe.stats import add_sums, call_sums, check_probabilities, head_figures
from attnscale.experiments.pretrained.model_run import arrays_of, forward, model_inputs, rebuilt_probabilities
from attnscale.experiments.pretrained.probe.summary import (
    FIGURES,
    FLOAT16_MAX,
    WEIGHTING,
    analysis,
    striking_heads,
    summarise,
)
from attnscale.experiments.pretrained.texts import builtin_sentences, key_kinds, punctuation_ids, read_texts
from attnscale.i18n import N_, filled

# How close a scale must be to a closed form to be named by it (relative).
SCALE_RTOL = 1e-6

__all__ = [
    "builtin_sentences",
    "read_texts",
    "run_probe",
    "probe_model",
    "result_kind",
    "scale_rule",
    "model_inputs",
    "striking_heads",
    "analysis",
    "FIGURES",
    "FLOAT16_MAX",
    "WEIGHTING",
]


def scale_rule(scale: float, d_k: int, *, softcap: float | None = None, qk_norm: bool = False) -> dict:
    """What a layer's scale is, in terms of d_k: ``rule`` is "1/sqrt(d_k)", "1" (no scale),
    "1/sqrt(c)" (c = 1/scale², a whole number other than d_k: Gemma 2's query_pre_attn_scalar, GPT-2's
    scale by inverse layer index) or "constant"; ``times_sqrt_d_k`` is scale·√d_k (1 for the standard
    scale); ``softcap`` the cap of a soft-capped logit (None: none); ``qk_norm`` whether q and k are
    normalised before the product.

    >>> scale_rule(0.125, 64)["rule"], scale_rule(1.0, 64)["rule"], scale_rule(256 ** -0.5, 32)["c"]
    ('1/sqrt(d_k)', '1', 256)
    """
    c = 1.0 / scale**2 if scale > 0 else None
    if math.isclose(scale, d_k**-0.5, rel_tol=SCALE_RTOL):
        rule, c = "1/sqrt(d_k)", d_k
    elif math.isclose(scale, 1.0, rel_tol=SCALE_RTOL):
        rule, c = "1", None
    elif c is not None and round(c) >= 1 and math.isclose(c, round(c), rel_tol=SCALE_RTOL):
        rule, c = "1/sqrt(c)", int(round(c))
    else:
        rule, c = "constant", None
    return {
        "value": scale,
        "d_k": d_k,
        "rule": rule,
        "c": c,
        "times_sqrt_d_k": scale * math.sqrt(d_k),
        "softcap": softcap,
        "qk_norm": bool(qk_norm),
    }


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
        if current and (len(current) == batch_size or (len(current) + 1) * grown**2 > max_pairs):
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
    positions = "rotary (RoPE)" if rope else "relative position bias" if biased else "learned absolute"
    return {
        "name": loaded.name,
        "architecture": type(loaded.model).__name__,
        "model_type": getattr(config, "model_type", None),
        "family": loaded.family,
        "user": loaded.user,
        "n_parameters": sum(p.numel() for p in loaded.model.parameters()),
        "package_version": loaded.version,
        "weights_sha256": loaded.sha256,
        "weights_note": loaded.weights_note or None,
        "d_k": layers[0]["d_k"],
        "n_layers": len(layers),
        "n_heads_q": layers[0]["n_heads_q"],
        "n_heads_kv": layers[0]["n_heads_kv"],
        "causal": loaded.causal,
        "positions": positions,
        "rope_theta": rope.get("rope_theta"),
        "scale": layers[0]["scale"],
        "scales": [layer["scale"] for layer in layers],
        "scale_rules": [layer["rule"] for layer in layers],
        "causal_layers": [layer["causal"] for layer in layers],
        "cross_layers": [layer["cross"] for layer in layers],
    }


def _layer_of(call) -> dict:
    return {
        "name": call.name,
        "n_heads_q": int(call.q.shape[1]),
        "n_heads_kv": int(call.k.shape[1]),
        "d_k": int(call.q.shape[-1]),
        "scale": call.scale,
        "cross": call.cross,
        "causal": _is_causal(call.attended().cpu().numpy()),
        "rule": scale_rule(call.scale, int(call.q.shape[-1]), softcap=call.softcap, qk_norm=call.qk_norm),
    }


def result_kind(loaded) -> str:
    """The results kind of a probe of ``loaded``: ``probe/<name>`` for a bundled model (minilm,
    smollm2), ``probe/user/<slug of its name>`` for the user's own."""
    from attnscale import results
    from attnscale.experiments.pretrained.loading import MODELS, model_slug

    if not loaded.user:
        return "probe/" + next(short for short, full in MODELS.items() if full == loaded.name)
    return results.user_kind("probe", loaded.key or model_slug(loaded.name))


def probe_model(model, tokenizer, texts: list[str] | None = None, *, name: str | None = None, **options) -> dict:
    """Probe an already-loaded transformers model (encoder, decoder or encoder-decoder) with its
    tokenizer, e.g. in a notebook: the same data as ``attnscale probe --model PATH`` writes (the
    envelope's ``data``). ``texts``: one sequence each (default: the built-in sentences); ``name``:
    the model's name in the result (default: its ``config.name_or_path``); ``options``: those of
    :func:`run_probe`. The model is put in eval mode; its attention implementation is restored.

    To keep it where the report and ``--json`` look::

        data = probe_model(model, tokenizer)
        results.write(data["kind"], data, config=data["config"])    # probe/user/<name>
    """
    from attnscale.experiments.pretrained.loading import wrap

    loaded = wrap(model, tokenizer, name)
    return run_probe(loaded, builtin_sentences() if texts is None else texts, **options)


@dataclass
class _Probed:
    """What the batches add up to: the check, per layer its facts and its sums, the key kinds seen
    and whether any call had a position bias."""

    check: dict
    layers: list = field(default_factory=list)
    sums: list = field(default_factory=list)
    present: set = field(default_factory=set)
    biased: bool = False
    gains: list = field(default_factory=list)  # per layer: its q/k-norm gains (design.norm_gains) or None
    # the first sequence's query (rows.first_query), its tokens, and per layer every head's row there
    query: int = 0
    tokens: list = field(default_factory=list)
    candidates: list = field(default_factory=list)


def _token_lengths(tokenizer, model, texts: list[str]) -> list[int]:
    """Each text's token count, refused past the model's limit (lines are never split)."""
    limit = int(getattr(model.config, "max_position_embeddings", None) or 512)
    lengths = [len(ids) for ids in tokenizer(texts, truncation=False)["input_ids"]]
    for line, n in enumerate(lengths, start=1):
        if n > limit:
            raise InputError(
                f"texts: line {line} has {n} tokens, expected at most {limit} "
                "(the model's limit; lines are never split)"
            )
    return lengths


def _first_batch_layers(probed: _Probed, calls: list, model_type: str, model) -> None:
    """The layers, from the first batch's calls; refused when none was captured or the layers'
    head counts differ."""
    from attnscale.experiments.pretrained.hf_attention import UnsupportedAttention

    if not calls:
        raise UnsupportedAttention(
            f"model: {model_type} is not supported: no attention call of "
            f"{type(model).__name__} went through transformers' attention interface"
        )
    probed.layers = [_layer_of(c) for c in calls]
    probed.gains = [norm_gains(model, c) for c in calls]
    if len({(layer["n_heads_q"], layer["n_heads_kv"]) for layer in probed.layers}) > 1:
        raise UnsupportedAttention(
            f"model: {model_type} is not supported: its layers have different "
            "numbers of heads (the per-head tables need the same in every layer)"
        )
    probed.check["max_abs_diff_per_layer"] = [0.0] * len(probed.layers)
    probed.sums = [None] * len(probed.layers)


def _add_calls(probed: _Probed, calls: list, query_valid: np.ndarray, kinds: dict, decoder_kinds: dict | None) -> None:
    """One batch's calls checked against the model's own probabilities and added to the sums."""
    check = probed.check
    for i, call in enumerate(calls):
        arrays = arrays_of(call)
        if len(probed.candidates) < len(calls):  # the first batch: the rows the report may show
            probed.candidates.append(head_rows(arrays, probed.query))
        probed.biased = probed.biased or call.bias is not None
        diff = check_probabilities(rebuilt_probabilities(**arrays), call.weights.double().cpu().numpy(), query_valid)
        check["max_abs_diff_per_layer"][i] = max(check["max_abs_diff_per_layer"][i], diff)
        check["rows_checked"] += int(query_valid.sum()) * probed.layers[i]["n_heads_q"]
        # A decoder's self-attention reads the decoder's (shifted) tokens as keys.
        own_side = decoder_kinds is not None and not call.cross and "decoder" in call.name.lower()
        probed.sums[i] = add_sums(
            probed.sums[i],
            call_sums(
                **arrays,
                query_valid=query_valid,
                key_kinds=decoder_kinds if own_side else kinds,
                key_offset=None if call.cross else 0,
            ),
        )
    check["max_abs_diff"] = max(check["max_abs_diff_per_layer"])


def run_probe(
    loaded,
    texts: list[str],
    *,
    batch_size: int = 32,
    tolerance: float = 1e-5,
    max_pairs: int = 1 << 18,
    source: str = "built-in sentences",
    progress: Callable[[int, int, str], None] | None = None,
) -> dict:
    """Probe ``loaded`` (a :class:`attnscale.experiments.pretrained.loading.LoadedModel`) on ``texts``.

    Each text is one sequence. Batches hold at most ``batch_size`` sequences and ``max_pairs``
    (sequences × padded length²). Returns the result's data (plain, strict-JSON-ready): ``kind``
    (where the CLI writes it, :func:`result_kind`), ``config``, ``model`` (with each layer's
    :func:`scale_rule`), ``check`` and, when the check passed, ``heads`` (one dict per layer × head,
    see FIGURES; a figure no row had is None, its reason in ``nulls``), ``per_layer``, ``float16``
    and ``striking_heads``; for a model with per-head QK-norm, ``qk_design``: per such layer the logit std
    predicted from its q/k-norm gains beside the text's, and a verdict
    (:func:`attnscale.experiments.pretrained.probe.design.design`; None without); ``rows``: three heads' rows for the
    report's widget (:func:`attnscale.experiments.pretrained.probe.rows.captured_rows`). When the check failed ``heads`` is empty. Raises
    :class:`~attnscale.experiments.pretrained.hf_attention.UnsupportedAttention` for a model whose attention
    cannot be captured and rebuilt.
    """
    import torch

    from attnscale.experiments.pretrained.hf_attention import attention_calls

    threadpool_limits = require("threadpoolctl", "probe").threadpool_limits
    if not texts:
        raise InputError("texts: expected at least one sequence, got none")
    check_count("batch_size", batch_size)
    started = time.perf_counter()
    model, tokenizer = loaded.model, loaded.tokenizer
    model_type = getattr(model.config, "model_type", None) or type(model).__name__
    if tokenizer.pad_token is None:  # padding is masked: any token will do
        tokenizer.pad_token = tokenizer.eos_token
    lengths = _token_lengths(tokenizer, model, texts)
    batches = _batches(lengths, batch_size, max_pairs)
    vocab_punct = punctuation_ids(tokenizer)
    probed = _Probed(
        check={
            "tolerance": tolerance,
            "max_abs_diff_per_layer": [],
            "passed": True,
            "rows_checked": 0,
            "what": "max |p rebuilt in float64 from the captured q, k, scale, mask (and soft-cap, position bias) − "
            "the model's own eager probabilities| over every real query row",
        }
    )
    padding_side, tokenizer.padding_side = tokenizer.padding_side, "right"  # positions count from 0
    try:
        for b, indices in enumerate(batches):
            enc = tokenizer([texts[i] for i in indices], padding=True, truncation=False, return_tensors="pt")
            enc = model_inputs(model.config, enc)
            query_valid = enc["attention_mask"].numpy().astype(bool)
            calls: list = []
            with torch.no_grad(), attention_calls(model, on_call=calls.append):
                decoder_ids = forward(loaded, enc)
            if not probed.layers:
                _first_batch_layers(probed, calls, model_type, model)
                probed.query, probed.tokens = first_query(tokenizer, enc["input_ids"][0], query_valid[0])
            kinds = key_kinds(tokenizer, vocab_punct, enc["input_ids"].numpy(), query_valid)
            decoder_kinds = (
                None if decoder_ids is None else key_kinds(tokenizer, vocab_punct, decoder_ids.numpy(), query_valid)
            )
            probed.present |= {name for name, mask in kinds.items() if mask.any()}
            # Small matrices: one BLAS thread is many times faster than several fighting torch's threads.
            with threadpool_limits(limits=1, user_api="blas"):
                _add_calls(probed, calls, query_valid, kinds, decoder_kinds)
            if probed.check["max_abs_diff"] > tolerance:
                probed.check["passed"] = False
                break
            if progress is not None:
                progress(b + 1, len(batches), filled(N_("batch {b}/{n}"), b=b + 1, n=len(batches)))
    finally:
        tokenizer.padding_side = padding_side
    data = _probe_data(loaded, probed, source, len(texts), sum(lengths), batch_size, max_pairs, tolerance)
    data["seconds"] = {"load": loaded.seconds, "probe": time.perf_counter() - started}
    return data


def _probe_data(
    loaded,
    probed: _Probed,
    source: str,
    n_sequences: int,
    n_tokens: int,
    batch_size: int,
    max_pairs: int,
    tolerance: float,
) -> dict:
    """The result's data from what the batches added up to (its figures only when the check passed)."""
    data = {
        "kind": result_kind(loaded),
        "config": {
            "model": loaded.name,
            "model_version": loaded.version,
            "weights_sha256": loaded.sha256,
            "text": source,
            "n_sequences": n_sequences,
            "n_tokens": n_tokens,
            "batch_size": batch_size,
            "max_pairs": max_pairs,
            "tolerance": tolerance,
            "transformers": metadata.version("transformers"),
            # the user's model: where it was loaded from, so another model given the same
            # --name is refused rather than replacing this result (None for a notebook's)
            **({"model_path": loaded.path} if loaded.user else {}),
        },
        "model": _model_facts(loaded, probed.layers, probed.biased),
        "check": probed.check,
        "layers": [layer["name"] for layer in probed.layers],
        "weighting": WEIGHTING,
        "figures": FIGURES,
        "heads": [],
    }
    if probed.check["passed"]:
        data.update(summarise([head_figures(s) for s in probed.sums], probed.layers, probed.present))
        data["qk_design"] = design(probed.layers, probed.gains, probed.sums, data["per_layer"])
        data["rows"] = captured_rows(probed.candidates, data["heads"], probed.query, probed.tokens)
    return data
