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
from attnscale.i18n import N_, language

E5 = Decimal("148.41315910257660342111558004055227962348766759387898904675284511")
E50 = Decimal("5184705528587072464087.4533229334")


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    # an empty results root: group 10 must not depend on what lies in the working directory
    return run_claims(VerifyConfig(quick=True, seed=0, results_root=tmp_path_factory.mktemp("results")))


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
    printed(
        ctx,
        "S1.22",
        N_("the first word gets {seed[0]}, the second {seed[1]}"),
        ["0.867", "0.017"],
        [Decimal("0.866813"), Decimal("0.015876")],
    )
    printed(
        ctx,
        "S1.22",
        N_("the first word gets {seed[0]}, the second {seed[1]}"),
        ["0.867", "0.016"],
        [Decimal("0.866813"), Decimal("0.015876")],
    )
    assert ctx.claims[0].verdict == "seed number wrong" and ctx.claims[0].correct_value == "0.016"
    assert ctx.claims[1].verdict == "holds" and ctx.claims[1].correct_value is None


def test_claim_result_validates_its_vocabulary():
    with pytest.raises(InputError, match="chapter: expected one of"):
        ClaimResult("X", "nowhere", "", "", None, "symbolic", "", "")
    with pytest.raises(InputError, match="verdict: expected one of"):
        ClaimResult("X", "faq", "", "", None, "symbolic", "", "", verdict="maybe")


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(seed=-1), "seed: expected a non-negative integer"),
        (dict(rel_ci_target=0.0), "rel_ci_target"),
        (dict(confidence=1.5), "confidence"),
        (dict(groups=(0, 11)), "groups: expected claim groups among 1..10, got \\[0, 11\\]"),
        (dict(margin=0.0), "margin: expected a relative equivalence margin"),
        (dict(only=("S11",)), "only: expected claim id prefixes like 'S5'"),
        (dict(only=("5.2",)), "only: expected claim id prefixes"),
        (dict(only=()), "only: expected claim id prefixes"),
    ],
)
def test_bad_config(kwargs, message):
    with pytest.raises(InputError, match=message):
        VerifyConfig(**kwargs)


# ---- the groups ------------------------------------------------------------------------------


@pytest.mark.slow
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


@pytest.mark.slow
def test_the_register_and_the_run_agree(quick):
    # every claim of the register is added, exactly once and in the register's order, and nothing else
    from attnscale.claims.register import REGISTER

    assert [c.id for c in quick.claims] == list(REGISTER)


@pytest.mark.slow
def test_every_worded_text_of_a_run_is_in_chinese_with_chinese_clause_joins(quick):
    import re

    from attnscale.claims.result import WORDED

    english = re.compile(r"\b(the|and|at|of|vs|median|unscaled|holds|fails|inconclusive) ")
    for c in quick.claims:
        for field in ("claim", *WORDED):
            en = c.text(field)
            with language("zh"):
                zh = c.text(field)
            if en and english.search(en) and c.id != "S10.5":  # S10.5 quotes the paper in English
                unquoted = re.sub(r"“[^”]*”", "", zh)  # S7.4 quotes the English it reads
                assert zh != en and not english.search(unquoted), (c.id, field, zh)
            if en and "; " in en and zh != en:  # worded (a language-neutral "8; 7/4" stays)
                assert "; " not in (zh or "") and "；" in zh, (c.id, field, zh)


@pytest.mark.slow
def test_group1_flags_the_two_e50_numbers_and_the_quotient_as_written(quick):
    group1 = [c for c in quick.claims if c.id.startswith("S1.")]
    wrong = {c.id for c in group1 if c.verdict != "holds"}
    assert wrong == {"S1.6", "S1.7", "S1.36"}
    assert all(c.correct_value == "5,184,705,528,587,072,464,087" for c in group1 if c.id in ("S1.6", "S1.7"))
    assert len(group1) >= 30
    # 4.482/13.727 = 0.326510 rounds to 0.327, the exact softmax weight 0.326496 to 0.326: both said
    q = by_id(quick)["S1.36"]
    assert q.correct_value == "0.327" and by_id(quick)["S1.28"].verdict == "holds"
    assert "4.482/13.727 = 0.326510 → 0.327" in q.measured and "exact softmax 0.326496 → 0.326" in q.measured


