"""A sweep's result rebuilt from the cells an earlier result holds (``attnscale train --cells-from FILE``):
nothing recomputed, the same analysis, each cell's time kept; a cell whose configuration differs is never
taken, a file of another kind is refused naming the argument, and the times older code kept inside a
cell's result move to the one field."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest

pytest.importorskip("torch")

from attnscale import results  # noqa: E402
from attnscale.cli import main  # noqa: E402
from attnscale.errors import InputError  # noqa: E402
from attnscale.experiments.sweeps.runner import SerialBackend  # noqa: E402
from attnscale.experiments.training import scale_vs_dk  # noqa: E402
from attnscale.experiments.training.registry import run_experiment  # noqa: E402
from attnscale.store import ResultCache  # noqa: E402
from helpers.sweeps import CountingBackend  # noqa: E402

TINY = scale_vs_dk.ScaleVsDkConfig(
    rules=("inverse_sqrt_dk", "unscaled"), d_ks=(16,), seeds=1, sgd_lrs=(0.3, 2.7), steps=20, log_every=5, final_eval=64
)
KIND = "train/scale-vs-dk"


@pytest.fixture(scope="module")
def earlier(tmp_path_factory):
    return run_experiment("scale-vs-dk", TINY, tmp_path_factory.mktemp("earlier"), SerialBackend())


def test_a_result_rebuilt_from_its_own_cells_computes_none_and_is_the_same(earlier, tmp_path):
    backend = CountingBackend()
    rebuilt = run_experiment("scale-vs-dk", TINY, tmp_path, backend, cells_from=results.read(KIND, path=earlier.path))
    assert backend.computed == 0
    assert rebuilt.data["analysis"] == earlier.data["analysis"]
    assert rebuilt.data["cells"] == earlier.data["cells"]  # results and each cell's time alike
    assert rebuilt.data["cell_seconds"] == earlier.data["cell_seconds"]
    n = len(TINY.cells())
    assert rebuilt.data["cells_cached"] == n and rebuilt.data["cells_from"]["cells"] == n
    assert rebuilt.data["cells_from"]["created"] == earlier.created
    # the cells went into the cache as the run that computed them left them: a rerun reads them there
    again = CountingBackend()
    run_experiment("scale-vs-dk", TINY, tmp_path, again)
    assert again.computed == 0


def test_a_figure_written_as_null_is_taken_as_the_non_finite_one_it_was(earlier, tmp_path):
    """A result writes NaN as null with its place in ``nonfinite``; the cache keeps NaN itself, so the
    cell taken from the file is the one its run computed, and the rebuilt result says it again."""
    data = json.loads(json.dumps(earlier.data))
    last = len(data["cells"][1]["result"]["loss"]) - 1
    data["cells"][1]["result"]["loss"][last] = None
    data["nonfinite"] = {f"data.cells[1].result.loss[{last}]": "NaN"}
    rebuilt = run_experiment(
        "scale-vs-dk", TINY, tmp_path, CountingBackend(), cells_from=dataclasses.replace(earlier, data=data)
    )
    assert set(data["nonfinite"]) <= set(rebuilt.data["nonfinite"])
    cached = ResultCache(results.cells_dir(KIND, tmp_path)).get("scale-vs-dk", data["cells"][1]["cell"])
    assert math.isnan(cached["loss"][last])
    with pytest.raises(ValueError, match="does not name a null figure"):
        results.restored_nonfinite({"loss": [1.0]}, {"data.loss[0]": "NaN"})


def test_only_cells_whose_configuration_equals_a_planned_one_are_taken(earlier, tmp_path):
    data = json.loads(json.dumps(earlier.data))
    data["cells"][0]["cell"]["lr"] *= 1.5  # another cell than the planned one: computed
    source = dataclasses.replace(earlier, data=data)
    wider = dataclasses.replace(TINY, rules=(*TINY.rules, "softcap_unscaled"))  # more cells than the file's
    backend = CountingBackend()
    rebuilt = run_experiment("scale-vs-dk", wider, tmp_path, backend, cells_from=source)
    assert backend.computed == len(wider.cells()) - len(TINY.cells()) + 1
    assert rebuilt.data["cells_from"]["cells"] == len(TINY.cells()) - 1


def test_the_times_older_code_kept_in_a_cell_move_to_the_one_field(earlier, tmp_path):
    """scale-vs-dk's cells kept {"timing": {"wall_s", "cpu_s"}} in their result; logit-growth's kept
    none: read from an older file, the first have their time (workers unknown), the others none."""
    data = json.loads(json.dumps(earlier.data))
    for i, entry in enumerate(data["cells"]):
        seconds = entry.pop("seconds")
        if i % 2 == 0:
            entry["result"]["timing"] = {"wall_s": seconds["wall"], "cpu_s": seconds["cpu"]}
    rebuilt = run_experiment(
        "scale-vs-dk", TINY, tmp_path, CountingBackend(), cells_from=dataclasses.replace(earlier, data=data)
    )
    for i, (entry, before) in enumerate(zip(rebuilt.data["cells"], earlier.data["cells"])):
        assert "timing" not in entry["result"] and entry["result"] == before["result"]
        if i % 2 == 0:
            assert entry["seconds"] == {**before["seconds"], "workers": None}
        else:
            assert entry["seconds"] is None
    timing = results.cell_seconds(rebuilt)
    assert timing.timed == (timing.cells + 1) // 2 and timing.workers is None
    assert results.recorded_seconds(rebuilt) == rebuilt.data["wall_s"]  # not every cell timed: the run's


def test_a_file_of_another_kind_is_refused_naming_the_argument(earlier, tmp_path, capsys):
    other = dataclasses.replace(earlier, kind="train/lm")
    with pytest.raises(InputError, match="cells_from: .* is a train/lm result, expected a train/scale-vs-dk one"):
        run_experiment("scale-vs-dk", TINY, tmp_path, cells_from=other)
    assert main(["train", "lm", "--quick", "--results", str(tmp_path), "--cells-from", str(earlier.path)]) == 2
    err = capsys.readouterr().err
    assert "--cells-from: " in err and "field 'kind' is 'train/scale-vs-dk', expected 'train/lm'" in err
    assert (
        main(["train", "lm", "--quick", "--results", str(tmp_path), "--cells-from", str(tmp_path / "none.json")]) == 2
    )
    assert "--cells-from: " in capsys.readouterr().err
    assert not (tmp_path / "train").exists()  # refused before any work
