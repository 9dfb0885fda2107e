"""Scale rules: their objects, and attention's forward and backward under each rule against (a) torch
autograd of the same rule written independently here and (b) central finite differences."""

from __future__ import annotations

import math

import numpy as np
import pytest

from attnscale import AuxRequest, attention, attention_backward
from attnscale.errors import InputError, InputTypeError
from attnscale.scales import (
    RULES,
    Constant,
    InverseDk,
    InverseSqrtDk,
    LogN,
    QKNorm,
    ScaleRule,
    SoftCap,
    Unscaled,
    resolve_scale,
)

torch = pytest.importorskip("torch")

# --- the rule objects ---------------------------------------------------------------------------


def test_every_named_rule_has_name_formula_citation():
    assert set(RULES) == {"inverse_sqrt_dk", "inverse_dk", "unscaled", "logn", "qknorm", "softcap", "softcap_unscaled"}
    for name, rule in RULES.items():
        assert rule.name == name
        assert rule.formula and rule.citation
        assert rule.describe() == {"name": name, "formula": rule.formula, "citation": rule.citation}
    assert "Vaswani" in RULES["inverse_sqrt_dk"].citation
    assert "Nakanishi" in RULES["logn"].citation
    assert "Henry" in RULES["qknorm"].citation and "Dehghani" in RULES["qknorm"].citation
    assert "Gemma" in RULES["softcap"].citation and RULES["softcap"].cap_value == 50.0


@pytest.mark.parametrize(
    "given, expected",
    [
        (None, InverseSqrtDk()),
        ("default", InverseSqrtDk()),
        ("1/sqrt(d_k)", InverseSqrtDk()),
        ("mup", InverseDk()),
        (" 1/D_K ", InverseDk()),
        ("unscaled", Unscaled()),
        ("ssmax", LogN()),
        ("qk-norm", QKNorm()),
        ("soft-cap", SoftCap()),
        (0.0, Constant(0.0)),
        (0, Constant(0.0)),
        (np.float32(0.5), Constant(0.5)),
        (-3, Constant(-3.0)),
    ],
)
def test_resolve_scale(given, expected):
    assert resolve_scale(given) == expected


def test_zero_scale_is_never_replaced_by_the_default():
    rule = resolve_scale(0.0)
    assert isinstance(rule, Constant) and rule.factor(64) == 0.0 and rule.formula == "0"


def test_rule_instance_passes_through():
    rule = SoftCap(cap_value=3.0, base=QKNorm(gain=2.0, norm="l2"))
    assert resolve_scale(rule) is rule


@pytest.mark.parametrize(
    "rule, d_k, n, expected",
    [
        (InverseSqrtDk(), 64, None, 0.125),
        (InverseDk(), 64, None, 1 / 64),
        (Unscaled(), 64, None, 1.0),
        (Constant(2.5), 64, None, 2.5),
        (QKNorm(gain=3.0), 16, None, 0.75),
        (QKNorm(gain=3.0, norm="l2"), 16, None, 3.0),
        (SoftCap(cap_value=5.0, base=InverseDk()), 8, None, 0.125),
    ],
)
def test_factor(rule, d_k, n, expected):
    assert rule.factor(d_k, n) == pytest.approx(expected, rel=1e-15)


def test_logn_factor_per_row_and_empty_rows():
    n = np.array([[0], [1], [2], [100]])
    got = LogN(s=0.5).factor(16, n)
    expected = 0.5 * np.log([[1.0], [1.0], [2.0], [100.0]]) / 4.0  # n = 0 counts as 1: ln 1 = 0
    np.testing.assert_allclose(got, expected, rtol=1e-15)
    with pytest.raises(InputError, match="n"):
        LogN().factor(16, None)


@pytest.mark.parametrize(
    "bad, exc",
    [
        (lambda: Constant(float("nan")), InputError),
        (lambda: Constant(True), InputTypeError),
        (lambda: Constant("1"), InputTypeError),
        (lambda: QKNorm(norm="l1"), InputError),
        (lambda: QKNorm(gain=float("inf")), InputError),
        (lambda: SoftCap(cap_value=0.0), InputError),
        (lambda: SoftCap(cap_value=-1.0), InputError),
        (lambda: LogN(s=float("nan")), InputError),
        (lambda: resolve_scale(True), InputTypeError),
        (lambda: resolve_scale([1.0]), InputTypeError),
    ],
)
def test_bad_rule_arguments(bad, exc):
    with pytest.raises(exc):
        bad()


