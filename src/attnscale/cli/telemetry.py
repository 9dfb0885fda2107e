"""``attnscale telemetry-bench``: what per-row attention figures cost (forward, forward + backward,
peak memory) against plain SDPA, and the monitor on a real model; its terminal and Markdown tables."""

from __future__ import annotations

import sys
import time

from attnscale.cli.options import add_command, add_results_option, results_root
from attnscale.cli.output import add_json_option, add_quiet_option

EXAMPLES = [
    "attnscale telemetry-bench                 the issue's shapes, float32, CPU, forward and forward+backward",
    "attnscale telemetry-bench --quick         small shapes, a smoke run (written apart, as quick.json)",
    "attnscale telemetry-bench --no-model      skip the monitor on all-MiniLM-L6-v2",
    "attnscale telemetry-bench --markdown      print the last result as the README's table; runs nothing",
]

LABELS = {
    "sdpa": "SDPA",
    "kernel": "fused kernel: out + lse + entropy",
    "kernel+range": "+ max/min logit",
    "composed": "one fused PyTorch call on [V, K]",
    "naive": "materialise weights, then entropy",
}
#: The variants whose share of the float32 GEMM peak the Markdown tables show, and their columns.
SHARE_LABELS = {"sdpa": "SDPA % of GEMM peak", "kernel": "kernel % of GEMM peak"}


def register(sub) -> None:
    p = add_command(
        sub,
        "telemetry-bench",
        help="time and memory of attention with per-row figures vs plain SDPA",
        description="Measure attnscale.torch.attention (output + log-sum-exp + entropy, exact, no L×S matrix) "
        "against plain torch SDPA and the naive materialise-then-entropy path, forward and "
        "forward + backward, in one run (medians, ratios); then run the monitor on all-MiniLM-L6-v2.",
        examples=EXAMPLES,
    )
    p.add_argument("--repeats", type=int, default=5, help="timed repeats per variant (default 5)")
    p.add_argument("--quick", action="store_true", help="small shapes, a smoke run")
    p.add_argument("--device", default="cpu", help="cpu (default) or cuda")
    p.add_argument("--threads", type=int, default=0, help="torch threads (default: torch's own choice)")
    p.add_argument("--no-backward", action="store_true", help="forward only")
    p.add_argument("--no-model", action="store_true", help="skip the monitor on all-MiniLM-L6-v2")
    p.add_argument(
        "--markdown",
        action="store_true",
        help="print the result found under --results as Markdown tables (the README's; --json: that result); "
        "run nothing",
    )
    add_results_option(p, "results folder; writes DIR/telemetry/result.json (quick.json with --quick)")
    add_json_option(p)
    add_quiet_option(p)
    p.set_defaults(run=run_telemetry_bench_command)


def run_telemetry_bench_command(args) -> int:
    from dataclasses import asdict

    from attnscale import results
    from attnscale.cli.output import check_json_target, emit_json, json_to_stdout
    from attnscale.cli.kernel import prepare_kernel
    from attnscale.cli.progress import Progress
    from attnscale.experiments.telemetry import TelemetryBenchConfig, check_device, measure_monitor, run_telemetry_bench

    root = results_root(args)
    if args.markdown:
        check_json_target(args)
        env = results.read_preferred("telemetry", root)
        if not json_to_stdout(args):
            print(format_markdown(env))
        emit_json(args, env)
        return 0
    check_device(args.device)
    check_json_target(args)
    results.check_writable(
        results.result_path("telemetry", root, args.quick).parent, "--results"
    )  # a rerun replaces the file
    make = TelemetryBenchConfig.quick if args.quick else TelemetryBenchConfig
    config = make(repeats=args.repeats, device=args.device, threads=args.threads, backward=not args.no_backward)
    if args.device == "cpu":
        prepare_kernel(quiet=args.quiet)
    started = time.perf_counter()
    with Progress(quiet=args.quiet) as progress:
        data = run_telemetry_bench(config, progress=progress)
    seconds = {"benchmark": time.perf_counter() - started}  # the run time a result records (results.recorded_seconds)
    if not args.no_model:
        from attnscale.experiments.pretrained.loading import load_encoder
        from attnscale.experiments.pretrained.probe.run import builtin_sentences

        loaded = load_encoder(attn_implementation="sdpa")
        batch = loaded.tokenizer(builtin_sentences(), padding=True, return_tensors="pt")
        found = measure_monitor(loaded.model, dict(batch), repeats=min(args.repeats, 5))
        found["model"] = loaded.name
        found["n_sequences"], found["padded_length"] = (int(n) for n in batch["input_ids"].shape)
        data["monitor"] = found
        seconds["monitor"] = time.perf_counter() - started - seconds["benchmark"]
    data["seconds"] = seconds
    env = results.write("telemetry", data, config=asdict(config), seed=config.seed, quick=args.quick, root=root)
    if not json_to_stdout(args):
        print(format_table(env))
    emit_json(args, env)
    if not args.quiet:
        print(f"wrote {env.path}", file=sys.stderr)
    return 0


