"""attnscale.torch.attention against the NumPy core (float64 oracle) and PyTorch's own SDPA.

Tolerances: float64 figures within 1e-9 relative of the core (with a 1e-12 nats floor for rows whose
entropy is 0: one attended key); float64 outputs within 1e-12; float32 outputs within 2e-6 of
PyTorch's SDPA (both float32, errors ~1e-7 against float64), float32 figures within 2e-5 of float64.
"""

import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import attnscale  # noqa: E402
from attnscale.errors import InputError, InputTypeError  # noqa: E402
from attnscale import AuxOutput, AuxRequest  # noqa: E402
from attnscale.torch import attention, kernel_status  # noqa: E402
from attnscale.torch import ext  # noqa: E402
from attnscale.torch.backends import kernel  # noqa: E402
from attnscale.torch.backends import problem as backend_problem  # noqa: E402
from attnscale.torch.functional import attention_figures, kept_attention  # noqa: E402
from helpers.threads import close_across_threads  # noqa: E402

BACKENDS = ("kernel", "composed", "chunked")
FIGURES = AuxRequest(lse=True, entropy=True)
WITH_RANGE = AuxRequest(lse=True, entropy=True, logit_range=True)


def kernel_or_skip(backend):
    if backend == "kernel" and not kernel_status()["available"]:
        pytest.fail(f"the C++ kernel did not build: {kernel_status()['reason']}")


def problem(seed, B=2, H_q=4, H_kv=2, L=37, S=53, d_k=16, d_v=8, dtype=torch.float64, spread=2.0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, H_q, L, d_k, generator=g, dtype=dtype) * spread
    k = torch.randn(B, H_kv, S, d_k, generator=g, dtype=dtype)
    v = torch.randn(B, H_kv, S, d_v, generator=g, dtype=dtype)
    mask = torch.rand(B, 1, L, S, generator=g) > 0.3
    mask[0, 0, 3] = False  # one fully masked row
    return q, k, v, mask


def oracle(q, k, v, **kw):
    """((out, AuxOutput with the logits and lse) of the NumPy core, the rows' health from its logits,
    their largest and smallest attended logit)."""
    out, ref = attnscale.attention(q.numpy(), k.numpy(), v.numpy(), aux=AuxRequest(logits=True, lse=True), **kw)
    health = attnscale.row_health(ref.logits, spectral=False)
    attended = np.isfinite(ref.logits)
    empty = ~attended.any(-1)
    hi = np.where(empty, np.nan, np.where(attended, ref.logits, -np.inf).max(-1))
    lo = np.where(empty, np.nan, np.where(attended, ref.logits, np.inf).min(-1))
    return (out, ref), health, hi, lo


def assert_figures(res_out, res: AuxOutput, core, health, hi, lo, rel=1e-9, out_atol=1e-12):
    empty = health.n == 0
    ref_out, ref = core
    np.testing.assert_allclose(res_out.numpy(), ref_out, rtol=0, atol=out_atol)
    assert (res_out.numpy()[empty] == 0).all()
    np.testing.assert_array_equal(res.lse.numpy()[empty], -np.inf)
    np.testing.assert_allclose(res.lse.numpy()[~empty], ref.lse[~empty], rtol=rel, atol=0)
    assert np.isnan(res.entropy.numpy()[empty]).all()
    np.testing.assert_allclose(res.entropy.numpy()[~empty], health.entropy[~empty], rtol=rel, atol=1e-12)
    if res.max_logit is not None:
        np.testing.assert_allclose(res.max_logit.numpy(), hi, rtol=rel, atol=0)  # NaN where empty, both
        np.testing.assert_allclose(res.min_logit.numpy(), lo, rtol=rel, atol=0)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("causal", [False, "top_left", "bottom_right"])
@pytest.mark.parametrize("masked", [False, True])
def test_float64_figures_equal_the_numpy_core(backend, causal, masked):
    kernel_or_skip(backend)
    q, k, v, mask = problem(seed=hash((causal, masked)) % 1000)
    kw = dict(causal=causal, mask=mask if masked else None)
    res_out, res = attention(q, k, v, backend=backend, **kw, aux=WITH_RANGE)
    assert res.backend == backend
    assert_figures(res_out, res, *oracle(q, k, v, **{**kw, "mask": None if not masked else mask.numpy()}))


@pytest.mark.parametrize("backend", BACKENDS)
def test_tiles_smaller_than_the_problem_cross_every_block_edge(backend, monkeypatch):
    """The kernel's online softmax across many key blocks, with rescaling, causal skips and
    partial blocks; L > S bottom-right leaves leading rows fully masked."""
    kernel_or_skip(backend)
    monkeypatch.setattr(kernel, "Q_BLOCK", 7)
    monkeypatch.setattr(kernel, "KV_BLOCK", 11)
    monkeypatch.setattr(backend_problem, "CHUNK_ELEMENTS", 500)
    q, k, v, mask = problem(seed=3, L=60, S=45, spread=3.0)
    for causal in (False, "top_left", "bottom_right"):
        res_out, res = attention(q, k, v, mask=mask, causal=causal, backend=backend, aux=WITH_RANGE)
        assert_figures(res_out, res, *oracle(q, k, v, mask=mask.numpy(), causal=causal))


@pytest.mark.parametrize("backend", ["kernel", "chunked"])
def test_additive_bias_with_masked_entries(backend):
    kernel_or_skip(backend)
    q, k, v, mask = problem(seed=5, H_q=2, H_kv=1)
    g = torch.Generator().manual_seed(9)
    bias = torch.randn(2, 2, 37, 53, generator=g, dtype=torch.float64)
    bias[torch.rand(bias.shape, generator=g) < 0.2] = -math.inf
    res_out, res = attention(q, k, v, bias=bias, causal="bottom_right", backend=backend, aux=WITH_RANGE)
    assert_figures(res_out, res, *oracle(q, k, v, bias=bias.numpy(), causal="bottom_right"))


def test_composed_refuses_a_bias():
    q, k, v, _ = problem(seed=1)
    with pytest.raises(InputError, match="bias: the 'composed' backend"):
        attention(q, k, v, bias=torch.zeros(37, 53, dtype=torch.float64), backend="composed", aux=FIGURES)


@pytest.mark.parametrize("backend", BACKENDS)
def test_huge_logits_keep_entropy_accurate(backend):
    """Logits in the thousands, entropies near 0: the kernel and chunked paths sum non-negative
    terms (ln l − u/l), relative 1e-9 above a floor of 1e-15 nats (a few ulps of ln l with l ≈ 1, which
    the NumPy core rounds too); the composed path subtracts lse − Σ p·s, so it gets an absolute bound."""
    kernel_or_skip(backend)
    q, k, v, _ = problem(seed=11, L=20, S=30)
    res_out, res = attention(q, k, v, scale=40.0, backend=backend, aux=FIGURES)
    (_, ref), health, *_ = oracle(q, k, v, scale=40.0)
    assert float(np.abs(ref.logits).max()) > 500
    if backend == "composed":
        np.testing.assert_allclose(res.entropy.numpy(), health.entropy, rtol=0, atol=1e-11)
    else:
        np.testing.assert_allclose(res.entropy.numpy(), health.entropy, rtol=1e-9, atol=1e-15)


