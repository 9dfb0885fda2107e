"""The monitor's cost on a real model: MiniLM forward with attnscale.torch.monitor ÷ without.

    python benchmarks/monitor_replace.py                # MiniLM (pinned package), 8 sentences, float32, CPU
    python benchmarks/monitor_replace.py --repeats 9 --batch 16
    python benchmarks/monitor_replace.py --no-minilm    # only the small training step below

Variants, interleaved in one run (so a load change hits them alike), their order turned by one each
round (so no variant always follows the same one); each ratio is the median of the rounds' own
ratios to that round's plain, printed with a 95% interval for that median (distribution-free, from
the rounds' order statistics: how far this run can tell a ratio from a target):

- ``plain``: the model's SDPA implementation, no monitor;
- ``observe``: ``Monitor(model)`` — SDPA runs, the figures are recomputed (two passes);
- ``replace``: ``Monitor(model, mode="replace", history=False)`` — the fused kernel computes the
  attention and its figures in one pass (target ≤ 1.05× plain);
- ``every10``: replace mode with ``every=10`` (one step of the 10 measured).

MiniLM's second row runs the same sentences as ten batches of ten lengths (13 to 22 tokens), one
forward on each in turn: dynamic padding, where a batch's length is a new call signature (in a
round's ten forwards, nine lengths the monitor, entered for the round, has not met).

Each variant is timed over 10 calls per round, the time per call, after one untimed call: the
first step under a monitor just entered finds the model's attention calls, a cost a training loop
pays once; its excess over plain's first call is the last column (replace mode, ms).

The compiled row is the same training step through ``torch.compile(model)`` (default backend),
each variant ÷ the compiled step without a monitor; compiled, observe keeps the compiled model's own
SDPA and computes the figures beside it, replace puts the fused kernel in the graph in its place.

Also a training step (forward, backward, AdamW) of the logit-growth experiment's GPT, plain ÷
observe ÷ replace: replace in training runs on monitor.TRAINING_BACKEND. Prints ratios to plain, the
largest |replace − plain| output difference, and the load average, since timings on a shared
machine are inflated.
"""

import argparse
import os
import statistics
import sys
import time


STEPS = 10  # calls of work() per variant and round: every=10's cycle, and a sample long enough to steady
# MiniLM's second row: the sentences padded or cut to each of these, a forward on each in turn.
TEN_LENGTHS = (20, 14, 22, 16, 19, 13, 21, 15, 18, 17)


def interleaved(work, repeats: int) -> dict:
    """Median seconds of ``work()`` per variant (plain, observe, replace, every10); each round runs
    every variant once, in turn (the order turned by one each round), each over :data:`STEPS` calls
    (the time per call). The monitor is
    entered before the clock starts and left after it stops, as a training loop enters it once:
    what is timed is the model's work under it, and each step's ``mon.step``. The first step after
    entering finds the model's attention calls (a first forward that watches every torch call): a
    cost a training loop pays once, so it runs before the clock, timed on its own (``first``)."""
    from attnscale.torch.monitor import Monitor

    def timed(mode):
        """(seconds of the first step, seconds per step of the STEPS after it); ``work.rewind()``,
        where work has one, first: every variant's calls on the same inputs in the same order."""
        getattr(work, "rewind", lambda: None)()
        if mode is None:
            t0 = time.perf_counter()
            work()
            t1 = time.perf_counter()
            for _ in range(STEPS):
                work()
            return t1 - t0, (time.perf_counter() - t1) / STEPS
        every = 10 if mode == "every10" else 1
        with Monitor(work.model, mode="replace" if every > 1 else mode, history=False, every=every) as mon:
            t0 = time.perf_counter()
            work()
            mon.step(0, log=False)
            t1 = time.perf_counter()
            for s in range(1, STEPS + 1):  # with every=10, step 10 is the one measured
                work()
                mon.step(s, log=False)
            return t1 - t0, (time.perf_counter() - t1) / STEPS

    modes = {"plain": None, "observe": "observe", "replace": "replace", "every10": "every10"}
    for mode in modes.values():  # warm-up: caches, kernel build, allocator
        timed(mode)
    times = {name: [] for name in modes}
    firsts = {name: [] for name in modes}
    names = list(modes)
    for r in range(repeats):
        # The order turns by one each round, so each variant runs in each place alike: a variant's
        # place in a round moved its time by ~2% (measured, AMD EPYC, 2026-12-04: the same plain
        # step 0.982× when run after every=10 rather than after observe).
        for name in names[r % len(names) :] + names[: r % len(names)]:
            first, per_step = timed(modes[name])
            times[name].append(per_step)
            firsts[name].append(first)
    # Each round's variant ÷ that round's plain, then the median: a slow drift of the machine's
    # speed (seen here: ±3% between runs a minute apart) moves both sides of a ratio alike.
    per_round = {name: [t / p for t, p in zip(ts, times["plain"])] for name, ts in times.items()}
    return {
        "medians": {name: statistics.median(ts) for name, ts in times.items()},
        "ratios": {name: statistics.median(rs) for name, rs in per_round.items()},
        # How far the median can be trusted: a distribution-free 95% interval from the rounds' order
        # statistics (the full range of the rounds when there are too few for one: below 6).
        "intervals": {name: median_interval(rs) for name, rs in per_round.items()},
        "first": {name: statistics.median(ts) for name, ts in firsts.items()},
    }


def median_interval(values: list) -> tuple:
    """(low, high): a 95% interval for the median of ``values`` (attnscale.montecarlo.quantile_ci)."""
    from attnscale.montecarlo import quantile_ci

    if len(values) < 2:  # one round: its own ratio
        return values[0], values[0]
    _, low, high = quantile_ci(values, 0.5, confidence=0.95)
    return low, high


