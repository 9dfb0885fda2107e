"""attnscale.integrations: the callbacks in a real Hugging Face Trainer and a real Lightning Trainer,
a few steps on CPU on tiny models; the documented keys land in the run's logged metrics on the
trainer's logging steps, with the monitor's own figures; without the library, one line says what
to install."""

import csv
import math
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

from attnscale.integrations._watch import FIGURES, log_keys  # noqa: E402
from attnscale.torch.monitor_records import HeadFigures, Step  # noqa: E402

LAYER_KEYS = [f"attn/{{layer}}/{f}" for f in (*FIGURES, "sink_heads_share")]


def expected_keys(layers, heads, clip=False):
    keys = {"attn/calls"} | {k.format(layer=layer) for layer in layers for k in LAYER_KEYS}
    keys |= {f"attn/{layer}/head{h}/{f}" for layer in layers for h in range(heads) for f in FIGURES}
    return keys | ({"attn/clipped_heads"} if clip else set())


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


@pytest.mark.slow
def test_the_transformers_callback_logs_the_documented_keys_on_the_logging_steps(tmp_path):
    transformers = pytest.importorskip("transformers")
    from attnscale.integrations.transformers import AttentionHealthCallback

    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=50,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=64,
        attn_implementation="sdpa",
    )
    model = transformers.LlamaForCausalLM(config)
    ids = torch.randint(0, 50, (16, 10), generator=torch.Generator().manual_seed(1))
    data = [{"input_ids": row, "labels": row} for row in ids]
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path),
        max_steps=4,
        logging_steps=2,
        per_device_train_batch_size=2,
        gradient_accumulation_steps=2,
        report_to="none",
        use_cpu=True,
        save_strategy="no",
        disable_tqdm=True,
    )
    trainer = transformers.Trainer(model=model, args=args, train_dataset=data)

    class Reporter(transformers.TrainerCallback):
        """Stands for report_to's integrations: what on_log hands them."""

        seen = []

        def on_log(self, args, state, control, logs=None, **kwargs):
            self.seen.append((state.global_step, dict(logs)))

    trainer.callback_handler.callbacks.insert(1, Reporter())  # where report_to's callbacks sit
    callback = AttentionHealthCallback(trainer, tau=1e3, mode="replace")
    trainer.add_callback(callback)
    trainer.train()

    layers = [f"model.layers.{i}.self_attn" for i in range(2)]
    logged = {(e["step"], k) for e in trainer.state.log_history for k in e if k.startswith("attn/")}
    for step in (2, 4):
        assert {k for s, k in logged if s == step} == expected_keys(layers, 4, clip=True)
    assert {s for s, _ in logged} == {2, 4}
    reported = {s: logs for s, logs in Reporter.seen if "attn/calls" in logs}
    assert sorted(reported) == [2, 4]
    # A step is one optimiser step: two micro-batches of 2 sequences, one call per layer each.
    assert reported[4]["attn/calls"] == 2 * 2
    last = callback.watch.last  # the monitor's own figures of step 4
    # Each sequence's first query attends one key: counted apart from the rows.
    assert last.step == 4 and {(h.rows, h.rows_single) for h in last.heads} == {(2 * 2 * 9, 2 * 2)}
    h = last.heads[5]
    assert reported[4][f"attn/{h.layer}/head{h.head}/entropy_mean"] == h.entropy_mean
    assert reported[4]["attn/clipped_heads"] == 0.0  # τ = 1000: nothing to clip


class TinyGPTModule:
    """Built in the test (lightning imported there): the project's GPT as a LightningModule."""

    @staticmethod
    def make(lightning, lr: float = 0.1, context: int = 8, n_layers: int = 2):
        from attnscale.experiments.training.gpt import GPT, GPTConfig
        from attnscale.scales import InverseSqrtDk

        class Module(lightning.LightningModule):
            def __init__(self):
                super().__init__()
                torch.manual_seed(0)
                self.gpt = GPT(
                    GPTConfig(vocab=13, context=context, d_model=16, n_layers=n_layers, d_k=8),
                    InverseSqrtDk(),
                    figures=False,
                )

            def training_step(self, x, batch_idx):
                loss = torch.nn.functional.cross_entropy(self.gpt(x)[:, :-1].flatten(0, 1), x[:, 1:].flatten())
                self.log("loss", loss)
                return loss

            def configure_optimizers(self):
                return torch.optim.SGD(self.parameters(), lr=lr)

        return Module()


@pytest.mark.slow
def test_the_lightning_callback_logs_the_documented_keys_on_the_loggers_steps(tmp_path):
    lightning = pytest.importorskip("lightning.pytorch")
    from attnscale.integrations.lightning import AttentionHealthCallback

    data = torch.utils.data.DataLoader(
        torch.randint(0, 13, (24, 8), generator=torch.Generator().manual_seed(1)), batch_size=3
    )
    callback = AttentionHealthCallback(tau=1e3, mode="replace")
    trainer = lightning.Trainer(
        max_steps=4,
        log_every_n_steps=2,
        accumulate_grad_batches=2,
        accelerator="cpu",
        devices=1,
        logger=lightning.loggers.CSVLogger(str(tmp_path)),
        callbacks=[callback],
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(TinyGPTModule.make(lightning), data)

    with open(trainer.logger.experiment.metrics_file_path, newline="") as f:
        rows = list(csv.DictReader(f))
    loss_steps = [r["step"] for r in rows if r.get("loss")]
    attn_steps = [r["step"] for r in rows if r.get("attn/calls")]
    assert attn_steps == loss_steps and len(attn_steps) == 2
    layers = [f"gpt.blocks.{i}.attn" for i in range(2)]
    assert expected_keys(layers, 2, clip=True) <= {k for r in rows for k, v in r.items() if v}
    last = [r for r in rows if r.get("attn/calls")][-1]
    assert float(last["attn/calls"]) == 2 * 2  # two micro-batches × two layers
    h = callback.watch.last.heads[3]
    assert callback.watch.last.step == 4 and (h.rows, h.rows_single) == (2 * 3 * 7, 2 * 3)
    assert float(last[f"attn/{h.layer}/head{h.head}/max_logit"]) == pytest.approx(h.max_logit, rel=1e-6)


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
    ],
)
def test_bad_options_are_refused_when_the_callback_is_made(options, message):
    from attnscale.errors import AttnScaleError
    from attnscale.integrations._watch import Watch

    with pytest.raises(AttnScaleError, match=message):
        Watch(**options)
