"""A detector on the monitor's per-head figures: fixed thresholds where the post's theory gives one,
change detection over a trailing window for the rest, per (layer, head), with a warm-up.

Fixed rules (judged from a head's first step on):

=====================  ==========================================================================
``float16_headroom``   FLOAT16_MAX / max_abs_logit below ``float16_headroom`` (default 1: the head's
                       largest |logit| is past 65504, the largest float16, so a float16 softmax
                       reads +inf; set 4 to be told two bits before)
``saturated_fraction`` at or above ``saturated_share`` (default 0.5): most of the head's rows put more
                       than SATURATED_WEIGHT = 0.99 on one key, where the softmax Jacobian
                       diag(p) − ppᵀ, and so the gradient through the row, all but vanishes
``rows_broken``        above 0: a row with a NaN or +inf logit (the attention has broken)
=====================  ==========================================================================

Change detection (a one-sided z-score, as OLMo-core's StabilityMonitorCallback judges the loss):
each head's figure is compared with the mean μ and standard deviation σ of its values over the last
``window`` measured steps (the current step not among them; a step in which the head has no value
counts in the window but adds nothing to μ and σ); it alerts when it leaves
μ ± ``z``·max(σ, ``min_sigma``) in the direction that is the chain's next link, once the window
holds ``warmup`` values. ``min_sigma`` keeps a figure that has been constant (a share stuck at 0)
from alerting on its first rounding-sized move.

=======================  ===========  =====================================================
``max_abs_logit``        up           on log|logit|: a relative growth (the logits grow)
``entropy_min``          down         nats (a row of the head saturates)
``saturated_fraction``   up           share of rows
``first_key_weight``     both ways    mean weight on the first key (an attention sink forms
                                      or breaks)
=======================  ===========  =====================================================

An alert is raised when a rule's condition becomes true for a head, not again while it stays true:
one alert per episode, re-armed once the condition has not held for ``rearm`` measured steps (a head
past float16 for a thousand steps is one alert, not a thousand; a share hovering about its threshold,
true one step and false the next, is one episode too). Values keep entering the window during an
episode, so a lasting shift becomes the new normal after about ``window`` steps.

Cost: the state is a ring of heads × figures × window float64; an update is a few vectorised
NumPy operations over it plus one Python pass over the step's heads (see ``docs/early-warning.md``
for the measured µs per step).
"""

from __future__ import annotations

import json
import math
import operator
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from attnscale.errors import InputError, InputTypeError, check_count, check_positive
from attnscale.softmax_rows import FLOAT16_MAX

__all__ = ["Alert", "CHANGE_RULES", "Detector", "DetectorConfig", "FIXED_RULES", "make_detector", "read_log", "replay"]

#: figure -> (direction the chain moves it, judged on a log scale)
CHANGE_RULES = {
    "max_abs_logit": ("up", True),
    "entropy_min": ("down", False),
    "saturated_fraction": ("up", False),
    "first_key_weight": ("both", False),
}
#: figure -> the reason code of its fixed rule (see :mod:`attnscale.early_warning.words`)
FIXED_RULES = {"float16_headroom": "float16", "saturated_fraction": "saturated", "rows_broken": "broken"}
# What a step record is read for, per head (a Step's HeadFigures attributes or its JSON keys).
_FIELDS = ("max_abs_logit", "entropy_min", "saturated_fraction", "first_key_weight", "rows_broken")
_COLUMN = {name: i for i, name in enumerate(_FIELDS)}
# One C call a head to read it: a JSON record's keys, a HeadFigures' attributes.
_ATTRS = ("max_abs_logit", "entropy_min", "saturated_rows", "rows", "first_key_weight", "rows_broken")
_key_item, _fields_item = operator.itemgetter("layer", "head"), operator.itemgetter(*_FIELDS)
_key_attr, _fields_attr = operator.attrgetter("layer", "head"), operator.attrgetter(*_ATTRS)
# The field each fixed rule reads (the headroom is FLOAT16_MAX / max_abs_logit), in FIXED_RULES' order.
_FIXED_COLUMNS = [_COLUMN["max_abs_logit"], _COLUMN["saturated_fraction"], _COLUMN["rows_broken"]]


