"""The QK-norm and output-scale claims (S8.6–S8.9): closed forms, and verdicts that follow their inputs."""

from __future__ import annotations

import math

import numpy as np
import pytest

from attnscale.claims import qk_norm
from attnscale.claims.context import Context
from attnscale.claims.result import VerifyConfig
from attnscale.errors import InputError
from attnscale.i18n import language
from attnscale.theory import attention_output_std_asymptote, qk_norm_logit_std


@pytest.fixture(scope="module")
def quick():
    ctx = Context(VerifyConfig(quick=True))
    qk_norm.run(ctx)
    return ctx


def by_id(ctx):
    return {c.id: c for c in ctx.claims}


def test_closed_forms():
    assert qk_norm_logit_std(1.0, d=256) == 16.0
    assert qk_norm_logit_std(1 / math.sqrt(256), d=256) == pytest.approx(1.0)
    g = np.array([2.0, 1.0, 0.5, 1.0])
    assert qk_norm_logit_std(0.5, g, np.ones(4)) == pytest.approx(0.5 * math.sqrt(4 + 1 + 0.25 + 1))
    assert attention_output_std_asymptote(10**9, 10**6) == pytest.approx(math.sqrt(math.e / 10**9), rel=1e-5)
    with pytest.raises(InputError, match="g_q, g_k"):
        qk_norm_logit_std(1.0, np.ones(4), np.ones(5))
    with pytest.raises(InputError, match="d:"):
        qk_norm_logit_std(1.0)


def test_logit_std_closed_form_against_rmsnorm_of_gaussians():
    """The closed form is exact at small d too (no large-d limit): check it at d = 8 with gains."""
    rng = np.random.default_rng(1)
    q, k = qk_norm.rms_normalised(rng, (200_000,), 8), qk_norm.rms_normalised(rng, (200_000,), 8)
    g_q, g_k = np.linspace(0.5, 2.0, 8), np.linspace(2.0, 0.5, 8)
    z = 0.3 * np.sum(q * g_q * k * g_k, axis=-1)
    assert z.std() == pytest.approx(qk_norm_logit_std(0.3, g_q, g_k), rel=0.01)


@pytest.mark.slow
def test_claims_hold_with_their_numbers(quick):
    c = by_id(quick)
    assert c["S8.6"].verdict == "holds" and abs(c["S8.6"].estimate - 16.0) < 0.16
    assert c["S8.6"].margin == 0.01 and "16" in c["S8.6"].claim_en
    assert c["S8.7"].verdict == "holds"
    assert c["S8.9"].seed_value == "0.102" and c["S8.9"].ci_low < 0.1025 and c["S8.9"].ci_high > 0.1015
    assert c["S8.9"].verdict in ("holds", "inconclusive")
    series = quick.data["qk_norm"]
    assert series["d"] == [64, 128, 256, 512] and series["logit_std"]["closed_form"] == 16.0
    with language("zh"):
        assert "闭式" in c["S8.6"].text("measured")


@pytest.mark.slow
def test_a_wrong_closed_form_fails_s86(monkeypatch, quick):
    rows = {"draws": qk_norm._saturation_by_d(Context(VerifyConfig(quick=True)))["draws"]}
    monkeypatch.setattr(qk_norm, "qk_norm_logit_std", lambda s, gq, gk, d: 1.03 * s * math.sqrt(d))
    ctx = Context(VerifyConfig(quick=True))
    ctx.data["qk_norm"] = {}
    qk_norm._logit_std(ctx, rows["draws"])
    assert by_id(ctx)["S8.6"].verdict == "fails"


def test_published_figures_are_judged_at_their_precision(monkeypatch):
    ctx = Context(VerifyConfig(quick=True))
    rows = qk_norm._saturation_by_d(ctx)
    monkeypatch.setitem(qk_norm.PUBLISHED, "entropy_1", "0.60")
    qk_norm._as_published(ctx, rows)
    row = by_id(ctx)["S8.8"]
    assert row.verdict == "fails" and "entropy at scaling 1" in row.note and row.seed_value.startswith("0.60")


def test_output_std_verdict_follows_the_printed_figure(monkeypatch):
    monkeypatch.setattr(qk_norm, "OUTPUT_PUBLISHED", "0.110")
    ctx = Context(VerifyConfig(quick=True))
    qk_norm._output_std(ctx)
    assert by_id(ctx)["S8.9"].verdict == "fails"


def test_entropy_claim_follows_its_rows():
    """Rows scaled by 1 on both sides: the "1/√d" entropy then depends on d, and S8.7 fails; scaled by
    1/√d on both sides, nothing falls with d, and S8.7 is not "holds"."""
    ctx = Context(VerifyConfig(quick=True))
    rows = qk_norm._saturation_by_d(ctx)
    both_one = {d: {**rows[d], "scaling_sqrt": rows[d]["scaling_1"]} for d in qk_norm.D_HEADS}
    both_sqrt = {d: {**rows[d], "scaling_1": rows[d]["scaling_sqrt"]} for d in qk_norm.D_HEADS}
    qk_norm._entropy_against_d(ctx, both_one)
    qk_norm._entropy_against_d(ctx, both_sqrt)
    assert [c.verdict for c in ctx.claims] == ["fails", "inconclusive"]


def test_judges():
    assert qk_norm.judge_published("0.102", 0.1016, 0.1024) == "holds"
    assert qk_norm.judge_published("0.102", 0.1020, 0.1030) == "inconclusive"
    assert qk_norm.judge_published("0.102", 0.1030, 0.1040) == "fails"
    assert qk_norm.judge_flat([(1.0, 1.02), (1.05, 1.07)], 0.1) == "holds"
    assert qk_norm.judge_flat([(1.0, 1.02), (1.2, 1.3)], 0.1) == "fails"
