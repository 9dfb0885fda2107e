"""The reference results shipped with attnscale: what produced each and whether this code still
would (above the producers it asks: the claims and the experiments; what the report needs of a
reference, the command that made it, is plain data in :data:`attnscale.results.KINDS`).

A reference result (``src/attnscale/reference_results/<kind>/result.json.gz``, read by
:func:`attnscale.results.read_reference`) is the tool's own output of one command, unedited. Two checks
keep it honest, both run by the test suite:

* **Staleness** (:func:`stale_reasons`): the result's *fingerprint* — the code version its producer
  declares and the configuration it records — against what the same command would record now. A
  sweep's code version is its cells' ``code_version`` (bumped when training code changes the numbers)
  and its configuration the whole sweep configuration; the verification's and the telemetry
  benchmark's are their configuration dataclasses; a probe's and a rescale's the defaults their code
  declares (weights, tolerances, α grid: the rest of what they record, such as the number of tokens,
  follows from those). Any difference names the field, the result and the command that regenerates it.
* **Reproducibility** (:mod:`attnscale.experiments.reproduction`): parts of a result recomputed by
  this code and compared with the shipped numbers, exactly on the CPU that made them and within a
  calibrated tolerance elsewhere.

    >>> sorted(PRODUCERS)[:3]
    ['probe/minilm', 'probe/smollm2', 'rescale/minilm']
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from attnscale import results
from attnscale.store import config_hash, to_jsonable

__all__ = [
    "Producer",
    "PRODUCERS",
    "producer",
    "fingerprint",
    "current_fingerprint",
    "stale_reasons",
    "regenerate_command",
]


@dataclass(frozen=True)
class Producer:
    """What produced a kind of reference result: the configuration the code would record for it now
    (as JSON data; for a probe or a rescale only the fields the code itself declares), and the
    producer's code version now (None where it declares none). Its command is the kind's
    ``reference_command`` (:data:`attnscale.results.KINDS`), plain data that the report reads."""

    kind: str
    defaults: Callable[[], dict]
    code_version: Callable[[], int | None] = lambda: None
    recorded_code_version: Callable[[results.Envelope], Any] = lambda env: None
    #: the configuration as the result records it, in the terms of ``defaults`` (default: all of it)
    recorded: Callable[[results.Envelope], dict] = lambda env: to_jsonable(env.config)

    @property
    def command(self) -> str:
        return results.KINDS[self.kind].reference_command


def _sweep(name: str) -> Producer:
    def defaults() -> dict:
        from attnscale.experiments.training.registry import make_config

        return to_jsonable(make_config(name))

    def code_version() -> int | None:
        from attnscale.experiments.training.registry import make_config

        cells = make_config(name).cells()
        return getattr(cells[0], "code_version", None) if cells else None

    def recorded(env: results.Envelope):
        found = {c.get("cell", {}).get("code_version") for c in env.data.get("cells", [])}
        return found.pop() if len(found) == 1 else sorted(found, key=str)

    return Producer(f"train/{name}", defaults, code_version, recorded)


def _verify_defaults() -> dict:
    from attnscale.claims import VerifyConfig

    return VerifyConfig(quick=False, seed=0).recorded()


def _telemetry_defaults(repeats: int) -> Callable[[], dict]:
    def defaults() -> dict:
        from attnscale.experiments.telemetry import TelemetryBenchConfig

        return to_jsonable(TelemetryBenchConfig(repeats=repeats))

    return defaults


def _picked(keys: tuple[str, ...]) -> Callable[[results.Envelope], dict]:
    return lambda env: {k: (env.config or {}).get(k) for k in keys}


PROBE_FIELDS = ("batch_size", "tolerance", "max_pairs", "text", "weights_sha256")


def _probe(model: str) -> Producer:
    def defaults() -> dict:
        from attnscale.experiments.pretrained import loading as pretrained
        from attnscale.experiments.pretrained.probe.run import run_probe

        declared = {
            name: p.default
            for name, p in inspect.signature(run_probe).parameters.items()
            if name in ("batch_size", "tolerance", "max_pairs", "source")
        }
        declared["text"] = declared.pop("source")
        sha = {"minilm": pretrained.MINILM_SHA256, "smollm2": pretrained.SMOLLM2_SHA256}[model]
        return {**declared, "weights_sha256": sha}

    return Producer(f"probe/{model}", defaults, recorded=_picked(PROBE_FIELDS))


RESCALE_FIELDS = ("max_tokens", "window", "prompt", "new_tokens", "batch_size", "model_version")


def _rescale(model: str) -> Producer:
    def defaults() -> dict:
        from attnscale.experiments.pretrained import loading as pretrained
        from attnscale.experiments.pretrained.rescale import RescaleConfig

        config = to_jsonable(RescaleConfig())
        version = {"minilm": pretrained.MINILM_VERSION, "smollm2": pretrained.SMOLLM2_VERSION}[model]
        return {
            **{k: config[k] for k in RESCALE_FIELDS if k in config},
            "alphas": config["alphas"],
            "model_version": version,
        }

    def recorded(env: results.Envelope) -> dict:
        # The run adds α = √d_k (no scale) to the grid when it is not in it: not a default of its own.
        from attnscale.experiments.pretrained.rescale import ALPHAS

        out = _picked(RESCALE_FIELDS)(env)
        unscaled = env.data.get("unscaled_alpha")
        out["alphas"] = [
            a
            for a in (env.config or {}).get("alphas", [])
            if a in ALPHAS or unscaled is None or not math.isclose(a, unscaled, rel_tol=1e-9)
        ]
        return out

    return Producer(f"rescale/{model}", defaults, recorded=recorded)


#: The producer of each kind of reference result (each kind's command: results.KINDS).
PRODUCERS: dict[str, Producer] = {
    p.kind: p
    for p in (
        Producer("verify", _verify_defaults),
        _probe("minilm"),
        _probe("smollm2"),
        _rescale("smollm2"),
        _rescale("minilm"),
        _sweep("scale-vs-dk"),
        _sweep("logit-growth"),
        _sweep("lm"),
        _sweep("early-warning"),
        Producer("telemetry", _telemetry_defaults(3)),
    )
}


def producer(kind: str) -> Producer:
    """The producer of ``kind``; an InputError naming the kinds known when there is none."""
    from attnscale.errors import check_choice

    check_choice("kind", kind, PRODUCERS)
    return PRODUCERS[kind]


def regenerate_command(kind: str) -> str:
    """The commands that regenerate the reference result of ``kind`` from a repository checkout: the
    producer's command into a scratch folder, then its envelope compressed into src/attnscale/reference_results."""
    folder = "/tmp/attnscale-reference"
    file = results.result_path(kind, folder).as_posix()
    return (
        f"{producer(kind).command} --results {folder} && "
        f"gzip -9n < {file} > src/attnscale/reference_results/{kind}/result.json.gz"
    )


