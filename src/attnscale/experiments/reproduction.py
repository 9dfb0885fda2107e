"""Recomputing parts of a shipped reference result and comparing them with what it holds, in a way
that tests the code and not the CPU.

A float32 computation reproduces bit for bit on the CPU that made it, and differs in the last bits
on another CPU type (other vector widths, other BLAS kernels). In a stable computation that
difference stays in the last digits; in a chaotic one (a high learning rate, a clipped run, a run
about to diverge) it grows to a percent within fifty updates, and no tolerance can hold it. So:

* **Items by stability, not by position.** The items a check recomputes (a training sweep's cells,
  the probe's heads, the rescale's α points) are chosen among those whose shipped logs show no
  divergence, clipping or saturation (:func:`instability`), and then among those whose figures
  stayed put under a second arithmetic (:data:`SECOND_ARITHMETIC`: torch's, oneDNN's and MKL's
  kernels capped at AVX2, which changes every vectorised sum, as another CPU type does).
* **A calibrated tolerance.** :func:`calibrate` (``python -m attnscale.experiments.reproduction``,
  on the machine that made the references) recomputes the candidates here and under the second
  arithmetic and stores, per figure, the largest difference it saw from the shipped number (the
  *spread*) in ``reproduction.json.gz`` beside the references. A recomputed figure then passes when
  it is within ``RTOL·|shipped| + ATOL + MARGIN·spread`` (:class:`Tolerance`); an integer count within
  ±1; anything else exactly. A candidate is kept only if ``MARGIN·spread`` stays under
  ``RTOL·|shipped| + ATOL`` for every figure, so that a shipped number altered by 1 part in 10³ fails.
* **Exact where the arithmetic is the same.** When this process's CPU record
  (:func:`attnscale.provenance.cpu`) matches the one the reference recorded (model, instruction set,
  BLAS, threads, instruction flags) and calibration found the kind reproducible bit for bit there,
  every figure must be equal to the bit.

    >>> compare({"log": [{"loss": 1.0}]}, {"log": [{"loss": 1.00001}, {"loss": 0.5}]})
    []
    >>> compare({"log": [{"loss": 1.0}]}, {"log": [{"loss": 1.1}]})
    ['log[0].loss: 1.0 here, 1.1 shipped']
    >>> compare({"n": [3]}, {"n": [4]}, prefix_lists=False), compare({"n": [3]}, {"n": [4]}, tolerance=EXACT)
    ([], ['n[0]: 3 here, 4 shipped'])
"""

from __future__ import annotations

import gzip
import json
import math
import os
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from attnscale import provenance, results
from attnscale.store import to_jsonable, write_bytes_atomic

__all__ = [
    "RTOL",
    "ATOL",
    "MARGIN",
    "SECOND_ARITHMETIC",
    "CHECKED",
    "Tolerance",
    "EXACT",
    "compare",
    "instability",
    "logged_steps",
    "spread_picks",
    "recompute",
    "reproduce",
    "calibrate",
    "calibration_path",
    "read_calibration",
    "tolerance_for",
    "backfill_cpu",
]

