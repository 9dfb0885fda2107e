"""``attnscale telemetry-bench``: what per-row attention figures cost (forward, forward + backward,
peak memory) against plain SDPA, and the monitor on a real model; its terminal and Markdown tables."""

from __future__ import annotations

import sys
import time

from attnscale.cli.options import add_command, add_lang_option, add_results_option, options_named, results_root
from attnscale.cli.output import (
    add_json_option,
    add_quiet_option,
    check_json_target,
    emit_json,
    hold_results,
    json_to_stdout,
    pad,
)
from attnscale.i18n import N_, _
from attnscale.stored_words import PASS_NAMES

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
    p.add_argument(
        "--threads", type=int, default=None, metavar="N", help="torch threads, N >= 1 (default: torch's own choice)"
    )
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
    add_lang_option(p, "the tables")
    p.set_defaults(run=run_telemetry_bench_command)


def run_telemetry_bench_command(args) -> int:
    from attnscale import results
    from attnscale.cli.kernel import prepare_kernel
    from attnscale.errors import check_count
    from attnscale.experiments.telemetry import TelemetryBenchConfig, check_device

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
    if args.threads is not None:  # 0 is the library's "torch's own choice": typed, it is a mistake
        check_count("--threads", args.threads)
    with options_named({"repeats": "--repeats", "threads": "--threads"}):
        config = make(
            repeats=args.repeats, device=args.device, threads=args.threads or 0, backward=not args.no_backward
        )
    if args.device == "cpu":
        prepare_kernel(quiet=args.quiet)
    with hold_results("telemetry", root):  # one benchmark per results folder: two would slow each other
        env = _bench(args, config)
    if not json_to_stdout(args):
        print(format_table(env))
    emit_json(args, env)
    if not args.quiet:
        print(_("wrote {path}", path=env.path), file=sys.stderr)
    return 0


def _bench(args, config):
    """Run the benchmark of ``config`` (and the monitor on MiniLM unless ``--no-model``) and write its result."""
    from dataclasses import asdict

    from attnscale import results
    from attnscale.cli.progress import Progress
    from attnscale.experiments.telemetry import run_telemetry_bench
    from attnscale.experiments.telemetry_monitor import measure_monitor

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
    return results.write(
        "telemetry", data, config=asdict(config), seed=config.seed, quick=args.quick, root=results_root(args)
    )


def _shape(row) -> str:
    return str(tuple(row["shape"]))


def _causal(row) -> str:
    return _("causal") if row["causal"] else "—"


def _ratio(x, spec=".2f") -> str:
    return "—" if x is None else f"{x:{spec}}×"


def _share(x) -> str:
    """A ratio to the GEMM peak as a percentage; "—" where the row has none for the variant."""
    return "—" if x is None else f"{100 * x:.1f}%"


def _peak_line(peak: dict) -> str:
    return _("float32 GEMM peak ({n}×{n} torch.mm): {gflops:.1f} GFLOP/s", n=peak["n"], gflops=peak["gflops"])


# A measure of the benchmark (a verdict's "measure"), as the tables say it; its passes: stored_words.PASS_NAMES.
MEASURES = {"time": N_("time"), "peak memory": N_("peak memory")}


def _words(table: dict, key: str) -> str:
    """``key`` in the bound language when ``table`` names it, else as the result stores it."""
    return _(table[key]) if key in table else key