def test_softcap_bounds_logits_and_is_identity_for_small_logits():
    rule = SoftCap(cap_value=2.0, base=Unscaled())
    z = np.array([-1e6, -3.0, 0.0, 1e-4, 3.0, 1e6])
    capped = rule.cap(z)
    assert np.all(np.abs(capped) <= 2.0)
    assert capped[3] == pytest.approx(1e-4, rel=1e-8)


def test_qknorm_l2_logits_are_gain_times_cosine():
    rng = np.random.default_rng(0)
    q, k = rng.standard_normal((5, 7)) * 30, rng.standard_normal((6, 7)) * 0.01
    rule = QKNorm(gain=4.0, norm="l2", eps=0.0)
    logits = attention(q, k, np.zeros((6, 1)), scale=rule, aux=AuxRequest(logits=True))[1].logits
    cos = (q / np.linalg.norm(q, axis=-1, keepdims=True)) @ (k / np.linalg.norm(k, axis=-1, keepdims=True)).T
    np.testing.assert_allclose(logits, 4.0 * cos, rtol=1e-12)


@pytest.mark.parametrize("rule", [QKNorm(norm="rms"), QKNorm(norm="l2"), QKNorm(gain=2.0, eps=0.0)])
def test_normalize_backward_against_finite_differences(rule):
    rng = np.random.default_rng(1)
    x, dy = rng.standard_normal((3, 5)), rng.standard_normal((3, 5))
    got = rule.normalize_backward(x, dy)
    fd = finite_difference(lambda: np.sum(rule.normalize(x) * dy), x)
    np.testing.assert_allclose(got, fd, rtol=1e-7, atol=1e-9)


@pytest.mark.parametrize("rule", [SoftCap(cap_value=2.0), SoftCap(cap_value=1.5, base=SoftCap(cap_value=3.0))])
def test_cap_derivative_against_finite_differences(rule):
    z = np.linspace(-6, 6, 25)
    h = 1e-6
    fd = (rule.cap(z + h) - rule.cap(z - h)) / (2 * h)
    np.testing.assert_allclose(rule.cap_derivative(z), fd, rtol=1e-7, atol=1e-10)


# --- attention under every rule vs torch autograd and finite differences ---------------------------

RULE_CASES = {
    "inverse_sqrt_dk": InverseSqrtDk(),
    "inverse_dk": InverseDk(),
    "unscaled": Unscaled(),
    "constant_0": Constant(0.0),
    "constant_-1.7": Constant(-1.7),
    "logn": LogN(s=0.6),
    "logn_over_inverse_dk": LogN(s=2.0, base=InverseDk()),
    "qknorm_rms": QKNorm(gain=3.0, norm="rms"),
    "qknorm_l2": QKNorm(gain=5.0, norm="l2"),
    "softcap": SoftCap(cap_value=1.5),
    "softcap_over_qknorm_l2": SoftCap(cap_value=2.0, base=QKNorm(gain=4.0, norm="l2")),
    "softcap_over_logn": SoftCap(cap_value=1.0, base=LogN(s=1.0)),
}


def torch_logits(rule: ScaleRule, q, k, allowed):
    """The rule's logits in torch, written from its formula (not from attnscale's code).
    q: (..., L, d_k), k: (..., S, d_k) already repeated to q's heads; allowed: (..., L, S) bool."""
    d_k = q.shape[-1]
    if isinstance(rule, SoftCap):
        inner = torch_logits(rule.base, q, k, allowed)
        return rule.cap_value * torch.tanh(inner / rule.cap_value)
    if isinstance(rule, QKNorm):
        if rule.norm == "rms":
            qh = q / torch.sqrt((q**2).mean(-1, keepdim=True) + rule.eps)
            kh = k / torch.sqrt((k**2).mean(-1, keepdim=True) + rule.eps)
            return (rule.gain / math.sqrt(d_k)) * (qh @ kh.transpose(-1, -2))
        qh = q / torch.sqrt((q**2).sum(-1, keepdim=True) + rule.eps)
        kh = k / torch.sqrt((k**2).sum(-1, keepdim=True) + rule.eps)
        return rule.gain * (qh @ kh.transpose(-1, -2))
    if isinstance(rule, LogN):
        n = allowed.sum(-1, keepdim=True).clamp(min=1).to(q.dtype)
        return rule.s * torch.log(n) * torch_logits(rule.base, q, k, allowed)
    factor = {InverseSqrtDk: 1 / math.sqrt(d_k), InverseDk: 1 / d_k, Unscaled: 1.0}.get(type(rule))
    if factor is None:
        factor = float(rule.value)
    return factor * (q @ k.transpose(-1, -2))


