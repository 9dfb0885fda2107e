"""The results contract: envelope, strict JSON, validated reads, quick apart from full."""

import json
import math

import pytest

from attnscale import results
from attnscale.results import ResultError, ResultMissing


def strict_load(path):
    def refuse(c):
        raise ValueError(c)

    return json.loads(path.read_text(encoding="utf-8"), parse_constant=refuse)


def test_round_trip_and_envelope(tmp_path):
    env = results.write("demo", {"answer": 1.5, "xs": [1, 2]}, config={"n": 3}, seed=7, root=tmp_path)
    assert env.path == tmp_path / "demo" / "result.json"
    raw = strict_load(env.path)
    assert set(raw) == set(results.ENVELOPE_FIELDS)
    back = results.read("demo", root=tmp_path)
    assert (back.data, back.config, back.seed, back.quick) == ({"answer": 1.5, "xs": [1, 2]}, {"n": 3}, 7, False)
    assert back.environment["attnscale"] == back.version


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_non_finite_refused_naming_where(tmp_path, bad):
    with pytest.raises(ValueError, match=r"data\.cells\[1\]\.loss"):
        results.write("demo", {"answer": 1, "cells": [{"loss": 1.0}, {"loss": bad}]}, root=tmp_path)
    assert not (tmp_path / "demo").exists()  # nothing half-written, nothing at all


def test_required_field_checked_on_write_and_read(tmp_path):
    with pytest.raises(ValueError, match="answer"):
        results.write("demo", {"answr": 1}, root=tmp_path)
    env = results.write("demo", {"answer": 1}, root=tmp_path)
    raw = strict_load(env.path)
    raw["data"] = {"renamed": 1}
    env.path.write_text(json.dumps(raw))
    with pytest.raises(ResultError, match=r"result\.json.*data\.answer"):
        results.read("demo", root=tmp_path)


def test_malformed_files_name_file_and_field(tmp_path):
    path = results.result_path("demo", tmp_path)
    path.parent.mkdir(parents=True)
    with pytest.raises(ResultMissing, match="result.json"):
        results.read("demo", root=tmp_path)
    path.write_text('{"schema": 1, "data": NaN}')
    with pytest.raises(ResultError, match="not a strict JSON"):
        results.read("demo", root=tmp_path)
    path.write_text('{"schema": 1, "data": {}}')
    with pytest.raises(ResultError, match="'kind'"):
        results.read("demo", root=tmp_path)
    good = results.write("demo", {"answer": 1}, root=tmp_path)
    raw = strict_load(good.path)
    raw["kind"] = "verify"
    path.write_text(json.dumps(raw))
    with pytest.raises(ResultError, match="field 'kind' is 'verify'"):
        results.read("demo", root=tmp_path)


def test_quick_lives_apart_and_full_is_preferred(tmp_path):
    results.write("demo", {"answer": "quick"}, quick=True, root=tmp_path)
    assert results.read_preferred("demo", tmp_path).data["answer"] == "quick"
    results.write("demo", {"answer": "full"}, root=tmp_path)
    results.write("demo", {"answer": "quick again"}, quick=True, root=tmp_path)
    env = results.read_preferred("demo", tmp_path)
    assert (env.data["answer"], env.quick) == ("full", False)
    assert results.read("demo", tmp_path, quick=True).data["answer"] == "quick again"


def test_unknown_kind_is_an_input_error(tmp_path):
    with pytest.raises(ValueError, match="kind: expected one of"):
        results.result_path("nope", tmp_path)


def test_finite_or_none_and_dumps():
    assert results.finite_or_none(math.nan) is None and results.finite_or_none(2) == 2.0
    assert json.loads(results.dumps({"a": [1, None]})) == {"a": [1, None]}
    with pytest.raises(ValueError):
        results.dumps({"a": math.inf})


def test_check_writable(tmp_path):
    assert results.check_writable(tmp_path / "new" / "deeper", "--results") == tmp_path / "new" / "deeper"
    assert not (tmp_path / "new").exists()  # creates nothing
    (tmp_path / "f").write_text("x")
    with pytest.raises(ValueError, match=r"--results: .* is a file"):
        results.check_writable(tmp_path / "f" / "sub", "--results")


# --- every kind this project's producers write through the contract parses strictly -----------------


def _tiny_train_configs():
    pytest.importorskip("torch")
    from attnscale.experiments.training import early_warning, lm, logit_growth, scale_vs_dk

    return {
        "lm": lm.LMConfig(
            rules=("inverse_sqrt_dk", "unscaled"),
            d_ks=(8,),
            seeds=1,
            sgd_lrs=(0.3,),
            steps=4,
            batch=4,
            context=16,
            d_model=16,
            n_layers=1,
            log_every=2,
            eval_windows=2,
        ),
        # the unscaled rule at a large learning rate: non-finite figures are likely, and must not leak
        "scale-vs-dk": scale_vs_dk.ScaleVsDkConfig(
            rules=("inverse_sqrt_dk", "unscaled"),
            d_ks=(16,),
            seeds=1,
            sgd_lrs=(0.3,),
            steps=6,
            log_every=3,
            final_eval=32,
        ),
        "logit-growth": logit_growth.LogitGrowthConfig(
            lrs=(3e-1,), seeds=1, steps=4, warmup=1, batch=2, log_every=2, corpus_chars=4000
        ),
        "early-warning": early_warning.EarlyWarningConfig(
            arms=("plain", "qk_layernorm"),
            seeds=1,
            steps=4,
            warmup=1,
            tail=1,
            batch=2,
            corpus_chars=4000,
            grid_z=(6.0,),
            grid_window=(64,),
            grid_share=(0.5,),
        ),
    }


