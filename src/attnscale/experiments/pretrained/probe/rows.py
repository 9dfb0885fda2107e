"""A few real attention rows, as the model's softmax saw them: what the report's interactive row sets
beside its iid ones (the page computes nothing from a model; it reads these from the probe's result).

The rows are picked by a stated rule, never by how they look:

* the text is the probe's first sequence (the first built-in sentence by default), in the first batch;
* the query is that sequence's last real token that is not one of the tokenizer's special tokens
  ([CLS], [SEP], BOS ...: :func:`first_query`), so a causal model's row holds every word of the text;
* the heads are three, by the probe's per-head mean normalized entropy at the model's scale (the
  result's ``heads``): the lowest, the (lower) median and the highest (:func:`pick_heads`).

Per row (:func:`captured_rows`): its layer and head, why it was picked, the attended keys' positions
(indices into the text's ``tokens``; in an encoder-decoder's decoder self-attention, the text shifted right),
the model's own ``logits`` there (scale, soft-cap and additive mask or position bias included: what
its softmax took), ``qk`` (q·k, nothing applied), ``q_norm2`` = ‖q‖² and ``k_norm2`` = ‖k_j‖² (so a
reader can apply another scale rule, a QK-norm included, to the same q and k). Rounded to
:data:`DIGITS` significant digits (the capture is float32) to keep the result small.
"""

from __future__ import annotations

import numpy as np

__all__ = ["DIGITS", "PICKS", "first_query", "head_rows", "pick_heads", "captured_rows"]

DIGITS = 7
# The heads picked, in order: by their mean normalized entropy at the model's scale.
PICKS = ("lowest", "median", "highest")
RULE = (
    "the first sequence's last real token that is not a special token, as the query; in the heads of lowest, "
    "(lower) median and highest mean normalized entropy at the model's scale (the result's heads)"
)


def first_query(tokenizer, input_ids, valid) -> tuple[int, list[str]]:
    """The query position of the first sequence and its real tokens: ``input_ids`` (L,) ints and
    ``valid`` (L,) bool are its row of the first batch (right-padded). The last real token that is
    not a special token; the last real token when every token is special."""
    ids = np.asarray(input_ids)
    valid = np.asarray(valid, bool)
    real = np.flatnonzero(valid)
    special = set(getattr(tokenizer, "all_special_ids", None) or ())
    plain = [int(i) for i in real if int(ids[i]) not in special]
    query = plain[-1] if plain else int(real[-1])
    return query, [str(t) for t in tokenizer.convert_ids_to_tokens([int(ids[i]) for i in real])]


def head_rows(arrays: dict, query: int) -> dict[str, np.ndarray]:
    """Every head's row at ``query`` of the first sequence of one captured call: ``arrays`` as
    :func:`attnscale.experiments.pretrained.model_run.arrays_of` gives them (q: (B, H, L, d), k: (B, H_kv, S, d),
    scale, attended broadcastable to (B, H, L, S), bias or None, softcap or None). Returns
    ``qk``, ``logits``, ``k_norm2`` and ``attended``, each (H, S), and ``q_norm2`` (H,)."""
    q = arrays["q"][0, :, query, :]  # (H, d)
    k = np.repeat(arrays["k"][0], q.shape[0] // arrays["k"].shape[1], axis=0)  # (H, S, d)
    qk = np.einsum("hd,hsd->hs", q, k)
    scale, cap = arrays["scale"], arrays["softcap"]
    logits = scale * qk if cap is None else cap * np.tanh(scale * qk / cap)
    shape = (arrays["q"].shape[0], q.shape[0], arrays["q"].shape[2], k.shape[1])
    if arrays["bias"] is not None:
        logits = logits + np.broadcast_to(arrays["bias"], shape)[0, :, query, :]
    return {
        "qk": qk,
        "logits": logits,
        "q_norm2": np.einsum("hd,hd->h", q, q),
        "k_norm2": np.einsum("hsd,hsd->hs", k, k),
        "attended": np.broadcast_to(arrays["attended"], shape)[0, :, query, :],
    }


def pick_heads(heads: list[dict]) -> list[tuple[str, dict]]:
    """(pick, head) for each of :data:`PICKS`, from the result's ``heads`` (dicts with ``layer``,
    ``head``, ``normalized_entropy``; None: no row had it, left out). Ties keep the heads' order
    (layer, then head); the median of an even count is the lower one.

    >>> hs = [{"layer": 0, "head": h, "normalized_entropy": e} for h, e in enumerate([0.5, 0.9, None, 0.1, 0.7])]
    >>> [(pick, h["head"]) for pick, h in pick_heads(hs)]
    [('lowest', 3), ('median', 0), ('highest', 1)]
    """
    ranked = sorted(
        (h for h in heads if h.get("normalized_entropy") is not None), key=lambda h: h["normalized_entropy"]
    )
    if not ranked:
        return []
    return list(zip(PICKS, (ranked[0], ranked[(len(ranked) - 1) // 2], ranked[-1])))


def _rounded(values) -> list[float]:
    return [float(f"{float(v):.{DIGITS}g}") for v in np.asarray(values).ravel()]


def captured_rows(candidates: list[dict], heads: list[dict], query: int, tokens: list[str]) -> dict | None:
    """The result's ``rows``: ``candidates`` per layer (:func:`head_rows` of the first batch's calls),
    ``heads`` the result's per-head figures, ``query`` and ``tokens`` from :func:`first_query`. None when
    nothing was captured (no candidates, or no head with an entropy)."""
    if not candidates:
        return None
    rows = []
    for pick, head in pick_heads(heads):
        layer, h = head["layer"], head["head"]
        found = candidates[layer]
        keys = np.flatnonzero(found["attended"][h])
        rows.append(
            {
                "pick": pick,
                "layer": layer,
                "head": h,
                "normalized_entropy": head["normalized_entropy"],
                "keys": [int(j) for j in keys],
                "logits": _rounded(found["logits"][h, keys]),
                "qk": _rounded(found["qk"][h, keys]),
                "q_norm2": _rounded(found["q_norm2"][h])[0],
                "k_norm2": _rounded(found["k_norm2"][h, keys]),
            }
        )
    if not rows:
        return None
    return {"rule": RULE, "sequence": 0, "query": query, "tokens": tokens, "rows": rows}