def test_s136_judges_each_quotient_as_written():
    from attnscale.claims import seed_numbers

    ctx = Context(VerifyConfig())
    # quotients that round to what is printed: holds, and the note says the weights agree
    seed_numbers._quotient_row(ctx, ["1.000", "3.000"], "4.000", ["0.250", "0.750"], [Decimal("0.25"), Decimal("0.75")])
    assert ctx.claims[-1].verdict == "holds" and ctx.claims[-1].correct_value is None
    assert "is right as a weight but not as the quotient" not in ctx.claims[-1].note
    seed_numbers._quotient_row(
        ctx, ["1.000", "3.000"], "4.000", ["0.251", "0.750"], [Decimal("0.2514"), Decimal("0.75")]
    )
    assert ctx.claims[-1].verdict == "seed number wrong" and ctx.claims[-1].correct_value == "0.250"
    assert "0.251 is right as a weight but not as the quotient" in ctx.claims[-1].note


@pytest.mark.slow
def test_group2_symbolic_and_variance_cover_dk(quick):
    c = by_id(quick)
    assert c["S2.1"].verdict == c["S2.2"].verdict == c["S2.3"].verdict == "holds"
    series = quick.data["variance_vs_dk"]
    assert set(series) == {"gaussian", "uniform", "rademacher", "student_t5"}
    misses = 0
    for s in series.values():
        assert s["d_k"][0] == 1 and s["d_k"][-1] == 4096
        misses += sum(not lo <= d <= hi for lo, hi, d in zip(s["ci_low"], s["ci_high"], s["d_k"]))
    # 52 intervals at 99%: about 0.5 misses expected, P(more than 3) < 0.2%; the claims themselves
    # judge all 52 at once at the Bonferroni level (each interval widened to 1 − 0.01/52).
    assert misses <= 3
    # quick: the intervals cover d_k but the widest (d_k = 4096) is far wider than the ±5% margin
    for i in range(4, 8):
        assert c[f"S2.{i}"].verdict == "inconclusive" and c[f"S2.{i}"].margin == 0.05
        assert "judged intervals inside ±5%; widest ±" in c[f"S2.{i}"].measured


@pytest.mark.slow
def test_group3_follows_the_general_formula(quick):
    rows = quick.data["broken_assumptions"]
    assert all(r["covers_formula"] for r in rows)
    means = [r for r in rows if r["case"] == "non-zero means" and r["d_k"] == 64][0]
    assert means["formula"] == 96.0 and means["iid_prediction"] == 64.0
    c = by_id(quick)
    assert c["S3.1"].verdict == c["S3.2"].verdict == "holds"
    # every interval covers its formula; whether it is inside the margin decides holds/inconclusive
    from attnscale.claims.broken_assumptions import CASES

    for i, case in enumerate(CASES, start=3):
        mine = [r for r in rows if r["case"] == case.name]
        expected = "holds" if all(r["verdict"] == "holds" for r in mine) else "inconclusive"
        assert c[f"S3.{i}"].verdict == expected and c[f"S3.{i}"].margin == 0.05


@pytest.mark.slow
def test_group4_rescaling(quick):
    c = by_id(quick)
    assert c["S4.1"].verdict == c["S4.2"].verdict == "holds"
    assert c["S4.3"].verdict == "inconclusive" and "52/52 cover 1" in c["S4.3"].measured


@pytest.mark.parametrize(
    "lo, hi, verdict",
    [
        (0.97, 1.03, "holds"),
        (0.95, 1.05, "holds"),
        (0.9, 1.02, "inconclusive"),
        (0.5, 1.5, "inconclusive"),
        (1.001, 1.002, "fails"),
        (0.5, 0.99, "fails"),
    ],
)
def test_judge_equal_needs_the_interval_inside_the_margin(lo, hi, verdict):
    from attnscale.claims.result import judge_equal

    assert judge_equal(lo, hi, 1.0, 0.05) == verdict
    assert judge_equal(lo * 4096, hi * 4096, 4096.0, 0.05) == verdict
    with pytest.raises(InputError, match="margin"):
        judge_equal(0.9, 1.1, 1.0, 0.0)


