"""attnscale.integrations: the callbacks in a real Hugging Face Trainer and a real Lightning Trainer,
a few steps on CPU on tiny models; the documented keys land in the trainer's own log entries on its
logging steps, with the monitor's own figures, and every key the trainer logs without the callback is
still there, equal (observe mode: the same run bit for bit); without the library, one line says what
to install."""

import csv
import math
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

from attnscale.integrations._watch import FIGURES, log_keys  # noqa: E402
from attnscale.torch.monitor.records import HeadFigures, Step  # noqa: E402
from helpers.lightning_gpt import tiny_gpt_module  # noqa: E402
from helpers.tiny_hf import llama_config  # noqa: E402

LAYER_KEYS = [f"attn/{{layer}}/{f}" for f in (*FIGURES, "sink_heads_share")]


def expected_keys(layers, heads, clip=False, alerts=False):
    """The keys of a step of ``layers`` × ``heads``: each layer's, the model's (as a layer ``model``), each head's."""
    keys = {"attn/calls"} | {k.format(layer=layer) for layer in (*layers, "model") for k in LAYER_KEYS}
    keys |= {f"attn/{layer}/head{h}/{f}" for layer in layers for h in range(heads) for f in FIGURES}
    return keys | ({"attn/clipped_heads"} if clip else set()) | ({"attn/alerts"} if alerts else set())


def test_log_keys_pool_heads_by_rows_and_leave_out_what_does_not_exist():
    def head(h, rows, mean, lo, hi, sat, first=math.nan, q_norm=math.nan, k_norm=math.nan):
        return HeadFigures(
            layer="L",
            head=h,
            calls=1,
            rows=rows,
            rows_empty=4 - rows,
            rows_broken=0,
            saturated_rows=sat,
            float16_overflow_rows=0,
            entropy_mean=mean,
            entropy_median=math.nan,
            entropy_min=lo,
            max_logit=hi,
            min_logit=-hi,
            max_abs_logit=hi,
            first_key_weight=first,
            q_norm_mean=q_norm,
            k_norm_mean=k_norm,
        )

    step = Step(
        step=2,
        calls=1,
        fallbacks={"dropout": 1},
        heads=[
            head(0, 4, 1.0, 0.5, 3.0, 1, 0.5, 2.0, 1.0),
            head(1, 1, 2.0, 0.25, 9.0, 1, 0.25, 7.0, 3.0),
            head(2, 0, math.nan, math.nan, math.nan, 0),
        ],
    )
    keys = log_keys(step, clips=[], per_head=True)
    assert keys["attn/L/entropy_mean"] == pytest.approx((4 * 1.0 + 1 * 2.0) / 5)
    assert keys["attn/L/first_key_weight"] == pytest.approx((4 * 0.5 + 1 * 0.25) / 5)
    assert (keys["attn/L/q_norm_mean"], keys["attn/L/k_norm_mean"]) == pytest.approx(((4 * 2 + 7) / 5, (4 + 3) / 5))
    assert keys["attn/L/sink_heads_share"] == 0.5  # head 0 (0.5 ≥ 0.3) of the two with rows
    assert keys["attn/L/head1/first_key_weight"] == 0.25 and "attn/L/head2/first_key_weight" not in keys
    assert (keys["attn/L/entropy_min"], keys["attn/L/max_logit"], keys["attn/L/saturated_fraction"]) == (0.25, 9.0, 0.4)
    assert keys["attn/L/head1/max_logit"] == 9.0 and "attn/L/head2/entropy_mean" not in keys
    assert keys["attn/L/head2/float16_overflow_rows"] == 0.0
    assert (keys["attn/fallbacks/dropout"], keys["attn/clipped_heads"], keys["attn/calls"]) == (1.0, 0.0, 1.0)
    assert not any(k.startswith("attn/L/head") for k in log_keys(step, per_head=False))
    # One layer: the model's figures are the layer's; no detector, no alerts key.
    assert {k[len("attn/model/") :]: v for k, v in keys.items() if k.startswith("attn/model/")} == {
        k[len("attn/L/") :]: v for k, v in keys.items() if k.count("/") == 2 and k.startswith("attn/L/")
    }
    assert "attn/alerts" not in keys and log_keys(step, alerts=3)["attn/alerts"] == 3.0