def fingerprint(env: results.Envelope) -> dict:
    """What produced ``env``, as it records it: its producer's code version and a hash of the
    configuration it records (for a probe or a rescale, of the fields its code declares)."""
    p = producer(env.kind)
    config = p.recorded(env)
    return {"code_version": p.recorded_code_version(env), "config_hash": config_hash(config), "config": config}


def current_fingerprint(kind: str) -> dict:
    """The fingerprint the code here would record for the producer's command."""
    p = producer(kind)
    config = to_jsonable(p.defaults())
    return {"code_version": p.code_version(), "config_hash": config_hash(config), "config": config}


def _differences(recorded: Any, now: Any, at: str) -> list[str]:
    if isinstance(recorded, dict) and isinstance(now, dict):
        out = []
        for key in sorted(set(recorded) | set(now)):
            out += _differences(recorded.get(key), now.get(key), f"{at}.{key}" if at else key)
        return out
    return [] if recorded == now else [f"{at}: {recorded!r} in the result, {now!r} now"]


def stale_reasons(env: results.Envelope) -> list[str]:
    """Why the reference result ``env`` is not what its command would produce now (empty when it is):
    each changed code version or configuration field, then the result and the command to regenerate it."""
    then, now = fingerprint(env), current_fingerprint(env.kind)
    reasons = []
    if then["code_version"] != now["code_version"]:
        reasons.append(f"code_version: {then['code_version']!r} in the result, {now['code_version']!r} now")
    if then["config_hash"] != now["config_hash"]:
        reasons += _differences(then["config"], now["config"], "config")
    if reasons:
        reasons.append(f"the reference result {env.path} is stale; regenerate it with: {regenerate_command(env.kind)}")
    return reasons
