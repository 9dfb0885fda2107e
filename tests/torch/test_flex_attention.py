"""The "flex" backend (attnscale.torch.backends.flex) on CPU, through FlexAttention's eager reference path,
against the NumPy core (float64 oracle).

Tolerances (relative ones with the same number as an absolute floor, for values near 0): float64
inputs: outputs within 1e-12, lse and logit range within 1e-12 relative, entropy within 1e-11
absolute (a difference of two numbers of size |lse| ≈ 10).
float32: outputs, lse, entropy and logit range within 2e-5 of float64. bfloat16 and float16 against
float64 of the same rounded inputs: outputs within 2e-2 (bf16) / 3e-3 (f16) of |v| ≤ 4 (their own
rounding), lse within 1e-5 relative, entropy within ENTROPY_ERROR_BOUND·(1 + |lse|).
FlexAttention has no backward on CPU (PyTorch 2.13): gradients are checked by benchmarks/gpu.py on
a GPU; here, their refusal.
"""

import math
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import attnscale  # noqa: E402
from attnscale.errors import InputError  # noqa: E402
from attnscale import AuxRequest  # noqa: E402
from attnscale.torch import arguments, attention, ext, flex_precision  # noqa: E402
from attnscale.torch.backends import flex  # noqa: E402
from attnscale.torch.choice import choose_backend  # noqa: E402
from attnscale.torch.prepare import prepare  # noqa: E402

FIGURES = AuxRequest(lse=True, entropy=True)
WITH_RANGE = AuxRequest(lse=True, entropy=True, logit_range=True)

# Eager FlexAttention warns on every new shape that it is not compiled; on CPU that is the point.
pytestmark = pytest.mark.filterwarnings("ignore:.*flex_attention called without torch.compile")

RULES = (None, "unscaled", "inverse_dk", 0.3, "qknorm", "logn")
CAUSAL = (False, "top_left", "bottom_right")


def problem(seed, B=2, H_q=4, H_kv=2, L=37, S=53, d_k=16, d_v=8, dtype=torch.float64, spread=2.0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, H_q, L, d_k, generator=g, dtype=torch.float64) * spread
    k = torch.randn(B, H_kv, S, d_k, generator=g, dtype=torch.float64)
    v = torch.randn(B, H_kv, S, d_v, generator=g, dtype=torch.float64)
    mask = torch.rand(B, 1, L, S, generator=g) > 0.3
    mask[0, 0, 3] = False  # one fully masked row
    return q.to(dtype), k.to(dtype), v.to(dtype), mask


def oracle(q, k, v, mask=None, **kw):
    """The NumPy core on float64 copies: (out, lse, entropy, max, min), NaN figures where nothing is attended."""
    out, ref = attnscale.attention(
        *(x.double().numpy() for x in (q, k, v)),
        aux=AuxRequest(logits=True, lse=True),
        mask=None if mask is None else mask.numpy(),
        **kw,
    )
    health = attnscale.row_health(ref.logits, spectral=False)
    attended = np.isfinite(ref.logits)
    empty = ~attended.any(-1)
    hi = np.where(empty, np.nan, np.where(attended, ref.logits, -np.inf).max(-1))
    lo = np.where(empty, np.nan, np.where(attended, ref.logits, np.inf).min(-1))
    return out, ref.lse, np.where(empty, np.nan, health.entropy), hi, lo


def assert_close(res_out, res, exact, out_atol, rel, ent_atol):
    out, lse, ent, hi, lo = exact
    empty = np.isnan(ent)
    got = lambda x: x.double().numpy()  # noqa: E731
    np.testing.assert_allclose(got(res_out), out, rtol=0, atol=out_atol)
    assert (got(res_out)[empty] == 0).all()
    np.testing.assert_array_equal(got(res.lse)[empty], -np.inf)
    np.testing.assert_allclose(got(res.lse)[~empty], lse[~empty], rtol=rel, atol=rel)
    assert np.isnan(got(res.entropy)[empty]).all()
    np.testing.assert_allclose(got(res.entropy)[~empty], ent[~empty], rtol=0, atol=ent_atol)
    if res.max_logit is not None:
        np.testing.assert_allclose(got(res.max_logit), hi, rtol=rel, atol=rel)  # NaN where empty, both
        np.testing.assert_allclose(got(res.min_logit), lo, rtol=rel, atol=rel)