# What a run's log entries may differ in besides the figures: the wall clock.
TIMINGS = {"train_runtime", "train_samples_per_second", "train_steps_per_second"}
LLAMA_LAYERS = [f"model.layers.{i}.self_attn" for i in range(2)]


def without(entry: dict, keys) -> dict:
    return {k: v for k, v in entry.items() if k not in keys and not k.startswith("attn/")}


def hf_trainer(transformers, out, accumulate: int, callbacks=None, **options):
    """A real Trainer on a tiny Llama (2 layers, 4 query heads over 2 KV heads), 16 sequences of 10."""
    torch.manual_seed(0)
    config = llama_config(attn_implementation="sdpa")
    model = transformers.LlamaForCausalLM(config)
    ids = torch.randint(0, 50, (16, 10), generator=torch.Generator().manual_seed(1))
    args = transformers.TrainingArguments(
        **{"max_steps": 4, "logging_steps": 2, "report_to": "none", **options},
        output_dir=str(out),
        per_device_train_batch_size=2,
        gradient_accumulation_steps=accumulate,
        use_cpu=True,
        save_strategy="no",
        disable_tqdm=True,
    )
    data = [{"input_ids": row, "labels": row} for row in ids]
    return transformers.Trainer(model=model, args=args, train_dataset=data, callbacks=callbacks)


def recording_reporter(transformers):
    """Stands for report_to's integrations: what each on_log call hands them."""

    class Reporter(transformers.TrainerCallback):
        def __init__(self):
            self.seen = []

        def on_log(self, args, state, control, logs=None, **kwargs):
            self.seen.append(dict(logs))

    return Reporter()


@pytest.mark.slow
@pytest.mark.parametrize(
    "accumulate, style, logging, logged_steps",
    [
        (1, "callbacks", {}, [2, 4]),
        (2, "callbacks", {}, [2, 4]),
        (1, "add_callback", {"logging_first_step": True}, [1, 2, 4]),
        (2, "add_callback", {}, [2, 4]),
        (2, "callbacks", {"logging_strategy": "epoch", "max_steps": 8}, [4, 8]),  # 4 steps an epoch
    ],
)
def test_the_transformers_callback_adds_its_figures_to_the_trainers_own_log_entries(
    tmp_path, accumulate, style, logging, logged_steps
):
    transformers = pytest.importorskip("transformers")
    from attnscale.integrations.transformers import AttentionHealthCallback

    plain = hf_trainer(transformers, tmp_path / "plain", accumulate, **logging)
    plain.train()
    callback = AttentionHealthCallback(tau=1e3)  # observe mode: the run is bit for bit the plain one
    trainer = hf_trainer(
        transformers, tmp_path / "watched", accumulate, [callback] if style == "callbacks" else None, **logging
    )
    if style == "add_callback":
        trainer.add_callback(callback)
    reporter = recording_reporter(transformers)
    trainer.callback_handler.callbacks.insert(1, reporter)  # where report_to's integrations sit
    trainer.train()

    history = trainer.state.log_history
    # Every entry the Trainer logged without the callback, at the same steps, with the same values.
    assert [without(e, TIMINGS) for e in history] == [without(e, TIMINGS) for e in plain.state.log_history]
    assert [e.keys() - {*TIMINGS} for e in plain.state.log_history] == [
        {k for k in e if not k.startswith("attn/")} - TIMINGS for e in history
    ]
    assert [e["step"] for e in history if "loss" in e] == logged_steps
    for e in history:  # the figures in each step's entry, in no other (the run's summary)
        assert {k for k in e if k.startswith("attn/")} == (
            expected_keys(LLAMA_LAYERS, 4, clip=True) if "loss" in e else set()
        )
    # The reporters got the Trainer's keys and the figures in one on_log call: the entry itself.
    assert reporter.seen == [{k: v for k, v in e.items() if k != "step"} for e in history]

    last = callback.watch.last  # the monitor's own figures of the last step
    entry = history[-2]  # the last step's (the summary follows)
    # A step is one optimiser step: `accumulate` micro-batches of 2 sequences, one call per layer each.
    assert last.step == logged_steps[-1] and entry["attn/calls"] == accumulate * 2
    # Each sequence's first query attends one key: counted apart from the rows.
    assert {(h.rows, h.rows_single) for h in last.heads} == {(accumulate * 2 * 9, accumulate * 2)}
    h = last.heads[5]
    assert entry[f"attn/{h.layer}/head{h.head}/entropy_mean"] == h.entropy_mean
    assert entry["attn/clipped_heads"] == 0.0  # τ = 1000: nothing to clip


