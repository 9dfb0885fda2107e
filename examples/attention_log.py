"""Write a real attention log for ``attnscale watch``: a small GPT trained on the text every Python
ships (the standard library's documentation topics, as bytes) WITHOUT the 1/√d_k scale, so that its
logits grow as the post says, with the monitor writing each step's per layer × head figures and the
step's training loss, one JSON line a step::

    python examples/attention_log.py                    # writes examples/attn.jsonl (~1 min on one core)
    attnscale watch examples/attn.jsonl --html watch.html

Each line is the monitor's :meth:`Step.to_json` (what :class:`attnscale.torch.sinks.JSONLSink`
writes) with the step's ``loss`` (nats per byte) beside it, which the dashboard draws under each
heatmap. The shipped examples/attn.jsonl was written by this script as it is (seed 0).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from attnscale.experiments.training.gpt import GPT, GPTConfig
from attnscale.experiments.training.text_data import ByteText, VOCAB
from attnscale.scales import Unscaled
from attnscale.store import write_bytes_atomic
from attnscale.torch import Monitor


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=120)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--context", type=int, default=32)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=str(Path(__file__).with_name("attn.jsonl")))
    a = p.parse_args()

    torch.manual_seed(a.seed)
    torch.set_num_threads(1)
    config = GPTConfig(vocab=VOCAB, context=a.context, d_model=64, n_layers=2, d_k=32)
    net = GPT(config, Unscaled(), figures=False)  # plain SDPA calls, scale 1: what the monitor sees
    opt = torch.optim.AdamW(net.parameters(), lr=a.lr, weight_decay=0.0)
    text = ByteText.from_source(context=a.context)
    batches = torch.Generator().manual_seed(a.seed + 1)
    lines, start = [], time.perf_counter()
    with Monitor(net, mode="replace", history=False) as mon:
        for step in range(a.steps):
            x, y = text.batch(a.batch, a.context, batches)
            loss = F.cross_entropy(net(x).flatten(0, 1), y.flatten())
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            record = {**mon.step(step, log=False).to_json(), "loss": round(loss.item(), 6)}
            lines.append(json.dumps(record, allow_nan=False, ensure_ascii=False))
    write_bytes_atomic(a.out, ("\n".join(lines) + "\n").encode("utf-8"))
    print(
        f"{a.steps} steps, {config.n_layers} layers × {config.n_heads} heads in {time.perf_counter() - start:.1f} s: {a.out}"
    )


if __name__ == "__main__":
    main()
