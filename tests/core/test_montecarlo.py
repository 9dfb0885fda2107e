"""The Monte Carlo engine: intervals that cover, stopping rules, bounded memory, determinism."""

import math

import numpy as np
import pytest

from attnscale.errors import InputError
from attnscale import montecarlo as mc


def test_t_quantile_matches_scipy():
    stats = pytest.importorskip("scipy.stats")
    for df in (1, 2, 5, 29, 200):
        for p in (0.9, 0.995, 0.9999):
            assert mc.t_quantile(p, df) == pytest.approx(stats.t.ppf(p, df), rel=1e-9)


def test_mean_ci_coverage_is_about_its_level():
    rng = np.random.default_rng(0)
    x = rng.exponential(size=(2000, 200))
    covered = sum(mc.mean_ci(row, 0.99).covers(1.0) for row in x)
    # 99% nominal; skewed data and n = 200: allow a few points either way (binomial sd ≈ 0.45%)
    assert 0.975 <= covered / 2000 <= 1.0


def test_quantile_ci_covers_the_median():
    rng = np.random.default_rng(1)
    hits = 0
    for _ in range(300):
        med, lo, hi = mc.quantile_ci(rng.uniform(size=501), 0.5, 0.99)
        assert lo <= med <= hi
        hits += lo <= 0.5 <= hi
    assert hits >= 290


def _exp_batches(batch_size, log):
    def draw(rng, n_batches, active):
        log.append(n_batches * batch_size)
        x = rng.exponential(size=(n_batches, batch_size, 2)) * np.array([1.0, 3.0])
        return x.mean(axis=1)

    return draw


def test_adaptive_means_reach_the_target_and_cover():
    log = []
    est = mc.adaptive_means(
        _exp_batches(50, log),
        2,
        batch_size=50,
        cost=[1, 1],
        rng=np.random.default_rng(2),
        max_samples=10**7,
        rel_ci_target=0.02,
        chunk_elements=5000,
    )
    for e, truth in zip(est, (1.0, 3.0)):
        assert e.converged and e.rel_half_width <= 0.02
        assert e.covers(truth)
    # memory bound: no call asked for more than chunk_elements samples × cost
    assert max(log) <= 5000


def test_adaptive_means_stop_at_the_cap():
    log = []
    est = mc.adaptive_means(
        _exp_batches(10, log),
        2,
        batch_size=10,
        cost=[1, 1],
        rng=np.random.default_rng(3),
        max_samples=[400, 1000],
        rel_ci_target=1e-6,
        chunk_elements=300,
    )
    assert [e.n_samples for e in est] == [400, 1000]
    assert not any(e.converged for e in est)


def test_adaptive_means_are_deterministic():
    def run():
        return mc.adaptive_means(
            _exp_batches(20, []),
            2,
            batch_size=20,
            cost=[1, 1],
            rng=np.random.default_rng(7),
            max_samples=10**6,
            rel_ci_target=0.05,
        )

    assert run() == run()


def test_prefix_dots_equal_direct_dots():
    rng = np.random.default_rng(4)
    q, k = rng.standard_normal((2, 7, 16))
    grid = (1, 2, 4, 16)
    dots = mc.prefix_dots(q, k, grid)
    for j, d in enumerate(grid):
        np.testing.assert_allclose(dots[:, j], np.sum(q[:, :d] * k[:, :d], axis=1), rtol=1e-13, atol=1e-13)
    qi, ki = mc.draw_components("rademacher", rng, (5, 8)), mc.draw_components("rademacher", rng, (5, 8))
    assert np.array_equal(mc.prefix_dots(qi, ki, (8,))[:, 0], np.sum(qi.astype(int) * ki, axis=1))  # integers: exact


@pytest.mark.parametrize("name", sorted(mc.SAMPLERS))
def test_samplers_have_mean_0_variance_1(name):
    x = mc.draw_components(name, np.random.default_rng(5), (200_000,)).astype(float)
    assert abs(x.mean()) < 5 / math.sqrt(x.size)
    assert abs(x.var() - 1) < 0.03


def test_dot_variance_estimates_cover_dk():
    est = mc.dot_variance_estimates(
        "gaussian", (1, 8, 64), rng=np.random.default_rng(6), max_samples=20_000, rel_ci_target=0.05
    )
    for e, d in zip(est, (1, 8, 64)):
        assert e.covers(d), (d, e)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(cost=[0, 1]), "cost: expected 2 positive integers"),
        (dict(batch_size=10**7), "batch_size: expected 1 ≤ batch_size"),
        (dict(max_samples=1), "max_samples: expected at least one batch"),
        (dict(rel_ci_target=0.0), "rel_ci_target: expected a number in"),
    ],
)
def test_bad_engine_input(kwargs, message):
    args = dict(batch_size=10, cost=[1, 1], rng=np.random.default_rng(0), max_samples=1000)
    args.update(kwargs)
    with pytest.raises(InputError, match=message):
        mc.adaptive_means(_exp_batches(10, []), 2, **args)


def test_bad_component_and_grid():
    with pytest.raises(InputError, match="component: expected one of"):
        mc.draw_components("cauchy", np.random.default_rng(0), (3,))
    with pytest.raises(InputError, match="d_ks: expected an increasing sequence"):
        mc.dot_variance_estimates("gaussian", (4, 2), rng=np.random.default_rng(0), max_samples=1000)
