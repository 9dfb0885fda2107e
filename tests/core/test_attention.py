"""attnscale.attention and attention_backward against PyTorch's scaled_dot_product_attention and torch
autograd, in float64 (the oracle, as micrograd does), at odd sizes (as FlashAttention's tests do).

Tolerance: every output and gradient within 1e-10 of torch, relative to the largest entry of torch's
array. Fully masked query rows must give exactly 0 output and exactly 0 gradient.
"""

from __future__ import annotations

import doctest
import importlib
import pkgutil
import runpy
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

import attnscale
from attnscale import AuxRequest, attention, attention_backward, causal_mask

torch = pytest.importorskip("torch")
F = torch.nn.functional

RTOL = 1e-10
DETAILS = AuxRequest(logits=True, weights=True, lse=True)  # the (L, S) matrices and the lse


def rel_err(got: np.ndarray, ref: np.ndarray) -> float:
    """max |got − ref| / max |ref| (0 when both are all zero)."""
    got, ref = np.asarray(got, dtype=np.float64), np.asarray(ref, dtype=np.float64)
    assert got.shape == ref.shape, (got.shape, ref.shape)
    diff = np.max(np.abs(got - ref), initial=0.0)
    scale = np.max(np.abs(ref), initial=0.0)
    return diff / scale if scale > 0 else diff


def assert_rel(got, ref, name: str, rtol: float = RTOL):
    err = rel_err(got, ref)
    assert err <= rtol, f"{name}: relative error {err:.3g} > {rtol:g}"


# (B, H_q, H_kv, L, S, d_k, d_v): every d_k in {1, 3, 59, 111} and every L, S in {1, 7, 97, 257},
# always L != S; H_q > H_kv is grouped-query (and 3 -> 1 multi-query) attention.
SHAPES = [
    (2, 2, 2, 7, 97, 1, 3),
    (1, 4, 2, 257, 7, 3, 5),
    (2, 3, 1, 97, 1, 59, 4),
    (1, 2, 2, 1, 257, 111, 7),
    (1, 4, 1, 257, 97, 59, 8),
    (1, 2, 1, 97, 257, 111, 6),
]
# Which of mask / bias / causal each case uses.
FEATURES = ["plain", "mask", "bias", "mask+bias", "top_left", "bottom_right", "bottom_right+mask+bias"]


def make_case(shape, features: str, seed: int = 0):
    B, H_q, H_kv, L, S, d_k, d_v = shape
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((B, H_q, L, d_k)) * 1.5
    k = rng.standard_normal((B, H_kv, S, d_k)) * 1.5
    v = rng.standard_normal((B, H_kv, S, d_v))
    dout = rng.standard_normal((B, H_q, L, d_v))
    mask = bias = None
    causal = False
    if "mask" in features:
        mask = rng.random((B, 1, L, S)) < 0.7  # broadcast over heads
        mask[0, 0, L // 2] = False  # one fully masked query row
    if "bias" in features:
        bias = rng.standard_normal((H_q, L, S))  # broadcast over the batch: dbias must sum over it
    if "top_left" in features:
        causal = "top_left"
    if "bottom_right" in features:
        causal = "bottom_right"
    return dict(q=q, k=k, v=v, dout=dout, mask=mask, bias=bias, causal=causal)


def allowed_of(case) -> np.ndarray:
    """(B, H_q, L, S) bool: what each query attends."""
    q, k = case["q"], case["k"]
    B, H_q, L, _ = q.shape
    S = k.shape[-2]
    allowed = np.ones((B, H_q, L, S), dtype=bool)
    if case["mask"] is not None:
        allowed &= case["mask"]
    if case["causal"]:
        allowed &= causal_mask(L, S, case["causal"])
    return allowed


def torch_reference(case, scale=None):
    """Output and gradients from torch SDPA + autograd. Top-left causal uses torch's own is_causal;
    bottom-right, masks and bias go in as an explicit attn_mask (float -inf where not attended)."""
    tq, tk, tv = (torch.tensor(case[n], requires_grad=True) for n in ("q", "k", "v"))
    tb = torch.tensor(case["bias"], requires_grad=True) if case["bias"] is not None else None
    only_top_left = case["causal"] == "top_left" and case["mask"] is None and tb is None
    attn_mask = None
    if not only_top_left and (case["mask"] is not None or tb is not None or case["causal"]):
        allowed = torch.tensor(allowed_of(case))
        attn_mask = allowed if tb is None else torch.where(allowed, tb, -torch.inf)
    gqa = case["q"].shape[-3] != case["k"].shape[-3]
    out = F.scaled_dot_product_attention(
        tq, tk, tv, attn_mask=attn_mask, is_causal=only_top_left, scale=scale, enable_gqa=gqa
    )
    out.backward(torch.tensor(case["dout"]))
    grads = {"dq": tq.grad, "dk": tk.grad, "dv": tv.grad, "dbias": None if tb is None else tb.grad}
    return out.detach().numpy(), {n: None if g is None else g.numpy() for n, g in grads.items()}


def ours(case, **kw):
    args = dict(mask=case["mask"], bias=case["bias"], causal=case["causal"], **kw)
    out = attention(case["q"], case["k"], case["v"], **args)
    grads = attention_backward(case["q"], case["k"], case["v"], case["dout"], **args)
    return out, grads


@pytest.mark.parametrize("features", FEATURES)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "B{}Hq{}Hkv{}L{}S{}dk{}dv{}".format(*s))
def test_matches_torch_sdpa_forward_and_backward(shape, features):
    case = make_case(shape, features)
    out, grads = ours(case)
    ref_out, ref = torch_reference(case)
    assert out.dtype == np.float64 and out.shape == ref_out.shape
    assert_rel(out, ref_out, "out")
    for name in ("dq", "dk", "dv"):
        got = getattr(grads, name)
        assert got.shape == case[name[1:]].shape
        assert_rel(got, ref[name], name)
    if case["bias"] is None:
        assert grads.dbias is None
    else:
        assert grads.dbias.shape == case["bias"].shape
        assert_rel(grads.dbias, ref["dbias"], "dbias")

    # Fully masked rows: exactly 0 output, exactly 0 gradient for that query (PyTorch's behaviour).
    empty = ~allowed_of(case).any(-1)  # (B, H_q, L)
    if "mask" in features or (case["causal"] == "bottom_right" and shape[3] > shape[4]):
        assert empty.any(), "the case was meant to contain a fully masked row"
    assert np.all(out[empty] == 0.0) and np.all(grads.dq[empty] == 0.0)
    assert np.isfinite(out).all() and np.isfinite(grads.dq).all()


