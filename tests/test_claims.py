"""The claim registry: verdict logic (a wrong number is flagged, a right one is not), every group's
verdicts, the report's data series, determinism and the JSON round trip."""

import json
import math
from decimal import Decimal

import numpy as np
import pytest

from attnscale.claims import CHAPTERS, GROUPS, METHODS, VERDICTS, ClaimResult, VerifyConfig, VerifyReport, run_claims
from attnscale.claims.context import Context
from attnscale.claims.result import format_like, judge_printed
from attnscale.claims.seed_numbers import printed
from attnscale.errors import InputError

E5 = Decimal("148.41315910257660342111558004055227962348766759387898904675284511")
E50 = Decimal("5184705528587072464087.4533229334")


@pytest.fixture(scope="module")
def quick():
    return run_claims(VerifyConfig(quick=True, seed=0))


def by_id(report):
    return {c.id: c for c in report.claims}


# ---- verdict logic ---------------------------------------------------------------------------

@pytest.mark.parametrize("text", ["148.4", "148", "148.41", "148.413"])
def test_right_numbers_at_any_shown_precision_hold(text):
    assert judge_printed(text, E5) == ("holds", None)


@pytest.mark.parametrize("text, correct", [("148.5", "148.4"), ("149", "148"), ("148.42", "148.41")])
def test_wrong_numbers_are_flagged_with_the_right_value(text, correct):
    assert judge_printed(text, E5) == ("seed number wrong", correct)


def test_the_seeds_e50_is_flagged_and_corrected():
    verdict, correct = judge_printed("5,184,705,528,587,072,045", E50)
    assert verdict == "seed number wrong"
    assert correct == "5,184,705,528,587,072,464,087"


def test_percent_and_rounding_edges():
    assert judge_printed("86.7%", Decimal("0.866813"))[0] == "holds"
    assert judge_printed("86.6%", Decimal("0.866813")) == ("seed number wrong", "86.7%")
    assert judge_printed("0.67", Decimal(2) / 3)[0] == "holds"
    assert judge_printed("0.66", Decimal(2) / 3)[0] == "seed number wrong"
    assert format_like("1,000.00", Decimal("1387385.5413")) == "1,387,385.54"
    with pytest.raises(InputError, match="printed number"):
        judge_printed("twelve", Decimal(12))


def test_a_row_with_one_wrong_number_is_flagged():
    ctx = Context(VerifyConfig())
    printed(ctx, "T.1", "real_numbers", "demo", "演示", ["0.867", "0.017"], [Decimal("0.866813"), Decimal("0.015876")])
    printed(ctx, "T.2", "real_numbers", "demo", "演示", ["0.867", "0.016"], [Decimal("0.866813"), Decimal("0.015876")])
    assert ctx.claims[0].verdict == "seed number wrong" and ctx.claims[0].correct_value == "0.016"
    assert ctx.claims[1].verdict == "holds" and ctx.claims[1].correct_value is None


def test_claim_result_validates_its_vocabulary():
    with pytest.raises(InputError, match="chapter: expected one of"):
        ClaimResult("X", "nowhere", "", "", None, "symbolic", "", "")
    with pytest.raises(InputError, match="verdict: expected one of"):
        ClaimResult("X", "faq", "", "", None, "symbolic", "", "", verdict="maybe")


@pytest.mark.parametrize("kwargs, message", [
    (dict(seed=-1), "seed: expected a non-negative integer"),
    (dict(rel_ci_target=0.0), "rel_ci_target"),
    (dict(confidence=1.5), "confidence"),
    (dict(groups=(0, 10)), "groups: expected claim groups among 1..9, got \\[0, 10\\]"),
])
def test_bad_config(kwargs, message):
    with pytest.raises(InputError, match=message):
        VerifyConfig(**kwargs)


# ---- the groups ------------------------------------------------------------------------------

def test_every_claim_is_well_formed(quick):
    ids = [c.id for c in quick.claims]
    assert len(ids) == len(set(ids))
    assert {c.id.split(".")[0] for c in quick.claims} == {f"S{g}" for g in GROUPS}
    for c in quick.claims:
        assert c.chapter in CHAPTERS and c.method in METHODS and c.verdict in VERDICTS
        assert c.claim_en and c.claim_zh and c.expected and c.measured
        if c.method == "Monte Carlo":
            assert c.n_samples and c.n_samples > 0
        assert (c.correct_value is not None) == (c.verdict == "seed number wrong")


