"""The reference results shipped in src/attnscale/reference_results: small, the tool's own envelopes naming their
CPU, not stale against this code, and reproduced by it (stable training cells' first logged steps,
the MiniLM probe's heads, MiniLM's rescale points: attnscale.experiments.reproduction), exactly on the
reference's own arithmetic and within the calibrated tolerance elsewhere, here and under a second
arithmetic (test_reference_second_arithmetic.py). Each check is also shown to fail on a temporary copy: a changed default makes a result
stale, a number altered by 1 part in 10³ fails reproduction."""

from __future__ import annotations

import dataclasses
import gzip
import json
import shutil
from pathlib import Path

import pytest

from attnscale import provenance, results
from attnscale.experiments import references
from attnscale.experiments import reproduction

REFERENCE = results.shipped_reference()


@pytest.fixture
def shipped(monkeypatch):
    """The repository's reference results, as the report reads them."""
    monkeypatch.setenv(results.REFERENCE_ENV, str(REFERENCE))
    return REFERENCE


def _present(kinds):
    return [k for k in kinds if results.stored_path(results.result_path(k, REFERENCE)) is not None]


def test_the_folder_holds_only_full_envelopes_of_known_kinds_in_at_most_5_mb(shipped):
    files = [p for p in shipped.rglob("*") if p.is_file()]
    assert sum(p.stat().st_size for p in files) <= 5 * 2**20
    files.remove(shipped / reproduction.CALIBRATION_FILE)  # the reproduction checks' calibration
    kinds = {p.parent.relative_to(shipped).as_posix() for p in files}
    assert kinds <= set(results.KINDS), kinds - set(results.KINDS)
    assert all(p.name in ("result.json", "result.json.gz") for p in files)  # no cell caches
    # every kind the report reads ships
    assert set(results.KINDS) - {"demo"} <= kinds, set(results.KINDS) - {"demo"} - kinds
    for kind in kinds:
        env = results.read_reference(kind)
        assert env.origin == "reference" and not env.quick and env.environment.get("platform")
        cpu = results.computed_on(env)["cpu"]  # where its figures were computed (a rebuild: its cells')
        # names its CPU, and torch's instruction set where torch computed it (verify's NumPy and
        # sympy leave torch unimported: provenance.cpu() then records None, not a guess)
        assert cpu["model"] and (cpu["capability"] or kind == "verify"), kind


@pytest.mark.parametrize("kind", _present(references.PRODUCERS))
def test_no_reference_result_is_stale(shipped, kind):
    reasons = references.stale_reasons(results.read_reference(kind))
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
    from attnscale.experiments.training import scale_vs_dk, registry as sweeps

    monkeypatch.setenv(results.REFERENCE_ENV, str(_copy("train/scale-vs-dk", tmp_path)))
    env = results.read_reference("train/scale-vs-dk")
    assert references.stale_reasons(env) == []

    @dataclasses.dataclass(frozen=True)
    class Changed(scale_vs_dk.ScaleVsDkConfig):
        adam_lr: float = 1e-3  # a deliberately changed default

    changed = dataclasses.replace(sweeps.EXPERIMENTS["scale-vs-dk"], config_type=Changed)
    monkeypatch.setitem(sweeps.EXPERIMENTS, "scale-vs-dk", changed)
    reasons = references.stale_reasons(env)
    assert reasons[0] == "config.adam_lr: 0.003 in the result, 0.001 now"
    assert str(env.path) in reasons[-1] and "attnscale train scale-vs-dk --results" in reasons[-1]


@pytest.mark.slow
@pytest.mark.parametrize("kind", _present(reproduction.CHECKED))
def test_references_reproduce(shipped, kind):
    """The calibrated items, exactly where this CPU is the reference's, else within the tolerance."""
    env = results.read_reference(kind)
    found = reproduction.reproduce(env)
    assert len(found) >= 2 and not any(found.values()), {k: v[:5] for k, v in found.items() if v}


def test_the_calibration_covers_every_checked_reference_with_stable_items(shipped):
    calibration = reproduction.read_calibration()
    for kind in _present(reproduction.CHECKED):
        entry, env = calibration[kind], results.read_reference(kind)
        assert entry["reference_created"] == env.created, (
            f"{kind} was regenerated after its calibration: python -m attnscale.experiments.reproduction {kind}"
        )
        assert len(entry["items"]) >= 2, kind
        if kind.startswith("train/"):
            assert all(reproduction.instability(env.data["cells"][i]["result"]) is None for i in entry["items"])
    # the chaotic last cells of two grids are left out, each with its reason
    assert calibration["train/lm"]["left_out"]["143"].startswith("it diverged")
    assert calibration["train/logit-growth"]["left_out"]["17"].startswith("QK-clip rescaled heads")


