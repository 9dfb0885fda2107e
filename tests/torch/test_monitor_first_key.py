"""The weight on the first key (attention sinks) and the mean ‖q‖, ‖k‖: attnscale.torch.attention's
``first_key_weight`` against the NumPy core's probabilities (float64), on every backend that runs
on CPU; the monitor's per-head figures against ones computed by hand; the share of sink heads.

Tolerances: p_i0 = exp(s_i0 − lse_i) carries the rounding of two numbers of size up to |lse_i|
(each from its own product of q and k), so |Δp_i0| ≤ 8 eps (1 + |lse_i|) p_i0 (float32: 1e-6 at
|lse| 0 and p 1), plus 1e-30 for the rows whose weight is 0;
the monitor's float32 means within 1e-5 relative of float64's by hand.
"""

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import attnscale  # noqa: E402
from attnscale.integrations._watch import log_keys  # noqa: E402
from attnscale.torch.monitor.records import SINK_WEIGHT  # noqa: E402
from attnscale.torch.monitor.rows import sampled_rows  # noqa: E402
from attnscale.torch.functional import attention_figures  # noqa: E402
from attnscale.torch.monitor import Monitor  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore:.*flex_attention called without torch.compile")

# What each backend can compute: composed takes no bias and no soft-cap.
CASES = {
    "plain": dict(),
    "causal": dict(causal="top_left"),
    "bottom_right": dict(causal="bottom_right"),
    "mask": dict(mask=True),
    "bias": dict(bias=True),
    "softcap": dict(scale="softcap"),
    "qknorm": dict(scale="qknorm"),
    "logn": dict(scale="logn", causal="top_left"),
}
COMPOSED_CANNOT = ("bias", "softcap")


def problem(seed, dtype, B=2, H_q=4, H_kv=2, L=9, S=13, d_k=8, d_v=4):
    """Grouped-query heads (4 over 2), L ≠ S; the mask leaves key 0 out of some rows and one row empty."""
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, H_q, L, d_k, generator=g, dtype=torch.float64) * 2
    k = torch.randn(B, H_kv, S, d_k, generator=g, dtype=torch.float64)
    v = torch.randn(B, H_kv, S, d_v, generator=g, dtype=torch.float64)
    mask = torch.rand(B, 1, L, S, generator=g) > 0.3
    mask[:, :, 1::3, 0] = False  # key 0 masked in these rows
    mask[0, 0, 4] = False  # a row with nothing attended
    bias = torch.randn(B, H_q, L, S, generator=g, dtype=torch.float64)
    bias[1, 2, 5, 0] = -math.inf  # key 0 out through the bias
    return q.to(dtype), k.to(dtype), v.to(dtype), mask, bias.to(dtype)


def reference_weights(q, k, v, **kw):
    """The NumPy core's weight on key 0 per row and its lse, float64: (B, H_q, L) each; weight NaN where
    nothing is attended."""
    _, ref = attnscale.attention(
        *(x.double().numpy() for x in (q, k, v)),
        aux=attnscale.AuxRequest(logits=True, weights=True, lse=True),
        **{
            n: (
                x.double().numpy()
                if isinstance(x, torch.Tensor) and x.is_floating_point()
                else x.numpy()
                if isinstance(x, torch.Tensor)
                else x
            )
            for n, x in kw.items()
        },
    )
    empty = ~np.isfinite(ref.logits).any(-1)
    return np.where(empty, np.nan, ref.weights[..., 0]), ref.lse


@pytest.mark.parametrize("backend", ["kernel", "composed", "chunked", "flex"])
@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_the_first_key_weight_equals_the_numpy_cores_probability(backend, case, dtype, request):
    if backend == "kernel":
        request.getfixturevalue("built_kernel")  # built here, not at collection; skipped where it cannot be
    if backend == "composed" and case in COMPOSED_CANNOT:
        pytest.skip("the composed backend takes no bias and no soft-cap")
    q, k, v, mask, bias = problem(seed=len(case), dtype=dtype)
    kw = {n: {"mask": mask, "bias": bias}.get(n, x) if x is True else x for n, x in CASES[case].items()}
    _, stats = attention_figures(q, k, v, first_key=True, backend=backend, **kw)
    assert stats.backend == backend and stats.first_key_weight.dtype == dtype
    assert not stats.first_key_weight.requires_grad
    expected, lse = reference_weights(q, k, v, **kw)
    got = stats.first_key_weight.double().numpy()
    assert (np.isnan(got) == np.isnan(expected)).all()  # rows with nothing attended
    bound = 8 * torch.finfo(dtype).eps * (1 + np.abs(lse)) * expected + 1e-30
    assert (np.abs(got - expected) <= bound)[~np.isnan(expected)].all(), np.nanmax(np.abs(got - expected) / bound)
    if case == "mask":
        masked = ~mask[:, :, :, 0].expand(got.shape).numpy() & ~np.isnan(expected)
        assert masked.any() and (got[masked] == 0).all()  # key 0 masked: weight exactly 0


