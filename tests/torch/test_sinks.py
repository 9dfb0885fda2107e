"""attnscale.torch.sinks: the JSON-lines sink writes strict JSON a line per step; TensorBoard's holds
the same numbers (skipped when tensorboard is not installed); a missing tensorboard names its install."""

import json
import math
import types

import pytest

torch = pytest.importorskip("torch")

from attnscale.early_warning import DetectorConfig  # noqa: E402
from attnscale.errors import MissingDependency  # noqa: E402
from attnscale.torch import Monitor  # noqa: E402
from attnscale.torch.keys import step_keys  # noqa: E402
from attnscale.torch.sinks import JSONLSink, TensorBoardSink  # noqa: E402

F = torch.nn.functional


class Masked(torch.nn.Module):
    def forward(self, x, mask):
        return F.scaled_dot_product_attention(x, x, x, attn_mask=mask)


def run_steps(sinks, steps=3):
    layer = Masked()
    g = torch.Generator().manual_seed(0)
    mask = torch.ones(1, 2, 4, 4, dtype=torch.bool)
    mask[0, 1] = False  # head 1 attends nothing: its figures are null
    returned = []
    with Monitor(layer, mode="replace", history=False, sinks=sinks) as mon:
        for step in range(steps):
            layer(torch.randn(1, 2, 4, 8, generator=g) * (step + 1), mask)
            returned.append(mon.step(10 * step))
    return returned


def strict_loads(line: str):
    def refuse(name):
        raise ValueError(f"non-standard JSON constant {name}")

    return json.loads(line, parse_constant=refuse)


def test_jsonl_sink_writes_one_strict_json_line_per_step(tmp_path):
    path = tmp_path / "attn.jsonl"  # in an existing folder: the sink makes no folders (tests/cli/test_bad_state.py)
    steps = run_steps([JSONLSink(path)])
    lines = path.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 3
    records = [strict_loads(line) for line in lines]
    for record, step in zip(records, steps):
        assert record == json.loads(json.dumps(step.to_json()))
        assert record["step"] == step.step
        head0, head1 = record["heads"]
        assert head0["entropy_mean"] == pytest.approx(step.heads[0].entropy_mean) and head0["rows"] == 4
        assert head1["entropy_mean"] is None and math.isnan(step.heads[1].entropy_mean)
        assert head1["why_null"] == "no row attended any key"
        for f in ("first_key_weight", "q_norm_mean", "k_norm_mean"):  # HeadFigures' new fields pass as they are
            assert head0[f] == pytest.approx(getattr(step.heads[0], f)) and head0[f] > 0
        assert head1["first_key_weight"] is None and head1["k_norm_mean"] > 0  # its keys are read, its rows masked
    assert [r["step"] for r in records] == [0, 10, 20]
    # append=True keeps what is there (a resumed run); the default starts the file afresh.
    run_steps([JSONLSink(path, append=True)], steps=1)
    assert len(path.read_text().splitlines()) == 4
    run_steps([JSONLSink(path)], steps=1)
    assert len(path.read_text().splitlines()) == 1


def test_a_sink_receives_the_step_record_itself():
    """A sink's write gets the typed Step the monitor returns (HeadFigures inside), not a dict."""
    from attnscale.torch.monitor.records import HeadFigures, Step

    class Keep:
        def __init__(self):
            self.got = []

        def write(self, step):
            self.got.append(step)

        def close(self):
            pass

    keep = Keep()
    steps = run_steps([keep])
    assert len(keep.got) == 3 and all(a is b for a, b in zip(keep.got, steps))
    assert all(isinstance(s, Step) and all(isinstance(h, HeadFigures) for h in s.heads) for s in keep.got)


def test_jsonl_sink_refuses_an_unwritable_path(tmp_path):
    from attnscale.errors import InputError

    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(InputError, match="path: .* is a file, expected a folder"):
        JSONLSink(blocker / "attn.jsonl")