@pytest.mark.parametrize("backend", BACKENDS)
def test_float32_output_matches_pytorch_sdpa(backend):
    kernel_or_skip(backend)
    q, k, v, mask = problem(seed=2, L=97, S=130, d_k=64, d_v=64, dtype=torch.float32, spread=1.0)
    for causal, m in ((False, None), ("top_left", None), (False, mask)):
        res_out, res = attention(q, k, v, mask=m, causal=causal, backend=backend, aux=FIGURES)
        ours = res_out
        sdpa = torch.nn.functional.scaled_dot_product_attention(
            q, k, v, attn_mask=m, is_causal=bool(causal), enable_gqa=True
        )
        exact = torch.nn.functional.scaled_dot_product_attention(
            q.double(), k.double(), v.double(), attn_mask=m, is_causal=bool(causal), enable_gqa=True
        )
        err_ours, err_sdpa = (ours.double() - exact).abs().max().item(), (sdpa.double() - exact).abs().max().item()
        print(f"{backend} {causal} mask={m is not None}: |ours−f64| {err_ours:.2e}  |sdpa−f64| {err_sdpa:.2e}")
        assert (ours - sdpa).abs().max().item() <= 2e-6
        assert err_ours <= max(4 * err_sdpa, 1e-6)
        ref_out, ref = attention(
            q.double(), k.double(), v.double(), mask=m, causal=causal, backend="chunked", aux=FIGURES
        )
        assert res.entropy.dtype == torch.float32
        np.testing.assert_allclose(res.entropy.numpy(), ref.entropy.numpy(), rtol=0, atol=2e-5)
        np.testing.assert_allclose(res.lse.numpy(), ref.lse.numpy(), rtol=0, atol=2e-5)


DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])  # CUDA adds cases; never skipped


@pytest.mark.parametrize("device", DEVICES)
def test_auto_backend_on_each_device(device):
    q, k, v, mask = problem(seed=12, L=70, S=90, d_k=64, d_v=64, dtype=torch.float32, spread=1.0)
    for causal, m in ((False, None), ("top_left", None), ("bottom_right", mask)):
        res_out, res = attention(
            q.to(device),
            k.to(device),
            v.to(device),
            mask=None if m is None else m.to(device),
            causal=causal,
            aux=WITH_RANGE,
        )
        assert res.backend == (
            "kernel"
            if device == "cpu" and kernel_status()["available"]
            else "flex"
            if device == "cuda" and kernel_status()["cuda"]["backend"] == "flex"
            else "composed"
        )
        ref_out, ref = attention(
            q.double(),
            k.double(),
            v.double(),
            mask=m,
            causal=causal,
            backend="chunked",
            aux=WITH_RANGE,
        )
        empty = torch.isnan(ref.entropy)
        np.testing.assert_allclose(res_out.cpu().double().numpy(), ref_out.numpy(), rtol=0, atol=2e-5)
        for name in ("entropy", "max_logit", "min_logit"):
            ours, exact = getattr(res, name).cpu(), getattr(ref, name)
            assert torch.equal(torch.isnan(ours), empty)
            np.testing.assert_allclose(ours[~empty].double().numpy(), exact[~empty].numpy(), rtol=0, atol=2e-5)


def test_without_stats_auto_is_plain_sdpa_exactly():
    """The default call returns the output tensor, PyTorch's own SDPA's bit for bit; an explicit
    backend without ``aux`` runs that backend and returns its output only."""
    q, k, v, mask = problem(seed=4, dtype=torch.float32)
    out = attention(q, k, v, mask=mask)
    sdpa = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
    assert isinstance(out, torch.Tensor) and torch.equal(out, sdpa)
    chunked = attention(q, k, v, mask=mask, backend="chunked")
    assert isinstance(chunked, torch.Tensor)
    assert torch.equal(chunked, attention(q, k, v, mask=mask, backend="chunked", aux=FIGURES)[0])


def test_scale_conventions():
    q, k, v, _ = problem(seed=6, L=5, S=9)
    _, uniform = attention(q, k, v, scale=0.0, aux=WITH_RANGE)  # 0.0 is legal: uniform weights
    torch.testing.assert_close(uniform.entropy, torch.full_like(uniform.entropy, math.log(9)), rtol=1e-12, atol=0)
    assert (uniform.max_logit == 0).all()
    lse = lambda **kw: attention(q, k, v, aux=FIGURES, **kw)[1].lse  # noqa: E731
    torch.testing.assert_close(lse(), lse(scale=1 / 4), rtol=0, atol=0)  # 1/√16
    torch.testing.assert_close(lse(scale="inverse_dk"), lse(scale=1 / 16), rtol=0, atol=0)