@pytest.fixture(scope="module")
def produced(tmp_path_factory):
    """One result of every kind written by verify and the training sweeps (tiny configurations)."""
    from attnscale.claims import VerifyConfig
    from attnscale.cli.verify import run_and_save
    from attnscale.experiments.training.registry import kind_of, run_experiment

    root = tmp_path_factory.mktemp("produced")
    envs = {"verify": run_and_save(VerifyConfig(quick=True, groups=(1, 8)), root)[1]}
    for name, config in _tiny_train_configs().items():
        envs[kind_of(name)] = run_experiment(name, config, root, quick=True)
    return root, envs


@pytest.mark.slow
def test_every_produced_kind_is_strict_json_and_reads_back(produced):
    root, envs = produced
    from attnscale.experiments.training.registry import EXPERIMENTS, kind_of

    assert set(envs) == {"verify"} | {kind_of(n) for n in EXPERIMENTS}
    assert set(envs) <= set(results.KINDS)
    for kind, env in envs.items():
        raw = strict_load(env.path)  # NaN / Infinity would raise here
        assert raw["kind"] == kind and raw["quick"] is True
        back = results.read(kind, root, quick=True)
        assert back.data == raw["data"]
        # every cell cache a sweep wrote is strict JSON too
        for cell in results.cells_dir(kind, root).glob("*.json") if kind != "verify" else ():
            strict_load(cell)


def test_nonfinite_figures_become_null_with_where_and_what(tmp_path, monkeypatch):
    """A producer's NaN/inf (a diverged run) is written as null, and the reason stands beside it."""
    from attnscale.experiments.training import registry as sweeps

    def fake_train(cell):
        return {"loss": [2.0, float("nan")], "peak": float("inf")}

    fake = sweeps.Experiment(
        "fake",
        sweeps.EXPERIMENTS["scale-vs-dk"].config_type,
        fake_train,
        lambda config, cells, done: {"best": float("-inf"), "table": [], "verdicts": []},
        "a fake sweep",
    )
    monkeypatch.setitem(sweeps.EXPERIMENTS, "scale-vs-dk", fake)
    config = _tiny_train_configs()["scale-vs-dk"]
    env = sweeps.run_experiment("scale-vs-dk", config, tmp_path, quick=False)
    raw = strict_load(env.path)
    assert raw["data"]["cells"][0]["result"] == {"loss": [2.0, None], "peak": None}
    assert raw["data"]["analysis"] == {"best": None, "table": [], "verdicts": []}
    assert raw["data"]["nonfinite"]["data.cells[0].result.loss[1]"] == "NaN"
    assert raw["data"]["nonfinite"]["data.cells[0].result.peak"] == "Infinity"
    assert raw["data"]["nonfinite"]["data.analysis.best"] == "-Infinity"
    # the cell cache keeps them exactly (a divergence stays one on resume), in strict JSON
    cached = sorted(results.cells_dir("train/scale-vs-dk", tmp_path).glob("*.json"))
    assert cached and all(strict_load(p) for p in cached)
    from attnscale.store import read_json

    loss = read_json(cached[0])["result"]["loss"]
    assert loss[0] == 2.0 and math.isnan(loss[1])


@pytest.mark.slow
def test_a_renamed_analysis_key_fails_at_read_time_naming_file_and_field(produced, tmp_path):
    import shutil

    root, envs = produced
    copy = tmp_path / "copy"
    shutil.copytree(root, copy)
    path = results.result_path("train/scale-vs-dk", copy, quick=True)
    raw = strict_load(path)
    raw["data"]["analysis"]["tables"] = raw["data"]["analysis"].pop("table")
    path.write_text(json.dumps(raw))
    with pytest.raises(ResultError) as err:
        results.read_preferred("train/scale-vs-dk", copy)
    assert str(path) in str(err.value) and "data.analysis.table" in str(err.value)


def test_cell_seconds_reads_each_cells_own_time_and_says_none_where_none_is_recorded():
    cells = [
        {"seconds": {"wall": 10.0, "cpu": 8.0, "workers": 2}},
        {"seconds": {"wall": 30.0, "cpu": 20.0, "workers": 2}},
        {"result": {}},
        {"seconds": None},
        {"seconds": {"wall": "soon"}},
    ]
    t = results.cell_seconds({"cells": cells})
    assert t.each == (10.0, 30.0, None, None, None) and (t.cells, t.timed) == (5, 2)
    assert (t.wall_s, t.cpu_s, t.wall_s_max, t.workers) == (40.0, 28.0, 30.0, 2)
    assert t.summary() == {"cells": 5, "timed": 2, "wall": 40.0, "cpu": 28.0, "wall_max": 30.0, "workers": 2}
    mixed = results.cell_seconds({"cells": [*cells[:1], {"seconds": {"wall": 1.0, "workers": 1}}]})
    assert mixed.workers is None and mixed.cpu_s == 8.0  # ran 2 and 1 at a time: no one number
    assert results.cell_seconds({"answer": 1}) is None  # not a sweep
    env = results.Envelope(kind="demo", data={"cells": cells[:2], "wall_s": 0.1})
    assert results.recorded_seconds(env) == 40.0  # every cell timed: theirs, not the last run's
    assert results.recorded_seconds(results.Envelope(kind="demo", data={"cells": cells, "wall_s": 0.1})) == 0.1