@pytest.mark.parametrize("causal", CAUSAL)
def test_every_linear_rule_mask_and_alignment_equals_the_numpy_core(causal):
    """Grouped-query heads (4 over 2), L ≠ S, d_v ≠ d_k, a fully masked row; bottom_right with L < S."""
    q, k, v, mask = problem(seed=len(str(causal)))
    for rule in RULES:
        for m in (None, mask):
            res_out, res = attention(q, k, v, scale=rule, mask=m, causal=causal, backend="flex", aux=WITH_RANGE)
            assert res.backend == "flex"
            assert_close(res_out, res, oracle(q, k, v, mask=m, causal=causal, scale=rule), 1e-12, 1e-12, 1e-11)


def test_bottom_right_with_more_queries_than_keys_leaves_leading_rows_empty():
    q, k, v, mask = problem(seed=4, L=60, S=45, H_q=2, H_kv=2)
    res_out, res = attention(q, k, v, causal="bottom_right", mask=mask, backend="flex", aux=WITH_RANGE)
    exact = oracle(q, k, v, causal="bottom_right", mask=mask)
    assert np.isnan(exact[2][:, :, :15]).all()  # rows 0..14 attend no key
    assert_close(res_out, res, exact, 1e-12, 1e-12, 1e-11)


@pytest.mark.parametrize("rule", ["softcap", "softcap_unscaled"])
def test_soft_cap_takes_the_second_pass(rule):
    q, k, v, mask = problem(seed=6, spread=6.0)
    for causal in CAUSAL:
        res_out, res = attention(q, k, v, scale=rule, mask=mask, causal=causal, backend="flex", aux=WITH_RANGE)
        assert_close(res_out, res, oracle(q, k, v, mask=mask, causal=causal, scale=rule), 1e-12, 1e-12, 1e-12)


def test_an_additive_bias_takes_the_second_pass():
    q, k, v, mask = problem(seed=5, H_q=2, H_kv=1)
    g = torch.Generator().manual_seed(9)
    bias = torch.randn(2, 1, 37, 53, generator=g, dtype=torch.float64)  # broadcast over heads
    bias[torch.rand(bias.shape, generator=g) < 0.2] = -math.inf
    res_out, res = attention(q, k, v, bias=bias, causal="bottom_right", backend="flex", aux=WITH_RANGE)
    exact = attnscale.attention(q.numpy(), k.numpy(), v.numpy(), bias=bias.numpy(), causal="bottom_right")
    np.testing.assert_allclose(res_out.numpy(), exact, rtol=0, atol=1e-12)
    chunked_out, chunked = attention(q, k, v, bias=bias, causal="bottom_right", backend="chunked", aux=WITH_RANGE)
    for name in ("lse", "entropy", "max_logit", "min_logit"):
        torch.testing.assert_close(getattr(res, name), getattr(chunked, name), rtol=0, atol=0, equal_nan=True)


@pytest.mark.slow
def test_float32_against_float64():
    q, k, v, mask = problem(seed=2, L=97, S=130, d_k=64, d_v=64, dtype=torch.float32, spread=1.0)
    for causal, m in ((False, None), ("top_left", None), ("bottom_right", mask)):
        res_out, res = attention(q, k, v, mask=m, causal=causal, backend="flex", aux=WITH_RANGE)
        assert res_out.dtype == torch.float32 and res.entropy.dtype == torch.float32
        assert_close(res_out, res, oracle(q, k, v, mask=m, causal=causal), 2e-5, 2e-5, 2e-5)