RULES = [
    "logn",
    "qknorm",
    "softcap",
    attnscale.scales.QKNorm(gain=3.0, norm="l2"),
    attnscale.scales.SoftCap(cap_value=2.0, base=attnscale.scales.LogN(s=0.7)),
]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("rule", RULES, ids=str)
def test_every_scale_rule_equals_the_numpy_core(backend, rule):
    """QK-norm, log-n (per-row factor: the attended count under mask, causal limit and −inf bias) and
    soft-capping, in float64, on every backend that can honour them; the composed one names what it cannot."""
    kernel_or_skip(backend)
    q, k, v, mask = problem(seed=16, L=23, S=31, spread=4.0)
    bias = torch.randn(23, 31, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    bias[2, :7] = -math.inf
    for kw in (dict(mask=mask, causal="bottom_right"), dict(bias=bias)):
        capped = attnscale.scales.resolve_scale(rule).caps
        if backend == "composed" and ("bias" in kw or capped):
            with pytest.raises(InputError, match="bias: the 'composed'|scale: the 'composed' backend cannot soft-cap"):
                attention(q, k, v, scale=rule, backend=backend, **kw, aux=FIGURES)
            continue
        res_out, res = attention(q, k, v, scale=rule, backend=backend, **kw, aux=WITH_RANGE)
        numpy_kw = {name: (x.numpy() if isinstance(x, torch.Tensor) else x) for name, x in kw.items()}
        (ref_out, ref), health, hi, lo = oracle(q, k, v, scale=rule, **numpy_kw)
        entropy_atol = 1e-11 if backend == "composed" else 1e-12
        np.testing.assert_allclose(res_out.numpy(), ref_out, rtol=0, atol=1e-12)
        empty = health.n == 0
        np.testing.assert_allclose(res.lse.numpy()[~empty], ref.lse[~empty], rtol=1e-9, atol=0)
        np.testing.assert_allclose(res.entropy.numpy()[~empty], health.entropy[~empty], rtol=1e-9, atol=entropy_atol)
        np.testing.assert_allclose(res.max_logit.numpy(), hi, rtol=1e-9, atol=0)
        np.testing.assert_allclose(res.min_logit.numpy(), lo, rtol=1e-9, atol=0)


def test_a_rule_no_backend_can_honour_is_named():
    q, k, v, _ = problem(seed=6, L=5, S=9)
    twice = attnscale.scales.SoftCap(cap_value=3.0, base=attnscale.scales.SoftCap(cap_value=5.0))
    with pytest.raises(InputError, match="scale: rule .* caps more than once"):
        attention(q, k, v, scale=twice, aux=FIGURES)


def test_shapes_rank2_broadcast_and_half_precision():
    q, k, v, _ = problem(seed=7, B=1, H_q=1, H_kv=1)
    one_out, one = attention(q[0, 0], k[0, 0], v[0, 0], aux=FIGURES)  # (L, d): one head
    assert one_out.shape == (37, 8) and one.entropy.shape == (37,)
    full_out, full = attention(q, k, v, aux=FIGURES)
    torch.testing.assert_close(one.entropy, full.entropy[0, 0], rtol=0, atol=0)
    shared_kv_out, shared_kv = attention(q.expand(3, 1, 37, 16), k[0], v[0], aux=FIGURES)  # leading dims broadcast
    assert shared_kv_out.shape == (3, 1, 37, 8)
    half_out, half = attention(q.half(), k.half(), v.half(), aux=WITH_RANGE)
    assert half_out.dtype == torch.float16 and half.entropy.dtype == torch.float32
    torch.testing.assert_close(half.entropy, full.entropy.float(), rtol=0, atol=5e-3)


@pytest.mark.parametrize("backend", BACKENDS)
def test_strided_views_as_models_pass_them(backend):
    """(B, L, H, d) projections viewed as (B, H, L, d), and a query row broadcast along L."""
    kernel_or_skip(backend)
    g = torch.Generator().manual_seed(13)
    qkv = torch.randn(2, 19, 3, 4, 16, generator=g, dtype=torch.float64)  # (B, L, 3, H, d)
    q, k, v = (qkv[:, :, i].transpose(1, 2) for i in range(3))
    assert not q.is_contiguous()
    res_out, res = attention(q, k, v, causal=True, backend=backend, aux=FIGURES)
    ref_out, ref = attention(
        q.contiguous(), k.contiguous(), v.contiguous(), causal=True, backend="chunked", aux=FIGURES
    )
    torch.testing.assert_close(res.entropy, ref.entropy, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(res_out, ref_out, rtol=1e-12, atol=1e-12)
    row = q[:, :, :1].expand(-1, -1, 19, -1)  # stride 0 along L
    same_out, same = attention(row, k, v, backend=backend, aux=FIGURES)
    torch.testing.assert_close(same.entropy, same.entropy[:, :, :1].expand_as(same.entropy), rtol=1e-12, atol=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_kernel_across_thread_counts(dtype):
    """Bit for bit run to run at a fixed thread count (what a race would break); on 1 thread against
    2 within 16 eps of the largest figure: the work is split the same way whatever the thread count,
    but the BLAS may choose its GEMM kernels by it (MKL does on Intel Xeon, at d_k 32 and more)."""
    kernel_or_skip("kernel")
    q, k, v, mask = problem(seed=14, L=300, S=600, d_k=64, d_v=32, dtype=dtype)
    names = ("out", "lse", "entropy", "max_logit", "min_logit")

    def run(threads):
        torch.set_num_threads(threads)
        out, stats = attention(q, k, v, mask=mask, backend="kernel", aux=WITH_RANGE)
        return {"out": out, **{n: getattr(stats, n) for n in names[1:]}}

    before = torch.get_num_threads()
    try:
        one, two, again = run(1), run(2), run(2)
    finally:
        torch.set_num_threads(before)
    for name in names:  # NaN rows: fully masked
        torch.testing.assert_close(two[name], again[name], rtol=0, atol=0, equal_nan=True)
        assert close_across_threads(one[name], two[name]) is None, (name, close_across_threads(one[name], two[name]))


@pytest.mark.parametrize("backend", BACKENDS)
def test_no_queries_and_no_values(backend):
    kernel_or_skip(backend)
    res_out, res = attention(
        torch.randn(2, 0, 4),
        torch.randn(2, 5, 4),
        torch.randn(2, 5, 3),
        backend=backend,
        aux=WITH_RANGE,
    )
    assert res_out.shape == (2, 0, 3) and res.entropy.shape == res.max_logit.shape == (2, 0)
    q, k, v, _ = problem(seed=15, L=6, S=9)
    empty_v_out, empty_v = attention(q, k, v[..., :0], backend=backend, aux=FIGURES)  # d_v = 0: figures still exact
    assert empty_v_out.shape == (2, 4, 6, 0)
    # The kernel's forward takes d_v = 0 itself (figures without the P·V products); the others, and
    # the kernel with gradients, hand it to chunked.
    assert empty_v.backend == ("kernel" if backend == "kernel" else "chunked")
    full = attention(q, k, v, backend=backend, aux=FIGURES)[1]
    exact = backend == "kernel"  # the same sums, only the P·V products skipped: the same bits
    for name in ("entropy", "lse", "max_logit"):
        torch.testing.assert_close(
            getattr(empty_v, name), getattr(full, name), rtol=0 if exact else 1e-12, atol=0 if exact else 1e-14
        )
    q.requires_grad_(True)
    out, trained = attention(q, k, v[..., :0], backend=backend, aux=FIGURES)
    assert trained.backend == "chunked"
    out.sum().backward()
    assert q.grad is not None and not q.grad.any()  # no values: the output, and its gradient, are nothing


def test_the_logit_range_shows_a_float16_overflow():
    """The range leaves ±FLOAT16_MAX exactly when a logit does (what the monitor counts per head)."""
    from attnscale.torch import FLOAT16_MAX

    q, k, v, _ = problem(seed=8, L=6, S=7)
    for scale, overflows in ((None, False), (1e5, True)):
        _, stats = attention(q, k, v, scale=scale, aux=WITH_RANGE)
        logits = (1 / 4 if scale is None else scale) * (q @ k.repeat_interleave(2, dim=1).transpose(-2, -1))
        per_row = logits.abs().amax(-1) > FLOAT16_MAX
        assert bool(per_row.any()) == overflows
        assert torch.equal((stats.max_logit > FLOAT16_MAX) | (stats.min_logit < -FLOAT16_MAX), per_row)
    assert attention(q, k, v, aux=FIGURES)[1].max_logit is None  # asked for: logit_range=True


BAD = [
    (dict(q=[1.0]), InputTypeError, "q: expected a torch.Tensor, got list"),
    (dict(q=torch.ones(3, dtype=torch.int64)), InputTypeError, "q: expected a floating-point tensor"),
    (dict(q=torch.ones(4)), InputError, r"q: expected at least 2 dimensions .* got shape \(4,\)"),
    (dict(k=torch.ones(2, 5, 3)), InputError, "k: expected last dimension d_k = 4"),
    (dict(v=torch.ones(2, 6, 3)), InputError, "v: expected S = 5 keys"),
    (dict(q=torch.ones(3, 7, 4)), InputError, "k: number of heads H_kv = 2 must divide"),
    (dict(v=torch.ones(2, 5, 3, dtype=torch.float64)), InputTypeError, "q, k, v: expected one dtype"),
    (dict(mask=torch.ones(7, 5)), InputTypeError, "mask: expected a bool torch.Tensor"),
    (dict(mask=torch.ones(6, 5, dtype=torch.bool)), InputError, "mask: shape .* cannot broadcast"),
    (dict(bias=torch.full((7, 5), math.nan), check_finite=True), InputError, "bias: contains NaN or \\+Inf"),
    (dict(q=torch.full((2, 7, 4), math.inf), check_finite=True), InputError, "q: contains NaN or Inf"),
    (dict(causal=True), InputError, "causal: True is ambiguous when L != S"),
    (dict(causal="left"), InputError, "causal: expected False, True"),
    (dict(scale=True), InputTypeError, "scale: expected a number"),
    (dict(backend="fast"), InputError, "backend: expected one of"),
]


@pytest.mark.parametrize("change,error,message", BAD)
def test_bad_inputs_name_the_argument(change, error, message):
    args = dict(q=torch.ones(2, 7, 4), k=torch.ones(2, 5, 4), v=torch.ones(2, 5, 3))
    args.update(change)
    q, k, v = args.pop("q"), args.pop("k"), args.pop("v")
    with pytest.raises(error, match=message):
        attention(q, k, v, **args, aux=FIGURES)


def test_a_kept_signature_hides_no_error_and_mixes_no_calls():
    """A call's signature is checked once and kept (arguments._kept_signature): a bad one still
    raises every time, True and 1 are not one key, and another dtype of the same shapes is its own."""
    q, k, v = torch.ones(2, 6, 4), torch.ones(2, 6, 4), torch.ones(2, 6, 3)
    for _ in range(2):
        with pytest.raises(InputError, match="scale: expected a finite number"):
            attention(q, k, v, scale=math.nan)
    attention(q, k, v, causal=True, scale=1.0)
    with pytest.raises(InputError, match="causal: expected False, True"):
        attention(q, k, v, causal=1, scale=1.0)  # == True, but not the same key
    with pytest.raises(InputTypeError, match="scale: expected a number"):
        attention(q, k, v, scale=True)  # after scale=1.0
    assert attention(q.double(), k.double(), v.double(), scale=1.0).dtype == torch.float64
    # The backend is kept with the signature too: chosen anew for another backend asked for, with
    # or without a bias, with or without figures.
    auto = "kernel" if kernel_status()["available"] else "composed"
    for backend, expected in (("chunked", "chunked"), ("composed", "composed"), ("auto", auto)):
        assert attention(q, k, v, aux=FIGURES, backend=backend)[1].backend == expected
    with pytest.raises(InputError, match="bias: the 'composed' backend cannot weight a bias"):
        attention(q, k, v, bias=torch.zeros(6, 6), aux=FIGURES, backend="composed")
    assert attention(q, k, v, bias=torch.zeros(6, 6), aux=FIGURES)[1].backend != "composed"
    assert attention(q, k, v, scale=1.0).dtype == torch.float32  # plain SDPA: no figures, no backend


KEPT = dict(logit_range=True, first_key=True, head_table=True)


@pytest.mark.usefixtures("built_kernel")
@pytest.mark.parametrize(
    "case",
    [
        dict(),  # grouped-query heads (4 query, 2 key/value), no mask
        dict(masked=True),  # a bool mask broadcast over the heads, one fully masked row
        dict(causal="top_left", L=53),
        dict(causal="bottom_right", L=9),  # decoding: L < S
        dict(counted=True, scale=0.3),
        dict(dtype=torch.float32, masked=True, counted=True),
        dict(grad=True, masked=True),
    ],
)
def test_a_kept_call_gives_attentions_results_bit_for_bit(case):
    """functional.KeptAttention, the kernel call a signature keeps (the monitor's replace mode
    calls it for a layer's calls after the first), against attention_figures() itself: every result and
    gradient the same bits."""
    dtype, L = case.get("dtype", torch.float64), case.get("L", 37)
    q, k, v, mask = problem(seed=11, L=L, dtype=dtype)
    mask = mask[:, :, :L] if case.get("masked") else None
    counted = (torch.arange(L) < L - 4).expand(2, L).clone() if case.get("counted") else None
    scale, causal = case.get("scale"), case.get("causal", False)
    runs = []
    for kept in (None, kept_attention(q, k, v, scale=scale, causal=causal, mask=mask)):
        qq, kk, vv = (x.detach().requires_grad_(case.get("grad", False)) for x in (q, k, v))
        if kept is None:
            out, stats = attention_figures(qq, kk, vv, scale=scale, causal=causal, mask=mask, counted=counted, **KEPT)
        else:
            out, stats = kept(qq, kk, vv, mask, counted)
        grads = torch.autograd.grad(out.square().sum(), (qq, kk, vv)) if case.get("grad") else ()
        runs.append((out, stats, grads))
    (out, stats, grads), (kept_out, kept_stats, kept_grads) = runs
    assert torch.equal(out, kept_out) and kept_stats.backend == stats.backend == "kernel"
    for field in ("lse", "entropy", "max_logit", "min_logit", "first_key_weight", "head_table", "counted_entropy"):
        a, b = getattr(stats, field), getattr(kept_stats, field)
        assert a.shape == b.shape and a.dtype == b.dtype and not b.requires_grad, field
        assert torch.equal(a.nan_to_num(), b.nan_to_num()) and torch.equal(a.isnan(), b.isnan()), field
    assert all(torch.equal(a, b) for a, b in zip(grads, kept_grads))


@pytest.mark.usefixtures("built_kernel")
def test_a_call_the_kernel_does_not_take_as_given_is_not_kept():
    """kept_attention keeps only what the kernel computes from the tensors as given and returns as
    they are; anything else goes through attention() each time."""
    q, k, v, mask = problem(seed=1, dtype=torch.float32)
    assert kept_attention(q, k, v, scale=None, causal=False, mask=mask) is not None
    refused = {
        "3-D": (q[0], k[0], v[0], {}),
        "float16": (q.half(), k.half(), v.half(), {}),
        "QK-norm": (q, k, v, {"scale": "qknorm"}),
        "chunked": (q, k, v, {"backend": "chunked"}),
        "no queries": (q[:, :, :0], k, v, {}),
        "no values": (q, k, v[..., :0], {}),
        "float mask": (q, k, v, {"mask": mask.float()}),
        "keys broadcast over the batch": (q, k[:1], v[:1], {}),
    }
    for why, (qq, kk, vv, change) in refused.items():
        args = {"scale": None, "causal": False, "mask": None, **change}
        assert kept_attention(qq, kk, vv, **args) is None, why


@pytest.mark.slow
@pytest.mark.parametrize("env", [{"ATTNSCALE_NO_KERNEL": "1"}, {"CXX": "/nonexistent/c++"}])
def test_without_the_kernel_auto_falls_back_to_composed_calls(env, tmp_path):
    """Switched off, or unbuildable (no compiler; a fresh, empty build cache)."""
    code = (
        "import torch; from attnscale.torch import AuxRequest, attention, kernel_status; s = kernel_status(); "
        "print(s['available'], attention(torch.ones(1, 3, 4), torch.ones(1, 3, 4), torch.ones(1, 3, 4), "
        "aux=AuxRequest(lse=True))[1].backend); "
        "print(s['reason'])"
    )
    env = {**os.environ, "TORCH_EXTENSIONS_DIR": str(tmp_path), **env}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    first, reason = done.stdout.splitlines()[:2]
    assert first.split() == ["False", "composed"] and reason
    print(reason)


# --- numerical edge cases of the kernel (each found by review; each test failed before its fix) ------


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("jump", [50.0, 90.0, 200.0, 300.0, 1000.0])
def test_a_later_key_block_far_above_the_running_max(dtype, jump):
    """The online softmax rescales its sums by e^{−δ} when a later key block raises the max by δ; past
    float32's exp underflow (δ > 87) that factor must be exactly 0, not garbage. Reference: the chunked
    backend in float64 on the same (rounded) inputs; float32 within 2e-6 relative (out, lse) and 2e-6
    nats (entropy), float64 within 1e-12."""
    kernel_or_skip("kernel")
    S = 2 * kernel.KV_BLOCK + 7  # two full key blocks and a partial third
    g = torch.Generator().manual_seed(int(jump))
    q = (torch.randn(1, 1, 3, 8, generator=g) * 0.5).to(dtype)  # other logits of order 1
    q[..., 0] = torch.tensor([1.0, 0.5, -1.0], dtype=dtype)  # rows: +jump, +jump/2, −jump
    k = (torch.randn(1, 1, S, 8, generator=g) * 0.5).to(dtype)
    k[..., 0] = 0.0
    k[0, 0, kernel.KV_BLOCK + 3, 0] = jump  # one key in the second block
    v = torch.randn(1, 1, S, 5, generator=g).to(dtype)
    res_out, res = attention(q, k, v, scale=1.0, backend="kernel", aux=WITH_RANGE)
    ref_out, ref = attention(q.double(), k.double(), v.double(), scale=1.0, backend="chunked", aux=WITH_RANGE)
    tol = 2e-6 if dtype == torch.float32 else 1e-12
    assert (res.entropy >= 0).all(), res.entropy
    np.testing.assert_allclose(res_out.double().numpy(), ref_out.numpy(), rtol=tol, atol=tol)
    np.testing.assert_allclose(res.lse.double().numpy(), ref.lse.numpy(), rtol=tol, atol=0)
    np.testing.assert_allclose(res.entropy.double().numpy(), ref.entropy.numpy(), rtol=0, atol=tol)
    np.testing.assert_allclose(res.max_logit.double().numpy(), ref.max_logit.numpy(), rtol=tol, atol=0)


@pytest.mark.parametrize("scale", [10.0, 100.0])
def test_composed_float32_entropy_is_never_negative(scale):
    """The composed backend's entropy is lse − scale·q·(PK), a difference: in float32 it has an absolute
    error of order eps·|lse| and, unclamped, went negative (−1.4e-4 at scale 10). Clamped at 0, and
    within 8·eps32·|lse| + 1e-6 nats of float64 chunked on the same inputs."""
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 4, 64, d, generator=g) for d in (64, 64, 16))
    res_out, res = attention(q, k, v, scale=scale, backend="composed", aux=FIGURES)
    ref_out, ref = attention(q.double(), k.double(), v.double(), scale=scale, backend="chunked", aux=FIGURES)
    assert (res.entropy >= 0).all()
    error = (res.entropy.double() - ref.entropy).abs()
    bound = 8 * torch.finfo(torch.float32).eps * ref.lse.abs() + 1e-6
    assert (error <= bound).all(), float((error - bound).max())
    print(
        f"scale {scale}: max |entropy error| {float(error.max()):.2e} nats, max |lse| {float(ref.lse.abs().max()):.0f}"
    )


@pytest.mark.parametrize("backend", ["kernel", "chunked"])
def test_an_overflowed_logit_is_not_reported_as_nothing_attended(backend):
    """q·k = 4e38 overflows float32 to +inf (finite inputs, so check_finite lets it through): the row
    has no distribution, and must not look like a fully masked one (out 0, lse −inf)."""
    kernel_or_skip(backend)
    q, k, v = torch.full((1, 1, 2, 4), 1e19), torch.full((1, 1, 3, 4), 1e19), torch.ones(1, 1, 3, 2)
    res_out, res = attention(q, k, v, scale=1.0, backend=backend, aux=WITH_RANGE)
    assert (res.lse == math.inf).all() and res.entropy.isnan().all() and res_out.isnan().all()
    assert (res.max_logit == math.inf).all()


@pytest.mark.parametrize("backend", ["kernel", "chunked"])
@pytest.mark.parametrize("block", [0, 1, 2])
@pytest.mark.parametrize("only_that_key", [False, True])
def test_a_nan_logit_makes_its_row_nan_in_any_key_block(backend, block, only_that_key):
    """A NaN key (check_finite=False) in the first, second or partial third key block: every row
    comes out NaN (lse NaN, not −inf), also when the mask leaves that key the only one attended."""
    kernel_or_skip(backend)
    S = 2 * kernel.KV_BLOCK + 7
    g = torch.Generator().manual_seed(block)
    q, k, v = (
        torch.randn(1, 2, 3, 8, generator=g),
        torch.randn(1, 2, S, 8, generator=g),
        torch.randn(1, 2, S, 4, generator=g),
    )
    j = block * kernel.KV_BLOCK + 2
    k[0, 0, j, 0] = math.nan  # head 0 only; head 1 is a healthy control
    mask = None
    if only_that_key:
        mask = torch.zeros(S, dtype=torch.bool)
        mask[j] = True
    res_out, res = attention(q, k, v, mask=mask, scale=1.0, backend=backend, check_finite=False, aux=WITH_RANGE)
    broken = res.lse[0, 0]
    assert broken.isnan().all() and res.entropy[0, 0].isnan().all() and res_out[0, 0].isnan().all()
    assert torch.isfinite(res.lse[0, 1]).all() and torch.isfinite(res_out[0, 1]).all()


@pytest.mark.slow
def test_a_stale_build_lock_is_removed_and_the_kernel_loads(tmp_path):
    """A build killed mid-way leaves torch's lock file; torch then waits on it forever, built or not
    (it takes the lock before ninja looks). An old lock (mtime an hour ago) is removed and the kernel
    loads, from a cache of its own holding a copy of this process's build: a second compile (half a
    minute on 2 cores) would check nothing more."""
    from torch.utils import cpp_extension

    assert ext.load_kernel() is not None, ext.kernel_status()["reason"]
    name = ext._build_name()
    built = Path(cpp_extension._get_build_directory(name, False))
    shutil.copytree(built, tmp_path / name, ignore=shutil.ignore_patterns("lock"))  # mtimes kept: ninja is idle
    code = (
        "import os, sys, time\n"
        "from pathlib import Path\n"
        "import torch\n"
        "from torch.utils import cpp_extension\n"
        "from attnscale.torch import ext\n"
        "lock = Path(cpp_extension._get_build_directory(ext._build_name(), False)) / 'lock'\n"
        "lock.touch(); os.utime(lock, (time.time() - 3600,) * 2)\n"
        "s = ext.kernel_status(); print(s['available'], lock.exists()); print(s['reason'])\n"
    )
    env = {**os.environ, "TORCH_EXTENSIONS_DIR": str(tmp_path)}
    env.pop("ATTNSCALE_NO_KERNEL", None)
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0].split() == ["True", "False"], done.stdout


