"""Gradients of attnscale.torch.attention: the fused kernel's own backward, and every backend's.

References: torch.autograd.gradcheck (finite differences, float64), and torch autograd through the
plain math path (logits, softmax, P·V) in float64, where the kernel's gradients must agree within
1e-10 relative to the largest entry of the call's reference gradients (dq, dk, dv together: with one
key, dq and dk are exactly 0 in exact arithmetic and ~1e-17 in floating point, while dv is not). float32 gradients within 2e-5 of float64 (relative to
the largest entry), next to PyTorch's own SDPA backward in float32.
"""

import math
import warnings

import pytest

torch = pytest.importorskip("torch")

from attnscale import AuxRequest  # noqa: E402
from attnscale.errors import InputError  # noqa: E402
from attnscale.torch import attention, kernel_status  # noqa: E402
from attnscale.torch import backends, ext  # noqa: E402
from attnscale.torch.backends import kernel  # noqa: E402
from attnscale.torch.ext import kernel_build  # noqa: E402

REL = 1e-10
FIGURES = AuxRequest(lse=True, entropy=True)
WITH_RANGE = AuxRequest(lse=True, entropy=True, logit_range=True)


@pytest.fixture(autouse=True)
def kernel_built():
    if not kernel_status()["available"]:
        pytest.fail(f"the C++ kernel did not build: {kernel_status()['reason']}")


@pytest.fixture
def small_blocks(monkeypatch):
    """Tiles smaller than the problems, so that every block edge, partial block and causal skip of
    both passes is crossed."""
    monkeypatch.setattr(kernel, "Q_BLOCK", 5)
    monkeypatch.setattr(kernel, "KV_BLOCK", 6)
    monkeypatch.setattr(ext, "BACKWARD_Q_BLOCK", 4)
    monkeypatch.setattr(ext, "BACKWARD_KV_BLOCK", 7)


def tensors(seed, B, H_q, H_kv, L, S, d_k, d_v, dtype=torch.float64, spread=1.5):
    g = torch.Generator().manual_seed(seed)
    q = (torch.randn(B, H_q, L, d_k, generator=g, dtype=dtype) * spread).requires_grad_()
    k = torch.randn(B, H_kv, S, d_k, generator=g, dtype=dtype).requires_grad_()
    v = torch.randn(B, H_kv, S, d_v, generator=g, dtype=dtype).requires_grad_()
    return q, k, v, g


def allowed_of(L, S, mask, causal, bias):
    allowed = torch.ones(L, S, dtype=torch.bool)
    if causal:
        offset = S - L if causal == "bottom_right" else 0
        allowed = torch.arange(S)[None, :] <= torch.arange(L)[:, None] + offset
    if mask is not None:
        allowed = allowed & mask
    if bias is not None:
        allowed = allowed & (bias != -math.inf)
    return allowed


def math_path(q, k, v, *, scale=None, mask=None, bias=None, causal=False):
    """softmax(scale·q kᵀ + bias)·v with torch autograd, GQA by repeating heads; a row with nothing
    attended gives output 0 and no gradient."""
    group = q.shape[-3] // k.shape[-3]
    k, v = k.repeat_interleave(group, dim=-3), v.repeat_interleave(group, dim=-3)
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    s = scale * (q @ k.transpose(-2, -1))
    if bias is not None:
        s = s + bias
    allowed = allowed_of(q.shape[-2], k.shape[-2], mask, causal, None if bias is None else bias.detach())
    empty = ~allowed.any(-1, keepdim=True)
    s = torch.where(allowed & ~empty, s, -math.inf).masked_fill(empty, 0.0)  # empty rows: finite, then 0
    p = torch.softmax(s, dim=-1).masked_fill(empty, 0.0)
    return p @ v


def grads(fn, inputs, seed=0):
    out = fn(*inputs)
    g = torch.randn(out.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(seed)).to(out.dtype)
    return torch.autograd.grad(out, inputs, g)


def assert_close_rel(ours, ref, rel=REL, what=""):
    """Each of ``ours`` within ``rel`` × the largest entry of all of ``ref`` (tuples of gradients)."""
    scale = max(r.abs().max().item() for r in ref if r.numel())
    for name, a, b in zip(what.split(), ours, ref):
        err = (a - b).abs().max().item() if b.numel() else 0.0
        assert err <= rel * scale, f"{name}: max |error| {err:.3e} vs {rel:g} × {scale:.3e}"