def _shape(row) -> str:
    return str(tuple(row["shape"]))


def _causal(row) -> str:
    return "causal" if row["causal"] else "—"


def _ratio(x, spec=".2f") -> str:
    return "—" if x is None else f"{x:{spec}}×"


def _share(x) -> str:
    """A ratio to the GEMM peak as a percentage; "—" where the row has none for the variant."""
    return "—" if x is None else f"{100 * x:.1f}%"


def _peak_line(peak: dict) -> str:
    return f"float32 GEMM peak ({peak['n']}×{peak['n']} torch.mm): {peak['gflops']:.1f} GFLOP/s"


def format_table(env) -> str:
    """A ``telemetry`` result as plain-text tables (for the terminal)."""
    data = env.data
    lines = [f"time ÷ plain SDPA (median of {data['repeats']}, {data['threads']} threads, {data['device']})"]
    if data.get("peak"):  # results made before the peak was measured have none
        lines.append(_peak_line(data["peak"]))
    for pass_, variants in data["variants"].items():
        lines.append(
            f"{pass_:<18}{'(B, H, L, d)':<19}{'causal':<8}{'sdpa s':>9}"
            + "".join(f"{v:>14}" for v in variants if v != "sdpa")
        )
        for row in (r for r in data["rows"] if r["pass"] == pass_):
            lines.append(
                f"{'':<18}{_shape(row):<19}{_causal(row):<8}{row['median_s']['sdpa']:>9.4f}"
                + "".join(f"{_ratio(row['ratio_to_sdpa'].get(v), '.3f'):>14}" for v in variants if v != "sdpa")
            )
            lines.append(
                f"{'':<18}{'  CPU time ratio':<27}{row['cpu_median_s']['sdpa']:>9.4f}"
                + "".join(f"{_ratio(row['cpu_ratio_to_sdpa'].get(v), '.3f'):>14}" for v in variants if v != "sdpa")
            )
            if "ratio_to_peak" in row:
                share = row["ratio_to_peak"]
                lines.append(
                    f"{'':<18}{'  % of GEMM peak':<27}{_share(share.get('sdpa')):>9}"
                    + "".join(f"{_share(share.get(v)):>14}" for v in variants if v != "sdpa")
                )
            lines += [f"{'':<18}  {name} skipped: {why}" for name, why in row.get("skipped", {}).items()]
    for row in data["memory"]:
        variants = list(row["peak_rise_bytes"])
        lines.append(
            f"peak memory rise ÷ plain SDPA, {row['pass']} {_shape(row)} {_causal(row)}: "
            + ", ".join(f"{v} {_ratio(row['ratio_to_sdpa'][v])} ({_mib(row['peak_rise_bytes'][v])})" for v in variants)
        )
        for name, why in row.get("failures", {}).items():
            lines.append(f"  {name} failed: {why}")
    lines += [_verdict_line(v) for v in data["verdicts"]]
    if data.get("monitor"):
        m = data["monitor"]
        lines.append(
            f"monitor on {m['model']} ({m['n_sequences']} sequences, padded to {m['padded_length']}): "
            f"forward ×{m['ratio']:.2f}, outputs bit-for-bit equal: {m['outputs_bitwise_equal']}, "
            f"float16 overflow in {m['float16_overflow_calls']} of {m['calls_per_forward']} calls"
        )
    if data.get("load_average"):
        lines.append("load average after the run: " + ", ".join(f"{x:.2f}" for x in data["load_average"]))
    return "\n".join(lines)