@dataclass(frozen=True)
class DetectorConfig:
    """The detector's parameters (defaults: see the module's tables; ``docs/early-warning.md`` says how
    they were chosen and what the lead-time experiment measured).

    window: steps of a head's trailing window (≥ 2). warmup: values the window holds before change
    detection judges (2 ≤ warmup ≤ window). z: the threshold in σ (> 0). min_sigma: the floor of σ
    (> 0), in the figure's units (nats, shares, log|logit|). float16_headroom: the fixed rule's bound
    (> 0). saturated_share: the fixed rule's share, in (0, 1]. rearm: measured steps a rule's
    condition must not hold before it can alert again for the head (≥ 1; 1: at the next step it holds
    again). figures: the change rules that run (keys of :data:`CHANGE_RULES`)."""

    # Defaults: the setting of `attnscale train early-warning` (the shipped reference result) with no false
    # alarm on its 10 healthy runs and an alert before each of its divergences; the first-key rule is off
    # because it was the first alert in healthy QK-layernorm runs there.
    window: int = 128
    warmup: int = 16
    z: float = 8.0
    min_sigma: float = 0.01
    float16_headroom: float = 1.0
    saturated_share: float = 0.9
    rearm: int = 16
    figures: tuple = ("max_abs_logit", "entropy_min", "saturated_fraction")

    def __post_init__(self):
        check_count("window", self.window, minimum=2)
        check_count("warmup", self.warmup, minimum=2)
        check_count("rearm", self.rearm)
        if self.warmup > self.window:
            raise InputError(f"warmup: expected at most window = {self.window} values, got {self.warmup}")
        for name in ("z", "min_sigma", "float16_headroom", "saturated_share"):
            check_positive(name, getattr(self, name))
        if self.saturated_share > 1:
            raise InputError(f"saturated_share: expected a share in (0, 1], got {self.saturated_share}")
        unknown = [f for f in self.figures if f not in CHANGE_RULES] if isinstance(self.figures, tuple) else None
        if unknown is None or unknown:
            raise InputError(f"figures: expected a tuple of {', '.join(CHANGE_RULES)}, got {self.figures!r}")


@dataclass(frozen=True)
class Alert:
    """One rule of one head, at the step where its condition became true.

    value and threshold are in the figure's own units (a |logit|, nats, a share, a headroom factor);
    reason: ``rose`` / ``fell`` (change detection), ``float16`` / ``saturated`` / ``broken`` (fixed).
    z and window: the change rule's z and how many values its window held (NaN and 0 for a fixed rule)."""

    step: int
    layer: str
    head: int
    figure: str
    value: float
    threshold: float
    reason: str
    z: float = math.nan
    window: int = 0

    def sentence(self) -> str:
        """The alert in one sentence, in the bound language (:func:`attnscale.early_warning.words.sentence`)."""
        from attnscale.early_warning.words import sentence

        return sentence(self)

    def to_json(self) -> dict:
        """Strict JSON data: a non-finite number is null."""
        return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in asdict(self).items()}

    @classmethod
    def from_json(cls, data: dict) -> Alert:
        return cls(**{k: (math.nan if v is None else v) for k, v in data.items()})


def _read_record(record) -> tuple[int, list, list]:
    """A Step, or its JSON data → (step, [(layer, head)], [the _FIELDS of each head, None where null])."""
    if isinstance(record, dict):
        step, heads = record.get("step"), record.get("heads")
        if isinstance(step, bool) or not isinstance(step, int) or not isinstance(heads, list):
            raise InputError(
                "record: expected a step record with an integer 'step' and a list 'heads' "
                f"(Step.to_json), got the keys {sorted(record)}"
            )
        try:
            keys = list(map(_key_item, heads))
            try:  # every field there, as Step.to_json writes them: one C call a head
                values = list(map(_fields_item, heads))
            except KeyError:  # a figure left out: as null
                values = [[h.get(f) for f in _FIELDS] for h in heads]
        except (KeyError, TypeError, AttributeError):
            raise InputError(
                f"record of step {step}: expected each head to be an object with 'layer' and 'head'"
            ) from None
        return step, keys, values
    heads = getattr(record, "heads", None)
    if heads is None or not hasattr(record, "step"):
        raise InputTypeError(f"record: expected a Step or its to_json() dict, got {type(record).__name__}")
    # HeadFigures' plain attributes (its saturated_fraction, a property, is saturated_rows / rows: divided
    # here for every head at once), one C call a head: the Python per head is what an update costs most.
    keys = list(map(_key_attr, heads))
    read = np.array(list(map(_fields_attr, heads)), dtype=np.float64).reshape(len(heads), len(_ATTRS))
    with np.errstate(divide="ignore", invalid="ignore"):
        saturated = read[:, 2] / read[:, 3]
    values = np.column_stack([read[:, :2], saturated, read[:, 4:]])
    return int(record.step), keys, values