# (B, H_q, H_kv, L, S, d_k, d_v): the issue's odd sizes, L ≠ S both ways, GQA.
SHAPES = [(1, 1, 1, 1, 7, 1, 2), (1, 2, 1, 7, 1, 3, 2), (2, 4, 2, 7, 97, 3, 3), (1, 2, 1, 97, 7, 59, 4)]
SETTINGS = [
    dict(),
    dict(causal="top_left"),
    dict(causal="bottom_right"),
    dict(masked=True),
    dict(biased=True, causal="bottom_right"),
]


def setting_inputs(setting, g, B, H_q, L, S):
    mask = bias = None
    if setting.get("masked"):
        mask = torch.rand(L, S, generator=g) > 0.4
        mask[L // 2] = False  # one fully masked row
    if setting.get("biased"):
        bias = torch.randn(B, H_q, L, S, generator=g, dtype=torch.float64)
        bias[torch.rand(bias.shape, generator=g) < 0.2] = -math.inf
        bias.requires_grad_()
    return mask, bias


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("setting", SETTINGS, ids=lambda s: "-".join(f"{k}={v}" for k, v in s.items()) or "plain")
def test_kernel_gradients_equal_autograd_through_the_math_path(shape, setting, small_blocks):
    B, H_q, H_kv, L, S, d_k, d_v = shape
    q, k, v, g = tensors(sum(shape), *shape)
    mask, bias = setting_inputs(setting, g, B, H_q, L, S)
    causal = setting.get("causal", False)
    inputs = (q, k, v) if bias is None else (q, k, v, bias)

    def ours(q, k, v, bias=None):
        res_out, res = attention(q, k, v, mask=mask, bias=bias, causal=causal, backend="kernel", aux=FIGURES)
        assert res.backend == "kernel"
        return res_out

    def reference(q, k, v, bias=None):
        return math_path(q, k, v, mask=mask, bias=bias, causal=causal)

    assert_close_rel(grads(ours, inputs), grads(reference, inputs), what="dq dk dv dbias")


@pytest.mark.parametrize("shape", SHAPES[:3], ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize(
    "setting",
    [SETTINGS[0], SETTINGS[2], SETTINGS[3], SETTINGS[4]],
    ids=lambda s: "-".join(f"{k}={v}" for k, v in s.items()) or "plain",
)
def test_gradcheck_float64(shape, setting, small_blocks):
    B, H_q, H_kv, L, S, d_k, d_v = shape
    q, k, v, g = tensors(7 * sum(shape), *shape)
    mask, bias = setting_inputs(setting, g, B, H_q, L, S)
    causal = setting.get("causal", False)
    inputs = (q, k, v) if bias is None else (q, k, v, bias)

    def fn(q, k, v, bias=None):
        return attention(
            q,
            k,
            v,
            mask=mask,
            bias=bias,
            causal=causal,
            backend="kernel",
        )

    assert torch.autograd.gradcheck(fn, inputs, fast_mode=L * S > 100)


def test_gradcheck_the_largest_odd_size_fast_mode(small_blocks):
    """d_k 59, L 97, S 7, grouped-query, causal bottom-right (L > S: leading rows see nothing)."""
    q, k, v, _ = tensors(3, 1, 2, 1, 97, 7, 59, 3)
    fn = lambda q, k, v: attention(q, k, v, causal="bottom_right", backend="kernel")  # noqa: E731
    assert torch.autograd.gradcheck(fn, (q, k, v), fast_mode=True)


@pytest.mark.parametrize("rule", ["unscaled", "inverse_dk", 0.0, 3.5, "qknorm", "logn", "softcap"], ids=str)
def test_every_scale_rule_has_the_gradient_of_the_chunked_torch_path(rule, small_blocks):
    """The chunked backend is plain torch operations under autograd: an independent backward."""
    q, k, v, g = tensors(21, 1, 4, 2, 13, 17, 6, 5, spread=3.0)
    mask = torch.rand(13, 17, generator=g) > 0.3

    def run(backend):
        return lambda q, k, v: attention(
            q,
            k,
            v,
            scale=rule,
            mask=mask,
            causal="top_left",
            backend=backend,
        )

    assert_close_rel(grads(run("kernel"), (q, k, v)), grads(run("chunked"), (q, k, v)), what="dq dk dv")
    if rule == "softcap":
        assert torch.autograd.gradcheck(run("kernel"), (q, k, v), fast_mode=True)


def test_soft_cap_with_a_bias_that_requires_grad(small_blocks):
    """dbias is the gradient at the logits (after the cap), dq and dk go through the cap's derivative."""
    q, k, v, g = tensors(22, 1, 2, 1, 9, 12, 5, 3, spread=4.0)
    bias = torch.randn(9, 12, dtype=torch.float64, generator=g)
    bias[3, :5] = -math.inf
    bias.requires_grad_()

    def fn(q, k, v, b):
        return attention(
            q,
            k,
            v,
            scale="softcap",
            bias=b,
            causal="bottom_right",
            backend="kernel",
        )

    assert torch.autograd.gradcheck(fn, (q, k, v, bias), fast_mode=True)

    def chunked(q, k, v, b):
        return attention(
            q,
            k,
            v,
            scale="softcap",
            bias=b,
            causal="bottom_right",
            backend="chunked",
        )

    assert_close_rel(grads(fn, (q, k, v, bias)), grads(chunked, (q, k, v, bias)), what="dq dk dv dbias")


def test_fully_masked_rows_get_exactly_zero_gradient(small_blocks):
    q, k, v, g = tensors(5, 1, 2, 2, 9, 11, 4, 3)
    mask = torch.rand(1, 2, 9, 11, generator=g) > 0.5
    mask[0, 0, [1, 6]] = False
    mask[0, 1, :, 3] = False  # a key nobody in head 1 attends
    res_out, res = attention(q, k, v, mask=mask, backend="kernel", aux=FIGURES)
    res_out.backward(torch.randn(res_out.shape, dtype=torch.float64, generator=g))
    assert (q.grad[0, 0, [1, 6]] == 0).all()
    assert (q.grad[0, 0, [0, 2, 3]] != 0).any()
    assert (k.grad[0, 1, 3] == 0).all() and (v.grad[0, 1, 3] == 0).all()
    assert (v.grad[0, 0] != 0).any()


@pytest.mark.parametrize("shape", [(2, 3), (2, 1, 2, 3)])
def test_a_broadcast_bias_gets_its_gradient_summed(shape):
    """A bias broadcast over batch and heads: dbias of every (b, h) summed back to its shape."""
    q, k, v, g = tensors(8, 2, 4, 2, 2, 3, 5, 4)
    bias = torch.randn(shape, dtype=torch.float64, generator=g).requires_grad_()
    ours = grads(lambda q, k, v, b: attention(q, k, v, bias=b, backend="kernel"), (q, k, v, bias))
    ref = grads(lambda q, k, v, b: math_path(q, k, v, bias=b), (q, k, v, bias))
    assert ours[3].shape == bias.shape
    assert_close_rel(ours, ref, what="dq dk dv dbias")


@pytest.mark.parametrize("backend", ["kernel", "composed", "chunked"])
def test_float32_gradients_on_every_backend(backend):
    """float32 within 2e-5 (relative to the largest entry) of float64 on the same inputs; PyTorch's
    own float32 SDPA backward beside it for scale."""
    q, k, v, g = tensors(9, 2, 4, 2, 70, 90, 64, 64, dtype=torch.float32, spread=1.0)
    mask = torch.rand(70, 90, generator=g) > 0.2
    for kw in (dict(causal="top_left"), dict(mask=mask)):
        ours = grads(lambda q, k, v, kw=kw: attention(q, k, v, backend=backend, **kw, aux=FIGURES)[0], (q, k, v))
        doubled = tuple(x.detach().double().requires_grad_() for x in (q, k, v))
        exact = grads(lambda q, k, v, kw=kw: math_path(q, k, v, **kw), doubled)
        sdpa = grads(
            lambda q, k, v, kw=kw: torch.nn.functional.scaled_dot_product_attention(
                q, k, v, attn_mask=kw.get("mask"), is_causal="causal" in kw, enable_gqa=True
            ),
            (q, k, v),
        )
        for name, a, b, c in zip("qkv", ours, exact, sdpa):
            err, err_sdpa = (a.double() - b).abs().max().item(), (c.double() - b).abs().max().item()
            print(f"{backend} {list(kw)} d{name}: |ours−f64| {err:.2e}  |sdpa−f64| {err_sdpa:.2e}")
        assert_close_rel(tuple(a.double() for a in ours), exact, rel=2e-5, what="dq dk dv")


def test_the_issue_reproduction_now_gives_gradients_without_warnings():
    """attention(q, k, v).out.sum().backward() on the default backend left q.grad None, with PyTorch's
    'autograd kernel was not registered' warning. The gradient of out.sum() is all-stride-0."""
    q, k, v, _ = tensors(1, 1, 2, 2, 8, 8, 4, 4, dtype=torch.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        res_out, res = attention(q, k, v, aux=FIGURES)
        res_out.sum().backward()
    assert res.backend == "kernel"
    for x in (q, k, v):
        assert x.grad is not None and torch.isfinite(x.grad).all() and (x.grad != 0).any()


def test_figures_come_back_detached():
    q, k, v, _ = tensors(2, 1, 1, 1, 5, 6, 3, 2)
    for backend in ("kernel", "composed", "chunked"):
        res_out, res = attention(q, k, v, backend=backend, aux=WITH_RANGE)
        assert res_out.requires_grad
        for name in ("lse", "entropy", "max_logit", "min_logit"):
            assert not getattr(res, name).requires_grad, (backend, name)


def test_strided_inputs_and_half_precision():
    """(B, L, H, d) projections seen as (B, H, L, d), as models pass them; float16 through float32."""
    g = torch.Generator().manual_seed(4)
    qkv = torch.randn(2, 19, 3, 4, 16, generator=g, dtype=torch.float64).requires_grad_()
    split = lambda t: tuple(t[:, :, i].transpose(1, 2) for i in range(3))  # noqa: E731
    ours = grads(lambda t: attention(*split(t), causal=True, backend="kernel"), (qkv,))
    ref = grads(lambda t: math_path(*split(t), causal="top_left"), (qkv,))
    assert_close_rel(ours, ref, what="dqkv")
    half = qkv.detach().half().requires_grad_()
    attention(*split(half), causal=True, aux=FIGURES)[0].float().sum().backward()
    assert half.grad.dtype == torch.float16 and torch.isfinite(half.grad).all()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_backward_across_thread_counts(dtype):
    """One task per (batch, KV head) owns its dq rows and its dk, dv, so no sum depends on which
    thread ran what: bit for bit run to run at a fixed thread count; on 1 thread against 2 within
    16 eps of the largest gradient (the BLAS may choose its GEMM kernels by the thread count)."""
    from helpers.threads import close_across_threads

    q, k, v, g = tensors(14, 2, 4, 2, 150, 300, 64, 32, dtype=dtype)

    def run(threads):
        torch.set_num_threads(threads)
        return grads(lambda q, k, v: attention(q, k, v, causal="top_left", aux=FIGURES)[0], (q, k, v))

    before = torch.get_num_threads()
    try:
        one, two, again = run(1), run(2), run(2)
    finally:
        torch.set_num_threads(before)
    for name, a, b, c in zip("dq dk dv".split(), one, two, again):
        assert torch.equal(b, c), name
        assert close_across_threads(a, b) is None, (name, close_across_threads(a, b))


def test_no_queries_gives_zero_gradients():
    q, k, v, _ = tensors(3, 1, 2, 1, 0, 5, 4, 3)
    attention(q, k, v, aux=FIGURES)[0].sum().backward()
    assert q.grad.shape == q.shape and (k.grad == 0).all() and (v.grad == 0).all()


def test_a_backend_without_a_backward_refuses_inputs_that_require_grad(monkeypatch):
    """Were a backend to return an output cut from the graph, the call fails, naming it, instead of
    returning something whose .backward() leaves q.grad None; under no_grad it runs."""
    real = backends.RUNNERS["chunked"]

    def cut(p, logit_range, first_key=False):
        out, *figures = real(p, logit_range, first_key)
        return (out.detach(), *figures)

    monkeypatch.setitem(backends.RUNNERS, "chunked", cut)
    q, k, v, _ = tensors(3, 1, 1, 1, 4, 5, 3, 2)
    with pytest.raises(InputError, match="backend: 'chunked' gave no gradient"):
        attention(q, k, v, backend="chunked", aux=FIGURES)
    with torch.no_grad():
        assert attention(q, k, v, backend="chunked").shape == (1, 1, 4, 2)


CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (none on this machine)")


@CUDA
def test_cuda_gradients_equal_the_cpu_kernel():
    q, k, v, g = tensors(30, 2, 8, 2, 130, 150, 64, 64, dtype=torch.float32)
    for kw in (dict(), dict(causal="top_left")):
        cpu = grads(lambda q, k, v, kw=kw: attention(q, k, v, **kw, aux=FIGURES)[0], (q, k, v))
        cuda = grads(lambda q, k, v, kw=kw: attention(q.cuda(), k.cuda(), v.cuda(), **kw, aux=FIGURES)[0], (q, k, v))
        assert_close_rel(cuda, cpu, rel=1e-4, what="dq dk dv")


def test_a_compiled_graph_names_the_kernels_build():
    """The build's digest is an argument of the op in the graph Dynamo captures, the graph that
    torch.compile's caches key on: a graph cached against another build of the kernel (its outputs
    perhaps laid out otherwise) is not reused."""
    graphs = []

    def capture(gm, example_inputs):
        graphs.append(gm.code)
        return gm.forward

    q, k, v = (torch.randn(1, 2, 5, 4) for _ in range(3))
    torch._dynamo.reset()
    torch.compile(lambda q, k, v: attention(q, k, v, backend="kernel", aux=FIGURES)[0], backend=capture)(q, k, v)
    assert len(graphs) == 1 and "attnscale_health.attention" in graphs[0]
    assert str(kernel_build()) in graphs[0]


@pytest.mark.slow
@pytest.mark.parametrize("setting", ["plain", "causal", "mask", "bias"])
def test_the_kernel_ops_fake_implementations_match_them(setting):
    """torch.library.opcheck: the fake (meta) implementations that torch.compile traces give the
    shapes, strides and dtypes the C++ ops return (and the forward's autograd registration is sound)."""
    g = torch.Generator().manual_seed(3)
    B, H, L, d = 2, 4, 6, 8
    q = torch.randn(B, L, H, d, generator=g, dtype=torch.float64).transpose(1, 2)  # strided, as a model's
    k, v = (torch.randn(B, H, L, d, generator=g, dtype=torch.float64) for _ in range(2))
    mask = torch.rand(B, 1, L, L, generator=g).expand(B, H, L, L) > 0.3 if setting == "mask" else None
    bias = torch.randn(B, H, L, L, generator=g, dtype=torch.float64) if setting == "bias" else None
    settings = (setting == "causal", 0, 0.35, 0.0)
    q, k, v = (x.requires_grad_() for x in (q.detach(), k, v))
    # The head table with causal and bias, of some rows: its counted entropies are NaN for the rows
    # left out, which opcheck's comparison of eager and AOT outputs takes for a difference (NaN ≠ NaN).
    tallied = setting in ("causal", "bias")
    counted = torch.rand(B, L, generator=g) > 0.3 if tallied else None
    thresholds = (-0.01, -0.69, 65504.0)
    # figures, the head table, tiles, build
    forward = (
        q,
        k,
        v,
        mask,
        bias,
        *settings,
        True,
        setting != "plain",
        tallied,
        counted,
        *thresholds,
        3,
        3,
        4,
        4,
        kernel_build(),
    )
    checks = ("test_schema", "test_autograd_registration", "test_faketensor") if tallied else None
    torch.library.opcheck(torch.ops.attnscale_health.attention, forward, **({"test_utils": checks} if checks else {}))
    out, lse, *_ = torch.ops.attnscale_health.attention(*forward)
    backward = (
        q.detach(),
        k.detach(),
        v.detach(),
        out.detach(),
        torch.randn_like(out),
        lse,
        mask,
        bias,
        *settings,
        bias is not None,
        3,
        3,
    )
    torch.library.opcheck(
        torch.ops.attnscale_health.attention_backward, backward, test_utils=("test_schema", "test_faketensor")
    )
