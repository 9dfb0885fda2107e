"""The probe's statistics against direct computation, pair by pair, in plain NumPy loops.

Inputs have padded queries, padded keys, S ≠ L, grouped-query heads and an additive bias, so a
statistic that counted padding, mixed rows of different sentences or dropped a head would differ.
"""

import numpy as np
import pytest

from attnscale.i18n import language
from attnscale.errors import InputError, InputTypeError
from attnscale.experiments.pretrained.probe.stats import add_sums, call_sums, check_probabilities, head_figures
from attnscale.softmax_rows import row_health, softmax


def random_call(seed=0, B=3, H=4, H_k=2, L=5, S=7, d=6, means=True, causal=False):
    rng = np.random.default_rng(seed)
    if causal:
        S = L
    # Non-zero means, uneven scales and a q–k coupling, so every part of the split is non-trivial.
    q = rng.normal(size=(B, H, L, d)) * rng.uniform(0.3, 2.0, size=d) + (0.7 if means else 0.0)
    k = rng.normal(size=(B, H_k, S, d)) * rng.uniform(0.3, 2.0, size=d) - (0.4 if means else 0.0)
    q[..., :L, :] += 0.8 * np.repeat(k, H // H_k, axis=1)[..., :L, :]
    attended = np.ones((B, 1, L, S), bool)
    attended[1, ..., 5:] = False  # sentence 1: two padded keys
    attended[2, ..., 3:] = False  # sentence 2: four padded keys
    if causal:  # query l attends keys 0..l: row 0 has one key, no choice
        attended = attended & np.tril(np.ones((L, S), bool))
    query_valid = np.ones((B, L), bool)
    query_valid[2, 3:] = False  # sentence 2: two padded queries
    bias = rng.normal(size=(1, H, L, S)) * 0.5
    key_kinds = {"cls": np.zeros((B, S), bool), "punct": rng.random((B, S)) < 0.3}
    key_kinds["cls"][:, 0] = True
    return dict(q=q, k=k, scale=0.41, attended=attended, bias=bias, query_valid=query_valid, key_kinds=key_kinds)


def direct(call, key_offset=0):
    """Every figure by enumerating (query, key) pairs head by head."""
    q, k = call["q"], np.repeat(call["k"], call["q"].shape[1] // call["k"].shape[1], axis=1)
    B, H, L, d = q.shape
    S = k.shape[2]
    att = np.broadcast_to(call["attended"], (B, H, L, S))
    out = {}
    for h in range(H):
        qs, ks, xs, rows, health, health_u, sinks, prev, nxt = [], [], [], [], [], [], [], [], []
        q_tokens, k_tokens, logits_all = [], {}, []
        for b in range(B):
            for pos in range(L):
                keys = [s for s in range(S) if att[b, h, pos, s]]
                if not call["query_valid"][b, pos] or not keys:
                    continue
                row = [float(q[b, h, pos] @ k[b, h, s]) for s in keys]
                for s, x in zip(keys, row):
                    qs.append(q[b, h, pos]), ks.append(k[b, h, s]), xs.append(x)
                    k_tokens[(b, s)] = k[b, h, s]
                q_tokens.append(q[b, h, pos])
                rows.append(row)
                bias = np.array([call["bias"][0, h, pos, s] for s in keys])
                logits = call["scale"] * np.array(row) + bias
                logits_all.extend(logits)
                if len(keys) < 2:  # no choice: no row figures
                    continue
                health.append(row_health(logits, spectral=False))
                health_u.append(row_health(np.array(row) + bias, spectral=False))
                p = dict(zip(keys, softmax(logits)))
                sinks.append(
                    sum(w for s, w in p.items() if call["key_kinds"]["cls"][b, s] or call["key_kinds"]["punct"][b, s])
                )
                if pos + key_offset - 1 in p:
                    prev.append(p[pos + key_offset - 1])
                if pos + key_offset + 1 in p:
                    nxt.append(p[pos + key_offset + 1])
        qs, ks, xs = np.array(qs), np.array(ks), np.array(xs)
        var_q, var_k = qs.var(), ks.var()  # all components pooled
        q_tok, k_tok = np.array(q_tokens), np.array(list(k_tokens.values()))
        total = np.sum((xs - xs.mean()) ** 2)
        within = sum(np.sum((np.array(r) - np.mean(r)) ** 2) for r in rows)
        out[h] = {
            "pairs": len(xs),
            "q_mean": qs.mean(),
            "q_var": var_q,
            "k_mean": ks.mean(),
            "k_var": var_k,
            "q_mean_token": q_tok.mean(),
            "q_var_token": q_tok.var(),
            "k_mean_token": k_tok.mean(),
            "k_var_token": k_tok.var(),
            "ratio_token": xs.var() / (d * q_tok.var() * k_tok.var()),
            "max_abs_logit": np.abs(logits_all).max(),
            "max_abs_logit_unscaled": np.abs(xs).max(),
            "qk_mean": xs.mean(),
            "qk_var": xs.var(),
            "ratio_pair": xs.var() / (d * var_q * var_k),
            "within_row_share": within / total,
            "entropy": np.mean([x.entropy for x in health]),
            "max_weight": np.mean([x.max_weight for x in health]),
            "saturation_index": np.nanmean([x.saturation_index for x in health]),
            "max_weight_unscaled": np.mean([x.max_weight for x in health_u]),
            "entropy_unscaled": np.mean([x.entropy for x in health_u]),
            "sink_any": np.mean(sinks),
            "previous_token": np.mean(prev),
            "next_token": np.mean(nxt) if nxt else np.nan,
            "qs": qs,
            "ks": ks,
        }
    return out


@pytest.mark.parametrize("causal", [False, True])
def test_figures_equal_direct_pair_enumeration(causal):
    call = random_call(causal=causal)
    fig = head_figures(call_sums(**call, key_offset=0))
    ref = direct(call)
    for h, expected in ref.items():
        for name, value in expected.items():
            if name in ("qs", "ks"):
                continue
            assert fig[name][h] == pytest.approx(value, rel=1e-10, abs=1e-12, nan_ok=True), (name, h)
    assert np.all(np.isnan(fig["next_token"])) == causal  # causal: no query attends the next key


def test_the_split_is_exact_and_the_independent_prediction_is_a_product_of_marginals():
    call = random_call(seed=4)
    fig = head_figures(call_sums(**call))
    ref = direct(call)
    parts = sum(fig[p] for p in ("part_uneven_variances", "part_means", "part_cross_dimension", "part_correlation"))
    # Bookkeeping only: the four parts telescope to ratio − 1 by construction, so this catches a
    # dropped or double-counted term, not a wrong variance. The checks below are independent.
    np.testing.assert_allclose(parts, fig["ratio_pair"] - 1, rtol=0, atol=1e-12)
    for h, r in ref.items():
        # V_ind: Var(q·k) with q and k drawn independently from the pairs' marginals = all products.
        products = r["qs"] @ r["ks"].T
        v_ind = products.var()
        v_iid = fig["qk_var_iid"][h]
        assert (fig["ratio_pair"][h] - fig["part_correlation"][h]) * v_iid == pytest.approx(v_ind, rel=1e-10)
        # V_diag: independent components with their own means and variances.
        mq, mk, vq, vk = r["qs"].mean(0), r["ks"].mean(0), r["qs"].var(0), r["ks"].var(0)
        v_diag = np.sum(vq * vk + mq**2 * vk + mk**2 * vq)
        assert (1 + fig["part_uneven_variances"][h] + fig["part_means"][h]) * v_iid == pytest.approx(v_diag, rel=1e-10)
        assert (1 + fig["part_uneven_variances"][h]) * v_iid == pytest.approx(np.sum(vq * vk), rel=1e-10)


def test_iid_components_give_a_ratio_near_one_and_a_nonzero_mean_explains_itself():
    rng = np.random.default_rng(7)
    q, k = rng.normal(size=(1, 1, 400, 16)), rng.normal(size=(1, 1, 400, 16))
    fig = head_figures(call_sums(q, k, scale=0.25))
    assert abs(fig["ratio_pair"][0] - 1) < 0.05  # 160 000 pairs: sampling error ~1%
    fig = head_figures(call_sums(q + 2.0, k + 1.0, scale=0.25))
    # d(σ²σ² + σ²m_k² + m_q²σ²)/(dσ²σ²) = 1 + 1 + 4 = 6, all of it carried by the means.
    assert fig["ratio_pair"][0] == pytest.approx(6.0, rel=0.05)
    assert fig["part_means"][0] == pytest.approx(5.0, rel=0.05)
    assert abs(fig["part_correlation"][0]) < 0.1


def test_sums_add_across_batches_and_padding_never_counts():
    call = random_call(seed=2)
    whole = call_sums(**call, key_offset=0)
    pieces = None
    for b in range(3):
        one = {
            key: (value[b : b + 1] if key in ("q", "k", "attended", "query_valid") else value)
            for key, value in call.items()
        }
        one["key_kinds"] = {n: m[b : b + 1] for n, m in call["key_kinds"].items()}
        # Drop sentence b's padding entirely: its figures must not change.
        n_q, n_k = int(one["query_valid"][0].sum()), int(one["attended"][0, 0, 0].sum())
        trimmed = dict(
            one,
            q=one["q"][:, :, :n_q],
            k=one["k"][:, :, :n_k],
            attended=None,
            query_valid=None,
            bias=call["bias"][:, :, :n_q, :n_k],
            key_kinds={n: m[:, :n_k] for n, m in one["key_kinds"].items()},
        )
        a, b_ = head_figures(call_sums(**one, key_offset=0)), head_figures(call_sums(**trimmed, key_offset=0))
        for name in a:
            np.testing.assert_allclose(a[name], b_[name], rtol=1e-10, atol=1e-12, err_msg=name)
        pieces = add_sums(pieces, call_sums(**one, key_offset=0))
    for key in whole:
        np.testing.assert_allclose(pieces[key], whole[key], rtol=1e-12, atol=1e-12, err_msg=key)


def test_keys_not_queries_a_kv_cache_step():
    """One new query attending 6 cached keys: the previous token is the last cached key."""
    rng = np.random.default_rng(3)
    q, k = rng.normal(size=(2, 2, 1, 4)), rng.normal(size=(2, 2, 6, 4))
    sums = call_sums(q, k, scale=0.5, key_offset=5)
    fig = head_figures(sums)
    p = softmax(0.5 * q @ np.swapaxes(k, -1, -2))
    np.testing.assert_allclose(fig["previous_token"], p[:, :, 0, 4].mean(axis=0), rtol=1e-12)
    assert np.all(np.isnan(fig["next_token"]))  # no key after the newest one
    auto = head_figures(call_sums(q, k, scale=0.5))  # L ≠ S and no offset: no positional figures
    assert np.all(np.isnan(auto["previous_token"]))
    assert fig["pairs"].tolist() == [12.0, 12.0]


def test_token_and_pair_weights_differ_under_a_causal_mask_and_agree_without_one():
    """With every query attending every key, each token is in equally many pairs: the two weightings
    coincide. Under a causal mask early keys and late queries weigh more in the pair weighting."""
    rng = np.random.default_rng(5)
    q = rng.normal(size=(1, 1, 12, 4)) + np.linspace(0, 3, 12)[:, None]  # later queries larger
    k = rng.normal(size=(1, 1, 12, 4))
    full = head_figures(call_sums(q, k, scale=0.5))
    assert full["ratio_token"][0] == pytest.approx(full["ratio_pair"][0], rel=1e-12)
    causal = head_figures(call_sums(q, k, scale=0.5, attended=np.tril(np.ones((12, 12), bool))))
    assert causal["q_mean"][0] > causal["q_mean_token"][0] + 0.1
    assert causal["ratio_token"][0] != pytest.approx(causal["ratio_pair"][0], rel=0.01)


def test_the_float16_margin_takes_the_largest_logit_across_batches():
    q = np.ones((1, 1, 2, 4))
    k = np.ones((1, 1, 2, 4))
    big = add_sums(call_sums(q, k, scale=0.5), call_sums(30 * q, k, scale=0.5))
    fig = head_figures(big)
    assert fig["max_abs_logit_unscaled"][0] == 120.0 and fig["max_abs_logit"][0] == 60.0
    assert big["pairs"][0] == 8  # the other sums still add


def test_check_probabilities_ignores_padded_rows_only():
    a = np.full((1, 1, 2, 2), 0.5)
    b = a.copy()
    b[0, 0, 1] = [0.9, 0.1]  # a padded row differs
    assert check_probabilities(a, b, np.array([[True, False]])) == 0.0
    assert check_probabilities(a, b) == pytest.approx(0.4)


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        (dict(q=np.zeros((2, 3, 4)), k=np.zeros((2, 3, 4, 5))), InputError, "q: expected 4 dimensions"),
        (dict(q=np.zeros((1, 3, 4, 5)), k=np.zeros((1, 2, 4, 5))), InputError, "k: expected .*H_k dividing 3"),
        (dict(q=np.zeros((1, 2, 4, 5)), k=np.zeros((1, 2, 4, 6))), InputError, "d_k=5"),
        (dict(q=np.zeros((1, 1, 2, 2), dtype=complex), k=np.zeros((1, 1, 2, 2))), InputTypeError, "q: expected real"),
        (
            dict(q=np.zeros((1, 1, 2, 2)), k=np.zeros((1, 1, 2, 2)), attended=np.ones((1, 1, 2, 2))),
            InputTypeError,
            "attended: expected a boolean",
        ),
        (
            dict(q=np.zeros((1, 1, 2, 2)), k=np.zeros((1, 1, 2, 2)), query_valid=np.ones((1, 3), bool)),
            InputError,
            r"query_valid: shape \(1, 3\) cannot broadcast to \(1, 2\)",
        ),
        (
            dict(q=np.zeros((1, 1, 2, 2)), k=np.zeros((1, 1, 2, 2)), scale=float("nan")),
            InputError,
            "scale: expected a finite",
        ),
    ],
)
def test_bad_inputs_are_named(kwargs, error, message):
    kwargs.setdefault("scale", 1.0)
    with pytest.raises(error, match=message):
        call_sums(**kwargs)


def test_the_chapter_names_the_scale_the_result_recorded():
    """The entropy caption states the model's recorded scale, and calls it 1/√d_k only when it is."""
    from attnscale.report.chapters import probe as chapter
    from attnscale.report.model_words import scale_number_text

    assert scale_number_text(0.125, 64) == "0.125 = 1/√64"
    assert scale_number_text(0.1, 64) == "0.1"
    assert "√" not in scale_number_text(1.0, 64)
    for lang in ("en", "zh"):
        with language(lang):
            caption = chapter.entropy_caption({"scale": 0.1, "d_k": 64})
        assert "0.1" in caption and "1/√d_k" not in caption