def _estimates(rel_half_width: float, shift: float = 0.0):
    from attnscale.montecarlo import Estimate

    return [
        Estimate(d * (1 + shift), d * (1 + shift - rel_half_width), d * (1 + shift + rel_half_width), 1000, 100, True)
        for d in iid_variance.D_KS
    ]


@pytest.mark.parametrize(
    "rel, shift, margin, verdict",
    [
        (0.01, 0.0, 0.05, "holds"),
        (0.3, 0.0, 0.05, "inconclusive"),
        (0.3, 0.0, 0.9, "holds"),
        (0.01, 0.2, 0.05, "fails"),
    ],
)
def test_variance_claim_verdict_follows_precision_and_margin(rel, shift, margin, verdict):
    ctx = Context(VerifyConfig(quick=True, margin=margin))
    iid_variance._variance_claim(ctx, "gaussian", _estimates(rel, shift), 0.99, 52)
    c = ctx.claims[0]
    assert c.verdict == verdict and c.margin == margin
    assert f"within d_k·(1 ± {margin:.0%})" in c.expected
    inside = 13 if verdict == "holds" else 0
    assert f"{inside}/13 judged intervals inside ±{margin:.0%}" in c.measured


@pytest.mark.slow
def test_groups5_6_saturation_and_gradients(quick):
    c = by_id(quick)
    for cid in ("S5.1", "S5.3", "S5.4", "S6.2", "S6.3"):
        assert c[cid].verdict == "holds", cid
    sat = quick.data["saturation"]
    assert sat["d_k"][-1] == 4096 and set(sat["by_n"]) == {"16", "128", "1024"}
    assert sat["streams"] == "independent, one per (n, d_k, mode)"
    unscaled = sat["by_n"]["1024"]["unscaled"]["max_weight"]
    scaled = sat["by_n"]["1024"]["scaled"]["max_weight"]
    assert unscaled["median"][-1] > 0.99 and scaled["median"][-1] < 0.05
    assert all(q10 <= m <= q90 for q10, m, q90 in zip(unscaled["q10"], unscaled["median"], unscaled["q90"]))
    # S5.2's verdict and its "would hold from" come from the data block the report shows
    near = sat["nearly_all"]
    for n, d in near["holds_from_d_k"].items():
        assert f"{d} (n={n})" in c["S5.2"].note
        mw = sat["by_n"][n]["unscaled"]["max_weight"]
        assert mw["median_ci"][sat["d_k"].index(d)][0] >= near["threshold"]
    # S6.1's words name the crossover the data holds, per n
    cross = quick.data["jacobian"]["crossover"]
    for n, x in cross.items():
        assert f"n={n}: unscaled below the scaled one from d_k = {x['d_k']} on" in c["S6.1"].measured
    jac = quick.data["jacobian"]["by_n"]["128"]["unscaled"]["jacobian_frobenius"]
    assert jac["median"][-1] < 1e-3 < jac["mean"][-1]


def _curve(values_lo_hi):
    return [
        {"median": m, "median_ci": [lo, hi], "q10": lo, "q90": hi, "mean": m, "mean_ci": [lo, hi]}
        for m, lo, hi in values_lo_hi
    ]