def rule_problem(seed=0, B=2, H_q=4, H_kv=2, L=5, S=6, d_k=7, d_v=3):
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((B, H_q, L, d_k)) * 2
    k = rng.standard_normal((B, H_kv, S, d_k)) * 2
    v = rng.standard_normal((B, H_kv, S, d_v))
    dout = rng.standard_normal((B, H_q, L, d_v))
    bias = rng.standard_normal((H_q, L, S))
    mask = rng.random((B, 1, L, S)) < 0.6
    mask[..., 0] = True  # every row attends something (fully masked rows: tested below)
    return q, k, v, dout, bias, mask


@pytest.mark.parametrize("name", list(RULE_CASES))
def test_rule_forward_and_backward_match_torch_autograd(name):
    rule = RULE_CASES[name]
    q, k, v, dout, bias, mask = rule_problem()
    out = attention(q, k, v, scale=rule, mask=mask, bias=bias)
    g = attention_backward(q, k, v, dout, scale=rule, mask=mask, bias=bias)
    tq, tk, tv, tb = (torch.tensor(x, requires_grad=True) for x in (q, k, v, bias))
    group = q.shape[-3] // k.shape[-3]
    kk, vv = tk.repeat_interleave(group, dim=-3), tv.repeat_interleave(group, dim=-3)
    allowed = torch.tensor(np.broadcast_to(mask, q.shape[:-1] + (k.shape[-2],)))
    logits = torch.where(allowed, torch_logits(rule, tq, kk, allowed) + tb, -torch.inf)
    ref = torch.softmax(logits, dim=-1) @ vv
    ref.backward(torch.tensor(dout))
    for got, want, what in (
        (out, ref.detach(), "out"),
        (g.dq, tq.grad, "dq"),
        (g.dk, tk.grad, "dk"),
        (g.dv, tv.grad, "dv"),
        (g.dbias, tb.grad, "dbias"),
    ):
        want = want.numpy()
        if not np.any(want):  # scale 0: logits do not depend on q, k
            assert np.all(got == 0.0), f"{name} {what}: expected exactly 0"
            continue
        err = np.max(np.abs(got - want)) / np.max(np.abs(want))
        assert err <= 1e-10, f"{name} {what}: relative error {err:.3g}"


def finite_difference(f, x: np.ndarray, h: float = 1e-6) -> np.ndarray:
    """Central differences of the scalar f() with respect to every entry of x (modified in place)."""
    grad = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        old = x[i]
        x[i] = old + h
        up = f()
        x[i] = old - h
        down = f()
        x[i] = old
        grad[i] = (up - down) / (2 * h)
    return grad


@pytest.mark.parametrize("name", list(RULE_CASES))
def test_rule_backward_against_finite_differences(name):
    """Central differences with h = 1e-6 in float64 have error ~h²·f''' + ε/h ≈ 1e-10 relative to the
    gradient's size; we allow 1e-6."""
    rule = RULE_CASES[name]
    q, k, v, dout, bias, mask = rule_problem(seed=1, B=1, H_q=2, H_kv=1, L=3, S=4, d_k=3, d_v=2)
    g = attention_backward(q, k, v, dout, scale=rule, mask=mask, bias=bias)
    if isinstance(rule, Constant) and rule.value == 0.0:
        assert np.all(g.dq == 0.0) and np.all(g.dk == 0.0)  # logits do not depend on q, k
    loss = lambda: float(np.sum(attention(q, k, v, scale=rule, mask=mask, bias=bias) * dout))  # noqa: E731
    for got, x, what in ((g.dq, q, "dq"), (g.dk, k, "dk"), (g.dv, v, "dv"), (g.dbias, bias, "dbias")):
        fd = finite_difference(loss, x)
        err = np.max(np.abs(got - fd)) / max(np.max(np.abs(fd)), 1e-3)
        assert err <= 1e-6, f"{name} {what}: relative error {err:.3g} against finite differences"


