"""The Lightning callback where training runs in several processes: a real Lightning ``Trainer`` with
``strategy="ddp"``, 2 processes on CPU (gloo; this file run as a script, Lightning starting the
second rank), the project's GPT, gradient accumulation and QK-clip. Each optimiser step's figures are
combined over both ranks before they are logged and before the guard clips, so both ranks hold the
same combined figures (bit for bit) and the same clipped weights, the calls and rows are both
ranks', and rank 0's logger gets the documented keys."""

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

    from attnscale.experiments.training.gpt import GPT, GPTConfig
    from attnscale.integrations.lightning import AttentionHealthCallback
    from attnscale.scales import InverseSqrtDk

    class Module(lightning.LightningModule):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.gpt = GPT(GPTConfig(vocab=13, context=SEQ, d_model=16, n_layers=LAYERS, d_k=8), InverseSqrtDk(),
                           figures=False)

        def training_step(self, x, batch_idx):
            loss = torch.nn.functional.cross_entropy(self.gpt(x)[:, :-1].flatten(0, 1), x[:, 1:].flatten())
            self.log("loss", loss)
            return loss

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.5)

    data = torch.utils.data.DataLoader(torch.randint(0, 13, (WORLD * BATCH * ACCUMULATE * STEPS, SEQ),
                                                     generator=torch.Generator().manual_seed(1)), batch_size=BATCH)
    callback = AttentionHealthCallback(tau=tau, mode="replace")
    trainer = lightning.Trainer(max_steps=STEPS, log_every_n_steps=1, accumulate_grad_batches=ACCUMULATE,
                                accelerator="cpu", devices=WORLD, strategy="ddp",
                                logger=lightning.loggers.CSVLogger(str(out)), callbacks=[callback],
                                enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
    module = Module()
    trainer.fit(module, data)
    last = callback.watch.last
    (out / f"rank{trainer.global_rank}.json").write_text(json.dumps({
        "step": last.step, "calls": last.calls,
        "heads": [[h.layer, h.head, h.rows, h.rows_single, h.entropy_sum, h.max_logit] for h in last.heads],
        "clips": callback.watch.guard.clips,
        "weights": [p.detach().double().flatten().tolist() for p in module.parameters()],
        "metrics": str(trainer.logger.experiment.metrics_file_path) if trainer.global_rank == 0 else None}))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_the_lightning_callback_combines_both_ddp_ranks_before_it_logs_and_clips(tmp_path):
    pytest.importorskip("lightning.pytorch")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()),
           "PYTHONWARNINGS": "ignore"}
    done = subprocess.run([sys.executable, __file__, str(tmp_path), "2.0"], env=env, capture_output=True, text=True,
                          timeout=240)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(WORLD)]
    assert ranks[0]["heads"] == ranks[1]["heads"] and ranks[0]["calls"] == ranks[1]["calls"]   # bit for bit
    assert ranks[0]["weights"] == ranks[1]["weights"]                 # so both clipped the same heads alike
    assert ranks[0]["clips"] == ranks[1]["clips"] > 0                 # not vacuous: the guard clipped
    assert ranks[0]["step"] == STEPS and ranks[0]["calls"] == WORLD * ACCUMULATE * LAYERS
    # Every rank's rows: WORLD × ACCUMULATE micro-batches of BATCH sequences, SEQ query rows each,
    # the first of each attending one key.
    sequences = WORLD * ACCUMULATE * BATCH
    assert {(rows, single) for _, _, rows, single, _, _ in ranks[0]["heads"]} == {(sequences * (SEQ - 1), sequences)}
    with open(ranks[0]["metrics"], newline="") as f:
        rows = list(csv.DictReader(f))
    logged = {k for r in rows for k, v in r.items() if v}
    layers = [f"gpt.blocks.{i}.attn" for i in range(LAYERS)]
    assert {"attn/calls", "attn/clipped_heads"} | {f"attn/{layer}/head{h}/max_logit" for layer in layers
                                                   for h in range(HEADS)} <= logged
    last = [r for r in rows if r.get("attn/calls")][-1]
    assert float(last["attn/calls"]) == WORLD * ACCUMULATE * LAYERS


if __name__ == "__main__":
    train(Path(sys.argv[1]), float(sys.argv[2]))
