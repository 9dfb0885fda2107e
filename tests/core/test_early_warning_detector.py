"""attnscale.early_warning: the detector on per-head step records (the JSON a JSONLSink writes, or the
Step itself), NumPy only: the fixed rules from their first step, the z-score rules after their warm-up
and in their direction only, one alert per episode, the same alerts from a Step and from its JSON, a
replay that is the detector fed in order, and sentences generated from the numbers in both languages."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from attnscale.early_warning import CHANGE_RULES, Alert, Detector, DetectorConfig, make_detector, replay
from attnscale.errors import InputError, InputTypeError
from attnscale.i18n import language
from attnscale.softmax_rows import FLOAT16_MAX


# The rules' mechanics are tested at fixed settings (every change rule, a 64-step window, z = 6, a saturated
# share of 0.5), not at the shipped defaults, which come from the lead-time experiment and may move.
MECHANICS = DetectorConfig(window=64, z=6.0, saturated_share=0.5, figures=tuple(CHANGE_RULES))


def head(layer="L0", h=0, logit=10.0, entropy=1.0, saturated=0.0, first=0.2, broken=0, rows=100):
    """One head's record as Step.to_json writes it (the fields the detector reads, and a few more)."""
    return {
        "layer": layer,
        "head": h,
        "rows": rows,
        "rows_broken": broken,
        "max_abs_logit": logit,
        "max_logit": logit,
        "entropy_min": entropy,
        "saturated_fraction": saturated,
        "first_key_weight": first,
    }


def noisy_log(steps, changes=None, seed=0, heads=2):
    """``steps`` records of ``heads`` heads with 1 % noise; ``changes``: {step: {field: value}} for head 0."""
    rng = np.random.default_rng(seed)
    records = []
    for s in range(steps):
        hs = [
            head(h=h, logit=10 * (1 + 0.01 * rng.standard_normal()), entropy=1 + 0.01 * rng.standard_normal())
            for h in range(heads)
        ]
        hs[0].update((changes or {}).get(s, {}))
        records.append({"step": s, "heads": hs})
    return records


def test_a_quiet_log_raises_nothing_and_a_jump_of_the_largest_logit_raises_one_alert_naming_it():
    assert replay(noisy_log(80), MECHANICS) == []
    log = noisy_log(80, {s: {"max_abs_logit": 40.0} for s in range(50, 80)})
    (alert,) = replay(log, MECHANICS)  # one episode: raised where it starts, not at every step after
    assert (alert.step, alert.layer, alert.head, alert.figure, alert.reason) == (50, "L0", 0, "max_abs_logit", "rose")
    # The threshold is exp(μ + 6σ) of log|logit| over the 50 steps before, σ at least min_sigma.
    logs = np.log([r["heads"][0]["max_abs_logit"] for r in log[:50]])
    bound = logs.mean() + 6 * max(logs.std(ddof=1), 0.01)
    assert alert.threshold == pytest.approx(math.exp(bound), rel=1e-9)
    assert (alert.value, alert.z, alert.window) == (40.0, 6.0, 50)


def test_change_rules_wait_for_the_warm_up_and_only_alert_in_their_direction():
    early = noisy_log(30, {10: {"max_abs_logit": 1e3}})  # before 16 values: not judged
    assert replay(early, MECHANICS) == []
    assert [a.step for a in replay(early, replace(MECHANICS, warmup=8))] == [10]
    # The entropy alerts when it falls, not when it rises; the logit when it rises, not when it falls.
    down = noisy_log(40, {30: {"entropy_min": 0.2, "max_abs_logit": 2.0}})
    assert [(a.figure, a.reason) for a in replay(down, MECHANICS)] == [("entropy_min", "fell")]
    up = noisy_log(40, {30: {"entropy_min": 3.0}})
    assert replay(up, MECHANICS) == []
    # The first-key weight alerts both ways (a sink forms, or breaks).
    assert [a.reason for a in replay(noisy_log(40, {30: {"first_key_weight": 0.9}}), MECHANICS)] == ["rose"]
    assert [a.reason for a in replay(noisy_log(40, {30: {"first_key_weight": 0.0}}), MECHANICS)] == ["fell"]


def test_fixed_rules_alert_from_the_first_step_once_per_episode_rearmed_after_rearm_clear_steps():
    over = 2 * FLOAT16_MAX
    log = noisy_log(10, {0: {"max_abs_logit": over}, 1: {"max_abs_logit": over}, 5: {"max_abs_logit": over}})
    alerts = replay(log, replace(MECHANICS, rearm=3))  # steps 2, 3, 4 clear: armed again at 5
    assert [(a.step, a.figure, a.reason) for a in alerts] == [(s, "float16_headroom", "float16") for s in (0, 5)]
    assert [a.step for a in replay(log, MECHANICS)] == [0]  # rearm=16: 0 to 5 is one episode
    assert alerts[0].value == pytest.approx(0.5) and alerts[0].threshold == 1.0
    sat = replay(noisy_log(5, {2: {"saturated_fraction": 0.75}, 3: {"rows_broken": 3}}), MECHANICS)
    assert [(a.step, a.figure, a.value, a.threshold) for a in sat] == [
        (2, "saturated_fraction", 0.75, 0.5),
        (3, "rows_broken", 3.0, 0.0),
    ]