#: Relative and absolute tolerance of a recomputed figure on another arithmetic, before the measured
#: spread is added. 1 part in 10⁴: ten times under the smallest alteration the tests must catch.
RTOL = 1e-4
ATOL = 1e-6
#: How many times the spread measured under the second arithmetic a figure may differ elsewhere.
MARGIN = 10.0
#: The second arithmetic: torch's and oneDNN's kernels on narrower vectors (what a CPU without
#: AVX-512 runs) and MKL's GEMMs on its CPU-independent code path (other blocking, other rounding:
#: on an AMD EPYC, MKL_ENABLE_INSTRUCTIONS alone changes nothing). Each is read once, when torch,
#: oneDNN or MKL loads: so a fresh process.
SECOND_ARITHMETIC = {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2", "MKL_CBWR": "COMPATIBLE"}
#: The reference kinds a check recomputes, and the candidates calibration tries in each.
CHECKED = ("train/scale-vs-dk", "train/logit-growth", "train/lm", "probe/minilm", "rescale/minilm")
CANDIDATES = 8  # training cells tried per sweep (each costs its first logged steps, twice)
KEEP = 3  # training cells kept per sweep, spread over the grid
ENTRIES = 2  # logged steps recomputed per training cell: step 0 and one early one
RESCALE_ALPHAS = (1.0, 8.0)
CALIBRATION_FILE = "reproduction.json.gz"


@dataclass(frozen=True)
class Tolerance:
    """How a recomputed figure may differ from the shipped one: exactly (``exact``), or within
    ``rtol·|shipped| + atol + margin·spread[path]`` (an int within ``count_slack``)."""

    exact: bool = False
    rtol: float = RTOL
    atol: float = ATOL
    margin: float = MARGIN
    count_slack: int = 1
    spread: Mapping[str, float] = field(default_factory=dict)

    def allows(self, here: Any, shipped: Any, path: str) -> bool:
        if (
            isinstance(here, bool)
            or isinstance(shipped, bool)
            or not all(isinstance(x, (int, float)) for x in (here, shipped))
        ):
            return here == shipped
        if self.exact:
            return here == shipped or (here != here and shipped != shipped)
        if isinstance(here, int) and isinstance(shipped, int):
            return abs(here - shipped) <= self.count_slack
        if not (math.isfinite(here) and math.isfinite(shipped)):
            return here == shipped or (here != here and shipped != shipped)
        bound = self.atol + self.rtol * abs(shipped) + self.margin * self.spread.get(path, 0.0)
        return abs(here - shipped) <= bound


EXACT = Tolerance(exact=True)


def compare(
    here: Any, shipped: Any, at: str = "", prefix_lists: bool = True, tolerance: Tolerance = Tolerance()
) -> list[str]:
    """Where the recomputed ``here`` differs from the ``shipped`` data beyond ``tolerance`` (each
    difference named by its path). With ``prefix_lists``, the lists of ``here`` are compared with the
    first entries of the shipped ones (a run stopped early logs a prefix of the full run's log) and
    its other entries are not compared: a stopped run's final figures are not the full run's."""
    if isinstance(here, dict) and isinstance(shipped, dict):
        out = []
        for key, value in here.items():
            if prefix_lists and not isinstance(value, (dict, list)):
                continue
            out += compare(value, shipped.get(key), f"{at}.{key}" if at else key, prefix_lists, tolerance)
        return out
    if isinstance(here, list) and isinstance(shipped, list):
        if len(here) > len(shipped) or (not prefix_lists and len(here) != len(shipped)):
            return [f"{at}: {len(here)} entries here, {len(shipped)} shipped"]
        out = []
        for i, value in enumerate(here):
            out += compare(value, shipped[i], f"{at}[{i}]", False, tolerance)
        return out
    if isinstance(here, (dict, list)) or isinstance(shipped, (dict, list)):
        return [f"{at}: {type(here).__name__} here, {type(shipped).__name__} shipped"]
    return [] if tolerance.allows(here, shipped, at) else [f"{at}: {here!r} here, {shipped!r} shipped"]


def _leaves(here: Any, shipped: Any, at: str = "", prefix_lists: bool = True):
    """(path, here, shipped) of every pair of numbers :func:`compare` would compare."""
    if isinstance(here, dict) and isinstance(shipped, dict):
        for key, value in here.items():
            if not (prefix_lists and not isinstance(value, (dict, list))):
                yield from _leaves(value, shipped.get(key), f"{at}.{key}" if at else key, prefix_lists)
    elif isinstance(here, list) and isinstance(shipped, list):
        for i, (a, b) in enumerate(zip(here, shipped)):
            yield from _leaves(a, b, f"{at}[{i}]", False)
    elif all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in (here, shipped)):
        yield at, here, shipped


# --- which items are a test of the code -------------------------------------------------------------

#: Keys of a cell result or its log whose true (non-zero) value marks a run no tolerance can follow
#: across CPUs: it diverged, or clipping changed its course, anywhere in the run.
RUN_MARKERS = {
    "diverged": "it diverged",
    "diverged_at": "it diverged",
    "clipped_heads": "QK-clip rescaled heads",
    "grad_zero_ever": "a gradient vanished",
}
#: Keys whose non-zero value in the compared steps marks a saturated softmax (its gradient is a
#: difference of nearly equal terms).
STEP_MARKERS = {"saturated_frac": "saturated rows", "grad_zero": "a vanished gradient"}


def _marked(value: Any) -> bool:
    if isinstance(value, (list, tuple)):
        return any(_marked(v) for v in value)
    if isinstance(value, dict):
        return any(_marked(v) for v in value.values())
    return bool(value) and not (isinstance(value, float) and value != value)


