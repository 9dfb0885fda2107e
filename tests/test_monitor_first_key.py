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
from attnscale.errors import InputError  # noqa: E402
from attnscale.integrations._watch import log_keys  # noqa: E402
from attnscale.torch.monitor_records import SINK_WEIGHT  # noqa: E402
from attnscale.torch import attention, kernel_status  # noqa: E402
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
    mask[:, :, 1::3, 0] = False                          # key 0 masked in these rows
    mask[0, 0, 4] = False                                # a row with nothing attended
    bias = torch.randn(B, H_q, L, S, generator=g, dtype=torch.float64)
    bias[1, 2, 5, 0] = -math.inf                         # key 0 out through the bias
    return q.to(dtype), k.to(dtype), v.to(dtype), mask, bias.to(dtype)


def reference_weights(q, k, v, **kw):
    """The NumPy core's weight on key 0 per row and its lse, float64: (B, H_q, L) each; weight NaN where
    nothing is attended."""
    ref = attnscale.attention(*(x.double().numpy() for x in (q, k, v)), return_details=True,
                              **{n: (x.double().numpy() if isinstance(x, torch.Tensor) and x.is_floating_point()
                                     else x.numpy() if isinstance(x, torch.Tensor) else x) for n, x in kw.items()})
    empty = ~np.isfinite(ref.logits).any(-1)
    return np.where(empty, np.nan, ref.weights[..., 0]), ref.lse


def backends():
    out = ["composed", "chunked", "flex"]
    return (["kernel"] if kernel_status()["available"] else []) + out


@pytest.mark.parametrize("backend", backends())
@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_the_first_key_weight_equals_the_numpy_cores_probability(backend, case, dtype):
    if backend == "composed" and case in COMPOSED_CANNOT:
        pytest.skip("the composed backend takes no bias and no soft-cap")
    q, k, v, mask, bias = problem(seed=len(case), dtype=dtype)
    kw = {n: {"mask": mask, "bias": bias}.get(n, x) if x is True else x for n, x in CASES[case].items()}
    _, stats = attention(q, k, v, return_stats=True, first_key=True, backend=backend, **kw)
    assert stats.backend == backend and stats.first_key_weight.dtype == dtype
    assert not stats.first_key_weight.requires_grad
    expected, lse = reference_weights(q, k, v, **kw)
    got = stats.first_key_weight.double().numpy()
    assert (np.isnan(got) == np.isnan(expected)).all()                  # rows with nothing attended
    bound = 8 * torch.finfo(dtype).eps * (1 + np.abs(lse)) * expected + 1e-30
    assert (np.abs(got - expected) <= bound)[~np.isnan(expected)].all(), np.nanmax(np.abs(got - expected) / bound)
    if case == "mask":
        masked = ~mask[:, :, :, 0].expand(got.shape).numpy() & ~np.isnan(expected)
        assert masked.any() and (got[masked] == 0).all()                # key 0 masked: weight exactly 0


def test_the_first_key_weight_needs_the_figures_and_leaves_the_output_alone():
    q, k, v, mask, _ = problem(seed=1, dtype=torch.float32)
    with pytest.raises(InputError, match="first_key"):
        attention(q, k, v, first_key=True)
    q.requires_grad_(True)
    plain, stats = attention(q, k, v, mask=mask, return_stats=True)
    out, with_first = attention(q, k, v, mask=mask, return_stats=True, first_key=True)
    assert stats.first_key_weight is None and torch.equal(out, plain) and out.requires_grad
    for name in ("lse", "entropy"):
        torch.testing.assert_close(getattr(with_first, name), getattr(stats, name), rtol=0, atol=0, equal_nan=True)


def test_2d_and_3d_inputs_have_a_weight_per_row():
    g = torch.Generator().manual_seed(3)
    q, k, v = torch.randn(5, 4, generator=g), torch.randn(6, 4, generator=g), torch.randn(6, 3, generator=g)
    _, stats = attention(q, k, v, return_stats=True, first_key=True)
    assert stats.first_key_weight.shape == (5,)
    expected, lse = reference_weights(q, k, v)
    assert (np.abs(stats.first_key_weight.numpy() - expected) <= 8 * torch.finfo(torch.float32).eps * (1 + np.abs(lse)) * expected).all()