def test_a_young_build_lock_is_waited_for_then_an_old_one_removed(tmp_path):
    """A lock a live build holds is waited on until released; one older than the limit is removed."""
    import threading

    from attnscale.torch import ext

    lock = tmp_path / "lock"
    lock.touch()
    releaser = threading.Timer(0.3, lock.unlink)
    releaser.start()
    ext._clear_stale_lock(lock, max_age=60, poll=0.01)  # returns once the build releases it
    releaser.join()
    assert not lock.exists()
    lock.touch()
    os.utime(lock, (lock.stat().st_mtime - 120,) * 2)
    ext._clear_stale_lock(lock, max_age=60, poll=0.01)
    assert not lock.exists()
    ext._clear_stale_lock(lock)  # no lock: returns at once


def test_ninja_next_to_the_python_is_found_without_an_activated_venv(tmp_path, monkeypatch):
    """torch runs `ninja` from PATH only; a venv's own ninja sits beside its python."""
    from attnscale.torch import ext

    (tmp_path / "ninja").write_text("")
    monkeypatch.setattr(ext.sys, "executable", str(tmp_path / "python"))
    monkeypatch.setattr(ext.shutil, "which", lambda name: None)
    monkeypatch.setenv("PATH", "/usr/bin")
    ext._find_ninja_next_to_python()
    assert os.environ["PATH"].split(os.pathsep) == [str(tmp_path), "/usr/bin"]
    monkeypatch.setattr(ext.shutil, "which", lambda name: "/usr/bin/ninja")  # already on PATH: unchanged
    monkeypatch.setenv("PATH", "/usr/bin")
    ext._find_ninja_next_to_python()
    assert os.environ["PATH"] == "/usr/bin"


