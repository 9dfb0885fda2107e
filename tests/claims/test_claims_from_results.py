"""Group 10 and the selection of claims: verdicts judged from training and probe results written
with ``results.write`` into a temporary root (change the data, see the verdict and its words change),
and ``VerifyConfig.only``."""

import json

import pytest

from attnscale import results
from attnscale.claims import VerifyConfig, VerifyReport, run_claims
from attnscale.errors import InputError


def _verdict(rule, d_k, verdict, optimiser="adam", lr=3e-3, seeds=3, agreeing=3):
    return {
        "rule": rule,
        "d_k": d_k,
        "optimiser": optimiser,
        "lr": lr,
        "verdict": verdict,
        "seeds": seeds,
        "seeds_agreeing": agreeing,
        "steps_ratio": None,
    }


def _train(root, verdicts, kind="train/scale-vs-dk", quick=False):
    results.write(
        kind, {"cells": [], "analysis": {"verdicts": verdicts, "table": [], "curves": {}}}, quick=quick, root=root
    )


def _probe(root, kind, name, d_k, heads):
    model = {"name": name, "d_k": d_k, "n_layers": 1, "n_heads_q": len(heads), "n_heads_kv": len(heads), "causal": True}
    results.write(kind, {"model": model, "heads": heads, "check": {"passed": True, "max_abs_diff": 0.0}}, root=root)


def _head(h, q_mean=0.0, q_var=1.0, k_mean=0.0, k_var=1.0):
    return {
        "layer": 0,
        "head": h,
        "q_mean": q_mean,
        "q_var": q_var,
        "k_mean": k_mean,
        "k_var": k_var,
        "ratio_pair": 1.0,
        "ratio_token": 1.0,
    }


def claims(root):
    return {c.id: c for c in run_claims(VerifyConfig(quick=True, only=("S10",), results_root=root)).claims}


def test_without_results_every_row_is_inconclusive_and_names_its_command(tmp_path):
    c = claims(tmp_path)
    assert [c[i].verdict for i in ("S10.1", "S10.2", "S10.3", "S10.4", "S10.5")] == ["inconclusive"] * 5
    assert "run attnscale train scale-vs-dk" in c["S10.1"].measured and "run attnscale train lm" in c["S10.1"].measured
    assert "run attnscale probe --model minilm" in c["S10.4"].measured
    assert c["S10.1"].sources is None and c["S10.5"].method == "citation"
    assert "§3.2.1" in c["S10.5"].measured and "footnote 4" in c["S10.5"].measured.lower()
    assert "not checkable by computation" in c["S10.5"].expected


def test_learning_stops_follows_the_training_verdicts(tmp_path):
    scaled_learns = [_verdict("inverse_sqrt_dk", d, "learns") for d in (16, 64, 256)]
    _train(
        tmp_path,
        scaled_learns
        + [_verdict("unscaled", 16, "learns"), _verdict("unscaled", 64, "fails"), _verdict("unscaled", 256, "fails")],
    )
    c = claims(tmp_path)
    assert c["S10.1"].verdict == "holds" and c["S10.2"].verdict == "holds"
    assert "2 unscaled cells at d_k ≥ 64: 2 fails" in c["S10.1"].measured and "quick" not in c["S10.1"].measured
    assert c["S10.1"].sources[0]["kind"] == "train/scale-vs-dk" and c["S10.1"].sources[0]["quick"] is False
    # unscaled learns at d_k = 256 with Adam: learning did not stop
    _train(tmp_path, scaled_learns + [_verdict("unscaled", 64, "fails"), _verdict("unscaled", 256, "learns")])
    c = claims(tmp_path)
    assert c["S10.1"].verdict == "fails" and c["S10.2"].verdict == "fails"
    assert "d_k=256 adam lr=0.003: learns" in c["S10.1"].measured
    # slower is not "stops" but is "hardly learns effectively"
    _train(tmp_path, scaled_learns + [_verdict("unscaled", 64, "slower", agreeing=2)])
    c = claims(tmp_path)
    assert c["S10.1"].verdict == "fails" and c["S10.2"].verdict == "holds"
    assert "2/3 seeds agree" in c["S10.1"].measured


def test_a_setting_where_scaling_does_not_learn_either_is_no_evidence(tmp_path):
    _train(
        tmp_path,
        [
            _verdict("inverse_sqrt_dk", 64, "fails", optimiser="sgd", lr=0.1),
            _verdict("unscaled", 64, "fails", optimiser="sgd", lr=0.1),
        ],
    )
    c = claims(tmp_path)
    assert c["S10.1"].verdict == "inconclusive"
    assert "1 cells where it does not learn either" in c["S10.1"].measured


def test_quick_only_is_said(tmp_path):
    _train(tmp_path, [_verdict("inverse_sqrt_dk", 64, "learns"), _verdict("unscaled", 64, "fails")], quick=True)
    c = claims(tmp_path)
    assert c["S10.1"].measured.startswith("quick results: ") and "only a quick result exists" in c["S10.1"].note
    assert c["S10.1"].sources[0]["quick"] is True
    # a full result, once there, is preferred
    _train(tmp_path, [_verdict("inverse_sqrt_dk", 64, "learns"), _verdict("unscaled", 64, "learns")])
    c = claims(tmp_path)
    assert c["S10.1"].verdict == "fails" and "quick" not in c["S10.1"].measured