def _find(data: Any, markers: Mapping[str, str]) -> str | None:
    if isinstance(data, dict):
        for key, value in data.items():
            if key in markers and _marked(value):
                return f"{markers[key]} ({key} = {json.dumps(value)[:60]})"
            found = _find(value, markers)
            if found:
                return found
    elif isinstance(data, list):
        for value in data:
            found = _find(value, markers)
            if found:
                return found
    return None


def logged_steps(result: dict) -> list[int]:
    """The steps of a cell result's step log: the first list in it whose entries carry a ``step``."""
    return [int(e["step"]) for e in _log(result)]


def _log(result: dict) -> list[dict]:
    for value in result.values():
        if isinstance(value, list) and value and all(isinstance(e, dict) and "step" in e for e in value):
            return value
    raise ValueError(f"no step log (a list of entries with a 'step') among the cell result's keys {sorted(result)}")


def instability(result: dict, entries: int = ENTRIES) -> str | None:
    """Why a training cell's shipped ``result`` is no test of the code across CPUs, or None: it
    diverged or was clipped anywhere in its run, or its first ``entries`` logged steps show saturation
    or a non-finite figure."""
    run = _find({k: v for k, v in result.items() if k in RUN_MARKERS}, RUN_MARKERS) or _find(_log(result), RUN_MARKERS)
    if run:
        return run
    early = _log(result)[:entries]
    if any(isinstance(x, float) and not math.isfinite(x) for _, x, _ in _leaves(early, early, prefix_lists=False)):
        return "a non-finite figure in its first logged steps"
    return _find(early, STEP_MARKERS)


def spread_picks(items: list, count: int) -> list:
    """``count`` of ``items`` spread over them (the first, the last, between), in order."""
    n = len(items)
    if n <= count:
        return list(items)
    return [items[i] for i in sorted({round(j * (n - 1) / max(count - 1, 1)) for j in range(count)})]


# --- recomputing ------------------------------------------------------------------------------------


def _training_items(env: results.Envelope, items: list[int]) -> dict[int, dict]:
    from attnscale.experiments.sweeps.process_settings import process_settings, restore_process_settings
    from attnscale.experiments.training.registry import EXPERIMENTS, make_config

    name = env.kind.split("/", 1)[1]
    cells, shipped = make_config(name).cells(), env.data["cells"]
    if len(cells) != len(shipped):
        raise ValueError(f"{env.path}: {len(shipped)} cells shipped, the configuration here makes {len(cells)}: stale")
    out = {}
    for i in items:
        if to_jsonable(cells[i]) != shipped[i]["cell"]:
            raise ValueError(
                f"{env.path}: cell {i} shipped is {shipped[i]['cell']}, here {to_jsonable(cells[i])}: stale"
            )
        steps = logged_steps(shipped[i]["result"])
        before = process_settings()
        try:
            out[i] = EXPERIMENTS[name].train_cell(cells[i], stop_after=steps[min(ENTRIES, len(steps)) - 1] + 1)
        finally:
            restore_process_settings(before)
    return out


def _numbers(d: dict) -> dict:
    return {k: v for k, v in d.items() if isinstance(v, (int, float, list, str, bool)) or v is None}


def _probe_items(env: results.Envelope, items: list[int]) -> dict[int, dict]:
    from attnscale.experiments.pretrained import loading as pretrained
    from attnscale.experiments.pretrained.probe.run import builtin_sentences, run_probe

    heads = run_probe(pretrained.load_model(env.kind.split("/", 1)[1]), builtin_sentences())["heads"]
    return {i: _numbers(heads[i]) for i in items}


def _rescale_items(env: results.Envelope, items: list[float]) -> dict[float, dict]:
    from attnscale.experiments.pretrained import loading as pretrained
    from attnscale.experiments.pretrained.probe.run import builtin_sentences
    from attnscale.experiments.pretrained.rescale import RescaleConfig, run_rescale

    data = run_rescale(
        pretrained.load_model(env.kind.split("/", 1)[1]),
        RescaleConfig(alphas=tuple(items), include_unscaled=False),
        texts=builtin_sentences(),
        source="built-in sentences",
    )
    return {row["alpha"]: row for row in data["alphas"]}