def format_table(env) -> str:
    """A ``telemetry`` result as plain-text tables (for the terminal), in the bound language."""
    data = env.data
    lines = [
        _(
            "time ÷ plain SDPA (median of {repeats}, {threads} threads, {device})",
            repeats=data["repeats"],
            threads=data["threads"],
            device=data["device"],
        )
    ]
    if data.get("peak"):  # results made before the peak was measured have none
        lines.append(_peak_line(data["peak"]))
    for pass_, variants in data["variants"].items():
        others = [v for v in variants if v != "sdpa"]
        head = [(_words(PASS_NAMES, pass_), 18), ("(B, H, L, d)", 19), (_("causal"), 8)]
        lines.append(
            "".join(pad(t, w) for t, w in head) + pad(_("sdpa s"), 9, True) + "".join(f"{v:>14}" for v in others)
        )
        for row in (r for r in data["rows"] if r["pass"] == pass_):
            lines += _time_rows(row, others)
    for row in data["memory"]:
        shown = ", ".join(
            f"{v} {_ratio(row['ratio_to_sdpa'][v])} ({_mib(row['peak_rise_bytes'][v])})" for v in row["peak_rise_bytes"]
        )
        lines.append(
            _(
                "peak memory rise ÷ plain SDPA, {pass_} {shape} {causal}: {shown}",
                pass_=_words(PASS_NAMES, row["pass"]),
                shape=_shape(row),
                causal=_causal(row),
                shown=shown,
            )
        )
        lines += ["  " + _("{name} failed: {why}", name=n, why=why) for n, why in row.get("failures", {}).items()]
    lines += [_verdict_line(v) for v in data["verdicts"]]
    if data.get("monitor"):
        m = data["monitor"]
        lines.append(
            _(
                "monitor on {model} ({n} sequences, padded to {length}): forward ×{ratio:.2f}, outputs bit-for-bit equal: {equal}, float16 overflow in {overflow} of {calls} calls",
                model=m["model"],
                n=m["n_sequences"],
                length=m["padded_length"],
                ratio=m["ratio"],
                equal=m["outputs_bitwise_equal"],
                overflow=m["float16_overflow_calls"],
                calls=m["calls_per_forward"],
            )
        )
    if data.get("load_average"):
        load = ", ".join(f"{x:.2f}" for x in data["load_average"])
        lines.append(_("load average after the run: {load}", load=load))
    return "\n".join(lines)


def _time_rows(row: dict, others: list[str]) -> list[str]:
    """One shape's lines of the time table: wall-time ratios, CPU-time ratios, shares of the GEMM peak, skips."""
    lines = [
        pad("", 18)
        + pad(_shape(row), 19)
        + pad(_causal(row), 8)
        + f"{row['median_s']['sdpa']:>9.4f}"
        + "".join(f"{_ratio(row['ratio_to_sdpa'].get(v), '.3f'):>14}" for v in others),
        pad("", 18)
        + pad("  " + _("CPU time ratio"), 27)
        + f"{row['cpu_median_s']['sdpa']:>9.4f}"
        + "".join(f"{_ratio(row['cpu_ratio_to_sdpa'].get(v), '.3f'):>14}" for v in others),
    ]
    if "ratio_to_peak" in row:
        share = row["ratio_to_peak"]
        lines.append(
            pad("", 18)
            + pad("  " + _("% of GEMM peak"), 27)
            + f"{_share(share.get('sdpa')):>9}"
            + "".join(f"{_share(share.get(v)):>14}" for v in others)
        )
    lines += [pad("", 20) + _("{name} skipped: {why}", name=n, why=why) for n, why in row.get("skipped", {}).items()]
    return lines


def _mib(n) -> str:
    return "—" if n is None else f"{n / 2**20:.0f} MiB"


def _verdict_line(v: dict) -> str:
    where = f"{tuple(v['shape'])}{' ' + _('causal') if v['causal'] else ''}"
    values = dict(
        variant=v["variant"],
        measure=_words(MEASURES, v["measure"]),
        pass_=_words(PASS_NAMES, v["pass"]),
        target=v["target"],
        where=where,
    )
    if v["ratio"] is None:
        return _("target: {variant} {measure} {pass_} ≤ {target:g}× at {where}: not measured", **values)
    if v["met"]:
        return _(
            "target: {variant} {measure} {pass_} ≤ {target:g}× at {where}: {ratio:.3f}× met", ratio=v["ratio"], **values
        )
    return _(
        "target: {variant} {measure} {pass_} ≤ {target:g}× at {where}: {ratio:.3f}× missed by {excess:.0f}%",
        ratio=v["ratio"],
        excess=100 * v["excess"],
        **values,
    )


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