@pytest.mark.slow
def test_tensorboard_through_report_to_gets_the_trainers_scalars_and_the_figures_at_each_logging_step(tmp_path):
    transformers = pytest.importorskip("transformers")
    accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
    from attnscale.integrations.transformers import AttentionHealthCallback

    trainer = hf_trainer(transformers, tmp_path, 2, report_to="tensorboard")
    trainer.add_callback(AttentionHealthCallback())  # added last, after the TensorBoard callback
    trainer.train()

    (events,) = tmp_path.glob("runs/*/events.out.tfevents.*")
    board = accumulator.EventAccumulator(str(events.parent), size_guidance={"scalars": 0})
    board.Reload()
    entries = [e for e in trainer.state.log_history if "loss" in e]
    figure = "attn/model.layers.1.self_attn/head2/max_logit"
    for key in ("loss", "grad_norm", "learning_rate", "attn/calls", figure):
        scalars = board.Scalars(f"train/{key}")  # the TensorBoard callback's prefix
        assert [(s.step, s.value) for s in scalars] == [(e["step"], pytest.approx(e[key], rel=1e-6)) for e in entries]


@pytest.mark.slow
def test_the_transformers_callback_refuses_a_trainer_and_says_how_to_add_it(tmp_path):
    transformers = pytest.importorskip("transformers")
    from attnscale.errors import InputTypeError
    from attnscale.integrations.transformers import AttentionHealthCallback

    fix = r"the Trainer hands it the model\): pass AttentionHealthCallback\(tau=\.\.\.\) in Trainer\(callbacks="
    with pytest.raises(InputTypeError, match=r"takes options by name and no trainer \(got a Trainer; " + fix):
        AttentionHealthCallback(hf_trainer(transformers, tmp_path, 1), tau=100.0)  # the first version's call
    with pytest.raises(InputTypeError, match=r"\(got a float; "):
        AttentionHealthCallback(100.0)


def test_without_the_trainers_handler_the_figures_still_reach_the_entry_and_a_warning_says_who_misses_them():
    """Hooks called by hand (no CallbackHandler above them): the callback cannot move ahead of the
    reporters, says so, and still adds the figures to the logged dict and its log_history entry."""
    transformers = pytest.importorskip("transformers")
    from attnscale.integrations.transformers import AttentionHealthCallback

    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=20, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=16
    )
    model = transformers.LlamaForCausalLM(config)
    state, control = transformers.TrainerState(), transformers.TrainerControl()
    callback = AttentionHealthCallback(per_head=False)
    with pytest.warns(UserWarning, match="reporting callbacks listed before this one will not send the attn/ figures"):
        callback.on_train_begin(None, state, control, model=model)
    callback.on_step_begin(None, state, control)
    model(torch.randint(0, 20, (1, 6)))
    state.global_step, control.should_log = 1, True
    callback.on_step_end(None, state, control)
    logs = {"loss": math.nan}  # a NaN loss: the entry is still found (by identity, not equality)
    state.log_history.append({**logs, "step": 1})  # what Trainer.log does before on_log
    callback.on_log(None, state, control, logs=logs)
    callback.on_log(None, state, control, logs=(later := {"eval_loss": 1.0}))  # the step's figures go once
    callback.on_train_end(None, state, control)
    assert logs["attn/calls"] == 1.0 and "attn/model.layers.0.self_attn/max_logit" in logs
    assert state.log_history[-1] == {**logs, "step": 1} and later == {"eval_loss": 1.0}


