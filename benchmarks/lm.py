"""Benchmark: training throughput of the lm experiment's GPT with the project's attention (per-row
figures on) against the same model with plain ``torch.nn.functional.scaled_dot_product_attention``.

The model and batch are the sweep's (:class:`attnscale.experiments.training.lm.LMCell` defaults: width 128,
2 layers, context 32, batch 16), one thread, float32, for each d_k. A "step" is what a training
cell does every step: forward, cross-entropy, backward, AdamW update. The two contenders start from
the same weights and see the same batches; in each round each runs ``--steps`` steps, one after the
other (interleaved, so that a noisy machine hurts both alike). Printed: median tokens per second of
each, and the ratio of medians, figures on ÷ SDPA (1.0 = free; below 1 = slower). Time is the
process's CPU time (one thread): on a shared machine, wall time mostly measures the neighbours (on
the development machine, under a load of 10 on 2 cores, the same 3 steps took 0.5 s or 3.5 s of
wall time); wall-time rates are kept in the JSON too.

    python benchmarks/lm.py                                   # d_k 16, 64, 128; 5 rounds of 5 steps
    python benchmarks/lm.py --rounds 9 --backend composed --json lm-bench.json
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from attnscale.experiments.training.gpt import GPT, GPTConfig
from attnscale.experiments.training import lm
from attnscale.experiments.training.lm import RULE_CHOICES, LMCell
from attnscale.experiments.training.text_data import VOCAB, ByteText
from attnscale.provenance import environment
from attnscale.store import write_json_atomic


def make_step(model: GPT, batches):
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.95))
    loss_fn = torch.nn.functional.cross_entropy

    def step(i: int) -> None:
        x, y = batches[i % len(batches)]
        loss = loss_fn(model(x).flatten(0, 1), y.flatten())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    return step


def measure(d_k: int, rule: str, backend: str, rounds: int, steps: int) -> dict:
    cell = LMCell(rule, d_k, "adamw", 1e-3, 0)
    text = ByteText.from_source(cell.text, context=cell.context)
    gen = torch.Generator().manual_seed(0)
    batches = [text.batch(cell.batch, cell.context, gen) for _ in range(8)]
    config = GPTConfig(VOCAB, cell.context, cell.d_model, cell.n_layers, d_k)
    contenders = {}
    for name, figures in (("figures", True), ("sdpa", False)):
        torch.manual_seed(0)
        contenders[name] = make_step(GPT(config, RULE_CHOICES[rule], backend=backend, figures=figures), batches)
    cpu = {name: [] for name in contenders}
    wall = {name: [] for name in contenders}
    for step in contenders.values():  # warm-up: allocator, first-call dispatch
        step(0)
    for r in range(rounds):
        for name, step in contenders.items():
            start, start_cpu = time.perf_counter(), time.process_time()
            for i in range(steps):
                step(r * steps + i)
            cpu[name].append(time.process_time() - start_cpu)
            wall[name].append(time.perf_counter() - start)
    tokens = steps * cell.batch * cell.context
    rate = {name: tokens / statistics.median(ts) for name, ts in cpu.items()}
    wall_rate = {name: tokens / statistics.median(ts) for name, ts in wall.items()}
    return {
        "d_k": d_k,
        "heads": cell.d_model // d_k,
        "rule": rule,
        "backend": backend,
        "tokens_per_round": tokens,
        "cpu_seconds": cpu,
        "wall_seconds": wall,
        "tokens_per_s": rate,
        "ratio": rate["figures"] / rate["sdpa"],
        "wall_tokens_per_s": wall_rate,
        "wall_ratio": wall_rate["figures"] / wall_rate["sdpa"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--d-ks", default=",".join(str(d) for d in lm.LMConfig().d_ks))
    parser.add_argument("--rule", default="inverse_sqrt_dk", choices=sorted(RULE_CHOICES))
    parser.add_argument(
        "--backend",
        default=lm.BACKEND,
        help="of attnscale.torch.attention, for the figures (default: the experiment's)",
    )
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=5, help="training steps per contender per round")
    parser.add_argument("--json", default=None, help="also write the measurements to this file")
    args = parser.parse_args()
    torch.set_num_threads(1)  # as the sweep's workers
    rows = [measure(int(d), args.rule, args.backend, args.rounds, args.steps) for d in args.d_ks.split(",")]
    print(
        f"GPT of the lm sweep, {args.rule}, figures via backend {args.backend!r}, 1 thread, "
        f"median of {args.rounds} rounds of {args.steps} training steps, tokens per CPU-second"
    )
    print(f"{'d_k':>5}{'heads':>6}{'figures tok/s':>15}{'SDPA tok/s':>12}{'figures / SDPA':>16}")
    for r in rows:
        print(
            f"{r['d_k']:>5}{r['heads']:>6}{r['tokens_per_s']['figures']:>15.0f}{r['tokens_per_s']['sdpa']:>12.0f}"
            f"{r['ratio']:>15.2f}x"
        )
    if args.json:
        write_json_atomic(args.json, {"benchmark": "lm", "environment": environment(), "rows": rows})


if __name__ == "__main__":
    main()
