"""Properties attention must have whatever the inputs (Hypothesis): equivalent expressions that must
agree, as einops keeps tables of them. Shapes, magnitudes, masks and scales are drawn; arrays come from
a drawn NumPy seed so that examples are cheap and shrink to small seeds."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attnscale import AuxRequest, attention, attention_backward

# Derandomized: CI runs the same examples every time (a failure is reproducible, never flaky).
examples = settings(max_examples=100, deadline=None, derandomize=True)


@st.composite
def problems(draw, with_mask=True):
    """q (H_q, L, d_k), k (H_kv, S, d_k), v (H_kv, S, d_v), optional mask (H_q, L, S)."""
    H_kv = draw(st.integers(1, 2))
    H_q = H_kv * draw(st.integers(1, 3))
    L, S = draw(st.integers(1, 9)), draw(st.integers(1, 9))
    d_k, d_v = draw(st.integers(1, 8)), draw(st.integers(1, 4))
    magnitude = draw(st.sampled_from([0.1, 1.0, 4.0, 20.0]))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    q = rng.standard_normal((H_q, L, d_k)) * magnitude
    k = rng.standard_normal((H_kv, S, d_k)) * magnitude
    v = rng.standard_normal((H_kv, S, d_v))
    mask = None
    if with_mask and draw(st.booleans()):
        mask = rng.random((H_q, L, S)) < draw(st.sampled_from([0.2, 0.6, 0.95]))
    return q, k, v, mask, rng


def close(a, b, rtol=1e-12):
    """Equal up to float64 rounding, relative to the largest entry (entries are O(1) values)."""
    scale = max(np.max(np.abs(b), initial=0.0), 1.0)
    return np.max(np.abs(a - b), initial=0.0) <= rtol * scale


@examples
@given(problems())
def test_weights_sum_to_one_over_attended_keys(p):
    q, k, v, mask, _ = p
    out, res = attention(q, k, v, mask=mask, aux=AuxRequest(weights=True))
    attended = np.ones(res.weights.shape, dtype=bool) if mask is None else mask
    assert np.all(res.weights[~attended] == 0.0)
    assert np.all(res.weights >= 0.0)
    sums = res.weights.sum(-1)
    nonempty = attended.any(-1)
    np.testing.assert_allclose(sums[nonempty], 1.0, rtol=1e-13)
    assert np.all(sums[~nonempty] == 0.0) and np.all(out[~nonempty] == 0.0)
    # out = weights · V, the definition.
    group = q.shape[0] // k.shape[0]
    assert close(out, res.weights @ np.repeat(v, group, axis=0))


@examples
@given(problems(), st.floats(-50, 50))
def test_adding_a_constant_to_a_row_of_logits_changes_nothing(p, c):
    q, k, v, mask, rng = p
    shift = c + rng.standard_normal(q.shape[:-1] + (1,))  # one constant per (head, query) row
    base = attention(q, k, v, mask=mask)
    assert close(attention(q, k, v, mask=mask, bias=shift), base, rtol=1e-11)


@examples
@given(problems())
def test_permuting_keys_and_values_together_changes_nothing(p):
    q, k, v, mask, rng = p
    perm = rng.permutation(k.shape[-2])
    bias = rng.standard_normal(q.shape[:-1] + (k.shape[-2],))
    base = attention(q, k, v, mask=mask, bias=bias)
    permuted = attention(
        q, k[:, perm], v[:, perm], mask=None if mask is None else mask[..., perm], bias=bias[..., perm]
    )
    assert close(permuted, base)
    # ...and permuting the queries permutes the output rows.
    qperm = rng.permutation(q.shape[-2])
    rows = attention(q[:, qperm], k, v, mask=None if mask is None else mask[:, qperm], bias=bias[:, qperm])
    assert close(rows, base[:, qperm])


@examples
@given(problems(), st.floats(-3, 3).filter(lambda s: s != 0.0))
def test_scale_s_equals_scale_one_with_q_times_s(p, s):
    q, k, v, mask, _ = p
    assert close(attention(q, k, v, scale=s, mask=mask), attention(q * s, k, v, scale=1.0, mask=mask))
    dout = np.ones(q.shape[:-1] + (v.shape[-1],))
    g1 = attention_backward(q, k, v, dout, scale=s, mask=mask)
    g2 = attention_backward(q * s, k, v, dout, scale=1.0, mask=mask)
    assert close(g1.dq, s * g2.dq, rtol=1e-10) and close(g1.dk, g2.dk, rtol=1e-10) and close(g1.dv, g2.dv)


@examples
@given(problems())
def test_scaled_and_unscaled_agree_when_d_k_is_1(p):
    q, k, v, mask, _ = p
    q, k = q[..., :1], k[..., :1]
    unscaled = attention(q, k, v, scale="unscaled", mask=mask)
    assert np.array_equal(attention(q, k, v, mask=mask), unscaled)  # 1/√1 = 1 exactly
    assert np.array_equal(attention(q, k, v, scale="inverse_dk", mask=mask), unscaled)


@examples
@given(problems(with_mask=False))
def test_grouped_query_attention_equals_repeated_heads(p):
    q, k, v, _, _ = p
    group = q.shape[0] // k.shape[0]
    assert np.array_equal(attention(q, k, v), attention(q, np.repeat(k, group, 0), np.repeat(v, group, 0)))


# --- dropout ----------------------------------------------------------------------------------------


@examples
@given(problems(), st.sampled_from([0.1, 0.5, 0.9]), st.integers(0, 2**32 - 1))
def test_dropout_same_seed_same_output(p, dropout_p, seed):
    q, k, v, mask, _ = p
    a = attention(q, k, v, mask=mask, dropout_p=dropout_p, seed=seed)
    assert np.array_equal(a, attention(q, k, v, mask=mask, dropout_p=dropout_p, seed=seed))


def test_dropout_different_seed_different_output():
    rng = np.random.default_rng(0)
    q, k, v = rng.standard_normal((2, 8, 4)), rng.standard_normal((2, 9, 4)), rng.standard_normal((2, 9, 3))
    assert not np.array_equal(attention(q, k, v, dropout_p=0.3, seed=1), attention(q, k, v, dropout_p=0.3, seed=2))


@examples
@given(problems(), st.sampled_from([0.1, 0.5, 0.9]), st.integers(0, 2**16))
def test_dropout_drops_weights_and_rescales_survivors(p, dropout_p, seed):
    """With V = I (d_v = S) the output row is the dropped weight row itself: every entry is 0 or
    weight / (1 − p), and the weights returned are those before dropout."""
    q, k, _, mask, _ = p
    S = k.shape[-2]
    eye = np.broadcast_to(np.eye(S), k.shape[:-2] + (S, S))
    out, res = attention(q, k, eye, mask=mask, dropout_p=dropout_p, seed=seed, aux=AuxRequest(weights=True))
    _, plain = attention(q, k, eye, mask=mask, aux=AuxRequest(weights=True))
    assert np.array_equal(res.weights, plain.weights)
    kept = out != 0
    expected = plain.weights[kept] / (1 - dropout_p)
    np.testing.assert_allclose(out[kept], expected, rtol=1e-14, atol=1e-300)  # atol: subnormal weights


def test_dropout_keeps_the_expected_value():
    """Averaged over seeds, dropout attention is unbiased: mean over 400 seeds within 5 standard errors."""
    rng = np.random.default_rng(1)
    q, k, v = rng.standard_normal((1, 3, 4)), rng.standard_normal((1, 6, 4)), rng.standard_normal((1, 6, 2))
    runs = np.stack([attention(q, k, v, dropout_p=0.4, seed=s) for s in range(400)])
    stderr = runs.std(0) / np.sqrt(len(runs))
    assert np.all(np.abs(runs.mean(0) - attention(q, k, v)) <= 5 * stderr + 1e-12)


@pytest.mark.parametrize("dropout_p", [0.2, 0.6])
def test_dropout_backward_matches_finite_differences(dropout_p):
    """Same seed ⇒ same dropout mask in forward and backward: the gradient is that of the forward."""
    rng = np.random.default_rng(2)
    q, k, v = rng.standard_normal((2, 3, 3)), rng.standard_normal((1, 4, 3)), rng.standard_normal((1, 4, 2))
    bias, dout = rng.standard_normal((2, 3, 4)), rng.standard_normal((2, 3, 2))
    kw = dict(bias=bias, dropout_p=dropout_p, seed=7)
    g = attention_backward(q, k, v, dout, **kw)
    h = 1e-6
    for x, got, name in ((q, g.dq, "dq"), (k, g.dk, "dk"), (v, g.dv, "dv"), (bias, g.dbias, "dbias")):
        fd = np.zeros_like(x)
        for i in np.ndindex(x.shape):
            old = x[i]
            x[i] = old + h
            up = np.sum(attention(q, k, v, **kw) * dout)
            x[i] = old - h
            down = np.sum(attention(q, k, v, **kw) * dout)
            x[i] = old
            fd[i] = (up - down) / (2 * h)
        err = np.max(np.abs(got - fd)) / np.max(np.abs(fd))
        assert err <= 1e-6, f"{name}: relative error {err:.3g} against finite differences"
    assert not np.allclose(g.dq, attention_backward(q, k, v, dout, bias=bias).dq)  # dropout did something
