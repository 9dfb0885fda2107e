"""attnscale.torch.attention's ``aux=AuxRequest(...)``: each field asked alone gives, bit for bit, what
the old flag gave (``attention_figures``, the monitor's call, keeps the old flags' semantics) and
agrees with the float64 NumPy core; the rest is None; the NumPy core and this one answer one request
with the same fields; anything else is an error naming ``aux``."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import attnscale  # noqa: E402
from attnscale import AuxOutput, AuxRequest  # noqa: E402
from attnscale.errors import InputError, InputTypeError  # noqa: E402
from attnscale.torch import attention, kernel_status  # noqa: E402
from attnscale.torch.functional import attention_figures  # noqa: E402

BACKENDS = ("kernel", "composed", "chunked")
# Request field -> the output fields it fills and the old flags that gave them (with return_stats=True).
FIELDS = {
    "lse": (("lse",), {}),
    "entropy": (("entropy",), {}),
    "logit_range": (("max_logit", "min_logit"), {"logit_range": True}),
    "first_key_weight": (("first_key_weight",), {"first_key": True}),
}
ROWS = ("lse", "entropy", "max_logit", "min_logit", "first_key_weight")


def _problem(dtype=torch.float64):
    """(2, 4 query heads over 2 KV heads, 9 rows, 11 keys), a mask with a row that attends nothing and
    a row whose key 0 is masked, bottom-right causal."""
    g = torch.Generator().manual_seed(47)
    q = torch.randn(2, 4, 9, 8, generator=g, dtype=torch.float64) * 2
    k = torch.randn(2, 2, 11, 8, generator=g, dtype=torch.float64)
    v = torch.randn(2, 2, 11, 5, generator=g, dtype=torch.float64)
    mask = torch.rand(2, 1, 9, 11, generator=g) > 0.25
    mask[0, 0, 4] = False
    mask[1, 0, 6, 0] = False
    return (q.to(dtype), k.to(dtype), v.to(dtype)), {"mask": mask, "causal": "bottom_right"}


def _same(a, b) -> bool:
    """Equal bits, NaN where NaN."""
    return (
        a.shape == b.shape
        and a.dtype == b.dtype
        and torch.equal(a.isnan(), b.isnan())
        and torch.equal(a.nan_to_num(), b.nan_to_num())
    )


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("field", sorted(FIELDS))
def test_each_field_asked_alone_is_what_its_old_flag_gave(backend, field):
    if backend == "kernel" and not kernel_status()["available"]:
        pytest.fail(f"the C++ kernel did not build: {kernel_status()['reason']}")
    qkv, kw = _problem()
    filled, flags = FIELDS[field]
    out, got = attention(*qkv, backend=backend, aux=AuxRequest(**{field: True}), **kw)
    old_out, old = attention_figures(*qkv, backend=backend, **flags, **kw)
    assert isinstance(got, AuxOutput) and got.backend == old.backend == backend
    assert torch.equal(out, old_out)
    for name in ROWS + ("logits", "weights"):
        if name in filled:
            assert _same(getattr(got, name), getattr(old, name)), name
            assert not getattr(got, name).requires_grad
        else:
            assert getattr(got, name) is None, name
    # And against the float64 NumPy core: the same request, the same fields.
    core_out, core = attnscale.attention(
        *(x.numpy() for x in qkv), mask=kw["mask"].numpy(), causal=kw["causal"], aux=AuxRequest(**{field: True})
    )
    np.testing.assert_allclose(out.numpy(), core_out, rtol=0, atol=1e-12)
    for name in filled:
        np.testing.assert_allclose(getattr(got, name).numpy(), getattr(core, name), rtol=1e-9, atol=1e-12)


def test_float32_figures_agree_with_float64_and_the_output_is_sdpas_without_aux():
    qkv, kw = _problem(torch.float32)
    request = AuxRequest(lse=True, entropy=True, logit_range=True, first_key_weight=True)
    out, got = attention(*qkv, aux=request, **kw)
    exact_out, exact = attention(*(x.double() for x in qkv), aux=request, **kw)
    for name in ROWS:
        a, b = getattr(got, name), getattr(exact, name)
        assert a.dtype == torch.float32 and torch.equal(a.isnan(), b.isnan()), name
        torch.testing.assert_close(a.double().nan_to_num(), b.nan_to_num(), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(out.double(), exact_out, rtol=0, atol=1e-5)
    assert isinstance(attention(*qkv, **kw), torch.Tensor)  # no aux: the output alone


@pytest.mark.parametrize(
    "aux, says",
    [
        (True, "got bool True"),
        ({"lse": True}, "got dict"),
        ("entropy", "got str 'entropy'"),
    ],
)
def test_anything_but_a_request_is_refused_naming_aux(aux, says):
    qkv, _ = _problem()
    with pytest.raises(InputTypeError, match=rf"^aux: expected an attnscale.AuxRequest or None, {says}"):
        attention(*qkv, aux=aux)


def test_flexattentions_own_request_is_refused_by_its_full_name():
    from torch.nn.attention.flex_attention import AuxRequest as FlexAuxRequest

    qkv, _ = _problem()
    with pytest.raises(InputTypeError, match=r"^aux: .* got torch\.nn\.attention\.flex_attention\.AuxRequest"):
        attention(*qkv, aux=FlexAuxRequest(lse=True))


def test_the_matrices_are_refused_naming_aux():
    """The torch entry point never forms the (L, S) logits or weights: asking is an error that says
    where they are, not a silent None."""
    qkv, _ = _problem()
    for request, asked in ((AuxRequest(logits=True), "logits"), (AuxRequest(lse=True, weights=True), "weights")):
        with pytest.raises(InputError, match=rf"^aux: {asked} asked for, .*attnscale.attention \(NumPy\)"):
            attention(*qkv, aux=request)