def test_group1_flags_exactly_the_two_e50_numbers(quick):
    group1 = [c for c in quick.claims if c.id.startswith("S1.")]
    wrong = {c.id for c in group1 if c.verdict != "holds"}
    assert wrong == {"S1.6", "S1.7"}
    assert all(c.correct_value == "5,184,705,528,587,072,464,087" for c in group1 if c.id in wrong)
    assert len(group1) >= 30


def test_group2_symbolic_and_variance_cover_dk(quick):
    c = by_id(quick)
    assert c["S2.1"].verdict == c["S2.2"].verdict == c["S2.3"].verdict == "holds"
    series = quick.data["variance_vs_dk"]
    assert set(series) == {"gaussian", "uniform", "rademacher", "student_t5"}
    misses = 0
    for name, s in series.items():
        assert s["d_k"][0] == 1 and s["d_k"][-1] == 4096
        misses += sum(not lo <= d <= hi for lo, hi, d in zip(s["ci_low"], s["ci_high"], s["d_k"]))
    # 52 intervals at 99%: about 0.5 misses expected, P(more than 3) < 0.2%; the claims themselves
    # judge all 52 at once at the Bonferroni level (each interval widened to 1 − 0.01/52).
    assert misses <= 3
    assert all(c[f"S2.{i}"].verdict == "holds" for i in range(4, 8))


def test_group3_follows_the_general_formula(quick):
    rows = quick.data["broken_assumptions"]
    assert all(r["covers_formula"] for r in rows)
    means = [r for r in rows if r["case"] == "non-zero means" and r["d_k"] == 64][0]
    assert means["formula"] == 96.0 and means["iid_prediction"] == 64.0
    assert all(by_id(quick)[f"S3.{i}"].verdict == "holds" for i in range(1, 7))


def test_group4_rescaling(quick):
    c = by_id(quick)
    assert c["S4.1"].verdict == c["S4.2"].verdict == c["S4.3"].verdict == "holds"


def test_groups5_6_saturation_and_gradients(quick):
    c = by_id(quick)
    for cid in ("S5.1", "S5.3", "S5.4", "S6.1", "S6.2", "S6.3"):
        assert c[cid].verdict == "holds", cid
    sat = quick.data["saturation"]
    assert sat["d_k"][-1] == 4096 and set(sat["by_n"]) == {"16", "128", "1024"}
    unscaled = sat["by_n"]["1024"]["unscaled"]["max_weight"]
    scaled = sat["by_n"]["1024"]["scaled"]["max_weight"]
    assert unscaled["median"][-1] > 0.99 and scaled["median"][-1] < 0.05
    assert all(q10 <= m <= q90 for q10, m, q90 in zip(unscaled["q10"], unscaled["median"], unscaled["q90"]))
    # the seed's "≈ 1.0 at d_k = 64": with 1024 keys the typical top weight is far from 1
    assert sat["by_n"]["1024"]["unscaled"]["max_weight"]["median"][sat["d_k"].index(64)] < 0.9
    assert c["S5.2"].verdict == "fails"
    jac = quick.data["jacobian"]["by_n"]["128"]["unscaled"]["jacobian_frobenius"]
    assert jac["median"][-1] < 1e-3 < jac["mean"][-1]


def test_group7_faq(quick):
    c = by_id(quick)
    assert c["S7.1"].verdict == "holds" and c["S7.3"].verdict == "holds"
    assert c["S7.2"].estimate > 0.1 and c["S7.2"].verdict == "fails"  # at d_k = 4 a quarter of the attention moves
    slope = quick.data["error_vs_samples"]["slope"]
    assert -0.65 < slope < -0.35


def test_group8_beyond(quick):
    c = by_id(quick)
    for cid in ("S8.1", "S8.2", "S8.3", "S8.4", "S8.5"):
        assert c[cid].verdict == "holds", cid
    ss = quick.data["ssmax"]
    assert ss["n"][0] == 10 and ss["n"][-1] == 100000
    assert ss["softmax"][-1] < 0.002 and ss["ssmax"][-1] > 0.99
    phase = quick.data["phase"]
    assert len(phase["mc"]["1024"]) == len(phase["sigma"]) == len(phase["asymptote"]["1024"])


def test_group9_give_away(quick):
    c = by_id(quick)
    assert c["S9.1"].verdict == c["S9.2"].verdict == "holds"
    assert quick.data["give_away"]["softmax1_total"][0] < 1e-3


