"""Softmax and its health figures against hand-computed values, closed forms, np.linalg, and
50-digit mpmath where float64 matrix algebra itself is too coarse (near one-hot rows)."""

from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest

from attnscale.errors import InputError, InputTypeError
from attnscale.softmax_rows import jacobian_norms, logsumexp, row_health, softmax, softmax_jacobian


def hand_softmax(logits):
    """exp(x_i) / Σ exp(x_j) with math.exp and an exactly rounded sum: the seed's own recipe."""
    e = [math.exp(x) for x in logits]
    total = math.fsum(e)
    return np.array([x / total for x in e])


# The seed's worked examples; the third is [14, 10, 12] divided by √64 = 8. All three of the seed's
# printed values are the true values rounded to 3 decimals (checked here, not assumed).
SEED_EXAMPLES = [
    ([5.0, 1.0, 0.5], [0.971, 0.018, 0.011]),
    ([14.0, 10.0, 12.0], [0.867, 0.016, 0.117]),
    ([14 / 8, 10 / 8, 12 / 8], [0.419, 0.254, 0.326]),
]


@pytest.mark.parametrize("logits, printed", SEED_EXAMPLES)
def test_seed_examples(logits, printed):
    p = softmax(np.array(logits))
    np.testing.assert_allclose(p, hand_softmax(logits), rtol=1e-15)
    assert np.array_equal(p.round(3), np.array(printed))
    assert math.fsum(p) == pytest.approx(1.0, abs=1e-15)


def test_seed_scaled_example_via_scale_semantics():
    """scale multiplies: logits × 0.125 is the seed's ÷ 8."""
    assert np.array_equal(softmax(np.array([14.0, 10.0, 12.0]) * 0.125), softmax(np.array([1.75, 1.25, 1.5])))


def test_seed_examples_health_by_hand():
    p = hand_softmax([14.0, 10.0, 12.0])
    h = row_health([14.0, 10.0, 12.0])
    assert h.entropy == pytest.approx(-math.fsum(x * math.log(x) for x in p), rel=1e-14)
    assert h.max_weight == pytest.approx(p[0], rel=1e-15)
    assert h.effective_support == pytest.approx(1 / math.fsum(x * x for x in p), rel=1e-14)
    assert h.normalized_entropy == pytest.approx(h.entropy / math.log(3), rel=1e-14)
    std = math.sqrt(sum((x - 12.0) ** 2 for x in (14.0, 10.0, 12.0)) / 3)  # population std
    assert h.saturation_index == pytest.approx(std / math.sqrt(2 * math.log(3)), rel=1e-14)


@pytest.mark.parametrize("n", [1, 2, 3, 7, 64, 1000])
@pytest.mark.parametrize("value", [0.0, -3.5, 1e6])
def test_uniform_row_closed_forms(n, value):
    """p = 1/n: H = ln n, H / ln n = 1, max weight 1/n, effective support n. J = (I − 11ᵀ/n)/n has the
    eigenvalue 1/n (n − 1 times) and 0, so ‖J‖_F = √(n − 1)/n and ‖J‖_2 = 1/n (0 when n = 1)."""
    h = row_health(np.full(n, value))
    assert h.n == n
    assert h.entropy == pytest.approx(math.log(n), rel=1e-13, abs=1e-15)
    assert h.max_weight == pytest.approx(1 / n, rel=1e-14)
    assert h.effective_support == pytest.approx(n, rel=1e-13)
    assert h.jacobian_frobenius == pytest.approx(math.sqrt(n - 1) / n, rel=1e-13, abs=1e-300)
    assert h.jacobian_spectral == pytest.approx(1 / n if n > 1 else 0.0, rel=1e-13, abs=1e-300)
    if n >= 2:
        assert h.normalized_entropy == pytest.approx(1.0, rel=1e-13)
        assert h.saturation_index == 0.0
    else:
        assert np.isnan(h.normalized_entropy) and np.isnan(h.saturation_index)


def test_jacobian_matrix_definition():
    p = np.array([0.5, 0.3, 0.2])
    J = softmax_jacobian(p)
    expected = np.array([[0.25, -0.15, -0.1], [-0.15, 0.21, -0.06], [-0.1, -0.06, 0.16]])
    np.testing.assert_allclose(J, expected, rtol=1e-15, atol=1e-17)
    # And it is the derivative: central differences of softmax at logits with these weights.
    x = np.log(p)
    h = 1e-6
    fd = np.stack([(softmax(x + h * e) - softmax(x - h * e)) / (2 * h) for e in np.eye(3)], axis=1)
    np.testing.assert_allclose(J, fd, rtol=1e-8, atol=1e-10)