def test_crossover_finds_where_the_curve_drops_below_for_good():
    d_ks = [1, 4, 16, 64]
    flat = _curve([(0.5, 0.45, 0.55)] * 4)
    below_from_16 = _curve([(0.5, 0.45, 0.55), (0.7, 0.65, 0.75), (0.2, 0.15, 0.25), (0.1, 0.05, 0.15)])
    x = saturation.crossover(below_from_16, flat, d_ks)
    assert x["d_k"] == 16 and x["above_at"] == 4 and 4 < x["interpolated"] < 16
    assert x["per_d_k"] == ["inconclusive", "fails", "holds", "holds"]
    # dips below, comes back above, and only the last point is below: the crossover is the last one
    back = _curve([(0.2, 0.15, 0.25), (0.7, 0.65, 0.75), (0.2, 0.15, 0.25), (0.1, 0.05, 0.15)])
    assert saturation.crossover(back, flat, d_ks)["d_k"] == 16
    never = _curve([(0.7, 0.65, 0.75)] * 4)
    assert saturation.crossover(never, flat, d_ks) == {
        "d_k": None,
        "above_at": None,
        "interpolated": None,
        "per_d_k": ["fails"] * 4,
    }


def _run_gradients(unscaled_rows):
    from attnscale.claims import gradients

    ctx = Context(VerifyConfig(quick=True))
    ctx.memo["softmax rows"] = _fake_rows(
        {
            ("unscaled", "jacobian_frobenius"): unscaled_rows,
            ("scaled", "jacobian_frobenius"): [(0.3, 0.28, 0.32)] * len(saturation.D_KS),
        }
    )
    gradients.run(ctx)
    return {c.id: c for c in ctx.claims}, ctx.data["jacobian"]


def test_s61_verdict_and_words_follow_the_curve():
    n = len(saturation.D_KS)
    i64 = saturation.D_KS.index(64)
    # above the scaled curve up to d_k = 64, then below and falling: holds, crossover 128
    rows = [(0.4, 0.38, 0.42)] * (i64 + 1) + [(0.2 / 2**j, 0.19 / 2**j, 0.21 / 2**j) for j in range(n - i64 - 1)]
    c, data = _run_gradients(rows)
    assert c["S6.1"].verdict == "holds"
    assert all(x["d_k"] == 128 for x in data["crossover"].values())
    assert "below the scaled one from d_k = 128 on (above or undecided at 64" in c["S6.1"].measured
    assert c["S6.4"].verdict == "fails" and "fails for n = 16, 128, 1024" in c["S6.4"].note
    # never below the scaled curve: fails, and the words say so
    c, data = _run_gradients([(0.4 + 0.001 * i, 0.38, 0.42) for i in range(n)])
    assert c["S6.1"].verdict == "fails" and "not below the scaled one by d_k = 4096" in c["S6.1"].measured
    assert all(x["d_k"] is None for x in data["crossover"].values())
    # below from the start: S6.4 holds at the seed's d_k
    c, _ = _run_gradients([(0.2 / 2**j, 0.19 / 2**j, 0.21 / 2**j) for j in range(n)])
    assert c["S6.1"].verdict == "holds" and c["S6.4"].verdict == "holds"
    assert "below the scaled one at every d_k from 1" in c["S6.1"].measured


@pytest.mark.slow
def test_group7_faq(quick):
    c = by_id(quick)
    assert c["S7.1"].verdict == "holds" and c["S7.3"].verdict == "holds"
    # the seed's words (no saturation at d_k = 4) and how much scaling changes the rows: two rows
    assert "表现良好" in c["S7.2"].claim_zh and "max weight unscaled" in c["S7.2"].measured
    assert "TV" in c["S7.4"].measured and "|ΔH|/ln n" in c["S7.4"].measured
    assert c["S7.2"].ci_high < faq.NEARLY_ALL and c["S7.2"].verdict == "holds"
    assert c["S7.4"].estimate > faq.BARELY and c["S7.4"].verdict == "fails"  # a quarter of the attention moves
    slope = quick.data["error_vs_samples"]["slope"]
    assert -0.65 < slope < -0.35


@pytest.mark.slow
def test_s72_and_s74_verdicts_follow_the_rows(monkeypatch):
    def run_at(d_k):
        monkeypatch.setattr(faq, "SMALL_D_K", d_k)
        ctx = Context(VerifyConfig(quick=True))
        faq.run(ctx)
        return by_id(ctx)

    small, large = run_at(1), run_at(1024)
    # d_k = 1: scaling is the identity, nothing changes, nothing saturates (n ≥ 3)
    assert small["S7.2"].verdict == "holds" and small["S7.4"].verdict == "holds"
    assert "TV 0.000 [0.000, 0.000]" in small["S7.4"].measured
    # d_k = 1024: the unscaled rows are saturated: the seed's "behaves well" fails there
    assert large["S7.2"].verdict == "fails" and "fails for n = 3, 16, 128" in large["S7.2"].note
    assert large["S7.4"].verdict == "fails"