def test_report_data_has_every_series_the_report_draws(quick):
    for key in ("variance_vs_dk", "dot_histograms", "saturation", "jacobian", "phase", "broken_assumptions",
                "ssmax", "seed_softmax_examples"):
        assert key in quick.data, key
    h = quick.data["dot_histograms"]
    assert set(h) == {"4", "64", "512"}
    assert sum(h["64"]["counts"]) + h["64"]["outside"] == h["64"]["n_samples"]
    ex = quick.data["seed_softmax_examples"]["[14, 10, 12]"]
    np.testing.assert_allclose(ex["weights_scaled"], [0.419229, 0.254275, 0.326496], atol=1e-6)


# ---- determinism and serialisation -----------------------------------------------------------

def test_same_seed_same_json_and_other_seed_differs(quick):
    again = run_claims(VerifyConfig(quick=True, seed=0))
    a = json.dumps(quick.to_dict(timings=False), sort_keys=True)
    b = json.dumps(again.to_dict(timings=False), sort_keys=True)
    assert a == b
    other = run_claims(VerifyConfig(quick=True, seed=1, groups=(2,)))
    assert other.data["variance_vs_dk"]["gaussian"]["estimate"] != quick.data["variance_vs_dk"]["gaussian"]["estimate"]


def test_groups_are_independent_of_each_other():
    alone = run_claims(VerifyConfig(quick=True, groups=(3,)))
    with_others = run_claims(VerifyConfig(quick=True, groups=(1, 3, 9)))
    a = [c for c in alone.claims]
    b = [c for c in with_others.claims if c.id.startswith("S3.")]
    assert a == b


def test_json_round_trip(quick, tmp_path):
    from attnscale.store import read_json, write_json_atomic

    path = write_json_atomic(tmp_path / "verify.json", quick.to_dict())
    back = VerifyReport.from_dict(read_json(path))
    assert back.claims == quick.claims and back.config == quick.config
    assert "timings" in read_json(path) and "total" in read_json(path)["timings"]


def test_progress_reaches_its_total():
    calls = []
    run_claims(VerifyConfig(quick=True, groups=(1, 9)), progress=lambda d, t, label: calls.append((d, t, label)))
    assert calls and calls[-1][0] == calls[-1][1]


# ---- three-way Monte Carlo verdicts: holds / fails / inconclusive ------------------------------

from attnscale.claims import beyond, give_away, iid_variance, saturation  # noqa: E402
from attnscale.claims.result import (  # noqa: E402
    count_verdicts, judge_all, judge_at_least, judge_at_most, judge_below, level_text,
)


@pytest.mark.parametrize("lo, hi, verdict", [(0.91, 0.95, "holds"), (0.9, 0.95, "holds"),
                                             (0.857, 0.955, "inconclusive"), (0.5, 0.89, "fails")])
def test_judge_at_least_is_three_way(lo, hi, verdict):
    assert judge_at_least(lo, hi, 0.9) == verdict
    # the mirror image: ≤ −0.9 for the negated interval
    assert judge_at_most(-hi, -lo, -0.9) == verdict


@pytest.mark.parametrize("lower, upper, verdict", [((0.1, 0.2), (0.3, 0.4), "holds"),
                                                   ((0.1, 0.35), (0.3, 0.4), "inconclusive"),
                                                   ((0.5, 0.6), (0.3, 0.4), "fails")])
def test_judge_below_separates_intervals(lower, upper, verdict):
    assert judge_below(lower, upper) == verdict


def test_judge_all_fails_if_any_part_fails_and_holds_only_if_all_hold():
    assert judge_all(["holds", "holds"]) == "holds"
    assert judge_all(["holds", "inconclusive"]) == "inconclusive"
    assert judge_all(["inconclusive", "fails", "holds"]) == "fails"
    with pytest.raises(InputError, match="verdicts"):
        judge_all([])
    with pytest.raises(InputError, match="verdicts"):
        judge_all(["holds", True])


def test_counts_include_inconclusive_and_level_text():
    claims = [ClaimResult("X", "faq", "", "", None, "Monte Carlo", "", "", verdict=v)
              for v in ("holds", "inconclusive", "inconclusive", "fails")]
    report = VerifyReport(VerifyConfig(), {}, claims)
    assert report.counts() == {"holds": 1, "fails": 1, "inconclusive": 2, "seed number wrong": 0}
    assert report.to_dict()["counts"]["inconclusive"] == 2
    assert count_verdicts(["holds", "odd"]) == {"holds": 1, "fails": 0, "inconclusive": 0,
                                                "seed number wrong": 0, "odd": 1}
    assert level_text(0.99) == "99%" and level_text(0.995) == "99.5%" and level_text(0.95) == "95%"