@pytest.mark.slow
def test_jacobian_norms_against_numpy_linalg():
    """Ordinary rows (weights not near one-hot): np.linalg on the explicit matrix is accurate."""
    rng = np.random.default_rng(0)
    for n in (2, 3, 5, 17, 100):
        p = rng.dirichlet(np.full(n, 0.7), size=20)  # (20, n)
        J = softmax_jacobian(p)
        fro, spec = jacobian_norms(p)
        np.testing.assert_allclose(fro, np.linalg.norm(J, axis=(-2, -1)), rtol=1e-12)
        np.testing.assert_allclose(spec, np.linalg.eigvalsh(J)[..., -1], rtol=1e-10)
        np.testing.assert_allclose(spec, np.linalg.norm(J, ord=2, axis=(-2, -1)), rtol=1e-10)
        # row_health computes the same from logits.
        h = row_health(np.log(p))
        np.testing.assert_allclose(h.jacobian_frobenius, fro, rtol=1e-12)
        np.testing.assert_allclose(h.jacobian_spectral, spec, rtol=1e-10)
    fro, spec = jacobian_norms(p, spectral=False)
    assert np.isnan(spec).all() and np.isfinite(fro).all()


def mp_figures(logits):
    """Entropy, ‖J‖_F and ‖J‖_2 of softmax(logits) with 50 significant digits (mpmath)."""
    with mpmath.workdps(50):
        x = [mpmath.mpf(float(v)) for v in logits]
        e = [mpmath.exp(v) for v in x]
        total = mpmath.fsum(e)
        p = [v / total for v in e]
        n = len(p)
        J = mpmath.matrix(n, n)
        for i in range(n):
            for j in range(n):
                J[i, j] = (p[i] if i == j else 0) - p[i] * p[j]
        entropy = -mpmath.fsum(v * mpmath.log(v) for v in p)
        fro = mpmath.sqrt(mpmath.fsum(J[i, j] ** 2 for i in range(n) for j in range(n)))
        spec = max(mpmath.eigsy(J)[0])
        return float(entropy), float(fro), float(spec)


@pytest.mark.parametrize(
    "logits",
    [
        [40.0, 0.0, 0.0],
        [30.0, 0.0, -1.0, 2.0],
        [100.0, 0.0],
        [25.0, 24.0, 0.0, 0.0],
        [14.0, 10.0, 12.0],
        [700.0, 0.0, 1.0, 3.0, -5.0],
    ],
)
def test_near_one_hot_figures_are_relatively_accurate(logits):
    """Near one-hot, ‖J‖ is a tiny difference of numbers near 1: the figures must hold to 1e-10
    relative against 50-digit arithmetic. (np.linalg on the float64 matrix cannot: there p_top rounds
    to 1 and its diagonal entry p_top − p_top² to 0; the assertion below shows it for [40, 0, 0].)"""
    entropy, fro, spec = mp_figures(logits)
    h = row_health(logits)
    assert h.entropy == pytest.approx(entropy, rel=1e-10)
    assert h.jacobian_frobenius == pytest.approx(fro, rel=1e-10)
    assert h.jacobian_spectral == pytest.approx(spec, rel=1e-10)
    f, s = jacobian_norms(softmax(np.array(logits)))
    assert f == pytest.approx(fro, rel=1e-10) and s == pytest.approx(spec, rel=1e-10)
    if logits == [40.0, 0.0, 0.0]:
        naive = np.linalg.norm(softmax_jacobian(softmax(np.array(logits))))
        assert abs(naive - fro) / fro > 0.1  # why jacobian_norms avoids the explicit matrix


def test_mask_and_minus_inf_are_not_attended():
    x = np.array([1.0, 2.0, 3.0, 0.5])
    mask = np.array([True, False, True, True])
    p = softmax(x, mask)
    assert p[1] == 0.0
    np.testing.assert_allclose(p[[0, 2, 3]], hand_softmax([1.0, 3.0, 0.5]), rtol=1e-15)
    assert np.array_equal(softmax(np.where(mask, x, -np.inf)), p)
    h, h3 = row_health(x, mask), row_health([1.0, 3.0, 0.5])
    assert h.n == 3
    for name, value in h3.as_dict().items():
        assert getattr(h, name) == pytest.approx(value, rel=1e-14), name
    assert logsumexp(x, mask) == pytest.approx(math.log(math.fsum(math.exp(v) for v in (1.0, 3.0, 0.5))), rel=1e-15)


def test_mask_broadcasts_over_rows():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((4, 3, 6))
    mask = rng.random((3, 6)) < 0.7
    mask[:, 0] = True
    p = softmax(x, mask)
    assert np.all(p[:, ~mask] == 0.0)
    np.testing.assert_allclose(p.sum(-1), 1.0, rtol=1e-15)
    h = row_health(x, mask)
    assert h.entropy.shape == (4, 3) and np.array_equal(h.n, np.broadcast_to(mask.sum(-1), (4, 3)))


