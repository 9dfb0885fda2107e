"""Do a trained model's queries and keys obey the seed's assumptions? The statistics, per head.

The seed (and Vaswani et al. 2017, footnote 4) argues: if the d_k components of q and k are
independent with mean 0 and variance 1, then q·k has mean 0 and variance d_k, so dividing by √d_k
brings the logits back to variance 1. Here we measure, on real attention calls, how far that holds.

Everything is computed over the *attended pairs* (l, s): query l is a real (non-padded) query and
key s is attended by it (mask and causal flag). Padded keys are masked, padded queries are left out
of every average, and keys need not be the queries (cross-attention, a KV-cache step: S ≠ L).

Moments, pair-weighted. Drawing a pair uniformly from the attended pairs makes q and k random
vectors. A query then counts once per key it attends, a key once per query attending it; the q and k
moments ``q_mean, q_var, k_mean, k_var`` and everything in the split below use these pair weights,
so that the split of Var(q·k) is exact. Per head: μ_q (d_k,) and C_q (d_k × d_k) are q's mean and
covariance, likewise μ_k, C_k; the "component" mean and variance pool the d_k components:
m_q = mean_i μ_q,i, σ_q² = mean_i E[q_i²] − m_q².

Moments, token-weighted. Under a causal mask query l attends l + 1 keys and key s is attended by
L − s queries, so the pair weights favour late queries and early keys. ``q_mean_token`` ... count
each real query (a row with a key) once and each attended key once, and ``ratio_token`` divides the
same measured Var(q·k) (over pairs: what softmax sees) by d_k σ_q,tok² σ_k,tok². The two ratios can
rank heads differently; only the pair-weighted one splits exactly.

Var(q·k), measured, against a ladder of predictions, each adding one departure from the seed:

    V_iid  = d_k σ_q² σ_k²                                  the seed: iid components (any variance)
    V_var  = Σ_i C_q,ii C_k,ii                               + uneven per-dimension variances
    V_diag = V_var + Σ_i (μ_q,i² C_k,ii + μ_k,i² C_q,ii)     + non-zero per-dimension means
    V_ind  = tr(C_q C_k) + μ_kᵀ C_q μ_k + μ_qᵀ C_k μ_q        + covariance across dimensions

V_ind is exactly Var(q·k) if q and k were drawn *independently* from their pair marginals:
Var(q·k) = Σ_ij E[q_i q_j] E[k_i k_j] − (μ_q·μ_k)², and E[q_i q_j] = C_q,ij + μ_q,i μ_q,j. So what
is left, Var_measured − V_ind, is due only to dependence between a query and the keys it meets
(same token, same sentence). The ratio Var_measured / V_iid (1.0 when the seed's assumption holds)
splits additively, in units of V_iid, into

    ratio − 1 = (V_var − V_iid) + (V_diag − V_var) + (V_ind − V_diag) + (Var − V_ind)   (each / V_iid)
              =  uneven variances + means         + cross-dimension    + q–k correlation

The split is a ladder, so each part is "what this departure adds given the ones before it". The
first part can be negative: the pooled σ² also counts the spread of the per-dimension means as
variance, and the next step hands that back as "means".

Softmax only feels the spread of logits *within* a row (it is shift-invariant per row). By the law
of total variance, the total sum of squares of q·k over pairs is the within-row part plus the
between-row part; ``within_row_share`` is the former's fraction.

Row figures (from :func:`attnscale.row_health`, averaged over the real query rows that have a choice,
i.e. attend at least two keys: under a causal mask the first query attends only itself, weight 1 by
construction): entropy, normalized entropy, max weight and saturation index, with the model's own
scale and with the scale removed (logits = q·k, i.e. × √d_k for the standard scale). Attention
sinks: the mean weight a row puts on keys of given kinds ([CLS], [SEP], the first token,
punctuation). Positional heads: the mean weight on the previous and on the next token (needs to
know where query l sits among the keys: ``key_offset``).

Float16 margin: the largest |logit| over attended pairs, at the model's scale (``max_abs_logit``,
bias and soft-cap included) and with the scale removed (``max_abs_logit_unscaled`` = max |q·k|), to set against
float16's largest finite number, 65504. (Their sums, ``peak_*``, combine by maximum, not addition.)

Use: ``sums = call_sums(q, k, scale=..., ...)`` per call (plain data, additive across batches:
:func:`add_sums`), then :func:`head_figures` once. Arrays are NumPy, float64.
"""