def test_the_first_key_weight_leaves_the_output_and_the_other_figures_alone():
    q, k, v, mask, _ = problem(seed=1, dtype=torch.float32)
    q.requires_grad_(True)
    plain, stats = attention_figures(q, k, v, mask=mask)
    out, with_first = attention_figures(q, k, v, mask=mask, first_key=True)
    assert stats.first_key_weight is None and torch.equal(out, plain) and out.requires_grad
    for name in ("lse", "entropy"):
        torch.testing.assert_close(getattr(with_first, name), getattr(stats, name), rtol=0, atol=0, equal_nan=True)


def test_2d_and_3d_inputs_have_a_weight_per_row():
    g = torch.Generator().manual_seed(3)
    q, k, v = torch.randn(5, 4, generator=g), torch.randn(6, 4, generator=g), torch.randn(6, 3, generator=g)
    _, stats = attention_figures(q, k, v, first_key=True)
    assert stats.first_key_weight.shape == (5,)
    expected, lse = reference_weights(q, k, v)
    bound = 8 * torch.finfo(torch.float32).eps * (1 + np.abs(lse)) * expected
    assert (np.abs(stats.first_key_weight.numpy() - expected) <= bound).all()


class CausalAttention(torch.nn.Module):
    """SDPA on given q, k, v (B, H, L, d): a causal layer whose figures are known by hand."""

    def forward(self, q, k, v):
        return torch.nn.functional.scaled_dot_product_attention(
            q, k, v, is_causal=True, enable_gqa=q.shape[1] != k.shape[1]
        )


