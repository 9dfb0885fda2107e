"""Benchmark: what the early-warning detector (attnscale.early_warning.Detector.update) costs per
training step, on a realistic step record: 12 layers × 12 heads (GPT-2 small / BERT-base), the
figures drifting with 1 % noise, no alert raised (the usual step).

Two forms of the record, each timed: the Step the monitor hands a callback (HeadFigures inside) and
its JSON data as a JSONL log holds it (what ``attnscale watch`` replays). The detector is warmed past
its window first (the ring full, every head judged). Each round times ``--steps`` updates; the table
gives the minimum and median over rounds of µs per step, by the wall clock and by this process's CPU
time (on a machine shared with other work, the CPU time is closer to the cost: the wall clock adds the
time spent waiting for a core).

    python benchmarks/early_warning.py                  # 12 × 12 heads, 15 rounds of 200 steps
    python benchmarks/early_warning.py --layers 32 --heads 32
"""

from __future__ import annotations

import argparse
import math
import platform
import statistics
import time

import numpy as np

from attnscale.early_warning import Detector, DetectorConfig
from attnscale.torch.monitor.records import HeadFigures, Step


def make_steps(n: int, layers: int, heads: int, seed: int = 0) -> list:
    """``n`` Steps of ``layers`` × ``heads`` heads with 1 % noise on each watched figure."""
    rng = np.random.default_rng(seed)
    out = []
    for s in range(n):
        # Python floats, as the monitor makes them (its figures come from .tolist()).
        noise = (1 + 0.01 * rng.standard_normal((layers, heads, 3))).tolist()
        figures = [
            HeadFigures(
                layer=f"model.layers.{i}.self_attn",
                head=h,
                calls=1,
                rows=4096,
                rows_empty=0,
                rows_broken=0,
                saturated_rows=int(40 * noise[i][h][2]),
                float16_overflow_rows=0,
                entropy_mean=2.5,
                entropy_median=math.nan,
                entropy_min=0.8 * noise[i][h][1],
                max_logit=12.0 * noise[i][h][0],
                min_logit=-9.0,
                max_abs_logit=12.0 * noise[i][h][0],
                first_key_weight=0.25 * noise[i][h][1],
                q_norm_mean=8.0,
                k_norm_mean=8.0,
            )
            for i in range(layers)
            for h in range(heads)
        ]
        out.append(Step(step=s, calls=layers, fallbacks={}, heads=figures))
    return out


def time_updates(records: list, rounds: int, steps: int, config: DetectorConfig) -> tuple[list, list, int]:
    """µs per update over each round, wall clock and this process's CPU time, and the alerts raised
    (0 expected: the usual step)."""
    detector = Detector(config)
    warm = config.window + 1
    for r in records[:warm]:
        detector.update(r)
    per_step, cpu, alerts, at = [], [], 0, warm
    for _ in range(rounds):
        batch = [records[warm + (at + i) % (len(records) - warm)] for i in range(steps)]
        at += steps
        start, started = time.perf_counter(), time.process_time()
        for r in batch:
            alerts += len(detector.update(r))
        per_step.append((time.perf_counter() - start) / steps * 1e6)
        cpu.append((time.process_time() - started) / steps * 1e6)
    return per_step, cpu, alerts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--heads", type=int, default=12)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--steps", type=int, default=200, help="updates per round")
    args = parser.parse_args()
    config = DetectorConfig()
    steps = make_steps(config.window + 400, args.layers, args.heads)
    print(
        f"{args.layers} × {args.heads} heads, {args.rounds} rounds of {args.steps} updates; {platform.processor() or platform.machine()}"
    )
    for name, records in (("Step (a callback)", steps), ("JSON record (a log)", [s.to_json() for s in steps])):
        us, cpu, alerts = time_updates(records, args.rounds, args.steps, config)
        print(
            f"{name:22s} wall: min {min(us):7.1f} µs/step, median {statistics.median(us):7.1f}   "
            f"CPU: min {min(cpu):7.1f}, median {statistics.median(cpu):7.1f}   alerts {alerts}"
        )


if __name__ == "__main__":
    main()