def test_the_build_does_not_depend_on_atens_dispatch_level(monkeypatch):
    """ATEN_CPU_CAPABILITY=avx2 (the second arithmetic of the tests) changes what ATen dispatches to,
    not what -march=native compiles: the same build serves, no second compile."""
    from attnscale.torch import ext

    here = ext._build_name()
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "AVX2")
    assert ext._build_name() == here
    monkeypatch.setattr(ext, "cpu_flags", lambda: "another cpu")
    assert ext._build_name() != here


def test_each_checkout_builds_its_kernel_in_its_own_folder(tmp_path, monkeypatch):
    """Two checkouts of the same source (a clone beside a working tree) would rebuild over each other
    in one folder, since ninja's build file records the source's path: the path is in the name."""
    from attnscale.torch import ext

    here = ext._build_name()
    copies = tuple(tmp_path / source.name for source in ext.SOURCES)
    for source, copy in zip(ext.SOURCES, copies):
        copy.write_bytes(source.read_bytes())
    monkeypatch.setattr(ext, "SOURCES", copies)
    assert ext._build_name() != here and ext._build_name() == ext._build_name()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_inputs_without_figures_reach_sdpa_in_their_own_dtype(monkeypatch, dtype):
    """No copy to float32 on the way: SDPA gets the caller's tensors' dtype, and the output is SDPA's own."""
    q, k, v, _ = problem(seed=3, B=1, H_q=2, H_kv=2)
    q, k, v = q.to(dtype), k.to(dtype), v.to(dtype)
    seen = []
    sdpa = torch.nn.functional.scaled_dot_product_attention

    def recording(*args, **kwargs):
        seen.append(args[0].dtype)
        return sdpa(*args, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", recording)
    out = attention(q, k, v, causal="top_left")
    assert seen == [dtype] and out.dtype == dtype
    assert torch.equal(out, sdpa(q, k, v, is_causal=True))


def test_check_finite_is_opt_in():
    """By default no value is scanned (PyTorch's default): an inf input comes out as NaN, not an error."""
    q, k, v = torch.ones(2, 7, 4), torch.ones(2, 5, 4), torch.ones(2, 5, 3)
    q[0, 0, 0] = math.inf
    out, stats = attention(q, k, v, aux=FIGURES)
    assert torch.isnan(out[0, 0]).all() and torch.isnan(stats.entropy[0, 0])
    with pytest.raises(InputError, match="q: contains NaN or Inf"):
        attention(q, k, v, check_finite=True)


def test_a_traced_call_warns_nothing_of_the_shape_cache(monkeypatch):
    """Dynamo traces through the shapes' lru_cache and warns that it does (once per process, seen
    in every compiled monitor run): a traced call skips the cache."""
    import warnings

    from torch._dynamo import utils as dynamo_utils

    monkeypatch.setattr(dynamo_utils, "warn_once_cache", set())  # the warning may have been given already
    torch._dynamo.reset()
    q, k, v, _ = problem(seed=5, B=1, H_q=2, H_kv=2)
    f = torch.compile(lambda q, k, v: attention(q, k, v, aux=FIGURES, backend="chunked")[1].entropy, backend="eager")
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        got = f(q, k, v)
    assert not [w for w in seen if "lru_cache" in str(w.message)], [str(w.message) for w in seen]
    assert torch.allclose(got, attention(q, k, v, aux=FIGURES, backend="chunked")[1].entropy)


# Issue 51: the peers' suites' failures (batch 0, a float32 bias, a NaN query row), zero sizes,
# NaN in masked keys and dropout. Each fix's test failed on the code before it (checked).

ALL_BACKENDS = ("kernel", "composed", "chunked", "auto")


def _figures(backend):
    """attention's keyword arguments for ``backend``: "auto" with and without figures are two paths."""
    return {"backend": backend, "aux": FIGURES if backend != "auto" else None}


@pytest.mark.parametrize("backend", ALL_BACKENDS)
@pytest.mark.parametrize("stats", [False, True])
def test_a_batch_of_zero_runs_forward_and_backward(backend, stats):
    """q (0, 4, 10, 64): SDPA returns an empty output and zero-size gradients; the kernel's backward
    refused the expanded gradient of .sum() ("out, dout: last dimension must be contiguous")."""
    q, k, v = (torch.randn(0, 4, n, 64, requires_grad=True) for n in (10, 7, 7))
    got = attention(q, k, v, backend=backend, aux=FIGURES if stats else None)
    out = got[0] if stats else got
    out.sum().backward()
    assert out.shape == (0, 4, 10, 64)
    assert q.grad.shape == q.shape and k.grad.shape == k.shape and v.grad.shape == v.shape
    if stats:
        assert got[1].entropy.shape == (0, 4, 10)


def _alibi_problem(L=1024, d=64, slope=0.3):
    g = torch.Generator().manual_seed(51)
    q, k, v = (torch.randn(1, 2, L, d, generator=g).to(torch.bfloat16) for _ in range(3))
    i = torch.arange(L)
    # FlashAttention's causal ALiBi: slope·(j − S + 1), a function of the key alone (softmax is
    # shift-invariant per row); early rows see only biases near −slope·S, where bfloat16's spacing is 1 or 2.
    bias = (torch.arange(-L + 1, 1).float() * slope).expand(L, L).masked_fill(i[None, :] > i[:, None], -math.inf)
    return q, k, v, bias


@pytest.mark.parametrize("backend,stats", [("auto", False), ("auto", True), ("chunked", True), ("kernel", True)])
def test_a_float32_bias_keeps_its_precision_beside_bfloat16_inputs(backend, stats):
    """Causal ALiBi (FlashAttention's, slope 0.3, 1,024 keys) with bfloat16 q, k, v: SDPA given the float32 bias errs
    by ~0.008 against float64; rounding the bias to bfloat16 moved the output by up to 1.0.
    FlashAttention's rule: within 2× SDPA's own error."""
    q, k, v, bias = _alibi_problem()
    F = torch.nn.functional
    exact = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), attn_mask=bias.double())
    sdpa_error = (F.scaled_dot_product_attention(q, k, v, attn_mask=bias).double() - exact).abs().max()
    got = attention(q, k, v, bias=bias, backend=backend, aux=FIGURES if stats else None)
    out = got[0] if stats else got
    assert out.dtype == torch.bfloat16
    assert (out.double() - exact).abs().max() <= 2 * sdpa_error