def _fake_rows(overrides: dict) -> dict:
    """A stand-in for saturation.simulate_rows: every median drifts a little with d_k (so drift ratios are
    defined); ``overrides[(mode, figure)]`` gives [(median, lo, hi)] per d_k for every n."""
    def summary(m, lo, hi):
        return {"median": m, "median_ci": [lo, hi], "q10": lo, "q90": hi, "mean": m, "mean_ci": [lo, hi]}

    by_n = {}
    for n in saturation.NS:
        per = {}
        for mode in ("unscaled", "scaled"):
            per[mode] = {}
            for f in saturation.FIGURES:
                rows = overrides.get((mode, f)) or [(0.5 + 0.01 * i * (mode == "unscaled"),) * 3
                                                   for i in range(len(saturation.D_KS))]
                per[mode][f] = [summary(*r) for r in rows]
        by_n[str(n)] = per
    return {"rows": 300, "d_k": list(saturation.D_KS), "n": list(saturation.NS), "by_n": by_n}


def _run_saturation(overrides: dict):
    ctx = Context(VerifyConfig(quick=True))
    ctx.memo["softmax rows"] = _fake_rows(overrides)
    saturation.run(ctx)
    return {c.id: c for c in ctx.claims}


def _max_weight(ci_1, ci_64, ci_4096):
    """Unscaled max weight summaries: the given (median, lo, hi) at d_k = 1, 64, 4096, in between filled."""
    rows = [ci_1] * len(saturation.D_KS)
    d64 = saturation.D_KS.index(64)
    for i in range(d64, len(rows)):
        rows[i] = ci_64
    rows[-1] = ci_4096
    return rows


def test_s51_compares_the_right_ends_of_the_intervals():
    # lo(4096) = 0.96 > hi(64) = 0.95 > hi(1) = 0.9: the old chained comparison said "holds", but the
    # intervals at d_k = 1 and 64 overlap ([0.1, 0.9] vs [0.5, 0.95]): not separated.
    overlapping = _max_weight((0.5, 0.1, 0.9), (0.9, 0.5, 0.95), (0.98, 0.96, 1.0))
    assert _run_saturation({("unscaled", "max_weight"): overlapping})["S5.1"].verdict == "inconclusive"
    separated = _max_weight((0.2, 0.1, 0.3), (0.9, 0.5, 0.95), (0.98, 0.96, 1.0))
    assert _run_saturation({("unscaled", "max_weight"): separated})["S5.1"].verdict == "holds"
    reversed_ = _max_weight((0.9, 0.85, 0.95), (0.5, 0.4, 0.6), (0.98, 0.96, 1.0))
    assert _run_saturation({("unscaled", "max_weight"): reversed_})["S5.1"].verdict == "fails"


def test_s53_compares_the_right_ends_of_the_intervals():
    # hi(4096) = 0.1 < lo(64) = 0.5 < lo(1) = 1.0, yet [0.5, 2.0] at 64 and [1.0, 3.0] at 1 overlap
    overlapping = _max_weight((2.0, 1.0, 3.0), (1.0, 0.5, 2.0), (0.05, 0.0, 0.1))
    assert _run_saturation({("unscaled", "entropy"): overlapping})["S5.3"].verdict == "inconclusive"
    separated = _max_weight((2.0, 1.5, 3.0), (1.0, 0.5, 1.2), (0.05, 0.0, 0.1))
    assert _run_saturation({("unscaled", "entropy"): separated})["S5.3"].verdict == "holds"


def test_s52_straddling_interval_is_inconclusive_not_fails():
    # the reviewer's case: median 0.93, interval [0.857, 0.955] straddles the 0.9 line
    straddling = _max_weight((0.2, 0.1, 0.3), (0.93, 0.857, 0.955), (0.99, 0.98, 1.0))
    c = _run_saturation({("unscaled", "max_weight"): straddling})["S5.2"]
    assert c.verdict == "inconclusive" and "inconclusive for n = 16, 128, 1024" in c.note
    below = _max_weight((0.2, 0.1, 0.3), (0.8, 0.7, 0.85), (0.99, 0.98, 1.0))
    assert _run_saturation({("unscaled", "max_weight"): below})["S5.2"].verdict == "fails"
    above = _max_weight((0.2, 0.1, 0.3), (0.95, 0.92, 0.97), (0.99, 0.98, 1.0))
    assert _run_saturation({("unscaled", "max_weight"): above})["S5.2"].verdict == "holds"