@pytest.mark.slow
def test_group8_beyond(quick):
    c = by_id(quick)
    for cid in ("S8.1", "S8.2", "S8.3", "S8.4", "S8.5"):
        assert c[cid].verdict == "holds", cid
    ss = quick.data["ssmax"]
    assert ss["n"][0] == 10 and ss["n"][-1] == 100000
    assert ss["softmax"][-1] < 0.002 and ss["ssmax"][-1] > 0.99
    phase = quick.data["phase"]
    assert len(phase["mc"]["1024"]) == len(phase["sigma"]) == len(phase["asymptote"]["1024"])


@pytest.mark.slow
def test_group9_give_away(quick):
    c = by_id(quick)
    assert c["S9.1"].verdict == c["S9.2"].verdict == "holds"
    assert quick.data["give_away"]["softmax1_total"][0] < 1e-3


@pytest.mark.slow
def test_report_data_has_every_series_the_report_draws(quick):
    for key in (
        "variance_vs_dk",
        "dot_histograms",
        "saturation",
        "jacobian",
        "phase",
        "broken_assumptions",
        "ssmax",
        "seed_softmax_examples",
    ):
        assert key in quick.data, key
    h = quick.data["dot_histograms"]
    assert set(h) == {"4", "64", "512"}
    assert sum(h["64"]["counts"]) + h["64"]["outside"] == h["64"]["n_samples"]
    ex = quick.data["seed_softmax_examples"]["[14, 10, 12]"]
    np.testing.assert_allclose(ex["weights_scaled"], [0.419229, 0.254275, 0.326496], atol=1e-6)


# ---- determinism and serialisation -----------------------------------------------------------


@pytest.mark.slow
def test_same_seed_same_json_and_other_seed_differs(quick):
    again = run_claims(VerifyConfig(quick=True, seed=0, results_root=quick.config.results_root))
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


@pytest.mark.slow
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

from attnscale.claims import beyond, faq, give_away, iid_variance, saturation  # noqa: E402
from attnscale.claims.result import (  # noqa: E402
    by_n_note,
    count_verdicts,
    interval_text,
    judge_all,
    judge_at_least,
    judge_at_most,
    judge_below,
    judge_falling,
    judge_rising,
    level_text,
    per_n,
)


@pytest.mark.parametrize(
    "lo, hi, verdict",
    [(0.91, 0.95, "holds"), (0.9, 0.95, "holds"), (0.857, 0.955, "inconclusive"), (0.5, 0.89, "fails")],
)
def test_judge_at_least_is_three_way(lo, hi, verdict):
    assert judge_at_least(lo, hi, 0.9) == verdict
    # the mirror image: ≤ −0.9 for the negated interval
    assert judge_at_most(-hi, -lo, -0.9) == verdict


@pytest.mark.parametrize(
    "lower, upper, verdict",
    [((0.1, 0.2), (0.3, 0.4), "holds"), ((0.1, 0.35), (0.3, 0.4), "inconclusive"), ((0.5, 0.6), (0.3, 0.4), "fails")],
)
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


def test_a_trend_holds_only_when_every_step_is_separated():
    up = [(0.1, 0.2), (0.3, 0.4), (0.5, 0.6)]
    assert judge_rising(up) == "holds" and judge_falling(up) == "fails"
    assert judge_falling(iter(up[::-1])) == "holds"  # any iterable, e.g. a generator
    # one step overlapping leaves the trend undecided; one step the wrong way fails it
    assert judge_rising([(0.1, 0.2), (0.15, 0.4), (0.5, 0.6)]) == "inconclusive"
    assert judge_rising([(0.1, 0.2), (0.3, 0.4), (0.0, 0.05)]) == "fails"
    with pytest.raises(InputError, match="intervals"):
        judge_rising([(0.1, 0.2)])