def test_fully_masked_row_has_zero_weights_and_nan_figures():
    x = np.array([[1.0, 2.0, 3.0], [-np.inf, -np.inf, -np.inf], [1.0, 2.0, 3.0]])
    mask = np.array([[True, True, True], [True, True, True], [False, False, False]])
    p = softmax(x, mask)
    assert np.all(p[1:] == 0.0) and p[0].sum() == pytest.approx(1.0)
    lse = logsumexp(x, mask)
    assert np.all(lse[1:] == -np.inf) and np.isfinite(lse[0])
    h = row_health(x, mask)
    assert np.array_equal(h.n, [3, 0, 0])
    for name, value in h.as_dict().items():
        if name != "n":
            assert np.isfinite(value[0]) and np.all(np.isnan(value[1:])), name


@pytest.mark.parametrize("dtype, rtol", [(np.float16, 2e-3), (np.float32, 1e-6)])
def test_low_precision_inputs(dtype, rtol):
    rng = np.random.default_rng(2)
    x = (rng.standard_normal((5, 9)) * 4).astype(dtype)
    p = softmax(x)
    assert p.dtype == dtype
    np.testing.assert_allclose(p.astype(np.float64), softmax(x.astype(np.float64)), rtol=rtol, atol=rtol * 1e-2)
    h, h64 = row_health(x), row_health(x.astype(np.float64))  # figures are computed in float64
    for name, value in h.as_dict().items():
        np.testing.assert_allclose(value, getattr(h64, name), rtol=1e-15, err_msg=name)


def test_huge_logits_in_float64_are_finite():
    x = np.array([1e30, 0.0, -1e30, 1e30 * (1 - 1e-15)])
    p = softmax(x)
    assert np.isfinite(p).all() and p[0] == 1.0 and np.all(p[1:] == 0.0)
    assert logsumexp(x) == 1e30
    h = row_health(x)
    for name, value in h.as_dict().items():
        assert np.isfinite(value), name
    assert h.entropy == 0.0 and h.max_weight == 1.0 and h.effective_support == 1.0
    assert h.jacobian_frobenius == 0.0 and h.jacobian_spectral == 0.0
    tie = softmax(np.array([1e30, 1e30, -1e300]))
    assert np.array_equal(tie, [0.5, 0.5, 0.0])


def test_logsumexp_against_scipy():
    scipy_special = pytest.importorskip("scipy.special")
    rng = np.random.default_rng(3)
    x = rng.standard_normal((6, 11)) * 50
    np.testing.assert_allclose(logsumexp(x), scipy_special.logsumexp(x, axis=-1), rtol=1e-14)


def test_saturation_index_against_numpy_std():
    rng = np.random.default_rng(4)
    x = rng.standard_normal((8, 30)) * 3
    mask = rng.random((8, 30)) < 0.5
    mask[:, :2] = True
    h = row_health(x, mask)
    for row, m, sat in zip(x, mask, h.saturation_index):
        assert sat == pytest.approx(np.std(row[m]) / math.sqrt(2 * math.log(m.sum())), rel=1e-12)


def test_effective_support_and_entropy_bounds():
    rng = np.random.default_rng(5)
    x = rng.standard_normal((50, 12)) * rng.uniform(0.1, 20, size=(50, 1))
    h = row_health(x)
    assert np.all((h.effective_support >= 1 - 1e-12) & (h.effective_support <= 12 + 1e-9))
    assert np.all((h.normalized_entropy >= 0) & (h.normalized_entropy <= 1 + 1e-12))
    assert np.all(h.max_weight >= 1 / 12 - 1e-15)
    assert np.all(h.jacobian_spectral <= h.jacobian_frobenius + 1e-15)
    assert np.all(h.jacobian_spectral <= h.max_weight + 1e-15)  # eigenvalues interlace diag(p)


@pytest.mark.parametrize(
    "bad, exc, words",
    [
        (lambda: softmax(np.array([1.0, np.nan])), InputError, "logits"),
        (lambda: softmax(np.array([1.0, np.inf])), InputError, "logits"),
        (lambda: softmax(np.array(["a", "b"])), InputTypeError, "logits"),
        (lambda: softmax(np.float64(1.0)), InputError, "logits"),
        (lambda: softmax(np.ones(3), mask=np.ones(3)), InputTypeError, "mask"),
        (lambda: softmax(np.ones(3), mask=np.ones(4, dtype=bool)), InputError, "mask"),
        (lambda: row_health(np.ones(3), mask=np.array([1, 0, 1])), InputTypeError, "mask"),
    ],
)
def test_bad_softmax_inputs(bad, exc, words):
    with pytest.raises(exc, match=words):
        bad()


def test_integer_logits_are_accepted_as_float64():
    assert np.array_equal(softmax(np.array([14, 10, 12])), softmax(np.array([14.0, 10.0, 12.0])))