def by_hand(q, k, rows=None):
    """Per query head, float64: (mean weight on key 0, mean ‖q_i‖) over the causal rows i ≥ 1 (row 0
    attends one key) among ``rows`` (None: all), and the mean ‖k_j‖ of its KV head's keys."""
    q, k = q.double(), k.double()
    group = q.shape[1] // k.shape[1]
    kk = k.repeat_interleave(group, dim=1)
    L = q.shape[-2]
    s = (q @ kk.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    s = s.masked_fill(~torch.ones(L, L, dtype=torch.bool).tril(), -math.inf)
    first = torch.softmax(s, dim=-1)[..., 0]  # (B, H, L)
    counted = torch.zeros(q.shape[:-1], dtype=torch.bool)
    if rows is None:
        counted[..., 1:] = True
    else:
        counted.scatter_(-1, rows[:, None, :].expand(-1, q.shape[1], -1), True)
        counted[..., 0] = False
    n = counted.sum((0, 2))
    mean = lambda x: (x * counted).sum((0, 2)) / n  # noqa: E731
    return mean(first), mean(q.norm(dim=-1)), kk.norm(dim=-1).mean((0, 2))


def inputs(seed, H_q=4, H_kv=2, B=2, L=12, d=8, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, H_q, L, d, generator=g) * torch.linspace(0.5, 2.0, L)[:, None]  # rows of unlike norms
    k = torch.randn(B, H_kv, L, d, generator=g)
    v = torch.randn(B, H_kv, L, d, generator=g)
    return q.to(dtype), k.to(dtype), v.to(dtype)


@pytest.mark.parametrize("mode", ["observe", "replace"])
@pytest.mark.parametrize("H_kv", [4, 2])
def test_the_monitors_head_figures_equal_those_by_hand(mode, H_kv):
    q, k, v = inputs(seed=H_kv, H_kv=H_kv)
    layer = CausalAttention()
    with torch.no_grad(), Monitor(layer, mode=mode) as mon:
        own = layer(q, k, v)
        step = mon.step(0)
    first, q_norm, k_norm = by_hand(q, k)
    assert [h.head for h in step.heads] == [0, 1, 2, 3]
    for h in step.heads:
        assert h.rows == 2 * 11 and h.keys == 2 * 12
        assert h.first_key_weight == pytest.approx(float(first[h.head]), rel=1e-5)
        assert h.q_norm_mean == pytest.approx(float(q_norm[h.head]), rel=1e-5)
        assert h.k_norm_mean == pytest.approx(float(k_norm[h.head]), rel=1e-5)
        assert h.first_key_sum == pytest.approx(h.first_key_weight * h.rows, rel=1e-12)
        assert h.k_norm_sum == pytest.approx(h.k_norm_mean * h.keys, rel=1e-12)
    if mode == "observe":
        assert torch.equal(layer(q, k, v), own)
    json_head = step.to_json()["heads"][0]
    assert {"first_key_weight", "q_norm_mean", "k_norm_mean", "keys", "first_key_sum"} <= set(json_head)


def test_a_sink_head_counts_in_the_share_and_a_uniform_one_does_not():
    """Head 0: every query along k_0 (q·k_0 ≫ the rest), a sink. Head 1: q = 0, weights 1/(i+1) on
    each of the i+1 keys: mean over rows 1..11 of 1/(i+1) = 0.19, below SINK_WEIGHT."""
    q, k, v = inputs(seed=5, H_q=2, H_kv=2)
    k[:, 0, 0] = 4.0
    q[:, 0] = 4.0 + 0.1 * q[:, 0]
    q[:, 1] = 0.0
    layer = CausalAttention()
    with torch.no_grad(), Monitor(layer) as mon:
        layer(q, k, v)
        step = mon.step(0)
    sink, uniform = step.heads
    assert sink.first_key_weight > 0.99 and sink.sink_head
    assert uniform.first_key_weight == pytest.approx(sum(1 / (i + 1) for i in range(1, 12)) / 11, rel=1e-6)
    assert uniform.first_key_weight < SINK_WEIGHT and not uniform.sink_head
    keys = log_keys(step)
    assert keys["attn/CausalAttention/sink_heads_share"] == 0.5
    assert keys["attn/CausalAttention/head0/first_key_weight"] == pytest.approx(sink.first_key_weight)
    assert keys["attn/CausalAttention/first_key_weight"] == pytest.approx(
        (sink.first_key_weight + uniform.first_key_weight) / 2
    )  # equal rows: the plain mean


@pytest.mark.parametrize("mode", ["observe", "replace"])
def test_rows_k_reads_the_sampled_rows_norms_and_weights(mode):
    q, k, v = inputs(seed=7)
    layer = CausalAttention()
    picked = sampled_rows(q, 5, 0, 0)  # the first call's rows, (B, 5)
    with torch.no_grad(), Monitor(layer, mode=mode, rows=5) as mon:
        layer(q, k, v)
        step = mon.step(0)
    first, q_norm, k_norm = by_hand(q, k, rows=picked)
    for h in step.heads:
        assert h.rows == int((picked > 0).sum()) and h.rows_of == 2 * 12
        assert h.first_key_weight == pytest.approx(float(first[h.head]), rel=1e-5)
        assert h.q_norm_mean == pytest.approx(float(q_norm[h.head]), rel=1e-5)
        assert h.k_norm_mean == pytest.approx(float(k_norm[h.head]), rel=1e-5)  # every key: all are read


@pytest.mark.parametrize("mode", ["observe", "replace"])
def test_a_3d_call_is_one_head_over_every_sequences_rows_and_keys(mode):
    """q (N, L, d) has no head axis: one head, its rows and keys those of all N sequences."""
    q, k, v = (x[:, 0] for x in inputs(seed=9, H_q=1, H_kv=1))  # (2, 12, 8) each
    layer = CausalAttention()
    with torch.no_grad(), Monitor(layer, mode=mode) as mon:
        layer(q, k, v)
        (h,) = mon.step(0).heads
    first, q_norm, k_norm = by_hand(q[:, None], k[:, None])
    assert (h.rows, h.keys) == (2 * 11, 2 * 12)
    assert (h.first_key_weight, h.q_norm_mean, h.k_norm_mean) == pytest.approx(
        (float(first[0]), float(q_norm[0]), float(k_norm[0])), rel=1e-5
    )