def test_instability_reads_divergence_clipping_and_saturation_from_a_log():
    calm = {"diverged": None, "log": [{"step": 0, "loss": 1.0, "saturated_frac": 0.0}, {"step": 5, "loss": 0.9}]}
    assert reproduction.instability(calm) is None
    assert reproduction.instability({**calm, "diverged": {"step": 9}}).startswith("it diverged")
    clipped = {"log": calm["log"] + [{"step": 10, "clipped_heads": 1}]}
    assert reproduction.instability(clipped).startswith("QK-clip")
    saturated = {"log": [{"step": 0, "heads": [{"saturated_frac": [0.0, 0.25]}]}, {"step": 5}]}
    assert reproduction.instability(saturated).startswith("saturated rows")
    late = {"log": [{"step": 0}, {"step": 5}, {"step": 10, "saturated_frac": 0.5}]}
    assert reproduction.instability(late) is None  # only the compared steps count for saturation


def test_the_tolerance_is_exact_on_the_references_arithmetic_and_calibrated_elsewhere(shipped, monkeypatch):
    env = results.read_reference("train/lm")
    here = {**results.computed_on(env)["cpu"]}
    monkeypatch.setattr(provenance, "cpu", lambda: here)
    assert reproduction.tolerance_for(env, 0) is reproduction.EXACT
    here["capability"] = "AVX2"
    tolerance = reproduction.tolerance_for(env, 0)
    assert not tolerance.exact and tolerance.spread["log[1].train_loss"] > 0
    assert tolerance.allows(3, 4, "n") and not tolerance.allows(3, 5, "n")  # counts within ±1
    assert tolerance.allows(1.0 + 5e-5, 1.0, "x") and not tolerance.allows(1.001, 1.0, "x")
    probe = results.read_reference("probe/minilm")  # not bit for bit even here: never exact
    assert not reproduction.tolerance_for(probe, 0, {"probe/minilm": {"bit_exact_here": False}}).exact


def test_a_reference_made_with_another_kernel_arithmetic_is_compared_within_its_tolerance(shipped, monkeypatch):
    """The fused kernel's rounding is part of the arithmetic: on the reference's own CPU, a kernel whose
    sums run otherwise (provenance.KERNEL_ARITHMETIC) is held to the calibrated tolerance, not to its bits."""
    env = results.read_reference("train/lm")
    made = results.computed_on(env)["cpu"]
    assert "kernel" not in made  # made before the field: kernel arithmetic 1
    monkeypatch.setattr(provenance, "cpu", lambda: {**made, "kernel": 1})
    assert reproduction.tolerance_for(env, 0) is reproduction.EXACT
    monkeypatch.setattr(provenance, "cpu", lambda: {**made, "kernel": provenance.KERNEL_ARITHMETIC})
    assert provenance.KERNEL_ARITHMETIC != 1 and not reproduction.tolerance_for(env, 0).exact
    assert provenance.same_arithmetic({**made, "kernel": 2}, {**made, "kernel": 2})


def _alter(kind: str, item, path: str):
    """An edit of a raw envelope multiplying the shipped figure at ``path`` of ``item`` by 1.001."""

    def edit(raw):
        data = raw["data"]
        node = (
            data["cells"][item]["result"]
            if kind.startswith("train/")
            else data["heads"][item]
            if kind.startswith("probe/")
            else next(r for r in data["alphas"] if r["alpha"] == item)
        )
        *parents, last = path.replace("]", "").replace("[", ".").split(".")
        for part in parents:
            node = node[int(part)] if isinstance(node, list) else node[part]
        key = int(last) if isinstance(node, list) else last
        node[key] *= 1.001

    return edit


@pytest.mark.slow
@pytest.mark.parametrize(
    "kind, item, path",
    [
        ("train/scale-vs-dk", 0, "log[1].grad_wq"),
        ("train/lm", 0, "log[1].train_loss"),
        ("probe/minilm", 0, "part_correlation"),
        ("rescale/minilm", 1.0, "entropy_per_layer[0]"),
    ],
)
@pytest.mark.parametrize("exact", [True, False])
def test_a_number_altered_by_one_part_in_a_thousand_fails_reproduction(
    shipped, tmp_path, monkeypatch, kind, item, path, exact
):
    calibration = reproduction.read_calibration()
    monkeypatch.setenv(results.REFERENCE_ENV, str(_copy(kind, tmp_path, _alter(kind, item, path))))
    (tmp_path / reproduction.CALIBRATION_FILE).write_bytes(gzip.compress(json.dumps(calibration).encode()))
    env = results.read_reference(kind)
    if not exact:  # as on another CPU: the calibrated tolerance
        monkeypatch.setattr(provenance, "cpu", lambda: {**results.computed_on(env)["cpu"], "model": "another CPU"})
    elif not calibration[kind]["bit_exact_here"]:
        pytest.skip(f"{kind} is not bit for bit reproducible, so never compared exactly")
    found = reproduction.reproduce(env, items=[item])
    assert [d.split(":")[0] for d in found[item]] == [path], found


def test_reading_prefers_own_full_then_reference_then_own_quick(tmp_path, monkeypatch):
    ref, own = tmp_path / "ref", tmp_path / "own"
    ref.mkdir()  # a reference folder named by the variable must exist (tests/cli/test_bad_state.py)
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
