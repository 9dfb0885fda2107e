"""The NumPy core's ``aux=AuxRequest(...)``: each figure against an independent float64 computation
from the logits (attnscale.row_health, a direct max, min and softmax), None where not asked, and a
clear error naming ``aux`` for anything else."""

from __future__ import annotations

import numpy as np
import pytest

from attnscale import AuxOutput, AuxRequest, attention, row_health
from attnscale.errors import InputTypeError

ROW_FIELDS = {"lse": ("lse",), "entropy": ("entropy",), "logit_range": ("max_logit", "min_logit")}
ROW_FIELDS["first_key_weight"] = ("first_key_weight",)
MATRIX_FIELDS = {"logits": ("logits",), "weights": ("weights",)}
ALL_OUTPUTS = ("lse", "entropy", "max_logit", "min_logit", "first_key_weight", "logits", "weights")


def _problem(seed=0, L=6, S=7):
    """Two heads over one KV head (grouped-query), a mask with one fully masked row and key 0 masked
    for another, causal bottom-right: every convention of an empty or partly masked row appears."""
    rng = np.random.default_rng(seed)
    q, k, v = rng.normal(size=(2, L, 4)) * 2, rng.normal(size=(1, S, 4)), rng.normal(size=(1, S, 3))
    mask = rng.random((2, L, S)) > 0.2
    mask[0, 2] = False  # nothing attended
    mask[1, 3, 0] = False  # key 0 masked, others attended
    return q, k, v, {"mask": mask, "causal": "bottom_right"}


def _reference(q, k, v, kw):
    """Each figure in float64 from logits formed here (q·kᵀ/√d_k, the mask, bottom-right causal: row
    i attends j ≤ i + S − L): no code of the core's."""
    L, S = q.shape[-2], k.shape[-2]
    reach = np.arange(S)[None, :] <= np.arange(L)[:, None] + S - L
    attended = kw["mask"] & reach
    s = np.where(attended, q @ k[0].T / np.sqrt(q.shape[-1]), -np.inf)
    empty = ~attended.any(-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        top = np.where(empty, 0.0, s.max(-1))
        e = np.where(attended, np.exp(s - top[..., None]), 0.0)
        lse = np.where(empty, -np.inf, top + np.log(e.sum(-1)))
        p = np.where(empty[..., None], 0.0, e / e.sum(-1, keepdims=True))
    return {
        "lse": lse,
        "entropy": row_health(s).entropy,  # NaN where nothing is attended
        "max_logit": np.where(empty, np.nan, s.max(-1)),
        "min_logit": np.where(empty, np.nan, np.where(attended, s, np.inf).min(-1)),
        "first_key_weight": np.where(empty, np.nan, p[..., 0]),
        "logits": s,
        "weights": p,
    }


@pytest.mark.parametrize("field", sorted({**ROW_FIELDS, **MATRIX_FIELDS}))
def test_each_field_asked_alone_gives_its_figures_and_nothing_else(field):
    q, k, v, kw = _problem()
    ref = _reference(q, k, v, kw)
    out, got = attention(q, k, v, aux=AuxRequest(**{field: True}), **kw)
    assert isinstance(got, AuxOutput) and got.backend == "numpy"
    np.testing.assert_array_equal(out, attention(q, k, v, **kw))  # asking changes nothing of the output
    asked = {**ROW_FIELDS, **MATRIX_FIELDS}[field]
    for name in ALL_OUTPUTS:
        value = getattr(got, name)
        if name not in asked:
            assert value is None, name
            continue
        assert value.shape == ref[name].shape and value.dtype == np.float64, name
        np.testing.assert_allclose(value, ref[name], rtol=1e-12, atol=1e-14, err_msg=name)  # NaN, ±inf alike


def test_the_conventions_of_an_empty_row_and_a_masked_first_key():
    q, k, v, kw = _problem()
    request = AuxRequest(lse=True, entropy=True, logit_range=True, first_key_weight=True)
    _, got = attention(q, k, v, aux=request, **kw)
    assert got.lse[0, 2] == -np.inf
    assert all(np.isnan(getattr(got, n)[0, 2]) for n in ("entropy", "max_logit", "min_logit", "first_key_weight"))
    assert got.first_key_weight[1, 3] == 0.0 and np.isfinite(got.entropy[1, 3])


def test_rank_two_inputs_give_rank_one_rows_in_the_inputs_dtype():
    rng = np.random.default_rng(1)
    q, k, v = (rng.normal(size=(n, 4)).astype(np.float32) for n in (3, 5, 5))
    request = AuxRequest(lse=True, entropy=True, logits=True)
    out, got = attention(q, k, v, aux=request)
    assert out.shape == (3, 4) and got.lse.shape == got.entropy.shape == (3,) and got.logits.shape == (3, 5)
    assert got.lse.dtype == got.entropy.dtype == np.float32


@pytest.mark.parametrize(
    "aux, says",
    [
        (True, "got bool True"),
        ("lse", "got str 'lse'"),
        ({"lse": True}, "got dict"),
        (("lse",), "got tuple"),
    ],
)
def test_anything_but_a_request_is_refused_naming_aux(aux, says):
    q = np.ones((2, 4))
    with pytest.raises(InputTypeError, match=rf"^aux: expected an attnscale.AuxRequest or None, {says}"):
        attention(q, q, q, aux=aux)


@pytest.mark.parametrize("field, value", [("lse", 1), ("entropy", "yes"), ("logits", None), ("weights", np.True_)])
def test_a_request_field_that_is_not_a_bool_is_refused_naming_aux(field, value):
    with pytest.raises(InputTypeError, match=rf"^aux: AuxRequest.{field} expected True or False, got"):
        AuxRequest(**{field: value})


def test_a_request_is_frozen_and_keyword_only():
    request = AuxRequest(lse=True)
    with pytest.raises(AttributeError):
        request.lse = False  # type: ignore[misc]
    with pytest.raises(TypeError):
        AuxRequest(True)  # type: ignore[misc]