@pytest.mark.parametrize("dtype,out_atol", [(torch.bfloat16, 2e-2), (torch.float16, 3e-3)])
def test_half_precision_runs_in_its_own_dtype(dtype, out_atol):
    """FlexAttention computes in the inputs' dtype (lse in float32); the reference is float64 of the
    same rounded inputs, so what is measured is the backend's own rounding."""
    q, k, v, mask = problem(seed=8, L=64, S=80, d_k=32, d_v=32, dtype=dtype, spread=1.0)
    bound = flex.ENTROPY_ERROR_BOUND[str(dtype).removeprefix("torch.")]
    for causal, m in ((False, None), ("top_left", mask)):
        res_out, res = attention(q, k, v, mask=m, causal=causal, backend="flex", aux=FIGURES)
        assert res_out.dtype == dtype and res.lse.dtype == torch.float32
        out, lse, ent, *_ = oracle(q, k, v, mask=m, causal=causal)
        empty = np.isnan(ent)
        np.testing.assert_allclose(res_out.double().numpy(), out, rtol=0, atol=out_atol)
        np.testing.assert_allclose(res.lse.double().numpy()[~empty], lse[~empty], rtol=1e-5, atol=0)
        err = np.abs(res.entropy.double().numpy()[~empty] - ent[~empty])
        assert (err <= bound * (1 + np.abs(lse[~empty]))).all(), err.max()


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_entropy_error_against_float64_is_within_the_bound(dtype):
    """The docstring's Precision numbers: rows from uniform to frozen, and the bracket that the logit
    range adds (a frozen row then reads ≤ 2e-4 nats; without it, in bfloat16, up to nats)."""
    plain = flex_precision.entropy_errors(getattr(torch, dtype))
    print(f"{dtype}: worst |Δentropy|/(1+|lse|) {plain['worst']:.2e}, bound {flex.ENTROPY_ERROR_BOUND[dtype]:.0e}")
    assert plain["worst"] <= flex.ENTROPY_ERROR_BOUND[dtype]
    assert min(plain["entropy"]) < 1e-50 and max(plain["entropy"]) == pytest.approx(math.log(256), abs=1e-9)
    bracketed = flex_precision.entropy_errors(getattr(torch, dtype), logit_range=True)
    frozen = [e for h, e in zip(bracketed["entropy"], bracketed["entropy_error"]) if h < 1e-6]
    assert len(frozen) > 10 and max(frozen) <= 2e-4
    assert bracketed["worst"] <= flex.ENTROPY_ERROR_BOUND[dtype]


def test_the_bracket_holds_the_entropy_between_its_exact_bounds():
    """−ln p_max ≤ H ≤ h(p_max) + (1 − p_max)·ln(S − 1): a too large, a frozen and a too small reading."""
    lse = torch.tensor([3.0, 100.0, 5.0], dtype=torch.float64)
    top = torch.tensor([1.0, 100.0, 5.0 + math.log(0.99)], dtype=torch.float64)  # p_max e⁻², 1, 0.99
    raw = torch.tensor([10.0, 2.4, -1.0], dtype=torch.float64)
    held = flex._bracketed(raw, lse, top, S=256)

    def fano(p):
        return -(p * math.log(p) + (1 - p) * math.log(1 - p)) + (1 - p) * math.log(255)

    assert held.tolist() == pytest.approx([fano(math.exp(-2)), 0.0, -math.log(0.99)], rel=1e-12, abs=1e-15)
    inside = torch.tensor([2.5, 0.0, 0.05], dtype=torch.float64)  # already within: unchanged
    assert torch.equal(flex._bracketed(inside, lse, top, S=256), inside)