class Detector:
    """Stateful: feed it each step record in order with :meth:`update`; it returns that step's alerts.

    A record is a :class:`~attnscale.torch.monitor.records.Step` or its :meth:`~Step.to_json` data (a
    line of a JSONL log). A record without heads (a step ``every=N`` left unmeasured) changes nothing.
    ``steps``: records with heads seen so far; ``alerts``: how many alerts raised."""

    def __init__(self, config: DetectorConfig | None = None):
        config = DetectorConfig() if config is None else config
        if not isinstance(config, DetectorConfig):
            raise InputTypeError(f"config: expected a DetectorConfig, got {type(config).__name__}")
        self.config = config
        rules = [CHANGE_RULES[f] for f in config.figures]
        self._cols = np.array([_COLUMN[f] for f in config.figures], dtype=np.intp)
        self._log = np.array([log for _, log in rules], dtype=bool)
        self._up = np.array([d in ("up", "both") for d, _ in rules], dtype=bool)
        self._down = np.array([d in ("down", "both") for d, _ in rules], dtype=bool)
        self.labels: list[tuple[str, int]] = []  # (layer, head) of each row of the state
        self._rows: dict[tuple[str, int], int] = {}
        self._last: tuple[list, np.ndarray] = ([], np.empty(0, dtype=np.intp))
        f, w = len(config.figures), config.window
        self._ring = np.full((w, 0, f), np.nan)  # ring[pos]: one step's heads × figures, contiguous
        self._sum, self._sq, self._n = np.zeros((0, f)), np.zeros((0, f)), np.zeros((0, f))
        # Per head and rule: consecutive measured steps its condition has not held (armed at ≥ rearm).
        self._clear = np.zeros((0, f + len(FIXED_RULES)))
        self._pos = 0
        self.steps = self.alerts = 0

    def _index(self, keys: list) -> np.ndarray:
        """The state rows of ``keys`` (new heads get new rows)."""
        if keys == self._last[0]:  # the same heads in the same order as the step before: the usual case
            return self._last[1]
        new = [k for k in dict.fromkeys(keys) if k not in self._rows]
        if new:
            w, f = self._ring.shape[0], self._ring.shape[2]
            for k in new:
                self._rows[k] = len(self.labels)
                self.labels.append(k)
            grow = len(new)
            self._ring = np.concatenate([self._ring, np.full((w, grow, f), np.nan)], axis=1)
            self._sum, self._sq, self._n = (
                np.concatenate([a, np.zeros((grow, a.shape[1]))]) for a in (self._sum, self._sq, self._n)
            )
            fresh = np.full((grow, self._clear.shape[1]), float(self.config.rearm))  # a new head is armed
            self._clear = np.concatenate([self._clear, fresh])
        idx = np.array([self._rows[k] for k in keys], dtype=np.intp)
        self._last = (keys, idx)
        return idx

    def update(self, record) -> list[Alert]:
        """The alerts of ``record``'s step (a list, empty when none), in head order, fixed rules first."""
        step, keys, values = _read_record(record)
        if not keys:
            return []
        idx = self._index(keys)
        x = np.array(values, dtype=np.float64).reshape(len(keys), len(_FIELDS))  # None (null) → NaN
        with np.errstate(divide="ignore", invalid="ignore"):
            headroom = FLOAT16_MAX / x[:, _COLUMN["max_abs_logit"]]
            observed = x[:, self._cols]
            observed = np.where(self._log, np.log(np.where(self._log, observed, 1.0)), observed)
        fixed = np.stack(
            [
                headroom < self.config.float16_headroom,
                x[:, _COLUMN["saturated_fraction"]] >= self.config.saturated_share,
                x[:, _COLUMN["rows_broken"]] > 0,
            ],
            axis=1,
        )
        rose, fell, mean, sigma, held = self._judge(idx, observed)
        present = np.isfinite(np.concatenate([x[:, _FIXED_COLUMNS], observed], axis=1))
        raised = self._raise(idx, np.concatenate([fixed, rose | fell], axis=1), present)
        self._push(idx, observed)
        self.steps += 1
        alerts = [
            self._alert(step, keys[i], r, x[i], headroom[i], rose[i], mean[i], sigma[i], held[i]) for i, r in raised
        ]
        self.alerts += len(alerts)
        return alerts

    def _judge(self, idx, observed):
        """rose, fell (heads × change rules): where each head leaves μ ± z·σ of its window; μ, σ, and
        the values the window holds."""
        c = self.config
        n, s, q = self._n[idx], self._sum[idx], self._sq[idx]
        with np.errstate(divide="ignore", invalid="ignore"):
            mean = s / n
            var = np.maximum(q - n * mean * mean, 0.0) / (n - 1)
        sigma = np.maximum(np.sqrt(var), c.min_sigma)
        ready = n >= c.warmup
        rose = ready & self._up & (observed > mean + c.z * sigma)
        fell = ready & self._down & (observed < mean - c.z * sigma)
        return rose, fell, mean, sigma, n

    def _raise(self, idx, conditions, present) -> list[tuple[int, int]]:
        """(head's position in the step, rule) pairs whose condition became true: armed rules that hold.
        A rule is armed again once its condition has not held for ``rearm`` measured steps of that head
        (a figure hovering about its threshold is one episode, not one alert every other step)."""
        clear = self._clear[idx]
        fire = conditions & (clear >= self.config.rearm)
        self._clear[idx] = np.where(conditions, 0.0, clear + present)
        return [(int(i), int(r)) for i, r in zip(*np.nonzero(fire))]

    def _push(self, idx, observed) -> None:
        """The step's values into each head's ring (NaN: not measured, not counted)."""
        w, pos = self.config.window, self._pos
        full = np.full(self._sum.shape, np.nan)
        full[idx] = observed
        old = self._ring[pos]
        for values, sign in ((old, -1.0), (full, 1.0)):
            ok = np.isfinite(values)
            v = np.where(ok, values, 0.0)
            self._sum += sign * v
            self._sq += sign * v * v
            self._n += sign * ok
        self._ring[pos] = full
        self._pos = (pos + 1) % w
        if self._pos == 0:  # once a round, the running sums afresh: no rounding drift over a long run
            ok = np.isfinite(self._ring)
            v = np.where(ok, self._ring, 0.0)
            self._sum, self._sq, self._n = v.sum(axis=0), (v * v).sum(axis=0), ok.sum(axis=0).astype(np.float64)

    def _alert(self, step, key, rule, x, headroom, rose, mean, sigma, held) -> Alert:
        c, fixed = self.config, len(FIXED_RULES)
        if rule < fixed:
            figure = tuple(FIXED_RULES)[rule]
            value, threshold = (
                (float(headroom), c.float16_headroom),
                (float(x[_COLUMN["saturated_fraction"]]), c.saturated_share),
                (float(x[_COLUMN["rows_broken"]]), 0.0),
            )[rule]
            return Alert(step, key[0], int(key[1]), figure, value, threshold, FIXED_RULES[figure])
        j = rule - fixed
        figure = c.figures[j]
        up = bool(rose[j])
        bound = mean[j] + (c.z if up else -c.z) * sigma[j]
        threshold = math.exp(bound) if self._log[j] else float(bound)
        value = float(x[_COLUMN[figure]])
        return Alert(step, key[0], int(key[1]), figure, value, threshold, "rose" if up else "fell", c.z, int(held[j]))