@pytest.mark.parametrize("scale", [0.0, 0.37, -2.0])
def test_numeric_scale_matches_torch(scale):
    case = make_case((2, 4, 2, 7, 97, 3, 5), "mask+bias", seed=1)
    out, grads = ours(case, scale=scale)
    ref_out, ref = torch_reference(case, scale=scale)
    assert_rel(out, ref_out, "out")
    for name in ("dq", "dk", "dv", "dbias"):
        assert_rel(getattr(grads, name), ref[name], name)


def test_scale_zero_is_uniform_over_attended_keys():
    """0.0 is a legal scale, never replaced by the default: each row averages its attended values."""
    case = make_case((1, 2, 2, 7, 97, 3, 5), "mask", seed=2)
    out = attention(case["q"], case["k"], case["v"], scale=0.0, mask=case["mask"])
    allowed = allowed_of(case)
    counts = allowed.sum(-1, keepdims=True)
    expected = np.where(counts > 0, (allowed / np.maximum(counts, 1)) @ case["v"], 0.0)
    np.testing.assert_allclose(out, expected, rtol=1e-12, atol=1e-15)


def test_fully_masked_rows_exactly_zero_everywhere():
    """Rows emptied by the mask, by -inf bias, or by bottom-right alignment with L > S: 0 output, 0 dq,
    0 dbias, and no contribution to dk or dv (compared with the same problem without those rows)."""
    rng = np.random.default_rng(3)
    q, k, v = rng.standard_normal((2, 5, 4)), rng.standard_normal((2, 3, 4)), rng.standard_normal((2, 3, 2))
    dout = rng.standard_normal((2, 5, 2))
    bias = rng.standard_normal((2, 5, 3))
    bias[1, 4] = -np.inf  # row emptied by the bias
    mask = np.ones((5, 3), dtype=bool)
    mask[3] = False  # row emptied by the mask
    kw = dict(mask=mask, bias=bias, causal="bottom_right")  # L=5 > S=3: rows 0 and 1 are empty
    out, res = attention(q, k, v, aux=DETAILS, **kw)
    g = attention_backward(q, k, v, dout, **kw)
    empty = np.zeros((2, 5), dtype=bool)
    empty[:, [0, 1, 3]] = True
    empty[1, 4] = True
    assert np.all(out[empty] == 0.0) and np.all(g.dq[empty] == 0.0) and np.all(g.dbias[empty] == 0.0)
    assert np.all(res.weights[empty] == 0.0) and np.all(res.lse[empty] == -np.inf)
    assert np.all(res.logits[empty] == -np.inf)
    assert not np.isnan(out).any() and not np.isnan(g.dk).any() and not np.isnan(g.dv).any()
    # Empty rows add nothing to dk, dv: zeroing their dout changes nothing, bit for bit.
    g0 = attention_backward(q, k, v, np.where(empty[..., None], 0.0, dout), **kw)
    assert np.array_equal(g.dk, g0.dk) and np.array_equal(g.dv, g0.dv)