def test_a_step_and_its_json_give_the_same_alerts():
    from attnscale.torch.monitor.records import HeadFigures, Step

    log = noisy_log(40, {30: {"max_abs_logit": 100.0, "saturated_fraction": 0.6}})

    def as_step(record):
        heads = [
            HeadFigures(
                layer=h["layer"],
                head=h["head"],
                calls=1,
                rows=100,
                rows_empty=0,
                rows_broken=0,
                saturated_rows=round(h["saturated_fraction"] * 100),
                float16_overflow_rows=0,
                entropy_mean=2.0,
                entropy_median=math.nan,
                entropy_min=h["entropy_min"],
                max_logit=h["max_abs_logit"],
                min_logit=-1.0,
                max_abs_logit=h["max_abs_logit"],
                first_key_weight=h["first_key_weight"],
            )
            for h in record["heads"]
        ]
        return Step(step=record["step"], calls=1, fallbacks={}, heads=heads)

    steps = [as_step(r) for r in log]
    from_json = replay([s.to_json() for s in steps], MECHANICS)
    assert replay(steps, MECHANICS) == from_json and {a.figure for a in from_json} == {
        "max_abs_logit",
        "saturated_fraction",
    }


def test_missing_figures_and_new_heads_are_no_alarm_and_replay_is_the_detector_in_order():
    log = noisy_log(40, {20: {"entropy_min": None, "max_abs_logit": None}})
    log[25]["heads"].append(head(layer="L1", h=0))  # a head first seen late starts its own warm-up
    assert replay(log, MECHANICS) == []
    detector = Detector(MECHANICS)
    fed = [a for r in noisy_log(60, {50: {"max_abs_logit": 50.0}}) for a in detector.update(r)]
    assert fed == replay(noisy_log(60, {50: {"max_abs_logit": 50.0}}), MECHANICS) and detector.steps == 60
    assert detector.update({"step": 61, "heads": []}) == [] and detector.steps == 60  # every=N's unmeasured step


def test_the_alert_sentence_follows_the_data_in_both_languages():
    a = replay(noisy_log(40, {30: {"max_abs_logit": 40.0}}), MECHANICS)[0]
    b = replay(noisy_log(40, {30: {"entropy_min": 0.25}}), MECHANICS)[0]
    assert a.sentence().startswith("step 30, L0 head 0: the largest |logit| rose to 40, above 10.")
    assert "(the mean + 6σ of its last 30 steps)" in a.sentence()
    assert b.sentence().startswith("step 30, L0 head 0: the smallest row entropy fell to 0.25, below 0.9")
    with language("zh"):
        assert a.sentence().startswith("第 30 步，L0 头 0：最大 |logit|升至 40，高于 10.")
        assert b.sentence().startswith("第 30 步，L0 头 0：最小行熵降至 0.25，低于 0.9")
    # A headroom bound above 1 crossed before the overflow says so; past it, the overflow.
    near = replay(noisy_log(3, {1: {"max_abs_logit": FLOAT16_MAX / 3}}), replace(MECHANICS, float16_headroom=4))[0]
    past = replay(noisy_log(3, {1: {"max_abs_logit": FLOAT16_MAX * 3}}), MECHANICS)[0]
    assert near.sentence().endswith("is 3×, below 4×: its logits are that close to overflowing float16")
    assert past.sentence().endswith("is 0.333×, below 1×: its logits overflow float16")
    sat = replay(noisy_log(3, {1: {"saturated_fraction": 0.8}}), MECHANICS)[0]
    assert "80% of its rows are saturated (largest weight > 0.99), at or above 50%" in sat.sentence()


def test_an_alert_round_trips_through_strict_json():
    import json

    a = replay(noisy_log(3, {1: {"rows_broken": 2}}), MECHANICS)[0]
    data = json.loads(json.dumps(a.to_json(), allow_nan=False))
    assert data["z"] is None and Alert.from_json(data).sentence() == a.sentence()


@pytest.mark.parametrize(
    "options, message",
    [
        ({"window": 1}, "window: expected"),
        ({"rearm": 0}, "rearm: expected"),
        ({"warmup": 200}, "warmup: expected at most window = 128 values, got 200"),
        ({"z": 0}, "z: expected a finite number > 0"),
        ({"saturated_share": 1.5}, r"saturated_share: expected a share in \(0, 1\], got 1.5"),
        ({"figures": ("max_logit",)}, "figures: expected a tuple of max_abs_logit, entropy_min"),
    ],
)
def test_bad_config_is_refused_naming_the_parameter(options, message):
    with pytest.raises(InputError, match=message):
        DetectorConfig(**options)


def test_bad_records_and_alerts_options_are_refused_in_one_line():
    with pytest.raises(InputError, match="expected a step record with an integer 'step' and a list 'heads'"):
        Detector(MECHANICS).update({"step": "1", "heads": []})
    with pytest.raises(InputTypeError, match="record: expected a Step or its to_json"):
        Detector(MECHANICS).update(3)
    with pytest.raises(InputTypeError, match="alerts: expected True, False, a DetectorConfig or a Detector, got 'yes'"):
        make_detector("yes")
    assert make_detector(False) is None and make_detector(True).config == DetectorConfig()
