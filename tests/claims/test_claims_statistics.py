"""The statistics behind the verdicts: the saturation medians' intervals cover independent
re-estimates at their stated level, their estimates do not share draws, and the pair estimator of
Var(q·k) has the spread its closed form predicts and intervals that cover."""

import math

import numpy as np
import pytest

from attnscale import montecarlo as mc
from attnscale.claims.context import Context
from attnscale.claims.result import VerifyConfig
from attnscale.claims.saturation import MODES, summarise_rows
from attnscale.theory import COMPONENTS, pair_mean_variance

FIGURES = ("max_weight", "entropy", "jacobian_frobenius")
NS, D_KS = (16, 128), (4, 64)
SEEDS = 40
ROWS = 200


@pytest.fixture(scope="module")
def per_seed():
    """The saturation summaries of SEEDS independent small runs (ROWS rows each), as verify draws them."""
    return [summarise_rows(Context(VerifyConfig(seed=s)).rng, ROWS, NS, D_KS) for s in range(SEEDS)]


@pytest.fixture(scope="module")
def reference():
    """Medians from a far larger independent run (its own standard error is ~5% of a small run's interval half-width)."""
    big = summarise_rows(Context(VerifyConfig(seed=10_000)).rng, 10_000, NS, D_KS)
    return {
        (n, d, mode, f): big["by_n"][str(n)][mode][f][i]["median"]
        for n in NS
        for i, d in enumerate(D_KS)
        for mode in MODES
        for f in FIGURES
    }


def test_saturation_median_intervals_cover_independent_re_estimates(per_seed, reference):
    hits = total = 0
    for sim in per_seed:
        for (n, d, mode, f), ref in reference.items():
            lo, hi = sim["by_n"][str(n)][mode][f][D_KS.index(d)]["median_ci"]
            hits += lo <= ref <= hi
            total += 1
    # 40 seeds × 24 intervals at 99%: ≈ 10 misses expected; ≥ 97% coverage allows 28
    assert total == SEEDS * len(reference) and hits / total >= 0.97, hits / total


def test_saturation_estimates_do_not_share_draws():
    """Every (n, d_k, mode) asks for its own named stream, once: no draw serves two estimates (one
    shared z for every d_k and both modes made all estimates of an n move together)."""
    asked = []

    def rng_for(name):
        asked.append(name)
        return np.random.default_rng(len(asked))

    summarise_rows(rng_for, 50, NS, D_KS)
    assert len(asked) == len(set(asked)) == len(NS) * len(D_KS) * len(MODES)


def test_a_stream_is_its_own():
    """One estimate's numbers do not change when the grid around it changes."""
    a = summarise_rows(Context(VerifyConfig(seed=3)).rng, 100, (16,), (4, 64))
    b = summarise_rows(Context(VerifyConfig(seed=3)).rng, 100, (16, 128), (1, 64))
    assert a["by_n"]["16"]["scaled"]["entropy"][1] == b["by_n"]["16"]["scaled"]["entropy"][1]


def test_all_pairs_means_equal_brute_force():
    rng = np.random.default_rng(0)
    q, k = rng.standard_normal((3, 5, 8)), rng.standard_normal((3, 5, 8))
    got = mc.all_pairs_dot_square_means(q, k, (2, 8), chunk_elements=25)  # one batch per stack
    for b in range(3):
        for g, d in enumerate((2, 8)):
            brute = np.mean([(q[b, i, :d] @ k[b, j, :d]) ** 2 for i in range(5) for j in range(5)])
            assert got[b, g] == pytest.approx(brute, rel=1e-12)
    r = mc.draw_components("rademacher", rng, (2, 4, 8))
    exact = mc.all_pairs_dot_square_means(r, r[::-1], (8,))
    assert np.array_equal(exact * 16, np.round(exact * 16))  # integer sums of ±1: exact in float64


@pytest.mark.parametrize("name, d_k", [("gaussian", 16), ("rademacher", 4), ("student_t5", 8)])
def test_pair_batch_variance_matches_its_closed_form(name, d_k):
    rng = np.random.default_rng(1)
    b, batches = 16, 4000
    q = mc.draw_components(name, rng, (batches, b, d_k))
    k = mc.draw_components(name, rng, (batches, b, d_k))
    stats = mc.all_pairs_dot_square_means(q, k, (d_k,))[:, 0]
    kappa = COMPONENTS[name].fourth_moment
    predicted = pair_mean_variance(d_k, kappa, kappa, b)
    assert abs(stats.mean() - d_k) < 5 * math.sqrt(predicted / batches)
    # the sample variance of 4000 batch means is within ±15% of its closed form (heavier tails: ±30%)
    assert stats.var(ddof=1) == pytest.approx(predicted, rel=0.3 if name == "student_t5" else 0.15)
    # and far below what b independent pairs would give, once d_k is not tiny
    assert predicted < pair_mean_variance(d_k, kappa, kappa, 1) / b


def test_variance_intervals_cover_dk_over_many_seeds():
    d_ks = (1, 4, 16, 64)
    hits = total = 0
    for seed in range(60):
        est = mc.dot_variance_estimates(
            "gaussian", d_ks, rng=np.random.default_rng(seed), max_samples=900, rel_ci_target=0.001
        )
        hits += sum(e.covers(d) for e, d in zip(est, d_ks))
        total += len(d_ks)
    # 240 intervals at 99%: ≈ 2.4 misses expected; ≥ 97% allows 7
    assert hits / total >= 0.97, hits / total