def test_the_logits_weights_and_lse_asked_for_match_torch():
    case = make_case((1, 4, 2, 7, 97, 59, 3), "bottom_right+mask+bias", seed=4)
    out, res = attention(
        case["q"],
        case["k"],
        case["v"],
        mask=case["mask"],
        bias=case["bias"],
        causal=case["causal"],
        aux=DETAILS,
    )
    tq, tk = torch.tensor(case["q"]), torch.tensor(case["k"]).repeat_interleave(2, dim=-3)
    allowed = torch.tensor(allowed_of(case))
    logits = torch.where(allowed, tq @ tk.transpose(-1, -2) / np.sqrt(59) + torch.tensor(case["bias"]), -torch.inf)
    lse = torch.logsumexp(logits, dim=-1)
    weights = torch.nan_to_num(torch.softmax(logits, dim=-1), nan=0.0)
    finite = np.isfinite(logits.numpy())
    assert np.array_equal(np.isfinite(res.logits), finite)
    assert_rel(res.logits[finite], logits.numpy()[finite], "logits")
    assert_rel(res.weights, weights.numpy(), "weights")
    assert np.array_equal(res.lse == -np.inf, lse.numpy() == -np.inf)
    fin = np.isfinite(lse.numpy())
    assert_rel(res.lse[fin], lse.numpy()[fin], "lse")
    assert_rel(
        out,
        attention(case["q"], case["k"], case["v"], mask=case["mask"], bias=case["bias"], causal=case["causal"]),
        "out with and without details",
        rtol=0,
    )


def test_causal_true_equals_top_left_when_square():
    rng = np.random.default_rng(5)
    q, k, v = (rng.standard_normal((2, 7, 3)) for _ in range(3))
    a = attention(q, k, v, causal=True)
    assert np.array_equal(a, attention(q, k, v, causal="top_left"))
    assert np.array_equal(a, attention(q, k, v, causal="bottom_right"))
    ref = F.scaled_dot_product_attention(*(torch.tensor(x) for x in (q, k, v)), is_causal=True).numpy()
    assert_rel(a, ref, "out")


def test_leading_dims_broadcast_and_rank2():
    """q (2, 3, H, L, d), k and v shared over the first axis; dk, dv summed back to their shapes."""
    rng = np.random.default_rng(6)
    q = rng.standard_normal((2, 3, 4, 7, 3))
    k = rng.standard_normal((1, 3, 2, 11, 3))
    v = rng.standard_normal((3, 2, 11, 5))
    dout = rng.standard_normal((2, 3, 4, 7, 5))
    out = attention(q, k, v)
    g = attention_backward(q, k, v, dout)
    tq, tk, tv = (torch.tensor(x, requires_grad=True) for x in (q, k, v))
    kk = tk.expand(2, 3, 2, 11, 3).repeat_interleave(2, dim=-3)
    vv = tv.expand(2, 3, 2, 11, 5).repeat_interleave(2, dim=-3)
    ref = F.scaled_dot_product_attention(tq, kk, vv)
    ref.backward(torch.tensor(dout))
    assert_rel(out, ref.detach().numpy(), "out")
    for got, want, name in ((g.dq, tq.grad, "dq"), (g.dk, tk.grad, "dk"), (g.dv, tv.grad, "dv")):
        assert got.shape == want.shape
        assert_rel(got, want.numpy(), name)
    # Rank 2 (L, d_k): one head, and the output is rank 2 too.
    out2 = attention(q[0, 0, 0], k[0, 0, 0], v[0, 0])
    assert out2.shape == (7, 5)
    assert_rel(out2, attention(q[0, 0, :1], k[0, 0, :1], v[0, :1])[0], "rank 2", rtol=0)