def test_tensorboard_sink_holds_the_step_figures(tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    sink = TensorBoardSink(log_dir=tmp_path)
    steps = run_steps([sink])
    sink.close()  # the sink is ours: the monitor leaves it open
    events = EventAccumulator(str(tmp_path))
    events.Reload()
    tags = events.Tags()["scalars"]
    # The callbacks' key scheme (attnscale.torch.keys): where, then what.
    assert {
        f"attn/Masked/head0/{f}" for f in ("entropy_mean", "first_key_weight", "q_norm_mean", "k_norm_mean")
    } <= set(tags)
    assert set(tags) == set(step_keys(steps[-1])) and not any(t.startswith("attention/") for t in tags)
    assert not any("head1" in t for t in tags if "entropy" in t)  # null figures are not written
    written = events.Scalars("attn/Masked/head0/max_logit")
    assert [e.step for e in written] == [0, 10, 20]
    assert [e.value for e in written] == pytest.approx([s.heads[0].max_logit for s in steps], rel=1e-6)
    # Over the layer's heads and the model's: head 1 attends nothing, so they are head 0's figures.
    for where in ("Masked", "model"):
        assert [e.value for e in events.Scalars(f"attn/{where}/entropy_mean")] == pytest.approx(
            [s.heads[0].entropy_mean for s in steps], rel=1e-6
        )
    assert [e.value for e in events.Scalars("attn/model/sink_heads_share")] == [
        float(s.heads[0].sink_head) for s in steps
    ]
    assert [e.value for e in events.Scalars("attn/calls")] == [1.0, 1.0, 1.0]


def test_tensorboard_missing_names_the_install_command(monkeypatch):
    import attnscale.torch.sinks as sinks

    def absent(module, extra):
        raise MissingDependency(f"{module} is not installed; install it with: pip install 'attnscale[{extra}]'")

    monkeypatch.setattr(sinks, "require", absent)
    with pytest.raises(MissingDependency, match=r"pip install 'attnscale\[tensorboard\]'"):
        TensorBoardSink(log_dir="unused")


def test_the_sinks_write_the_alerts_a_step_carries(tmp_path):
    """A monitor with a detector hands steps with ``alerts``: JSONLSink writes them in the line, and
    TensorBoardSink their count as attn/alerts; a step without (no detector) has neither."""
    import dataclasses

    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from attnscale.early_warning import Alert, replay

    path, given = tmp_path / "attn.jsonl", []
    with JSONLSink(path) as sink, TensorBoardSink(log_dir=tmp_path / "tb") as board:
        for step in run_steps([]):
            alerts = replay([step], DetectorConfig(float16_headroom=1e9))  # head 0 alerts; head 1 has no logits
            given.append(alerts)
            carried = types.SimpleNamespace(**{f.name: getattr(step, f.name) for f in dataclasses.fields(step)})
            carried.alerts, carried.to_json, carried.by_layer = alerts, step.to_json, step.by_layer
            sink.write(carried)
            board.write(carried)
        sink.write(step)  # no alerts attribute: the line as before
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [[Alert.from_json(a) for a in r["alerts"]] for r in lines[:3]] == given
    assert {a.head for alerts in given for a in alerts} == {0} and "alerts" not in lines[3]
    events = EventAccumulator(str(tmp_path / "tb"))
    events.Reload()
    assert [e.value for e in events.Scalars("attn/alerts")] == [float(len(a)) for a in given]


def test_a_monitor_with_alerts_hands_each_step_its_alerts_and_the_sink_writes_them(tmp_path):
    from attnscale.early_warning import Alert, DetectorConfig

    path = tmp_path / "attn.jsonl"
    layer, g = Masked(), torch.Generator().manual_seed(0)
    mask = torch.ones(1, 2, 4, 4, dtype=torch.bool)
    always = DetectorConfig(float16_headroom=1e9)  # every head with logits alerts at its first step
    with JSONLSink(path) as sink, Monitor(layer, mode="replace", history=False, sinks=[sink], alerts=always) as mon:
        steps = []
        for s in range(3):
            layer(torch.randn(1, 2, 4, 8, generator=g), mask)
            steps.append(mon.step(s))
    assert [(a.step, a.head, a.figure) for a in steps[0].alerts] == [
        (0, 0, "float16_headroom"),
        (0, 1, "float16_headroom"),
    ]
    assert steps[1].alerts == () and steps[2].alerts == ()  # one alert per episode
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [Alert.from_json(a) for a in lines[0]["alerts"]] == list(steps[0].alerts) and lines[1]["alerts"] == []
    with Monitor(layer, mode="replace") as plain:  # no detector: no alerts field
        layer(torch.randn(1, 2, 4, 8, generator=g), mask)
        assert plain.step(0).alerts is None
