"""Both trainer callbacks where training runs in several processes, 2 on CPU (gloo), with gradient
accumulation and QK-clip: a real Lightning ``Trainer`` with ``strategy="ddp"`` (this file run as a
script, Lightning starting the second rank) on the project's GPT, and a real Hugging Face ``Trainer``
under ``torchrun`` on a tiny Llama. Each optimiser step's figures are combined over both ranks before
they are logged and before the guard clips, so both ranks hold the same combined figures (bit for
bit) and the same clipped weights, the calls and rows are both ranks', and the logs get the
documented keys."""

import csv
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

WORLD, LAYERS, HEADS, ACCUMULATE, SEQ, BATCH, STEPS = 2, 2, 2, 2, 8, 3, 4


def train(out: Path, tau: float) -> None:
    """One rank of the run (Lightning starts the other with this same command line)."""
    import lightning.pytorch as lightning

    from attnscale.integrations.lightning import AttentionHealthCallback
    from helpers.lightning_gpt import tiny_gpt_module

    data = torch.utils.data.DataLoader(
        torch.randint(0, 13, (WORLD * BATCH * ACCUMULATE * STEPS, SEQ), generator=torch.Generator().manual_seed(1)),
        batch_size=BATCH,
    )
    callback = AttentionHealthCallback(tau=tau, mode="replace")
    trainer = lightning.Trainer(
        max_steps=STEPS,
        log_every_n_steps=1,
        accumulate_grad_batches=ACCUMULATE,
        accelerator="cpu",
        devices=WORLD,
        strategy="ddp",
        logger=lightning.loggers.CSVLogger(str(out)),
        callbacks=[callback],
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    module = tiny_gpt_module(lightning, lr=0.5, context=SEQ, n_layers=LAYERS)
    trainer.fit(module, data)
    last = callback.watch.last
    (out / f"rank{trainer.global_rank}.json").write_text(
        json.dumps(
            {
                "step": last.step,
                "calls": last.calls,
                "heads": [[h.layer, h.head, h.rows, h.rows_single, h.entropy_sum, h.max_logit] for h in last.heads],
                "clips": callback.watch.guard.clips,
                "weights": [p.detach().double().flatten().tolist() for p in module.parameters()],
                "metrics": str(trainer.logger.experiment.metrics_file_path) if trainer.global_rank == 0 else None,
            }
        )
    )


def train_transformers(out: Path, tau: float) -> None:
    """One rank of the Hugging Face run (torchrun starts both)."""
    import transformers

    from attnscale.integrations.transformers import AttentionHealthCallback
    from helpers.tiny_hf import llama_config

    torch.manual_seed(0)
    config = llama_config(num_hidden_layers=LAYERS, attn_implementation="sdpa")
    model = transformers.LlamaForCausalLM(config)
    ids = torch.randint(0, 50, (WORLD * BATCH * ACCUMULATE * STEPS, SEQ), generator=torch.Generator().manual_seed(1))
    args = transformers.TrainingArguments(
        output_dir=str(out),
        max_steps=STEPS,
        logging_steps=1,
        learning_rate=0.05,
        per_device_train_batch_size=BATCH,
        gradient_accumulation_steps=ACCUMULATE,
        report_to="none",
        use_cpu=True,
        ddp_backend="gloo",
        save_strategy="no",
        disable_tqdm=True,
    )
    callback = AttentionHealthCallback(tau=tau, mode="replace")
    data = [{"input_ids": r, "labels": r} for r in ids]
    trainer = transformers.Trainer(model=model, args=args, train_dataset=data, callbacks=[callback])
    trainer.train()
    last = callback.watch.last
    rank = torch.distributed.get_rank()
    logged = sorted({k for e in trainer.state.log_history if "loss" in e for k in e})  # the Trainer's and the figures
    (out / f"hf{rank}.json").write_text(
        json.dumps(
            {
                "step": last.step,
                "calls": last.calls,
                "heads": [[h.layer, h.head, h.rows, h.rows_single, h.entropy_sum, h.max_logit] for h in last.heads],
                "clips": callback.watch.guard.clips,
                "logged": logged,
                "weights": [p.detach().double().flatten().tolist() for p in model.parameters()],
            }
        )
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_the_lightning_callback_combines_both_ddp_ranks_before_it_logs_and_clips(tmp_path):
    pytest.importorskip("lightning.pytorch")
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(free_port()),
        "PYTHONWARNINGS": "ignore",
    }
    done = subprocess.run(
        [sys.executable, __file__, str(tmp_path), "2.0"], env=env, capture_output=True, text=True, timeout=240
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(WORLD)]
    assert ranks[0]["heads"] == ranks[1]["heads"] and ranks[0]["calls"] == ranks[1]["calls"]  # bit for bit
    assert ranks[0]["weights"] == ranks[1]["weights"]  # so both clipped the same heads alike
    assert ranks[0]["clips"] == ranks[1]["clips"] > 0  # not vacuous: the guard clipped
    assert ranks[0]["step"] == STEPS and ranks[0]["calls"] == WORLD * ACCUMULATE * LAYERS
    # Every rank's rows: WORLD × ACCUMULATE micro-batches of BATCH sequences, SEQ query rows each,
    # the first of each attending one key.
    sequences = WORLD * ACCUMULATE * BATCH
    assert {(rows, single) for _, _, rows, single, _, _ in ranks[0]["heads"]} == {(sequences * (SEQ - 1), sequences)}
    with open(ranks[0]["metrics"], newline="") as f:
        rows = list(csv.DictReader(f))
    logged = {k for r in rows for k, v in r.items() if v}
    layers = [f"gpt.blocks.{i}.attn" for i in range(LAYERS)]
    assert {"attn/calls", "attn/clipped_heads"} | {
        f"attn/{layer}/head{h}/max_logit" for layer in layers for h in range(HEADS)
    } <= logged
    last = [r for r in rows if r.get("attn/calls")][-1]
    assert float(last["attn/calls"]) == WORLD * ACCUMULATE * LAYERS


@pytest.mark.slow
def test_the_transformers_callback_combines_both_ddp_ranks_before_it_logs_and_clips(tmp_path):
    pytest.importorskip("transformers")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nproc_per_node",
            str(WORLD),
            "--master_port",
            str(free_port()),
            __file__,
            str(tmp_path),
            "1e-4",
            "transformers",
        ],  # its logits are small
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    ranks = [json.loads((tmp_path / f"hf{r}.json").read_text()) for r in range(WORLD)]
    assert ranks[0]["heads"] == ranks[1]["heads"] and ranks[0]["weights"] == ranks[1]["weights"]
    assert ranks[0]["clips"] == ranks[1]["clips"] > 0
    assert ranks[0]["step"] == STEPS and ranks[0]["calls"] == WORLD * ACCUMULATE * LAYERS
    sequences = WORLD * ACCUMULATE * BATCH
    assert {(rows, single) for _, _, rows, single, _, _ in ranks[0]["heads"]} == {(sequences * (SEQ - 1), sequences)}
    layers = [f"model.layers.{i}.self_attn" for i in range(LAYERS)]
    assert {"loss", "grad_norm", "learning_rate", "attn/calls", "attn/clipped_heads"} | {
        f"attn/{layer}/head{h}/max_logit" for layer in layers for h in range(4)
    } <= set(ranks[0]["logged"])


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: its helpers package
    (train_transformers if sys.argv[3:] == ["transformers"] else train)(Path(sys.argv[1]), float(sys.argv[2]))
    # Neither trainer destroys its process group; left to the interpreter's exit, gloo's worker
    # threads can outlive it and abort the process (pytorch/pytorch#179291).
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()