def test_the_lm_experiment_counts_too_and_a_broken_result_is_named(tmp_path):
    _train(tmp_path, [_verdict("inverse_sqrt_dk", 64, "learns"), _verdict("unscaled", 64, "fails")], kind="train/lm")
    c = claims(tmp_path)
    assert c["S10.1"].verdict == "holds" and "train/lm d_k=64" in c["S10.1"].measured
    results.write("train/scale-vs-dk", {"cells": [], "analysis": {"table": [], "verdicts": []}}, root=tmp_path)
    c = claims(tmp_path)
    assert c["S10.1"].verdict == "holds"  # still judged from train/lm
    _train(tmp_path, [{"rule": "unscaled", "verdict": "fails"}], kind="train/lm")  # no d_k
    c = claims(tmp_path)
    assert c["S10.1"].verdict == "inconclusive" and "analysis.verdicts needs" in c["S10.1"].measured
    bad = tmp_path / "train" / "lm" / "result.json"
    bad.unlink()
    c = claims(tmp_path)
    assert c["S10.1"].verdict == "inconclusive" and "no unscaled cell at d_k ≥ 64" in c["S10.1"].measured


def test_normalised_inputs_fraction_of_heads(tmp_path):
    heads = [_head(0), _head(1, q_var=1.2), _head(2, q_mean=0.5), _head(3, k_var=3.0)]
    _probe(tmp_path, "probe/minilm", "all-MiniLM-L6-v2", 32, heads)
    c = claims(tmp_path)
    assert c["S10.3"].verdict == "holds" and "2/4 heads (50%) meet it" in c["S10.3"].measured
    assert "|mean| ≤ 0.1" in c["S10.3"].expected and "[0.8, 1.25]" in c["S10.3"].expected
    _probe(tmp_path, "probe/minilm", "all-MiniLM-L6-v2", 32, heads[2:] + [_head(4, q_var=0.1)])
    c = claims(tmp_path)
    assert c["S10.3"].verdict == "fails" and "0/3 heads (0%) meet it" in c["S10.3"].measured
    _probe(tmp_path, "probe/minilm", "all-MiniLM-L6-v2", 32, [{"layer": 0, "head": 0, "q_mean": 0.0}])
    c = claims(tmp_path)
    assert c["S10.3"].verdict == "inconclusive" and "data.heads needs" in c["S10.3"].measured
    assert c["S10.4"].verdict == "fails"  # the model's d_k is still read


def test_dk_of_real_models(tmp_path):
    _probe(tmp_path, "probe/smollm2", "SmolLM2-135M", 64, [_head(0)])
    c = claims(tmp_path)
    assert c["S10.4"].verdict == "holds" and "SmolLM2-135M: d_k = 64" in c["S10.4"].measured
    _probe(tmp_path, "probe/minilm", "all-MiniLM-L6-v2", 32, [_head(0)])
    c = claims(tmp_path)
    assert c["S10.4"].verdict == "fails" and "all-MiniLM-L6-v2 (32)" in c["S10.4"].note
    assert {s["kind"] for s in c["S10.4"].sources} == {"probe/minilm", "probe/smollm2"}


def test_only_computes_the_selected_claims(tmp_path):
    report = run_claims(VerifyConfig(quick=True, only=("S9", "S1.36", "S1.3"), results_root=tmp_path))
    assert [c.id for c in report.claims] == ["S1.3", "S1.36", "S9.1", "S9.2"]
    assert set(report.timings) == {"group 1: seed_numbers", "group 9: give_away", "total"}
    with pytest.raises(InputError, match=r"only: \['S9.7'\] match no claim"):
        run_claims(VerifyConfig(quick=True, only=("S9.7",)))
    # only and groups narrow each other
    assert VerifyConfig(groups=(1, 2), only=("S2", "S5")).selected_groups == [2]
    from attnscale.claims import GROUPS
    from attnscale.claims.result import N_GROUPS

    assert sorted(GROUPS) == list(range(1, N_GROUPS + 1)) == VerifyConfig().selected_groups


def test_config_round_trip_keeps_only_and_the_results_root(tmp_path):
    report = run_claims(VerifyConfig(quick=True, only=("S9",), results_root=tmp_path))
    back = VerifyReport.from_dict(json.loads(json.dumps(report.to_dict())))
    assert back.config == report.config and back.config.only == ("S9",)
    assert back.config.results_root == tmp_path
    assert VerifyConfig(only="S9").only == ("S9",)


def test_cli_only_and_json_show_the_new_rows_and_margins(capsys):
    from attnscale.cli import main

    assert main(["verify", "--quick", "--only", "S3.3,S7", "--json", "-"]) == 0
    env = json.loads(capsys.readouterr().out)  # the verify envelope (results contract)
    rows = {c["id"]: c for c in env["data"]["claims"]}
    assert set(rows) == {"S3.3", "S7.1", "S7.2", "S7.3", "S7.4"}
    assert rows["S3.3"]["margin"] == 0.05 and "sources" in rows["S7.2"]
    assert env["config"]["only"] == ["S3.3", "S7"] and env["kind"] == "verify"
    assert main(["verify", "--only", "S42"]) == 2
    assert "only: expected claim id prefixes" in capsys.readouterr().err


def test_a_claim_says_which_result_it_was_judged_from():
    from attnscale import results
    from attnscale.claims.from_results import _provenance, _sources

    def env(quick, reference):
        return results.Envelope(
            kind="train/lm",
            data={},
            quick=quick,
            created="2026-12-01T22:19:22Z",
            config=None,
            seed=0,
            version="0",
            environment={},
            reference=reference,
        )

    said = {
        origin: _provenance([e])
        for origin, e in (("full", env(False, False)), ("reference", env(False, True)), ("quick", env(True, False)))
    }
    assert said["full"] == "train/lm (full, 2026-12-01T22:19:22Z)"
    assert said["reference"] == "train/lm (the full reference run shipped with attnscale, 2026-12-01T22:19:22Z)"
    assert "only a quick result exists" in said["quick"]
    assert _sources([env(False, True)])[0]["origin"] == "reference"