@pytest.mark.parametrize("S", [1, 2, 3, 5, 8, 16, 40])
@pytest.mark.parametrize("backend", ("kernel", "composed", "chunked"))
def test_a_nan_query_row_is_nan_on_every_backend(S, backend):
    """The docstring's rule: a row with a NaN logit has NaN output and entropy, lse NaN. PyTorch's
    CPU flash kernel turns such a row of 8 keys or fewer into a finite one (lse 0): composed did too."""
    g = torch.Generator().manual_seed(S)
    q, k, v = torch.randn(1, 2, 3, 16, generator=g), torch.randn(1, 2, S, 16, generator=g), torch.randn(1, 2, S, 8)
    q[0, 1, 1, 3] = math.nan
    out, stats = attention(q, k, v, backend=backend, aux=FIGURES)
    assert torch.isnan(out[0, 1, 1]).all() and torch.isnan(stats.entropy[0, 1, 1]) and torch.isnan(stats.lse[0, 1, 1])
    rest = torch.ones(2, 3, dtype=torch.bool)
    rest[1, 1] = False
    assert torch.isfinite(out[0][rest]).all() and torch.isfinite(stats.lse[0][rest]).all()


@pytest.mark.parametrize("backend", ALL_BACKENDS)
def test_zero_keys_give_what_sdpa_gives(backend):
    """S = 0: SDPA returns zeros (and zero-size dk, dv); every row attends nothing: lse −inf, NaN figures."""
    q = torch.randn(2, 3, 5, 8, requires_grad=True)
    k, v = torch.randn(2, 3, 0, 8, requires_grad=True), torch.randn(2, 3, 0, 4, requires_grad=True)
    got = attention(q, k, v, **_figures(backend))
    out = got[0] if isinstance(got, tuple) else got
    expected = torch.nn.functional.scaled_dot_product_attention(q, k, v)
    assert torch.equal(out, expected) and out.shape == (2, 3, 5, 4)
    out.sum().backward()
    assert torch.equal(q.grad, torch.zeros_like(q)) and k.grad.shape == k.shape and v.grad.shape == v.shape
    if isinstance(got, tuple):
        assert (got[1].lse == -math.inf).all() and torch.isnan(got[1].entropy).all()


