"""The claim registry: verdict logic (a wrong number is flagged, a right one is not), every group's
verdicts, the report's data series, determinism and the JSON round trip."""

import json
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