from __future__ import annotations

import numpy as np

from attnscale.errors import InputError, InputTypeError
from attnscale.softmax_rows import row_health, softmax

__all__ = ["ROW_FIGURES", "call_sums", "add_sums", "head_figures", "check_probabilities"]

# The row_health figures averaged per head, with the model's scale and with the scale removed.
ROW_FIGURES = ("entropy", "normalized_entropy", "max_weight", "saturation_index")


def _array(x, name: str, ndim: int | None = None) -> np.ndarray:
    a = np.asarray(x)
    if a.dtype.kind not in "fiu":
        raise InputTypeError(f"{name}: expected real numbers, got dtype {a.dtype}")
    if ndim is not None and a.ndim != ndim:
        raise InputError(f"{name}: expected {ndim} dimensions, got shape {a.shape}")
    return a.astype(np.float64, copy=False)


def _bool(x, name: str, shape: tuple[int, ...]) -> np.ndarray:
    a = np.asarray(x)
    if a.dtype != np.bool_:
        raise InputTypeError(f"{name}: expected a boolean array (True = attend/real), got dtype {a.dtype}")
    try:
        return np.broadcast_to(a, shape)
    except ValueError:
        raise InputError(f"{name}: shape {a.shape} cannot broadcast to {shape}") from None


def _row_sums(values: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sum and count per head of a per-row figure (B, H, L) over the given rows, NaNs left out."""
    ok = rows & ~np.isnan(values)
    return np.where(ok, values, 0.0).sum(axis=(0, 2)), ok.sum(axis=(0, 2))


def _weighted_gram(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Σ_{b,t} w[b,h,t] x[b,h,t,:] x[b,h,t,:]ᵀ per head: x (B, H, T, d), w (B, H, T) → (H, d, d).
    One batched matrix product (BLAS), not an einsum: the probe's hot spot."""
    B, H, T, d = x.shape
    xh = np.moveaxis(x, 1, 0).reshape(H, B * T, d)
    wh = np.moveaxis(w, 1, 0).reshape(H, B * T, 1).astype(np.float64)
    return np.swapaxes(xh * wh, 1, 2) @ xh


def call_sums(
    q,
    k,
    *,
    scale: float,
    attended=None,
    bias=None,
    softcap: float | None = None,
    query_valid=None,
    key_kinds: dict | None = None,
    key_offset: int | None | str = "auto",
) -> dict[str, np.ndarray]:
    """Additive per-head sums of one attention call; finish with :func:`head_figures`.

    q: (B, H, L, d_k); k: (B, H_k, S, d_k), H a multiple of H_k (grouped-query heads are repeated).
    scale: the factor the model multiplies q·k by. attended: bool, broadcastable to (B, H, L, S),
    True = attend (None: all). bias: additive logits besides the scale (e.g. T5's position bias),
    broadcastable, or None. softcap: the model's logits are cap·tanh(scale·q·k / cap) + bias (Gemma 2)
    when given; the figures "with the scale removed" use q·k + bias, neither scale nor cap. query_valid: bool (B, L), False for padded queries (None: all real).
    key_kinds: {name: bool (B, S)} for the attention-sink figures. key_offset: query l sits at key
    position l + key_offset (for previous/next-token weights); "auto" = 0 when L == S, else none.
    """
    q, k = _checked_heads(q, k)
    B, H, L, _d = q.shape
    S = k.shape[2]
    if not isinstance(scale, (int, float)) or not np.isfinite(scale):
        raise InputError(f"scale: expected a finite number, got {scale!r}")
    att = np.ones((B, H, L, S), bool) if attended is None else _bool(attended, "attended", (B, H, L, S))
    qv = np.ones((B, L), bool) if query_valid is None else _bool(query_valid, "query_valid", (B, L))
    pairs = att & qv[:, None, :, None]  # (B, H, L, S)
    rows = pairs.sum(axis=-1) >= 2  # (B, H, L): rows with a choice

    x = q @ np.swapaxes(k, -1, -2)  # (B, H, L, S) raw q·k
    sums = _moment_sums(q, k, x, pairs)
    extra = 0.0 if bias is None else np.where(pairs, np.broadcast_to(_array(bias, "bias"), x.shape), 0.0)
    scaled = (scale * x if softcap is None else softcap * np.tanh(scale * x / softcap)) + extra
    sums.update(_logit_sums(x, scaled, extra, pairs, rows))
    p = softmax(scaled, pairs)  # (B, H, L, S)
    sums.update(_sink_sums(p, rows, key_kinds))
    offset = (0 if L == S else None) if key_offset == "auto" else key_offset
    sums.update(_neighbour_sums(p, pairs, rows, offset))
    return sums


def _checked_heads(q, k) -> tuple[np.ndarray, np.ndarray]:
    """q (B, H, L, d_k) and k (B, H, S, d_k) as float arrays, grouped-query key heads repeated to H;
    :class:`InputError` when their shapes do not fit."""
    q = _array(q, "q", 4)
    k = _array(k, "k", 4)
    B, H, L, d = q.shape
    if k.shape[0] != B or k.shape[3] != d or H % k.shape[1]:
        raise InputError(f"k: expected (B={B}, H_k dividing {H}, S, d_k={d}), got shape {k.shape}")
    if k.shape[1] != H:
        k = np.repeat(k, H // k.shape[1], axis=1)
    return q, k


def _moment_sums(q: np.ndarray, k: np.ndarray, x: np.ndarray, pairs: np.ndarray) -> dict[str, np.ndarray]:
    """The sums of the moments of q, k (pair- and token-weighted) and of q·k over the attended
    ``pairs`` (B, H, L, S); x: the raw q·k (B, H, L, S)."""
    n_row = pairs.sum(axis=-1)  # (B, H, L) keys per query
    n_col = pairs.sum(axis=-2)  # (B, H, S) queries per key
    q_tok, k_tok = (n_row > 0).astype(np.float64), (n_col > 0).astype(np.float64)
    xs = np.where(pairs, x, 0.0)
    row_mean = xs.sum(axis=-1) / np.maximum(n_row, 1)
    return {
        "pairs": n_row.sum(axis=(0, 2)).astype(np.float64),  # (H,)
        "q1": np.einsum("bhl,bhld->hd", n_row, q),  # (H, d)
        "q2": _weighted_gram(q, n_row),  # (H, d, d)
        "k1": np.einsum("bhs,bhsd->hd", n_col, k),
        "k2": _weighted_gram(k, n_col),
        "x1": xs.sum(axis=(0, 2, 3)),
        "x2": (xs * xs).sum(axis=(0, 2, 3)),
        "within": (np.where(pairs, x - row_mean[..., None], 0.0) ** 2).sum(axis=(0, 2, 3)),
        "q_tokens": q_tok.sum(axis=(0, 2)),  # (H,) token-weighted moments
        "q1_token": np.einsum("bhl,bhld->hd", q_tok, q),
        "q2_token": np.einsum("bhl,bhld->h", q_tok, q * q),
        "k_tokens": k_tok.sum(axis=(0, 2)),
        "k1_token": np.einsum("bhs,bhsd->hd", k_tok, k),
        "k2_token": np.einsum("bhs,bhsd->h", k_tok, k * k),
    }


def _logit_sums(x: np.ndarray, scaled: np.ndarray, extra, pairs: np.ndarray, rows: np.ndarray) -> dict[str, np.ndarray]:
    """The largest |logit| per head and the sums of the row figures (:data:`ROW_FIGURES`), with the
    model's logits ``scaled`` and with the scale removed (x + extra); all (B, H, L, S) but extra, the
    additive bias (0.0 or broadcastable)."""
    sums = {
        "peak_abs_logit": np.where(pairs, np.abs(scaled), 0.0).max(axis=(0, 2, 3), initial=0.0),
        "peak_abs_logit_unscaled": np.where(pairs, np.abs(x), 0.0).max(axis=(0, 2, 3), initial=0.0),
    }
    for suffix, logits in (("", scaled), ("_unscaled", x + extra)):
        health = row_health(logits, pairs, spectral=False)
        for name in ROW_FIGURES:
            sums[f"{name}{suffix}"], sums[f"{name}{suffix}_n"] = _row_sums(getattr(health, name), rows)
    return sums


def _sink_sums(p: np.ndarray, rows: np.ndarray, key_kinds: dict | None) -> dict[str, np.ndarray]:
    """The sums of the attention share each kind of key (e.g. the first token) takes per row, and of
    any of them ("any"); p: the weights (B, H, L, S); key_kinds: {name: bool (B, S)} or None."""
    B, _h, _l, S = p.shape
    kinds = {} if key_kinds is None else {n: _bool(m, f"key_kinds[{n!r}]", (B, S)) for n, m in key_kinds.items()}
    if kinds:
        kinds["any"] = np.logical_or.reduce(list(kinds.values()))
    sums = {}
    for name, is_kind in kinds.items():
        share = np.einsum("bhls,bs->bhl", p, is_kind.astype(np.float64))
        sums[f"sink_{name}"], sums[f"sink_{name}_n"] = _row_sums(share, rows)
    return sums


def _neighbour_sums(p: np.ndarray, pairs: np.ndarray, rows: np.ndarray, offset: int | None) -> dict[str, np.ndarray]:
    """The sums of the weight on the previous and the next token's key (query l sits at key position
    l + offset; None: no position is known, the sums are 0); p, pairs: (B, H, L, S)."""
    B, H, L, S = p.shape
    sums = {}
    for name, step in (("previous_token", -1), ("next_token", +1)):
        if offset is None:
            sums[name], sums[f"{name}_n"] = np.zeros(H), np.zeros(H, dtype=np.int64)
            continue
        j = np.arange(L) + offset + step  # the neighbour's key index
        inside = (j >= 0) & (j < S)
        jj = np.clip(j, 0, S - 1)
        weight = np.take_along_axis(p, np.broadcast_to(jj[None, None, :, None], (B, H, L, 1)), axis=-1)[..., 0]
        has = np.take_along_axis(pairs, np.broadcast_to(jj[None, None, :, None], (B, H, L, 1)), axis=-1)[..., 0]
        sums[name], sums[f"{name}_n"] = _row_sums(weight, rows & has & inside[None, None, :])
    return sums


def add_sums(total: dict | None, new: dict) -> dict:
    """Sums of two sets of calls of the same head layout (``total`` None: a copy of ``new``)."""
    if total is None:
        return {key: np.array(value, copy=True) for key, value in new.items()}
    if total.keys() != new.keys():
        raise InputError(f"new: expected the same figures as total, got {sorted(set(total) ^ set(new))} differing")
    return {
        key: np.maximum(total[key], new[key]) if key.startswith("peak_") else total[key] + new[key] for key in total
    }


def head_figures(sums: dict) -> dict[str, np.ndarray]:
    """Per-head figures (each an (H,) array) from :func:`call_sums` totals. See the module docstring."""
    N = sums["pairs"]
    with np.errstate(divide="ignore", invalid="ignore"):
        mu_q = sums["q1"] / N[:, None]
        mu_k = sums["k1"] / N[:, None]
        C_q = sums["q2"] / N[:, None, None] - mu_q[:, :, None] * mu_q[:, None, :]
        C_k = sums["k2"] / N[:, None, None] - mu_k[:, :, None] * mu_k[:, None, :]
        d = mu_q.shape[-1]
        m_q, m_k = mu_q.mean(axis=-1), mu_k.mean(axis=-1)
        diag_q, diag_k = np.einsum("hii->hi", C_q), np.einsum("hii->hi", C_k)
        var_q = (diag_q + mu_q**2).mean(axis=-1) - m_q**2
        var_k = (diag_k + mu_k**2).mean(axis=-1) - m_k**2

        mean_x = sums["x1"] / N
        total_ss = sums["x2"] - sums["x1"] ** 2 / N
        var_x = total_ss / N
        v_iid = d * var_q * var_k
        mt_q, mt_k = sums["q1_token"] / sums["q_tokens"][:, None], sums["k1_token"] / sums["k_tokens"][:, None]
        m_q_tok, m_k_tok = mt_q.mean(axis=-1), mt_k.mean(axis=-1)
        var_q_tok = sums["q2_token"] / (d * sums["q_tokens"]) - m_q_tok**2
        var_k_tok = sums["k2_token"] / (d * sums["k_tokens"]) - m_k_tok**2
        v_var = np.sum(diag_q * diag_k, axis=-1)
        v_diag = v_var + np.sum(mu_q**2 * diag_k + mu_k**2 * diag_q, axis=-1)
        v_ind = (
            np.einsum("hij,hij->h", C_q, C_k)
            + np.einsum("hi,hij,hj->h", mu_k, C_q, mu_k)
            + np.einsum("hi,hij,hj->h", mu_q, C_k, mu_q)
        )
        out = {
            "pairs": N,
            "q_mean": m_q,
            "q_var": var_q,
            "k_mean": m_k,
            "k_var": var_k,
            "q_mean_token": m_q_tok,
            "q_var_token": var_q_tok,
            "k_mean_token": m_k_tok,
            "k_var_token": var_k_tok,
            "qk_mean": mean_x,
            "qk_var": var_x,
            "qk_var_iid": v_iid,
            "ratio_pair": var_x / v_iid,
            "ratio_token": var_x / (d * var_q_tok * var_k_tok),
            "part_uneven_variances": (v_var - v_iid) / v_iid,
            "part_means": (v_diag - v_var) / v_iid,
            "part_cross_dimension": (v_ind - v_diag) / v_iid,
            "part_correlation": (var_x - v_ind) / v_iid,
            "within_row_share": sums["within"] / total_ss,
            "max_abs_logit": sums["peak_abs_logit"],
            "max_abs_logit_unscaled": sums["peak_abs_logit_unscaled"],
        }
        for key in sums:
            if f"{key}_n" in sums:  # a per-row figure: its mean
                out[key] = sums[key] / sums[f"{key}_n"]
    return out


def check_probabilities(recovered, model_weights, query_valid=None) -> float:
    """Largest |recovered − model's own| attention probability over real query rows.

    recovered, model_weights: (B, H, L, S); query_valid: bool (B, L) or None (all rows).
    """
    a = _array(recovered, "recovered", 4)
    b = _array(model_weights, "model_weights", 4)
    if a.shape != b.shape:
        raise InputError(f"model_weights: expected shape {a.shape} like recovered, got {b.shape}")
    diff = np.abs(a - b)
    if query_valid is not None:
        qv = _bool(query_valid, "query_valid", (a.shape[0], a.shape[2]))
        diff = np.where(qv[:, None, :, None], diff, 0.0)
    return float(diff.max()) if diff.size else 0.0