def test_per_n_words_what_was_measured_and_how_it_was_judged():
    assert interval_text(0.12345, 0.1, 0.15) == "0.123 [0.100, 0.150]"
    assert interval_text(1234.5, 1200, 1300, ".3g") == "1.23e+03 [1.2e+03, 1.3e+03]"
    assert per_n({16: "a", 128: "b"}) == "n=16: a; n=128: b"
    with language("zh"):
        assert per_n({16: "a", 128: "b"}) == "n=16：a；n=128：b"
    assert per_n({"16": "a", "128": "b"}, sep=",") == "n=16: a, n=128: b"
    assert (
        by_n_note({16: "holds", 128: "inconclusive"}, "overlap")
        == "holds for n = 16; inconclusive for n = 128 (overlap)"
    )
    with language("zh"):
        assert by_n_note({16: "holds", 128: "inconclusive"}, "重叠") == "n = 16 时成立；n = 128 时无定论（重叠）"
    assert by_n_note({16: "holds", 128: "holds"}, "overlap") == "holds for n = 16, 128"


def test_counts_include_inconclusive_and_level_text():
    claims = [
        ClaimResult("X", "faq", "", "", None, "Monte Carlo", "", "", verdict=v)
        for v in ("holds", "inconclusive", "inconclusive", "fails")
    ]
    report = VerifyReport(VerifyConfig(), {}, claims)
    assert report.counts() == {"holds": 1, "fails": 1, "inconclusive": 2, "seed number wrong": 0}
    assert report.to_dict()["counts"]["inconclusive"] == 2
    assert count_verdicts(["holds", "odd"]) == {
        "holds": 1,
        "fails": 0,
        "inconclusive": 0,
        "seed number wrong": 0,
        "odd": 1,
    }
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
                rows = overrides.get((mode, f)) or [
                    (0.5 + 0.01 * i * (mode == "unscaled"),) * 3 for i in range(len(saturation.D_KS))
                ]
                per[mode][f] = [summary(*r) for r in rows]
        by_n[str(n)] = per
    return {"rows": 300, "d_k": list(saturation.D_KS), "n": list(saturation.NS), "by_n": by_n, "streams": "fake"}


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
    c = _run_saturation({("unscaled", "max_weight"): above})["S5.2"]
    assert c.verdict == "holds" and "it would hold from d_k = 64 (n=16), 64 (n=128), 64 (n=1024)" in c.note
    # the straddling case would hold only at d_k = 4096, where the interval is above 0.9
    c = _run_saturation({("unscaled", "max_weight"): straddling})["S5.2"]
    assert "it would hold from d_k = 4096 (n=16)" in c.note


def test_the_confidence_level_is_printed_from_the_config():
    report = run_claims(VerifyConfig(quick=True, confidence=0.95, groups=(5,)))
    c = by_id(report)
    assert "95% CIs" in c["S5.1"].expected and "99%" not in c["S5.1"].expected + c["S5.2"].expected
    assert c["S5.1"].ci_level == 0.95


@pytest.mark.slow
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
    monkeypatch.setattr(beyond, "ssmax_one_high_max_weight", lambda n, s: 0.999 - 0.01 * math.log10(n))
    ctx = Context(VerifyConfig(quick=True))
    beyond._ssmax(ctx)
    assert by_id(ctx)["S8.5"].verdict == "fails"


@pytest.mark.slow
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

    size, caps = batch_plan([1000, 100], 2, 64, min_batches=30, chunk_elements=2**21)
    assert size == 3 and list(caps) == [1000, 100]
    size, caps = batch_plan([10, 10], 2, 64, min_batches=30, min_batch_size=2)
    assert size == 2 and list(caps) == [60, 60]  # caps raised so that 30 batches fit
    size, _ = batch_plan(10**9, 3, 4096, min_batches=30, chunk_elements=2**21)
    assert size == 2**21 // (2 * 4096)


