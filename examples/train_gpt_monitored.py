"""Train a small GPT on the text every Python ships (the standard library's documentation topics,
as bytes) with the attention monitor, TensorBoard logging and QK-clip, in one process or several:

    python examples/train_gpt_monitored.py
    torchrun --nproc_per_node 2 examples/train_gpt_monitored.py        # CPU, gloo; each rank its own batches

Each step: forward, backward, optimiser step (DDP averages the gradients across ranks), then the
monitor's figures of the step, combined over the ranks with one collective
(attnscale.torch.distributed.combine_step), so that every rank clips the same heads by the same
factors (attnscale.torch.guard.LogitGuard); rank 0 alone writes TensorBoard
(runs/gpt_monitored by default: ``tensorboard --logdir runs``) and prints a line every --print-every steps.
"""

from __future__ import annotations

import argparse
import math
import os
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F

from attnscale.experiments.training.gpt import GPT, GPTConfig
from attnscale.experiments.training.text_data import ByteText, VOCAB
from attnscale.scales import InverseSqrtDk
from attnscale.torch import Monitor
from attnscale.torch.distributed import combine_step
from attnscale.torch.guard import LogitGuard
from attnscale.torch.sinks import TensorBoardSink


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--batch", type=int, default=16, help="sequences per rank and step")
    p.add_argument("--context", type=int, default=64)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--tau", type=float, default=12.0, help="QK-clip threshold on each head's largest logit")
    p.add_argument("--print-every", type=int, default=50)
    p.add_argument("--logdir", default="runs/gpt_monitored")
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()

    distributed = "WORLD_SIZE" in os.environ  # set by torchrun
    if distributed:
        dist.init_process_group("gloo")
    rank, world = (dist.get_rank(), dist.get_world_size()) if distributed else (0, 1)

    torch.manual_seed(a.seed)  # the same initial weights on every rank
    config = GPTConfig(vocab=VOCAB, context=a.context, d_model=64, n_layers=2, d_k=16)
    net = GPT(config, InverseSqrtDk(), figures=False)  # plain SDPA: the calls the monitor sees
    model = torch.nn.parallel.DistributedDataParallel(net) if distributed else net
    opt = torch.optim.AdamW(net.parameters(), lr=a.lr, weight_decay=0.0)
    text = ByteText.from_source(context=a.context)
    batches = torch.Generator().manual_seed(a.seed + 1000 * rank)  # each rank its own batches
    guard = LogitGuard(net, a.tau)  # names layers as the monitor does: blocks.0.attn, ...
    sink = TensorBoardSink(log_dir=a.logdir) if rank == 0 else None
    if rank == 0:
        print(
            f"{world} process(es), {sum(p.numel() for p in net.parameters())} parameters, "
            f"{config.n_layers} layers × {config.n_heads} heads, batch {a.batch} × {a.context} bytes per rank, "
            f"QK-clip at tau = {a.tau:g}"
        )

    start, clipped = time.perf_counter(), 0
    with Monitor(net, mode="replace", history=False) as mon:  # no sinks: rank 0 writes the combined step
        for step in range(a.steps):
            x, y = text.batch(a.batch, a.context, batches)
            loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            figures = combine_step(mon.step(step, log=False))  # every rank: one collective
            clips = guard.apply(figures)  # the same on every rank
            clipped += len(clips)
            if sink is not None:
                sink.write(figures)
                sink.writer.add_scalar("attn/clipped_heads", len(clips), step)  # the sink's key scheme
            if step % a.print_every == 0 or step == a.steps - 1:
                mean_loss = loss.detach().clone()
                if distributed:
                    dist.all_reduce(mean_loss)
                    mean_loss /= world
                hot = max(figures.heads, key=lambda h: h.max_logit)
                rows = sum(h.rows for h in figures.heads)
                entropy = sum(h.entropy_mean * h.rows for h in figures.heads) / rows
                if rank == 0:
                    print(
                        f"step {step:4d}  loss {mean_loss.item() / math.log(2):.3f} bits/byte  "
                        f"max logit {hot.max_logit:6.2f} ({hot.layer} head {hot.head})  "
                        f"entropy {entropy:.3f} nats  rows {rows}  clipped {len(clips)} heads ({clipped} so far)"
                    )
    if sink is not None:
        sink.close()  # the sink is ours, not the monitor's
        print(f"{a.steps} steps in {time.perf_counter() - start:.1f} s; TensorBoard: {a.logdir}")
    if distributed:
        dist.destroy_process_group()
        # Gloo's worker thread frees a finished collective's tensors after the collective returns,
        # and that takes the GIL: one still doing so as Python exits aborts the process, after all
        # the work is done (pytorch/pytorch#179291). Sleeping gives it the GIL to finish.
        time.sleep(0.1)


if __name__ == "__main__":
    main()