@pytest.mark.parametrize("dtype", [np.float16, np.float32])
def test_low_precision_dtypes(dtype):
    """float32 and float16 keep their dtype; float16 is computed in float32 then cast back, so its error
    is that of the final rounding (≤ 1 float16 ulp, ~1e-3 relative), not of float16 arithmetic."""
    case = make_case((1, 2, 1, 7, 97, 59, 4), "mask+bias", seed=7)
    low = {n: None if case[n] is None else case[n].astype(dtype) for n in ("q", "k", "v", "bias", "dout")}
    ref64 = attention(
        *(low[n].astype(np.float64) for n in "qkv"), mask=case["mask"], bias=low["bias"].astype(np.float64)
    )
    out = attention(low["q"], low["k"], low["v"], mask=case["mask"], bias=low["bias"])
    assert out.dtype == dtype
    tol = 2e-3 if dtype == np.float16 else 1e-6
    assert_rel(out, ref64, f"{np.dtype(dtype).name} out", rtol=tol)
    g = attention_backward(low["q"], low["k"], low["v"], low["dout"], mask=case["mask"], bias=low["bias"])
    assert g.dq.dtype == dtype and g.dk.dtype == dtype and g.dv.dtype == dtype and g.dbias.dtype == dtype


def test_huge_logits_stay_finite_in_float64():
    """Logits of order 1e30: max subtraction keeps exp finite; the row is one-hot on the largest key."""
    q = np.array([[1e15, 0.0]])
    k = np.array([[1e15, 0.0], [0.5e15, 0.0], [-1e15, 0.0]])
    v = np.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    out, res = attention(q, k, v, scale=1.0, aux=DETAILS)
    assert res.logits[0, 0] == 1e30
    assert np.isfinite(out).all() and np.array_equal(out, v[:1])
    assert np.isfinite(res.lse).all() and res.lse[0] == 1e30
    g = attention_backward(q, k, v, np.ones((1, 2)), scale=1.0)
    # One-hot row: dS = P ⊙ (dP − rowsum(dP ⊙ P)) = 0, so nothing reaches q and k (the seed's point).
    assert np.array_equal(g.dq, np.zeros_like(q)) and np.array_equal(g.dk, np.zeros_like(k))


def test_forward_holds_one_LxS_array_at_a_time():
    """The issue's memory target, measured (tracemalloc sees NumPy's allocations): beyond the output,
    the forward's peak is one L×S float array plus L×d-sized odds and ends, whatever the head count."""
    rng = np.random.default_rng(8)
    L = S = 256
    q, k, v = (rng.standard_normal((1, 3, L, 8)) for _ in range(3))
    cases = (
        {},
        {"causal": "top_left"},
        {"mask": rng.random((L, S)) < 0.5},
        {"scale": "logn"},
        {"scale": "softcap"},
        {"bias": rng.standard_normal((L, S))},
        {"dropout_p": 0.1, "seed": 0},
    )
    for kw in cases:
        tracemalloc.start()
        try:
            before, _ = tracemalloc.get_traced_memory()
            tracemalloc.reset_peak()
            out = attention(q, k, v, **kw)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        temporaries = (peak - before - out.nbytes) / (L * S * 8)
        # 1 float64 L×S array, plus the inverted mask and its inversion temporary (L×S bools, 1/8 each)
        # and the L×d_k, L×d_v per-head arrays (~1/32 each at this size); dropout adds its float32
        # uniform draws (1/2) while it makes the keep mask. Measured: 1.14, 1.27 with a mask, 1.64.
        limit = 1.75 if "dropout_p" in kw else 1.35
        assert temporaries <= limit, f"{kw}: {temporaries:.2f} L×S float64 arrays of temporaries"


def test_benchmark_script_runs():
    """benchmarks/attention.py at a tiny size: the script the closing note quotes keeps working."""
    bench = runpy.run_path(str(Path(__file__).parents[2] / "benchmarks" / "attention.py"), run_name="bench")
    result = bench["bench"]((1, 2, 64, 8), rounds=2)
    assert set(result["median_s"]) >= {"attnscale", "naive numpy", "torch sdpa"}
    assert result["max_rel_diff_attnscale_vs_naive"] < 1e-5
    assert result["temporaries_in_LxS"]["attnscale"] < result["temporaries_in_LxS"]["naive numpy"]
    assert "ratio" in bench["render"]({"results": [result], "threads": {}})


# --- doctests: docstring examples of every module of the package are tests too (as einops does) ---

# onerror: a subpackage that fails to import fails its own test below, not this file's collection.
MODULES = sorted(
    m.name
    for m in pkgutil.walk_packages(attnscale.__path__, prefix="attnscale.", onerror=lambda _: None)
    if m.name != "attnscale.__main__"
)


@pytest.mark.parametrize("module_name", MODULES)
def test_doctests(module_name):
    module = importlib.import_module(module_name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE, verbose=False)
    assert result.failed == 0, f"{result.failed} of {result.attempted} doctests failed in {module_name}"