def test_refusals_name_the_backend_and_the_reason(monkeypatch):
    q, k, v, _ = problem(seed=1, dtype=torch.float32)
    q.requires_grad_(True)
    with pytest.raises(InputError, match=r"backend: 'flex' has no backward on CPU .*torch.no_grad\(\)"):
        attention(q, k, v, backend="flex", aux=FIGURES)
    with torch.no_grad():
        assert attention(q, k, v, backend="flex", aux=FIGURES)[1].backend == "flex"
    monkeypatch.setattr(flex, "_flex_module", lambda: None)
    with pytest.raises(InputError, match=r"backend: 'flex' needs torch.nn.attention.flex_attention with AuxRequest"):
        attention(q.detach(), k, v, backend="flex", aux=FIGURES)


def test_a_device_other_than_cpu_or_cuda_is_refused():
    q, k, v, _ = problem(seed=1, dtype=torch.float32)
    p = prepare(q, k, v, None, None, None, False, False, "flex", True)[0]
    meta = flex.replace(p, q=p.q.to("meta"))
    assert "runs on CPU (eager) or CUDA (compiled), got device meta" in flex.refusal(meta)


def test_auto_picks_flex_on_cuda_only_when_compiled_flex_works(monkeypatch):
    cuda = torch.device("cuda")
    for works, expected in (("flex", "flex"), ("composed", "composed")):
        monkeypatch.setattr(flex, "cuda_status", lambda b=works: {"backend": b, "reason": "test"})
        assert choose_backend(cuda, torch.bfloat16, False, False, "auto") == expected
        with_bias = choose_backend(cuda, torch.float32, True, False, "auto")
        assert with_bias == ("flex" if works == "flex" else "chunked")
    assert choose_backend(cuda, torch.float64, False, False, "auto") == "chunked"  # no fused float64 peer
    # On CPU "auto" never picks flex (it would be the eager reference path, slow, without backward).
    cpu = torch.device("cpu")
    for kernel, expected in ((object(), "kernel"), (None, "composed")):
        monkeypatch.setattr(ext, "load_kernel", lambda k=kernel: k)
        assert choose_backend(cpu, torch.bfloat16, False, False, "auto") == expected


def test_kernel_status_says_what_auto_runs_on_cuda(monkeypatch):
    monkeypatch.setattr(ext, "load_kernel", lambda: None)  # the CPU kernel's build is not the point
    monkeypatch.setitem(ext._state, "reason", "not built here")
    status = ext.kernel_status()
    assert status["available"] is False and status["cuda"] == flex.cuda_status()
    if torch.cuda.is_available():
        assert status["cuda"]["backend"] in ("flex", "composed") and status["cuda"]["reason"]
    else:
        assert status["cuda"] == {"backend": None, "reason": "no CUDA device"}


def test_causal_block_masks_are_built_once_per_shape():
    flex._causal_block_mask.cache_clear()
    q, k, v, _ = problem(seed=3, dtype=torch.float32)
    for _ in range(3):
        attention(q, k, v, causal="top_left", backend="flex", aux=FIGURES)
    info = flex._causal_block_mask.cache_info()
    assert (info.misses, info.hits) == (1, 2)


def test_eager_is_a_context_that_resets():
    assert not flex._eager.get()
    with flex.eager():
        assert flex._eager.get()
    assert not flex._eager.get()


@pytest.mark.slow
def test_the_gpu_script_dry_run_passes_on_cpu(tmp_path):
    """benchmarks/gpu.py, as CI runs it: tiny shapes, eager FlexAttention, every section."""
    script = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu.py"
    out = tmp_path / "gpu.json"
    with warnings.catch_warnings():
        done = subprocess.run(
            [sys.executable, str(script), "--device", "cpu", "--eager", "--json", str(out)],
            capture_output=True,
            text=True,
            timeout=600,
        )
    assert done.returncode == 0, done.stdout + done.stderr
    text = done.stdout
    for section in ("correctness against float64", "entropy error sweep", "forward: time", "targets"):
        assert section in text, text
    assert "FAIL" not in text
    assert out.exists()


