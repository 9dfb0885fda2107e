"""Closed forms of attnscale.theory against their symbolic derivations, exact enumeration and scipy."""

import itertools
import math

import numpy as np
import pytest
import sympy

from attnscale.errors import InputError
from attnscale.softmax_rows import softmax
from attnscale import theory


def test_symbolic_dot_square_counts_terms_like_the_seed():
    expectation, n_terms, diagonal, cross = theory.symbolic_dot_square(3)
    assert (expectation, n_terms, diagonal, cross) == (3, 9, 3, 6)
    expectation, n_terms, diagonal, cross = theory.symbolic_dot_square(5)
    assert (expectation, n_terms, diagonal, cross) == (5, 25, 5, 20)


@pytest.mark.parametrize("d_k", [1, 2, 3])
def test_general_variance_formula_is_the_symbolic_expansion(d_k):
    variance, formula, difference = theory.symbolic_dot_variance(d_k)
    assert difference == 0
    mq, mk = sympy.symbols("mu_q mu_k", real=True)
    vq, vk = sympy.symbols("sigma_q2 sigma_k2", positive=True)
    values = {mq: 0.3, mk: -1.2, vq: 2.5, vk: 0.7}
    assert float(variance.subs(values)) == pytest.approx(theory.dot_variance(d_k, 0.3, 2.5, -1.2, 0.7), rel=1e-12)


def test_gaussian_correlated_product_variance_matches_symbolic_and_sampling():
    variance, formula, difference = theory.symbolic_gaussian_product_variance()
    assert difference == 0
    mq, mk, c = sympy.symbols("mu_q mu_k c", real=True)
    vq, vk = sympy.symbols("sigma_q2 sigma_k2", positive=True)
    args = dict(mu_q=0.5, var_q=2.0, mu_k=-0.5, var_k=1.0, cov=0.5)
    symbolic = float(variance.subs({mq: 0.5, vq: 2.0, mk: -0.5, vk: 1.0, c: 0.5}))
    assert symbolic == pytest.approx(theory.product_variance(**args), rel=1e-12)
    # and a plain sampling check, loose (5 standard errors), independent of the engine
    rng = np.random.default_rng(3)
    z1, z2 = rng.standard_normal((2, 400_000))
    rho = 0.5 / math.sqrt(2.0)
    q = 0.5 + math.sqrt(2.0) * z1
    k = -0.5 + (rho * z1 + math.sqrt(1 - rho**2) * z2)
    prod = q * k
    se = np.std(prod**2) / math.sqrt(prod.size) * 2  # rough bound for the variance estimate's error
    assert abs(np.var(prod) - theory.product_variance(**args)) < 5 * se


def test_seed_assumptions_give_variance_dk():
    assert theory.dot_variance(64) == 64.0
    assert theory.dot_mean(64) == 0.0
    assert theory.dot_variance(64, mu_q=0.5, mu_k=0.5) == 96.0  # the iid prediction would be 64


def test_scaled_variance_symbolic():
    _, _, difference = theory.symbolic_scaled_variance()
    assert difference == 0


def test_dot_square_variance_by_exact_enumeration_of_rademacher():
    # all 2^(2d) sign patterns of q, k: the exact Var((q·k)²)
    for d in (1, 2, 3, 4):
        squares = [sum(a * b for a, b in zip(s[:d], s[d:])) ** 2 for s in itertools.product((-1, 1), repeat=2 * d)]
        exact = np.var(np.asarray(squares, dtype=float))
        assert exact == pytest.approx(theory.dot_square_variance(d, 1.0, 1.0), abs=1e-12)


def test_component_fourth_moments_against_scipy():
    stats = pytest.importorskip("scipy.stats")
    assert theory.COMPONENTS["gaussian"].fourth_moment == pytest.approx(stats.norm.moment(4))
    assert theory.COMPONENTS["uniform"].fourth_moment == pytest.approx(
        stats.uniform(-math.sqrt(3), 2 * math.sqrt(3)).moment(4)
    )
    t5 = stats.t(5)
    assert theory.COMPONENTS["student_t5"].fourth_moment == pytest.approx(t5.moment(4) / t5.var() ** 2)
    assert theory.COMPONENTS["student_t5"].finite_moments_below == 5  # E|T|^p < ∞ iff p < ν: no 6th moment