@pytest.mark.parametrize("backend", ALL_BACKENDS)
def test_zero_head_size_and_zero_heads_follow_sdpa(backend):
    """d_k = 0: every logit is 0, so the weights are uniform and the output the mean of v (SDPA's
    answer, default scale included); H = 0: empty results."""
    F = torch.nn.functional
    q, k, v = torch.randn(2, 3, 5, 0), torch.randn(2, 3, 6, 0), torch.randn(2, 3, 6, 4)
    mask = torch.rand(2, 1, 5, 6) > 0.3
    for m in (None, mask):
        got = attention(q, k, v, mask=m, **_figures(backend))
        out = got[0] if isinstance(got, tuple) else got
        torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, attn_mask=m), rtol=1e-6, atol=1e-6)
        if isinstance(got, tuple):
            n = torch.full((2, 3, 5), 6.0) if m is None else m.expand(2, 3, 5, 6).sum(-1).float()
            attended = n > 0
            torch.testing.assert_close(got[1].entropy[attended], n.log()[attended])
    q, k, v = torch.randn(2, 0, 5, 8), torch.randn(2, 0, 6, 8), torch.randn(2, 0, 6, 4)
    got = attention(q, k, v, **_figures(backend))
    assert (got[0] if isinstance(got, tuple) else got).shape == (2, 0, 5, 4)


@pytest.mark.parametrize("backend", ALL_BACKENDS)
def test_nan_in_masked_keys_reaches_neither_the_output_nor_a_gradient(backend):
    """Padding keys (a key-padding mask, and keys past a top-left causal reach) full of NaN: the
    output and every gradient are those without them (SDPA's math path gives NaN rows, and 0 × NaN
    put NaN in dq on kernel, chunked and flex)."""
    g = torch.Generator().manual_seed(3)
    q, k, v = torch.randn(2, 4, 6, 8, generator=g), torch.randn(2, 2, 9, 8, generator=g), torch.randn(2, 2, 9, 5)
    keep = torch.ones(2, 1, 1, 9, dtype=torch.bool)
    keep[0, ..., 6:] = False
    keep[1, ..., 7:] = False
    k_bad, v_bad = k.clone(), v.clone()
    k_bad[0, :, 6:], v_bad[0, :, 6:], k_bad[1, :, 7:], v_bad[1, :, 7:] = math.nan, math.nan, math.inf, math.nan
    for causal in (False, "top_left"):
        grads = []
        for kk, vv in ((k, v), (k_bad, v_bad)):
            leaves = [x.clone().requires_grad_() for x in (q, kk, vv)]
            got = attention(*leaves, mask=keep, causal=causal, **_figures(backend))
            out = got[0] if isinstance(got, tuple) else got
            (out * torch.linspace(-1, 1, out.numel()).reshape(out.shape)).sum().backward()
            grads.append([out.detach()] + [x.grad for x in leaves])
        for clean, dirty in zip(*grads):
            assert torch.isfinite(dirty).all()
            torch.testing.assert_close(dirty, clean, rtol=1e-5, atol=1e-6)


def _keep_pattern(backend, p, generator=None, seed=None):
    """Dropout's keep pattern read off the output: q = 0 gives uniform weights 1/S over S keys and
    v the identity, so out_ij·S·(1 − p) is 1 where weight j was kept, 0 where dropped."""
    S = 32
    q, k = torch.zeros(2, 3, 64, 8), torch.randn(2, 3, S, 8)
    v = torch.eye(S).expand(2, 3, S, S)
    if seed is not None:
        torch.manual_seed(seed)
    got = attention(q, k, v, dropout_p=p, generator=generator, **_figures(backend))
    out = got[0] if isinstance(got, tuple) else got
    kept = out * S * (1 - p)
    assert torch.all((kept - kept.round()).abs() < 1e-4) and set(kept.round().unique().tolist()) <= {0.0, 1.0}
    return kept.round().bool(), got