def _shipped_item(env: results.Envelope, item) -> dict:
    if env.kind.startswith("train/"):
        return env.data["cells"][item]["result"]
    if env.kind.startswith("probe/"):
        return env.data["heads"][item]
    return next(r for r in env.data["alphas"] if r["alpha"] == item)


def _prefix_lists(kind: str) -> bool:
    return kind.startswith("train/")


def recompute(env: results.Envelope, items: list) -> dict:
    """The items of the reference ``env`` recomputed by the code here: {item: data as shipped}
    (a training cell's first :data:`ENTRIES` logged steps, a probe head's figures, a rescale row)."""
    if env.kind.startswith("train/"):
        return _training_items(env, items)
    if env.kind.startswith("probe/"):
        return _probe_items(env, items)
    return _rescale_items(env, items)


def _recompute_in_second_arithmetic(env: results.Envelope, items: list) -> dict:
    """:func:`recompute` of the reference ``env`` in a fresh process under :data:`SECOND_ARITHMETIC`, and that process's CPU record."""
    script = (
        "import json, sys; from attnscale import provenance, results;"
        "from attnscale.experiments import reproduction as r;"
        "out = r.recompute(results.read_reference(sys.argv[1]), json.loads(sys.argv[2]));"
        "print(json.dumps({'cpu': provenance.cpu(), 'items': [[k, v] for k, v in out.items()]}))"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, env.kind, json.dumps(items)],
        capture_output=True,
        text=True,
        env={**os.environ, **SECOND_ARITHMETIC},
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"recomputing {env.kind} under {SECOND_ARITHMETIC} failed:\n{done.stderr[-2000:]}")
    raw = json.loads(done.stdout.strip().splitlines()[-1])
    return {"cpu": raw["cpu"], "items": {k: v for k, v in raw["items"]}}


# --- calibration ------------------------------------------------------------------------------------


def calibration_path() -> Path | None:
    """The calibration file beside the reference results (None when there are none)."""
    root = results.reference_root()
    return None if root is None else root / CALIBRATION_FILE


def read_calibration() -> dict:
    """The stored calibration: {kind: {"items", "spread": {item: {path: spread}}, ...}, "made": ...}
    ({} when there is none)."""
    path = calibration_path()
    if path is None or not path.is_file():
        return {}
    return json.loads(gzip.decompress(path.read_bytes()))


def _candidates(env: results.Envelope) -> tuple[list, dict]:
    """The items calibration tries, and why the others of a training sweep are left out."""
    if env.kind.startswith("train/"):
        reasons = {i: instability(c["result"]) for i, c in enumerate(env.data["cells"])}
        stable = [i for i, why in reasons.items() if why is None]
        return spread_picks(stable, CANDIDATES), {i: why for i, why in reasons.items() if why}
    if env.kind.startswith("probe/"):
        return list(range(len(env.data["heads"]))), {}
    return [a for a in RESCALE_ALPHAS if any(r["alpha"] == a for r in env.data["alphas"])], {}


def _spreads(env, item, *recomputed: dict) -> dict[str, float]:
    """Per compared figure of ``item``, the largest |recomputed − shipped| over the recomputations."""
    out: dict[str, float] = {}
    shipped = _shipped_item(env, item)
    for data in recomputed:
        for path, here, there in _leaves(data, shipped, prefix_lists=_prefix_lists(env.kind)):
            if math.isfinite(here) and math.isfinite(there):
                out[path] = max(out.get(path, 0.0), abs(here - there))
    return out


def _within_margin(env, item, here: dict, spread: dict[str, float]) -> bool:
    """Whether every compared figure of ``item`` moved by at most 1/MARGIN of the plain tolerance."""
    return all(
        MARGIN * spread.get(path, 0.0) <= ATOL + RTOL * abs(there)
        for path, _, there in _leaves(here, _shipped_item(env, item), prefix_lists=_prefix_lists(env.kind))
    )