def test_rem_asymptote_and_boundary():
    n = 1024
    assert theory.phase_boundary(n) == pytest.approx(math.sqrt(2 * math.log(n)))
    assert theory.rem_normalized_entropy(0.0, n) == 1.0
    assert theory.rem_normalized_entropy(theory.phase_boundary(n) / 2, n) == pytest.approx(0.75)
    assert theory.rem_normalized_entropy(theory.phase_boundary(n) * 1.01, n) == 0.0
    assert theory.rem_entropy(1.0, n) == pytest.approx(math.log(n) - 0.5)


@pytest.mark.parametrize("n", [10, 100, 1000, 100000])
def test_one_high_closed_forms_match_softmax(n):
    logits = np.full(n, -2.0)
    logits[-1] = 3.0
    assert theory.one_high_max_weight(n) == pytest.approx(softmax(logits)[-1], rel=1e-12)
    assert theory.ssmax_one_high_max_weight(n) == pytest.approx(softmax(0.43 * math.log(n) * logits)[-1], rel=1e-12)


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: theory.dot_variance(0), "d_k: expected a positive integer, got 0"),
        (lambda: theory.dot_variance(2.5), "d_k: expected a positive integer, got 2.5"),
        (lambda: theory.product_variance(var_q=1.0, var_k=1.0, cov=2.0), "cov: expected |cov|"),
        (lambda: theory.product_variance(var_q=-1.0), "var_q, var_k: expected non-negative"),
        (lambda: theory.phase_boundary(1), "n: expected at least 2 keys, got 1"),
    ],
)
def test_bad_input_names_the_argument(call, message):
    with pytest.raises(InputError, match=message.replace("|", r"\|").replace("(", r"\(")):
        call()


def test_dot_square_counts_come_from_the_expansion_not_an_index_grid(monkeypatch):
    for d in range(1, 7):
        e, n, unit, zero = theory.symbolic_dot_square(d)
        assert (e, n, unit, zero) == (d, d * d, d, d * d - d)
        # the sympy-free enumeration agrees (it serves d_k = 64)
        assert theory.dot_square_terms(d) == (d * d, d, d * d - d, d)
    assert theory.dot_square_terms(64) == (4096, 64, 4032, 64)
    # a wrong moment rule (E x = 1) changes the counts: they are not true by construction
    monkeypatch.setattr(theory, "_UNIT_MOMENTS", {1: 1, 2: 1})
    assert theory.symbolic_dot_square(3) == (9, 9, 9, 0)
    assert theory.dot_square_terms(3) == (9, 9, 0, 9)


def test_symbolic_dot_mean():
    mq, mk = sympy.symbols("mu_q mu_k", real=True)
    assert sympy.simplify(theory.symbolic_dot_mean(3) - 3 * mq * mk) == 0


def test_numpy_integers_are_accepted_as_d_k():
    assert theory.dot_variance(np.int64(64)) == 64.0
    assert theory.dot_mean(np.int32(8), 1.0, 1.0) == 8.0
    with pytest.raises(InputError, match="d_k: expected a positive integer, got True"):
        theory.dot_variance(True)
    with pytest.raises(InputError, match="got np.float64"):
        theory.dot_variance(np.float64(3.0))


def test_pair_mean_variance_by_exact_enumeration_of_rademacher():
    import itertools

    for d, b in ((2, 2), (3, 2), (1, 3)):
        values = []
        for bits in itertools.product((-1, 1), repeat=2 * b * d):
            q = np.array(bits[: b * d]).reshape(b, d)
            k = np.array(bits[b * d :]).reshape(b, d)
            values.append(np.mean((q @ k.T) ** 2))
        assert np.mean(values) == pytest.approx(d)
        assert np.var(values) == pytest.approx(theory.pair_mean_variance(d, 1.0, 1.0, b), abs=1e-12)
    assert theory.pair_mean_variance(64, 3.0, 3.0, 1) == theory.dot_square_variance(64, 3.0, 3.0)
    assert theory.samples_for_relative_ci(64, 3.0, 0.01, 2.576, batch=1) == math.ceil(
        (2.576 * math.sqrt(theory.dot_square_variance(64, 3.0, 3.0)) / 64 / 0.01) ** 2
    )
    with pytest.raises(InputError, match="batch"):
        theory.pair_mean_variance(4, 3.0, 3.0, 0)