def _mib(n) -> str:
    return "—" if n is None else f"{n / 2**20:.0f} MiB"


def _verdict_line(v: dict) -> str:
    where = f"{tuple(v['shape'])}{' causal' if v['causal'] else ''}"
    head = f"target: {v['variant']} {v['measure']} {v['pass']} ≤ {v['target']:g}× at {where}: "
    if v["ratio"] is None:
        return head + "not measured"
    return head + f"{v['ratio']:.3f}× " + ("met" if v["met"] else f"missed by {100 * v['excess']:.0f}%")


def format_markdown(env) -> str:
    """A ``telemetry`` result as the README's Markdown: its date, machine, load and float32 GEMM peak,
    then one table of time ratios (and SDPA's and the kernel's share of that peak) per pass and one of
    peak memory, every cell from the result. A result without a measured peak reads as before it."""
    data, machine = env.data, env.data.get("machine", {})
    where = ", ".join(
        str(x)
        for x in (
            machine.get("cpu"),
            f"{machine.get('cores')} cores",
            f"{data['threads']} threads",
            f"torch {machine.get('torch')}",
        )
        if x
    )
    load = ", ".join(f"{x:.1f}" for x in data["load_average"]) if data.get("load_average") else "unknown"
    peak = data.get("peak")
    of_peak = (
        f"; each % of GEMM peak: the attention's flops per second (as FlashAttention's papers count them) "
        f"÷ the float32 GEMM peak measured in the same run, {peak['gflops']:.1f} GFLOP/s "
        f"({peak['n']}×{peak['n']} torch.mm)"
        if peak
        else ""
    )
    lines = [
        f"Measured {env.created[:10]} on {where} ({data['device']}; load average after the run {load}), "
        f"medians of {data['repeats']}{', a quick run' if env.quick else ''}; each cell wall-clock time "
        f"(CPU time in brackets) ÷ plain SDPA's in the same run{of_peak}. Generated from "
        f"`{env.path}` by `attnscale telemetry-bench --markdown`.",
        "",
    ]
    for pass_, variants in data["variants"].items():
        others = [v for v in variants if v != "sdpa"]
        shared = [v for v in SHARE_LABELS if v in variants] if peak else []
        lines += [
            f"| {pass_}: time ÷ SDPA | SDPA median | "
            + " | ".join([LABELS[v] for v in others] + [SHARE_LABELS[v] for v in shared])
            + " |",
            "|---|---|" + "---|" * (len(others) + len(shared)),
        ]
        for row in (r for r in data["rows"] if r["pass"] == pass_):
            lines.append(
                f"| {_shape(row)}{', causal' if row['causal'] else ''} | "
                f"{row['median_s']['sdpa'] * 1e3:.0f} ms | "
                + " | ".join(
                    [
                        f"{_ratio(row['ratio_to_sdpa'][v])} ({_ratio(row['cpu_ratio_to_sdpa'][v])})"
                        if v in row["ratio_to_sdpa"]
                        else "skipped"
                        for v in others
                    ]
                    + [_share(row.get("ratio_to_peak", {}).get(v)) for v in shared]
                )
                + " |"
            )
        lines.append("")
    if data["memory"]:
        variants = list(dict.fromkeys(v for row in data["memory"] for v in row["peak_rise_bytes"] if v != "sdpa"))
        lines += [
            "| peak memory rise ÷ SDPA | SDPA | " + " | ".join(LABELS[v] for v in variants) + " |",
            "|---|---|" + "---|" * len(variants),
        ]
        for row in data["memory"]:
            lines.append(
                f"| {row['pass']}, {_shape(row)}{', causal' if row['causal'] else ''} | "
                f"{_mib(row['peak_rise_bytes']['sdpa'])} | "
                + " | ".join(
                    _ratio(row["ratio_to_sdpa"].get(v)) if v in row["ratio_to_sdpa"] else "—" for v in variants
                )
                + " |"
            )
        lines.append("")
    lines += [f"- {_verdict_line(v)}" for v in data["verdicts"]]
    return "\n".join(lines).rstrip()