def minilm(repeats: int, batch: int, lengths: tuple = ()) -> dict:
    """The MiniLM forward of ``batch`` sentences padded to the longest; with ``lengths``, one batch
    per length (padded or cut to it), a forward on each in turn: a training set's batches under
    dynamic padding (the STEPS calls a variant's round times take each of ten lengths once)."""
    import itertools

    import torch

    from attnscale.experiments.pretrained.loading import load_encoder
    from attnscale.experiments.pretrained.probe.run import builtin_sentences
    from attnscale.torch.monitor import Monitor

    loaded = load_encoder(attn_implementation="sdpa")
    model = loaded.model
    sentences = builtin_sentences()[:batch]
    batches = [
        loaded.tokenizer(sentences, padding="max_length", truncation=True, max_length=n, return_tensors="pt")
        for n in lengths
    ] or [loaded.tokenizer(sentences, padding=True, return_tensors="pt")]
    turn = [itertools.cycle(batches)]

    def forward(inputs=None):
        with torch.no_grad():
            return model(**(inputs or next(turn[0]))).last_hidden_state

    def rewind():
        turn[0] = itertools.cycle(batches)

    forward.model, forward.rewind = model, rewind
    plain = [forward(b) for b in batches]
    with Monitor(model, mode="replace") as mon:
        replaced = [forward(b) for b in batches]
    rows, widths = batches[0]["input_ids"].shape[0], sorted({b["input_ids"].shape[1] for b in batches})
    return {
        "shape": (rows, widths[0]) if len(widths) == 1 else f"({rows}, {widths[0]}–{widths[-1]})",
        **interleaved(forward, repeats),
        "max_abs_diff": max(float((r - p).abs().max()) for r, p in zip(replaced, plain)),
        "fallbacks": dict(mon.fallbacks),
        "backends": sorted({c.backend for c in mon.calls}),
    }


def training_step(repeats: int, compiled: bool = False) -> dict:
    import torch

    from attnscale.experiments.training import logit_growth
    from attnscale.experiments.training.gpt import GPT
    from attnscale.scales import InverseSqrtDk

    torch.manual_seed(0)
    config = logit_growth.gpt_config(logit_growth.LogitCell(1e-3, False, 0), vocab=48)  # width 64, 4 heads
    model = GPT(config, InverseSqrtDk(), figures=False)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = torch.randint(0, 48, (16, 64), generator=torch.Generator().manual_seed(1))

    def step():
        loss = torch.nn.functional.cross_entropy(model(x)[:, :-1].flatten(0, 1), x[:, 1:].flatten())
        opt.zero_grad()
        loss.backward()
        opt.step()

    step.model = model
    if compiled:
        step.model = model = torch.compile(model)
    return {"shape": (16, 4, 64, 16), **interleaved(step, repeats)}


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            return next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        import platform

        return platform.processor() or "unknown"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    # 41 rounds: at 11, the same code read MiniLM replace 1.041–1.078× in five runs and every=10
    # (no work on nine steps of ten) 0.96–1.06×; at 41, 1.046–1.047× and 1.002–1.008× (measured, AMD
    # EPYC, 2026-12-04). About 3 minutes a run at one thread.
    parser.add_argument("--repeats", type=int, default=41, help="interleaved rounds (default 41)")
    parser.add_argument("--batch", type=int, default=8, help="MiniLM sentences per forward")
    parser.add_argument("--no-minilm", action="store_true")
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch threads (default 1: on a shared 2-core machine two threads spin against each other; "
        "0 = torch's own choice)",
    )
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error(f"--repeats: expected at least 1 round, got {args.repeats}")
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    from attnscale.torch.monitor import TRAINING_BACKEND

    rows = []
    if not args.no_minilm:
        rows.append(("MiniLM forward", minilm(args.repeats, args.batch)))
        rows.append(("MiniLM forward, ten lengths in turn", minilm(args.repeats, args.batch, TEN_LENGTHS)))
    rows.append((f"GPT train step (replace: {TRAINING_BACKEND})", training_step(args.repeats)))
    rows.append(("GPT train step, torch.compile", training_step(args.repeats, compiled=True)))
    print(
        f"{'':<38}{'shape':<20}{'plain ms':>10}{'observe ×':>13}{'replace ×':>13}{'every=10 ×':>13}"
        f"{'first step +ms':>16}"
    )
    # Below 6 rounds even the full range of the rounds holds the median with less than 95% chance.
    spread_label = "its 95% interval" if args.repeats >= 6 else "range of the rounds"
    for name, r in rows:
        m, ratio, first, ci = r["medians"], r["ratios"], r["first"], r["intervals"]
        print(
            f"{name:<38}{str(r['shape']):<20}{m['plain'] * 1e3:>10.2f}{ratio['observe']:>13.3f}"
            f"{ratio['replace']:>13.3f}{ratio['every10']:>13.3f}"
            f"{(first['replace'] - first['plain']) * 1e3:>16.2f}"
        )
        print(
            f"{'':<38}{spread_label:<30}"
            + "".join(f"{f'{ci[v][0]:.3f}–{ci[v][1]:.3f}':>13}" for v in ("observe", "replace", "every10"))
        )
        if "max_abs_diff" in r:
            print(
                f"{'':<38}max |replace − plain| = {r['max_abs_diff']:.3g}; backends {r['backends']}; "
                f"fallbacks: {r['fallbacks'] or 'none'}"
            )
    print(f"CPU: {cpu_name()}; torch {__import__('torch').__version__}")
    print(
        f"plain: median of {args.repeats} interleaved rounds of {STEPS} calls; ratios: median of the rounds' own "
        f"ratios to plain; {args.threads or 'default'} torch thread(s); load average "
        f"{', '.join(f'{x:.2f}' for x in os.getloadavg())}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
