"""The reference results shipped in src/attnscale/reference_results: small, the tool's own envelopes, not stale
against this code, and reproduced by it (a few training cells' first logged steps, two heads of the
MiniLM probe, MiniLM's α = 1 rescale point) within attnscale.reference.RTOL / ATOL. Each check is also shown to fail on a
temporary copy: a changed default makes a result stale, an altered number fails reproduction."""

from __future__ import annotations

import dataclasses
import gzip
import json
import shutil
from pathlib import Path

import pytest

from attnscale import reference, results

REFERENCE = results.shipped_reference()
TRAIN = [k for k in results.KINDS if k.startswith("train/")]


@pytest.fixture
def shipped(monkeypatch):
    """The repository's reference results, as the report reads them."""
    monkeypatch.setenv(results.REFERENCE_ENV, str(REFERENCE))
    return REFERENCE


def _present(kinds):
    return [k for k in kinds if results.stored_path(results.result_path(k, REFERENCE)) is not None]


def test_the_folder_holds_only_full_envelopes_of_known_kinds_in_at_most_5_mb(shipped):
    files = [p for p in shipped.rglob("*") if p.is_file()]
    assert sum(p.stat().st_size for p in files) <= 5 * 2 ** 20
    kinds = {p.parent.relative_to(shipped).as_posix() for p in files}
    assert kinds <= set(results.KINDS), kinds - set(results.KINDS)
    assert all(p.name in ("result.json", "result.json.gz") for p in files)   # no cell caches
    # every kind the report reads ships
    assert set(results.KINDS) - {"demo"} <= kinds, set(results.KINDS) - {"demo"} - kinds
    for kind in kinds:
        env = results.read_reference(kind)
        assert env.origin == "reference" and not env.quick and env.environment.get("platform")


@pytest.mark.parametrize("kind", _present(reference.PRODUCERS))
def test_no_reference_result_is_stale(shipped, kind):
    reasons = reference.stale_reasons(results.read_reference(kind))
    assert not reasons, "\n".join(reasons)


def _copy(kind: str, to: Path, edit=None) -> Path:
    """The reference result of ``kind`` copied into the reference folder ``to`` (``edit`` applied to its
    envelope, as a dict)."""
    source = results.stored_path(results.result_path(kind, REFERENCE))
    target = results.result_path(kind, to).with_suffix(".json.gz")
    target.parent.mkdir(parents=True)
    if edit is None:
        shutil.copy(source, target)
    else:
        raw = json.loads(gzip.decompress(source.read_bytes()) if source.suffix == ".gz" else source.read_bytes())
        edit(raw)
        target.write_bytes(gzip.compress(json.dumps(raw).encode(), compresslevel=1))
    return to


def test_a_changed_default_makes_a_reference_stale_naming_it_and_its_command(tmp_path, monkeypatch):
    from attnscale.experiments import scale_vs_dk, sweeps

    monkeypatch.setenv(results.REFERENCE_ENV, str(_copy("train/scale-vs-dk", tmp_path)))
    env = results.read_reference("train/scale-vs-dk")
    assert reference.stale_reasons(env) == []

    @dataclasses.dataclass(frozen=True)
    class Changed(scale_vs_dk.ScaleVsDkConfig):
        adam_lr: float = 1e-3                   # a deliberately changed default

    changed = dataclasses.replace(sweeps.EXPERIMENTS["scale-vs-dk"], config_type=Changed)
    monkeypatch.setitem(sweeps.EXPERIMENTS, "scale-vs-dk", changed)
    reasons = reference.stale_reasons(env)
    assert reasons[0] == "config.adam_lr: 0.003 in the result, 0.001 now"
    assert str(env.path) in reasons[-1] and "attnscale train scale-vs-dk --results" in reasons[-1]


@pytest.mark.parametrize("kind", _present(TRAIN))
def test_training_references_reproduce_their_first_logged_steps(shipped, kind):
    env = results.read_reference(kind)
    found = reference.reproduce_cells(env)
    assert len(found) >= 2 and not any(found.values()), found


def test_an_altered_reference_number_fails_reproduction(tmp_path, monkeypatch):
    def alter(raw):
        raw["data"]["cells"][0]["result"]["log"][1]["grad_wq"] *= 1.001

    monkeypatch.setenv(results.REFERENCE_ENV, str(_copy("train/scale-vs-dk", tmp_path, alter)))
    env = results.read_reference("train/scale-vs-dk")
    found = reference.reproduce_cells(env, indices=[0])
    assert len(found[0]) == 1 and found[0][0].startswith("log[1].grad_wq: ")


def _numbers(d: dict) -> dict:
    return {k: v for k, v in d.items() if isinstance(v, (int, float, list, str, bool)) or v is None}


def test_probe_heads_reproduce(shipped):
    from attnscale.experiments import pretrained
    from attnscale.experiments.probe_run import builtin_sentences, run_probe

    env = results.read_reference("probe/minilm")
    data = run_probe(pretrained.load_model("minilm"), builtin_sentences())
    for i in (0, len(data["heads"]) - 1):
        assert reference.compare(_numbers(data["heads"][i]), env.data["heads"][i], f"heads[{i}]",
                                 prefix_lists=False) == []


def test_a_rescale_point_reproduces(shipped):
    """MiniLM's α = 1 point (SmolLM2's would cost half a minute of loading its 4-bit weights)."""
    from attnscale.experiments import pretrained
    from attnscale.experiments.probe_run import builtin_sentences
    from attnscale.experiments.rescale import RescaleConfig, run_rescale

    env = results.read_reference("rescale/minilm")
    data = run_rescale(pretrained.load_model("minilm"), RescaleConfig(alphas=(1.0,), include_unscaled=False),
                       texts=builtin_sentences(), source="built-in sentences")
    shipped_row = next(r for r in env.data["alphas"] if r["alpha"] == 1.0)
    assert reference.compare(data["alphas"][0], shipped_row, "alphas[α=1]", prefix_lists=False) == []


def test_reading_prefers_own_full_then_reference_then_own_quick(tmp_path, monkeypatch):
    ref, own = tmp_path / "ref", tmp_path / "own"
    monkeypatch.setenv(results.REFERENCE_ENV, str(ref))
    results.write("demo", {"answer": 1}, seed=0, quick=True, root=own)
    assert results.read_preferred("demo", own).origin == "quick"
    shipped = results.write("demo", {"answer": 2}, seed=0, root=tmp_path / "made")
    (ref / "demo").mkdir(parents=True)
    (ref / "demo" / "result.json.gz").write_bytes(gzip.compress(shipped.path.read_bytes()))
    env = results.read_preferred("demo", own)
    assert (env.origin, env.data["answer"], env.path.name) == ("reference", 2, "result.json.gz")
    results.write("demo", {"answer": 3}, seed=0, root=own)
    mine = results.read_preferred("demo", own)
    assert (mine.origin, mine.data["answer"]) == ("full", 3)
    monkeypatch.setenv(results.REFERENCE_ENV, "")
    with pytest.raises(results.ResultMissing):
        results.read_reference("demo")
