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
    assert not (tmp_path / "demo").exists()          # nothing half-written, nothing at all


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
    assert results.check_writable(tmp_path / "new" / "deeper") == tmp_path / "new" / "deeper"
    assert not (tmp_path / "new").exists()           # creates nothing
    (tmp_path / "f").write_text("x")
    with pytest.raises(ValueError, match="is a file"):
        results.check_writable(tmp_path / "f" / "sub")