def calibrate(kinds=CHECKED, progress=None) -> dict:
    """Measure each checked reference's spread here and under :data:`SECOND_ARITHMETIC`, choose its
    items, and store the calibration beside the references (atomically). Returns what it stored.
    ``progress(kind)`` is called as each kind starts. The kinds not in ``kinds`` keep their stored
    entries (``made`` then describes this calibration's run)."""
    stored = {
        **read_calibration(),
        "made": {
            "created": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "second_arithmetic": SECOND_ARITHMETIC,
            "rtol": RTOL,
            "atol": ATOL,
            "margin": MARGIN,
        },
    }
    for kind in kinds:
        if progress:
            progress(kind)
        env = results.read_reference(kind)
        candidates, unstable = _candidates(env)
        here = recompute(env, candidates)
        second = _recompute_in_second_arithmetic(env, candidates)
        stored["made"]["second_cpu"] = second["cpu"]
        spread = {item: _spreads(env, item, here[item], second["items"][item]) for item in candidates}
        within = [item for item in candidates if _within_margin(env, item, here[item], spread[item])]
        kept = spread_picks(within, KEEP) if env.kind.startswith("train/") else within
        left_out = {str(i): why for i, why in unstable.items()}
        left_out.update(
            {
                str(i): "its figures moved beyond 1/MARGIN of the tolerance under the second arithmetic"
                for i in candidates
                if i not in within
            }
        )
        stored[kind] = {
            "reference_created": env.created,  # a regenerated reference needs a new calibration
            "items": kept,
            "left_out": left_out,
            "spread": {str(item): {p: float(f"{s:.2e}") for p, s in spread[item].items() if s} for item in kept},
            "bit_exact_here": not any(s for item in candidates for s in _spreads(env, item, here[item]).values()),
        }
    stored["made"]["cpu"] = provenance.cpu()  # now that the recomputation has loaded torch
    path = calibration_path()
    if path is None:
        raise results.ResultMissing("no reference folder to store the calibration in (ATTNSCALE_REFERENCE is empty)")
    write_bytes_atomic(
        path, gzip.compress(json.dumps(stored, indent=1, sort_keys=True).encode(), compresslevel=9, mtime=0)
    )
    return stored


def tolerance_for(env: results.Envelope, item, calibration: dict | None = None) -> Tolerance:
    """Exact when this process's arithmetic is the reference's (where its figures were computed,
    :func:`attnscale.results.computed_on`) and calibration found the kind bit
    for bit reproducible there (the training sweeps are; the probe's float64 sums are not), else the
    calibrated tolerance of ``item``."""
    entry = (calibration if calibration is not None else read_calibration()).get(env.kind, {})
    if entry.get("bit_exact_here") and provenance.same_arithmetic(
        results.computed_on(env).get("cpu"), provenance.cpu()
    ):
        return EXACT
    return Tolerance(spread=entry.get("spread", {}).get(str(item), {}))


def reproduce(env: results.Envelope, items: list | None = None) -> dict:
    """Recompute ``items`` of the reference ``env`` (by default the calibrated ones; without a
    calibration, up to :data:`KEEP` stable ones spread over the sweep) and compare them with the
    shipped data: {item: differences}."""
    calibration = read_calibration()
    if items is None:
        items = calibration.get(env.kind, {}).get("items") or spread_picks(_candidates(env)[0], KEEP)
    here = recompute(env, items)
    return {
        item: compare(
            here[item],
            _shipped_item(env, item),
            prefix_lists=_prefix_lists(env.kind),
            tolerance=tolerance_for(env, item, calibration),
        )
        for item in items
    }


def backfill_cpu(kind: str, record: dict, note: str) -> Path:
    """Add a CPU record to a reference envelope that predates the field (``environment.cpu``), with
    ``note`` saying how it is known; nothing else of the file changes. Returns the file."""
    path = results.stored_path(results.result_path(kind, results.reference_root()))
    raw = json.loads(gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes())
    if raw["environment"].get("cpu"):
        raise ValueError(f"{path} records its CPU already: {raw['environment']['cpu']}")
    raw["environment"]["cpu"] = {**record, "note": note}
    text = json.dumps(raw, indent=1).encode()
    write_bytes_atomic(path, gzip.compress(text, compresslevel=9, mtime=0) if path.suffix == ".gz" else text)
    return path


def main(argv: list[str] | None = None) -> int:
    """``python -m attnscale.experiments.reproduction [KIND ...]``: calibrate the checked references."""
    kinds = tuple(argv if argv else CHECKED)
    stored = calibrate(kinds, progress=lambda kind: print(f"calibrating {kind} ...", flush=True))
    for kind in kinds:
        entry = stored[kind]
        print(
            f"{kind}: items {entry['items']}, {len(entry['left_out'])} left out, "
            f"bit-exact here: {entry['bit_exact_here']}"
        )
    print(f"wrote {calibration_path()}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