@pytest.mark.parametrize("name", list(RULE_CASES))
def test_rule_fully_masked_rows_exactly_zero(name):
    rule = RULE_CASES[name]
    q, k, v, dout, bias, mask = rule_problem(seed=2)
    bias = np.broadcast_to(bias, q.shape[:-1] + (k.shape[-2],)).copy()  # one bias per batch entry
    mask = mask.copy()
    mask[1, 0, 2] = False  # query 2 of batch 1, all heads
    out = attention(q, k, v, scale=rule, mask=mask, bias=bias)
    g = attention_backward(q, k, v, dout, scale=rule, mask=mask, bias=bias)
    assert np.all(out[1, :, 2] == 0.0) and np.all(g.dq[1, :, 2] == 0.0) and np.all(g.dbias[1, :, 2] == 0.0)
    assert np.isfinite(out).all() and np.isfinite(g.dq).all() and np.isfinite(g.dk).all()


def test_the_string_none_is_not_a_rule():
    # scale=None is 1/√d_k; a "none" read from a config file must not silently mean the opposite.
    with pytest.raises(InputError, match="unknown scale rule 'none'"):
        resolve_scale("none")


@pytest.mark.parametrize("base", [InverseSqrtDk(), Unscaled()])
def test_logn_counts_keys_blocked_by_minus_inf_bias_like_masked_keys(base):
    rng = np.random.default_rng(7)
    q, k, v = rng.normal(size=(2, 5, 4)), rng.normal(size=(2, 9, 4)), rng.normal(size=(2, 9, 3))
    bias = np.where(np.arange(9) < 4, 0.0, -np.inf)
    rule = LogN(s=0.7, base=base)
    by_bias = attention(q, k, v, scale=rule, bias=bias)
    kept = attention(q, k[:, :4], v[:, :4], scale=rule)
    np.testing.assert_allclose(by_bias, kept, rtol=1e-13)
    g_bias = attention_backward(q, k, v, np.ones((2, 5, 3)), scale=rule, bias=bias)
    g_kept = attention_backward(q, k[:, :4], v[:, :4], np.ones((2, 5, 3)), scale=rule)
    np.testing.assert_allclose(g_bias.dq, g_kept.dq, rtol=1e-12, atol=1e-15)


def test_softcap_unscaled_is_a_named_rule_the_core_takes():
    import attnscale
    from attnscale.scales import SOFTCAP_DEFAULT

    rule = resolve_scale("softcap_unscaled")
    assert rule is RULES["softcap_unscaled"] and rule.name == "softcap_unscaled"
    assert isinstance(rule.base, Unscaled) and rule.cap_value == SOFTCAP_DEFAULT
    rng = np.random.default_rng(3)
    q, k, v = rng.standard_normal((5, 64)) * 4, rng.standard_normal((7, 64)) * 4, rng.standard_normal((7, 3))
    z = q @ k.T  # unscaled logits, far beyond the cap for some pairs
    assert np.abs(z).max() > SOFTCAP_DEFAULT
    capped = SOFTCAP_DEFAULT * np.tanh(z / SOFTCAP_DEFAULT)
    w = np.exp(capped - capped.max(-1, keepdims=True))
    w /= w.sum(-1, keepdims=True)
    out = attnscale.attention(q, k, v, scale="softcap_unscaled")
    np.testing.assert_allclose(out, w @ v, rtol=1e-12, atol=1e-12)
    # the Gemma rule over 1/sqrt(d_k) keeps its name; the two differ
    assert RULES["softcap"].name == "softcap"
    assert not np.allclose(out, attnscale.attention(q, k, v, scale="softcap"))


def test_attnscale_rules_lists_softcap_unscaled(capsys):
    import json

    from attnscale.cli import main

    assert main(["rules", "--json", "-"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    assert set(rows) == set(RULES)
    assert rows["softcap_unscaled"]["formula"] == RULES["softcap_unscaled"].formula
    assert "Gemma" in rows["softcap_unscaled"]["citation"]