def lightning_run(lightning, out, accumulate: int, callbacks=()):
    """A real Lightning Trainer with a CSV logger, one epoch of 4 optimiser steps, written every 2nd;
    returns the trainer and the CSV's rows."""
    data = torch.utils.data.DataLoader(
        torch.randint(0, 13, (3 * 4 * accumulate, 8), generator=torch.Generator().manual_seed(1)), batch_size=3
    )
    trainer = lightning.Trainer(
        max_epochs=1,
        log_every_n_steps=2,
        accumulate_grad_batches=accumulate,
        accelerator="cpu",
        devices=1,
        logger=lightning.loggers.CSVLogger(str(out)),
        callbacks=list(callbacks),
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(tiny_gpt_module(lightning), data)
    with open(trainer.logger.experiment.metrics_file_path, newline="") as f:
        return trainer, list(csv.DictReader(f))


@pytest.mark.slow
@pytest.mark.parametrize("accumulate", [1, 2])
def test_the_lightning_callback_adds_its_figures_to_the_rows_the_logger_writes_and_keeps_the_modules_own(
    tmp_path, monkeypatch, accumulate
):
    lightning = pytest.importorskip("lightning.pytorch")
    from attnscale.integrations.lightning import AttentionHealthCallback

    plain, plain_rows = lightning_run(lightning, tmp_path / "plain", accumulate)
    callback = AttentionHealthCallback(tau=1e3)  # observe mode: the run is bit for bit the plain one
    logged_at = []  # the steps whose figures went through LightningModule.log (a millisecond a key)
    log_dict = lightning.LightningModule.log_dict

    def counted(module, metrics, *args, **kwargs):
        logged_at.extend([module.trainer.global_step] if "attn/calls" in metrics else [])
        return log_dict(module, metrics, *args, **kwargs)

    monkeypatch.setattr(lightning.LightningModule, "log_dict", counted)
    trainer, rows = lightning_run(lightning, tmp_path / "watched", accumulate, [callback])
    assert logged_at == [2, 4]  # the steps written, no other

    # The module's own metrics: the same rows (steps 1 and 3, the epoch's), columns and values.
    own = [{k: v for k, v in r.items() if v and not k.startswith("attn/")} for r in rows]
    assert own == [{k: v for k, v in r.items() if v} for r in plain_rows] and len(own) == 3
    for metrics in ("logged_metrics", "callback_metrics"):
        watched = {k: v for k, v in getattr(trainer, metrics).items() if not k.startswith("attn/")}
        assert watched.keys() == getattr(plain, metrics).keys() == {"loss", "epoch_loss"}
        assert all(torch.equal(v, getattr(plain, metrics)[k]) for k, v in watched.items())
    # The figures in each row of a written step, with every documented key.
    layers = [f"gpt.blocks.{i}.attn" for i in range(2)]
    for r in rows:
        assert {k for k, v in r.items() if v and k.startswith("attn/")} == (
            expected_keys(layers, 2, clip=True) if r["loss"] else set()
        )
    last = [r for r in rows if r["attn/calls"]][-1]
    assert float(last["attn/calls"]) == accumulate * 2  # micro-batches × layers
    assert float(trainer.callback_metrics["attn/calls"]) == accumulate * 2
    h = callback.watch.last.heads[3]  # the monitor's own figures of the last step, the one written
    assert callback.watch.last.step == 4 and (h.rows, h.rows_single) == (accumulate * 3 * 7, accumulate * 3)
    assert float(last[f"attn/{h.layer}/head{h.head}/max_logit"]) == pytest.approx(h.max_logit, rel=1e-6)


def test_the_docs_page_lists_the_keys_the_module_documents():
    """docs/trainers.md's key table and attnscale.torch.keys' (the API's, the one scheme of the
    callbacks and TensorBoardSink) name the same keys."""
    import re
    from pathlib import Path

    import attnscale.torch.keys

    page = (Path(__file__).parents[2] / "docs" / "trainers.md").read_text(encoding="utf-8")
    documented = set(re.findall(r"``(attn/[^`]+)``", attnscale.torch.keys.__doc__))
    assert len(documented) == 16 and set(re.findall(r"^\| `(attn/[^`]+)`", page, re.M)) == documented


@pytest.mark.parametrize(
    "module, package, extra",
    [("transformers", "transformers", "transformers"), ("lightning", "lightning.pytorch", "lightning")],
)
def test_without_the_library_the_import_says_what_to_install_in_one_line(module, package, extra):
    code = (
        f"import sys; sys.modules[{package.split('.')[0]!r}] = None\n"
        f"try:\n    import attnscale.integrations.{module}\n"
        "except ImportError as err:\n    print(err)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out == f"{package} is not installed; install it with: pip install 'attnscale[{extra}]'\n"


@pytest.mark.parametrize(
    "options, message",
    [
        ({"tau": 0.0}, "tau: expected a finite number > 0, got 0.0"),
        ({"tau": 1.0, "alpha": 2}, r"alpha: expected a number in \[0, 1\]"),
        ({"log_only": "yes"}, "log_only: expected True or False, got 'yes'"),
        ({"per_head": 1}, "per_head: expected True or False, got 1"),
        (
            {"every": 2},
            r"every: not taken by the trainer callbacks \(got 2\): they log the figures of the trainer's logging",
        ),
    ],
)
def test_bad_options_are_refused_when_the_callback_is_made(options, message):
    from attnscale.errors import AttnScaleError
    from attnscale.integrations._watch import Watch

    with pytest.raises(AttnScaleError, match=message):
        Watch(**options)


# A headroom bound no logit can meet (65504 / |logit| < 10⁹ for any |logit| > 6.6e-5): every head
# alerts at the first step, one alert per head (an episode is not raised again while it lasts).
ALWAYS = {"float16_headroom": 1e9}


def test_the_transformers_callback_counts_alerts_and_stops_the_training_on_one(tmp_path):
    transformers = pytest.importorskip("transformers")
    from attnscale.early_warning import DetectorConfig
    from attnscale.integrations.transformers import AttentionHealthCallback

    callback = AttentionHealthCallback(alerts=DetectorConfig(**ALWAYS), stop_on_alert=True)
    trainer = hf_trainer(transformers, tmp_path, 1, [callback])  # logging_steps=2: step 1 logs as it stops
    stopping = (
        r"stopping the training at an early-warning alert: step 1, model\.layers\.0\.self_attn head 0: the float16"
    )
    with pytest.warns(UserWarning, match=stopping + r".* \(and 7 more alerts in this step\)"):
        trainer.train()
    assert trainer.state.global_step == 1  # of max_steps 4
    first = trainer.state.log_history[0]
    assert first["step"] == 1 and first["attn/alerts"] == 8.0 and "loss" in first
    assert {k for k in first if k.startswith("attn/")} == expected_keys(LLAMA_LAYERS, 4, alerts=True)
    assert [(a.step, a.figure) for a in callback.alerts] == [(1, "float16_headroom")] * 8


def test_the_lightning_callback_logs_alerts_per_logged_step_and_stops_only_when_asked(tmp_path):
    lightning = pytest.importorskip("lightning.pytorch")
    from attnscale.early_warning import DetectorConfig
    from attnscale.integrations.lightning import AttentionHealthCallback

    counting = AttentionHealthCallback(alerts=DetectorConfig(**ALWAYS))
    trainer, rows = lightning_run(lightning, tmp_path / "count", 1, [counting])
    assert trainer.global_step == 4 and len(counting.alerts) == 4  # 2 layers × 2 heads, at step 1
    # Step 1's alerts are logged with the next written step (2), none after: once per episode.
    assert [float(r["attn/alerts"]) for r in rows if r.get("attn/alerts")] == [4.0, 0.0]
    stopping = AttentionHealthCallback(alerts=DetectorConfig(**ALWAYS), stop_on_alert=True)
    with pytest.warns(UserWarning, match=r"early-warning alert: step 1, gpt\.blocks\.0\.attn head 0"):
        trainer, _ = lightning_run(lightning, tmp_path / "stop", 1, [stopping])
    assert trainer.global_step == 1 and trainer.should_stop


def test_the_callbacks_refuse_bad_alert_options_when_made():
    from attnscale.errors import AttnScaleError
    from attnscale.integrations._watch import Watch

    with pytest.raises(AttnScaleError, match="alerts: expected True, False, a DetectorConfig or a Detector, got 3"):
        Watch(alerts=3)
    with pytest.raises(AttnScaleError, match="stop_on_alert: expected True or False, got 'yes'"):
        Watch(stop_on_alert="yes")
    assert Watch(stop_on_alert=True).alerts_option is True  # stopping turns the detector on