def test_auto_falls_back_to_composed_where_flexattention_fails(monkeypatch):
    """A FlexAttention failure (here: injected) is a FlexFailure naming the backend; "auto" then
    computes the problem on the composed backend in float32 and says so."""

    def broken(device):
        def call(*args, **kwargs):
            raise flex.FlexFailure("backend: 'flex': FlexAttention failed on this problem (test)")

        return call

    monkeypatch.setattr(flex, "_call", broken)
    q, k, v, mask = problem(seed=7, dtype=torch.bfloat16)
    with pytest.raises(flex.FlexFailure, match="backend: 'flex': FlexAttention failed"):
        attention(q, k, v, backend="flex", aux=FIGURES)
    monkeypatch.setattr(arguments, "choose_backend", lambda *a: "flex")
    res_out, res = attention(q, k, v, mask=mask, aux=WITH_RANGE)
    assert res.backend == "composed" and res_out.dtype == torch.bfloat16
    assert_close(res_out, res, oracle(q, k, v, mask=mask), 2e-2, 1e-5, 1e-4)


def test_flexattention_errors_become_flex_failures(monkeypatch):
    module = flex._flex_module()

    def fails(*args, **kwargs):
        raise RuntimeError("no kernel\nmore")

    monkeypatch.setattr(module, "flex_attention", fails)
    q, k, v, _ = problem(seed=7, dtype=torch.float32)
    with pytest.raises(flex.FlexFailure, match=r"FlexAttention failed on this problem \(RuntimeError: no kernel\)"):
        attention(q, k, v, backend="flex", aux=FIGURES)


def test_the_monitor_takes_its_figures_from_the_flex_backend():
    """Replace mode on backend="flex" (CPU, no gradients: the eager path): the model's output and
    every head's figures as on the chunked backend; on CUDA "auto" reaches the same path."""
    from attnscale.torch import Monitor

    class Causal(torch.nn.Module):
        def forward(self, x):
            return torch.nn.functional.scaled_dot_product_attention(x, x, x, is_causal=True)

    model, x = Causal(), problem(seed=9, B=2, H_q=3, L=20, d_k=8, dtype=torch.float32)[0][:, :, :, :8]
    with torch.no_grad():
        plain = model(x)
        with Monitor(model, mode="replace", backend="flex") as mon:
            out = model(x)
        with Monitor(model, mode="replace", backend="chunked") as ref:
            model(x)
    assert [c.backend for c in mon.calls] == ["flex"] and not mon.fallbacks
    assert float((out - plain).abs().max()) <= 1e-5 * float(x.abs().max())
    for a, b in zip(mon.summary(), ref.summary()):
        np.testing.assert_allclose([a.max_logit, a.min_logit], [b.max_logit, b.min_logit], rtol=1e-5, atol=1e-6)
        # flex's entropy is a difference of figures of size |lse| ≤ max logit + ln S: its stated bound
        bound = flex.ENTROPY_ERROR_BOUND["float32"] * (1 + abs(b.max_logit) + math.log(x.shape[-2]))
        np.testing.assert_allclose([a.entropy_mean, a.entropy_min], [b.entropy_mean, b.entropy_min], rtol=0, atol=bound)


# Issue 51 (each failed before its fix: checked).