def test_s54_a_large_drift_fails_only_when_detectable():
    assert saturation.stays_put(0.05, False) == "holds"
    assert saturation.stays_put(0.3, True) == "inconclusive" and saturation.stays_put(0.3, False) == "fails"
    n = len(saturation.D_KS)
    # the scaled medians drift by a third of the unscaled drift (0.01 per grid step)
    wide = [(0.5 + 0.004 * i, 0.4, 0.6 + 0.004 * i) for i in range(n)]
    narrow = [(0.5 + 0.004 * i, 0.4995 + 0.004 * i, 0.5005 + 0.004 * i) for i in range(n)]
    assert _run_saturation({("scaled", "max_weight"): wide})["S5.4"].verdict == "inconclusive"
    c = _run_saturation({("scaled", "max_weight"): narrow})["S5.4"]
    assert c.verdict == "fails" and "detectable" in c.note and "drift ratio 0.400" in c.measured


def test_s54_and_s62_judge_and_word_one_criterion():
    """S5.4 (max weight, entropy) and S6.2 (Jacobian norm) use the same stays-put criterion: with the same
    detectable drift of the scaled medians, both fail, state the same expectation and open the note alike."""
    from attnscale.claims import gradients

    n = len(saturation.D_KS)
    narrow = [(0.5 + 0.004 * i, 0.4995 + 0.004 * i, 0.5005 + 0.004 * i) for i in range(n)]
    ctx = Context(VerifyConfig(quick=True))
    ctx.memo["softmax rows"] = _fake_rows({("scaled", "max_weight"): narrow, ("scaled", "jacobian_frobenius"): narrow})
    saturation.run(ctx)
    gradients.run(ctx)
    s54, s62 = (next(c for c in ctx.claims if c.id == i) for i in ("S5.4", "S6.2"))
    assert s54.verdict == s62.verdict == "fails"
    assert s54.expected == s62.expected and "over d_k = 16…4096" in s54.expected
    opening = "a residual drift is detectable (99% CIs of the medians share no common value) for n = 16, 128, 1024"
    assert s54.note.startswith(opening) and s62.note.startswith(opening)
    assert "drift ratio 0.400" in s54.measured and "drift ratio 0.400" in s62.measured


def test_stays_put_takes_the_worst_figure_of_each_n():
    def summaries(medians, half=0.001):
        return [{"median": m, "median_ci": [m - half, m + half]} for m in medians]

    unscaled = summaries([0.0, 1.0, 2.0])  # moves by 2 from index 0 on
    still, creeping = summaries([0.5, 0.5, 0.5]), summaries([0.5, 0.6, 0.9])
    per, verdict = saturation.judge_stays_put(
        {16: [(still, unscaled)], 128: [(still, unscaled), (creeping, unscaled)]}, 0
    )
    assert per[16] == (0.0, True)
    assert per[128][0] == pytest.approx(0.2) and per[128][1] is False  # the creeping figure decides
    assert verdict == "fails"
    # from index 1 on the creeping figure moves 0.3 of 1.0: still too much, but undetectable with wide intervals
    per, verdict = saturation.judge_stays_put({128: [(summaries([0.5, 0.6, 0.9], half=0.5), unscaled)]}, 1)
    assert per[128] == (pytest.approx(0.3), True) and verdict == "inconclusive"


@pytest.mark.slow
def test_every_bracketed_interval_a_row_prints_says_what_it_is(quick):
    """A measured text with "x [lo, hi]" names the brackets (the intervals its verdict rests on)."""
    import re

    bare = [
        c.id
        for c in quick.claims
        if re.search(r"\d \[[-\d.]+, [-\d.]+\]", c.measured or "")
        and "(in brackets: 99% CIs)" not in c.measured
        and not re.search(r"\] \(\d+(\.\d+)?%\)", c.measured)
    ]
    assert not bare, bare
    c = by_id(quick)
    assert c["S7.2"].measured.endswith("(in brackets: 99% CIs)")
    assert c["S7.2"].measured_zh.endswith("（方括号内为 99% 置信区间）")