def make_detector(alerts) -> Detector | None:
    """What an ``alerts=`` option asks for: None or False → no detector; True → one with the default
    :class:`DetectorConfig`; a DetectorConfig → one with it; a Detector → that one."""
    if alerts is None or alerts is False:
        return None
    if alerts is True:
        return Detector()
    if isinstance(alerts, DetectorConfig):
        return Detector(alerts)
    if isinstance(alerts, Detector):
        return alerts
    raise InputTypeError(f"alerts: expected True, False, a DetectorConfig or a Detector, got {alerts!r}")


def replay(records, config: DetectorConfig | None = None) -> list[Alert]:
    """Every alert of a whole log: ``records`` (Steps or their JSON data, in step order) through one
    fresh :class:`Detector`. Pure: the same records and config give the same alerts."""
    detector = Detector(config)
    return [alert for record in records for alert in detector.update(record)]


def read_log(path) -> list[dict]:
    """The step records of a JSONL log (:class:`~attnscale.torch.sinks.JSONLSink`'s), in file order.

    A line that is not a JSON object with ``step`` and ``heads`` is an :class:`InputError` naming the
    file and line, except a last line with no newline that does not parse: a run killed while writing
    it, whose finished steps are all there. Blank lines are skipped."""
    path = Path(path)
    if path.is_dir():
        raise InputError(f"log: {str(path)!r} is a folder, expected a JSONL file of step records")
    text = path.read_text(encoding="utf-8")
    lines = text.split("\n")
    records = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as err:
            if number == len(lines):  # no newline after it: half-written
                break
            raise InputError(f"{path}: line {number} is not JSON ({err.msg} at column {err.colno})") from None
        if not isinstance(record, dict) or "heads" not in record or "step" not in record:
            raise InputError(
                f"{path}: line {number} is not a step record: expected a JSON object with 'step' and "
                "'heads' (what JSONLSink writes)"
            )
        records.append(record)
    return records