def _overflow_problems():
    """FlashAttention's test_flash_attn_bwd_overflow inputs: batch 2, 5 heads, q ~ N(0, 5²), k and v
    ~ N(0, 3²), seqlen in {1, 2, 5, 17, 128}, d in {16, 32, 64}, causal or not (its grid, 30 a dtype)."""
    for seqlen in (1, 2, 5, 17, 128):
        for d in (16, 32, 64):
            for causal in (False, "top_left"):
                g = torch.Generator().manual_seed(1000 * seqlen + d)
                q = torch.randn(2, 5, seqlen, d, generator=g) * 5
                k, v = (torch.randn(2, 5, seqlen, d, generator=g) * 3 for _ in range(2))
                yield q, k, v, causal


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_precision_entropy_holds_its_bound_on_flash_attentions_overflow_inputs(dtype):
    """Measured as flex_precision measures it (against float64 chunked of the same rounded inputs):
    |Δentropy| ≤ ENTROPY_ERROR_BOUND·(1 + |lse|). P·K rounded to bfloat16 read up to 0.028·(1 + |lse|)."""
    worst = 0.0
    for q, k, v, causal in _overflow_problems():
        q, k, v = (x.to(getattr(torch, dtype)) for x in (q, k, v))
        with torch.no_grad():
            _, ours = attention(q, k, v, causal=causal, backend="flex", aux=FIGURES)
            _, exact = attention(q.double(), k.double(), v.double(), causal=causal, backend="chunked", aux=FIGURES)
        worst = max(worst, ((ours.entropy.double() - exact.entropy).abs() / (1 + exact.lse.abs())).max().item())
    print(f"{dtype}: worst |Δentropy|/(1+|lse|) {worst:.2e}")
    assert worst <= flex.ENTROPY_ERROR_BOUND[dtype]


def test_a_float32_bias_is_not_rounded_to_bfloat16():
    """Causal ALiBi (slope 0.3, 512 keys), bfloat16 q, k, v, float32 bias: the output within 2×
    SDPA's own error against float64 (FlashAttention's rule), the lse within the docstring's
    5e-7·(1 + |lse|). Rounded to bfloat16, the bias moved the output by ~1 and the lse by 0.1·(1 + |lse|)."""
    L = 512
    g = torch.Generator().manual_seed(51)
    q, k, v = (torch.randn(1, 2, L, 32, generator=g).to(torch.bfloat16) for _ in range(3))
    i = torch.arange(L)
    # FlashAttention's causal ALiBi: slope·(j − S + 1), a function of the key alone.
    bias = (torch.arange(-L + 1, 1).float() * 0.3).expand(L, L).masked_fill(i[None, :] > i[:, None], -math.inf)
    F = torch.nn.functional
    exact = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), attn_mask=bias.double())
    sdpa_error = (F.scaled_dot_product_attention(q, k, v, attn_mask=bias).double() - exact).abs().max()
    with torch.no_grad():
        out, stats = attention(q, k, v, bias=bias, backend="flex", aux=FIGURES)
        _, ref = attention(q.double(), k.double(), v.double(), bias=bias.double(), backend="chunked", aux=FIGURES)
    assert (out.double() - exact).abs().max() <= 2 * sdpa_error
    assert ((stats.lse.double() - ref.lse).abs() <= 5e-7 * (1 + ref.lse.abs())).all()


def test_zero_sizes_and_nan_padding_keys_under_no_grad():
    """Batch 0 and S = 0 as SDPA answers them; NaN in padding keys leaves the output as without them."""
    with torch.no_grad():
        out = attention(torch.randn(0, 2, 5, 8), torch.randn(0, 2, 4, 8), torch.randn(0, 2, 4, 8), backend="flex")
        assert out.shape == (0, 2, 5, 8)
        out, stats = attention(
            torch.randn(1, 2, 5, 8), torch.randn(1, 2, 0, 8), torch.randn(1, 2, 0, 3), backend="flex", aux=FIGURES
        )
        assert torch.equal(out, torch.zeros(1, 2, 5, 3)) and (stats.lse == -math.inf).all()
        q, k, v = torch.randn(1, 2, 5, 8), torch.randn(1, 2, 6, 8), torch.randn(1, 2, 6, 4)
        keep = torch.tensor([True] * 4 + [False] * 2)
        clean = attention(q, k, v, mask=keep, backend="flex")
        k[..., 4:, :], v[..., 4:, :] = math.nan, math.nan
        torch.testing.assert_close(attention(q, k, v, mask=keep, backend="flex"), clean)