@pytest.mark.parametrize("p", [0.1, 0.5, 0.83])
@pytest.mark.parametrize("who", ["chunked", "auto-figures", "auto-sdpa", "sdpa"])
def test_dropout_keeps_each_weight_with_probability_one_minus_p(p, who):
    """The keep rate over 12,288 weights within 4.5 standard deviations of its binomial (1 − p),
    scaled by 1/(1 − p) (the pattern reads 0 or 1 exactly); SDPA's own passes the same test."""
    if who == "sdpa":
        torch.manual_seed(7)
        q, k, v = torch.zeros(2, 3, 64, 8), torch.randn(2, 3, 32, 8), torch.eye(32).expand(2, 3, 32, 32)
        kept = torch.nn.functional.scaled_dot_product_attention(q, k, v, dropout_p=p) * 32 * (1 - p)
        kept = kept.round().bool()
    else:
        backend = "chunked" if who == "chunked" else "auto"
        generator = torch.Generator().manual_seed(7) if who != "auto-sdpa" else None
        if who == "auto-figures":
            torch.manual_seed(0)
            out, stats = attention(
                torch.zeros(2, 3, 64, 8),
                torch.randn(2, 3, 32, 8),
                torch.eye(32).expand(2, 3, 32, 32),
                dropout_p=p,
                generator=generator,
                aux=FIGURES,
            )
            assert stats.backend == "chunked"
            torch.testing.assert_close(stats.entropy, torch.full_like(stats.entropy, math.log(32)))  # before dropout
            kept = (out * 32 * (1 - p)).round().bool()
        else:
            kept, _ = _keep_pattern(backend, p, generator=generator, seed=7)
    n = kept.numel()
    rate = kept.float().mean().item()
    assert abs(rate - (1 - p)) <= 4.5 * math.sqrt(p * (1 - p) / n), (rate, 1 - p)


@pytest.mark.slow
@pytest.mark.parametrize("who", ["chunked", "sdpa-through-auto", "sdpa"])
def test_dropout_leaves_the_mean_output_unbiased(who):
    """Over 400 seeds the mean output of every element lies within 5 standard errors of the
    no-dropout output (the per-element spread measured from the same draws); SDPA's distribution
    passes the same test, not its bits."""
    g = torch.Generator().manual_seed(11)
    q, k, v = torch.randn(1, 2, 6, 8, generator=g), torch.randn(1, 2, 10, 8, generator=g), torch.randn(1, 2, 10, 4)
    p, draws = 0.3, 400
    plain = torch.nn.functional.scaled_dot_product_attention(q, k, v)
    gen = torch.Generator().manual_seed(5)
    samples = []
    for seed in range(draws):
        torch.manual_seed(seed)
        if who == "chunked":
            samples.append(attention(q, k, v, dropout_p=p, generator=gen, backend="chunked"))
        elif who == "sdpa-through-auto":
            samples.append(attention(q, k, v, dropout_p=p))
        else:
            samples.append(torch.nn.functional.scaled_dot_product_attention(q, k, v, dropout_p=p))
    x = torch.stack(samples).double()
    z = (x.mean(0) - plain.double()) / (x.std(0) / math.sqrt(draws))
    assert z.abs().max() < 5.0, z.abs().max()
    assert x.std(0).min() > 0  # the dropout did drop


def test_dropout_is_sdpas_formula_on_the_drawn_pattern_gradients_included():
    """The chunked backend's output and gradients equal softmax·keep/(1 − p) @ v written out in
    float64 with the same generator's draw (keep: the uniform draw ≥ p)."""
    g = torch.Generator().manual_seed(2)
    q = torch.randn(1, 2, 5, 4, generator=g, dtype=torch.float64)
    k, v = torch.randn(1, 2, 7, 4, generator=g, dtype=torch.float64), torch.randn(1, 2, 7, 3, dtype=torch.float64)
    leaves = [x.clone().requires_grad_() for x in (q, k, v)]
    seeded = torch.Generator().manual_seed(9)
    out = attention(*leaves, dropout_p=0.4, generator=seeded, backend="chunked", causal="top_left")
    ref_leaves = [x.clone().requires_grad_() for x in (q, k, v)]
    rq, rk, rv = ref_leaves
    draw = torch.rand(1, 2, 5, 7, generator=torch.Generator().manual_seed(9), dtype=torch.float64)
    s = (rq @ rk.transpose(-1, -2) / 2.0).masked_fill(torch.ones(5, 7, dtype=torch.bool).triu(1), -math.inf)
    ref = (s.softmax(-1) * (draw >= 0.4) / 0.6) @ rv
    torch.testing.assert_close(out, ref, rtol=1e-12, atol=1e-12)
    w = torch.randn(out.shape, dtype=torch.float64)
    (out * w).sum().backward()
    (ref * w).sum().backward()
    for a, b in zip(leaves, ref_leaves):
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-10, atol=1e-12)


def test_dropout_with_a_seeded_generator_repeats_and_its_refusals():
    q, k, v, _ = problem(seed=4, dtype=torch.float32)
    a = attention(q, k, v, dropout_p=0.2, generator=torch.Generator().manual_seed(1))
    b = attention(q, k, v, dropout_p=0.2, generator=torch.Generator().manual_seed(1))
    c = attention(q, k, v, dropout_p=0.2, generator=torch.Generator().manual_seed(2))
    assert torch.equal(a, b) and not torch.equal(a, c)
    assert torch.equal(attention(q, k, v, dropout_p=1.0), torch.zeros_like(a))
    for backend in ("kernel", "composed", "flex"):
        with pytest.raises(InputError, match=f"dropout_p: the '{backend}' backend has no dropout"):
            attention(q, k, v, dropout_p=0.1, backend=backend)
    for bad in (-0.1, 1.5, True, "0.1", math.nan):
        with pytest.raises(InputError, match="dropout_p: expected a probability"):
            attention(q, k, v, dropout_p=bad)
    with pytest.raises(InputTypeError, match="generator: expected a torch.Generator"):
        attention(q, k, v, dropout_p=0.1, generator=3)


@pytest.mark.usefixtures("built_kernel")
def test_a_kept_call_isolates_nan_padding_keys_as_attention_does():
    """The monitor's replace mode (functional.KeptAttention) zeroes the keys no row attends, as
    attention() does: NaN padding leaves the same finite output and figures."""
    q, k, v, _ = problem(seed=12, dtype=torch.float32)
    mask = torch.ones(2, 1, 1, 53, dtype=torch.bool)
    mask[..., 40:] = False
    k[:, :, 40:], v[:, :, 40:] = math.nan, math.nan
    kept = kept_attention(q, k, v, scale=None, causal=False, mask=mask)
    out, stats = kept(q, k, v, mask, None)
    ref, ref_stats = attention_figures(q, k, v, mask=mask, **KEPT)
    assert torch.isfinite(out).all() and torch.equal(out, ref) and torch.equal(stats.entropy, ref_stats.entropy)


@pytest.mark.parametrize(
    ("value", "disabled"), [("", False), ("0", False), ("off", False), ("1", True), ("TRUE", True)]
)
def test_the_no_kernel_switch_reads_its_values(monkeypatch, value, disabled):
    monkeypatch.setenv("ATTNSCALE_NO_KERNEL", value)
    assert ext.kernel_disabled() is disabled


def test_a_no_kernel_switch_that_says_neither_is_refused_naming_it(monkeypatch):
    monkeypatch.setenv("ATTNSCALE_NO_KERNEL", "maybe")
    with pytest.raises(InputError, match="ATTNSCALE_NO_KERNEL: expected .* got 'maybe'"):
        ext.kernel_disabled()