def test_the_confidence_level_is_printed_from_the_config():
    report = run_claims(VerifyConfig(quick=True, confidence=0.95, groups=(5,)))
    c = by_id(report)
    assert "95% CIs" in c["S5.1"].expected and "99%" not in c["S5.1"].expected + c["S5.2"].expected
    assert c["S5.1"].ci_level == 0.95


def test_variance_claims_store_the_interval_they_judge(quick):
    c = by_id(quick)
    series = quick.data["variance_vs_dk"]["gaussian"]
    level = 1 - 0.01 / 52
    s24 = c["S2.4"]
    assert s24.ci_level == pytest.approx(level)
    assert s24.ci_low < series["ci_low"][-1] and s24.ci_high > series["ci_high"][-1]  # wider than the 99% one
    assert s24.ci_low <= 4096 <= s24.ci_high
    s33 = c["S3.3"]
    assert s33.ci_level == pytest.approx(1 - 0.01 / 8)
    big = [r for r in quick.data["broken_assumptions"] if r["case"] == "non-zero means"][-1]
    assert [s33.ci_low, s33.ci_high] == big["judged_ci"] and s33.ci_low < big["ci_low"]
    # an interval without a stated level is at the configured one
    assert c["S5.1"].ci_level == 0.99


def test_s22_checks_the_mean_too(monkeypatch):
    import sympy

    c = by_id(run_claims(VerifyConfig(quick=True, groups=(2,))))["S2.2"]
    assert c.verdict == "holds" and "mean 0" in c.measured
    mq = sympy.symbols("mu_q", real=True)
    monkeypatch.setattr(iid_variance, "symbolic_dot_mean", lambda d: mq + 1)  # a wrong mean
    ctx = Context(VerifyConfig(quick=True))
    iid_variance._symbolic(ctx)
    assert by_id(ctx)["S2.2"].verdict == "fails"


def test_s85_checks_that_the_max_weight_does_not_decay(monkeypatch):
    ctx = Context(VerifyConfig(quick=True))
    beyond._ssmax(ctx)
    assert by_id(ctx)["S8.5"].verdict == "holds"
    # a curve that stays ≥ 0.9 but decays with n: the old check (≥ 0.9 only) passed it
    monkeypatch.setattr(beyond, "ssmax_one_high_max_weight", lambda n: 0.999 - 0.01 * math.log10(n))
    ctx = Context(VerifyConfig(quick=True))
    beyond._ssmax(ctx)
    assert by_id(ctx)["S8.5"].verdict == "fails"


def test_s9_is_labelled_a_consistency_check_and_has_no_typed_in_series(quick):
    assert "consistency check" in by_id(quick)["S9.1"].note
    assert "softmax_total" not in quick.data["give_away"]
    assert give_away.LEVELS[0] < 0


def test_s133_s134_counts_come_from_the_moment_rules(monkeypatch):
    from attnscale import theory
    from attnscale.claims import seed_numbers

    ctx = Context(VerifyConfig())
    seed_numbers._count_rows(ctx)
    assert [c.verdict for c in ctx.claims] == ["holds", "holds"]
    assert "4096 terms = 64 of mean 1 + 4032 of mean 0; variance 64" in ctx.claims[1].measured
    # with a wrong moment rule (E x = 1) every product has mean 1: the check must notice
    monkeypatch.setattr(theory, "_UNIT_MOMENTS", {1: 1, 2: 1})
    ctx = Context(VerifyConfig())
    seed_numbers._count_rows(ctx)
    assert [c.verdict for c in ctx.claims] == ["seed number wrong", "seed number wrong"]


def test_batch_plan_is_shared_by_both_variance_engines():
    from attnscale.montecarlo import batch_plan

    size, caps = batch_plan([1000, 100], 2, 64, min_batches=30, chunk_elements=2 ** 21)
    assert size == 3 and list(caps) == [1000, 100]
    size, caps = batch_plan([10, 10], 2, 64, min_batches=30, min_batch_size=2)
    assert size == 2 and list(caps) == [60, 60]   # caps raised so that 30 batches fit
    size, _ = batch_plan(10 ** 9, 3, 4096, min_batches=30, chunk_elements=2 ** 21)
    assert size == 2 ** 21 // (2 * 4096)
