"""``attnscale telemetry-bench``: what per-row attention figures cost, and the monitor on a real model."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

EPILOG = """examples:
  attnscale telemetry-bench                 the issue's shapes, float32, CPU; writes telemetry/summary.json
  attnscale telemetry-bench --quick         small shapes, a smoke run
  attnscale telemetry-bench --no-model      skip the monitor on all-MiniLM-L6-v2
"""


def register(sub) -> None:
    p = sub.add_parser(
        "telemetry-bench", help="time and memory of attention with per-row figures vs plain SDPA",
        description="Measure attnscale.torch.attention (output + log-sum-exp + entropy, exact, no L×S matrix) "
                    "against plain torch SDPA and the naive materialise-then-entropy path, in one run "
                    "(medians, ratios); then run the monitor on all-MiniLM-L6-v2.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repeats", type=int, default=7, help="timed repeats per variant (default 7)")
    p.add_argument("--quick", action="store_true", help="small shapes, a smoke run")
    p.add_argument("--device", default="cpu", help="cpu (default) or cuda")
    p.add_argument("--no-model", action="store_true", help="skip the monitor on all-MiniLM-L6-v2")
    p.add_argument("--out", default="attnscale-results", metavar="DIR",
                   help="results folder; writes DIR/telemetry/summary.json (default ./attnscale-results)")
    p.set_defaults(run=run_telemetry_bench_command)


def run_telemetry_bench_command(args) -> int:
    from attnscale.cli.progress import Progress
    from attnscale.store import write_json_atomic
    from attnscale.torch.benchmark import TelemetryBenchConfig, format_table, measure_monitor, run_telemetry_bench

    make = TelemetryBenchConfig.quick if args.quick else TelemetryBenchConfig
    config = make(repeats=args.repeats, device=args.device)
    with Progress() as progress:
        result = run_telemetry_bench(config, progress=progress)
    print(format_table(result))
    if not args.no_model:
        from attnscale.experiments.pretrained import load_encoder
        from attnscale.experiments.probe_run import builtin_sentences

        loaded = load_encoder(attn_implementation="sdpa")
        batch = loaded.tokenizer(builtin_sentences(), padding=True, return_tensors="pt")
        found = measure_monitor(loaded.model, dict(batch), repeats=min(args.repeats, 5))
        found["model"] = loaded.name
        found["n_sequences"], found["padded_length"] = (int(n) for n in batch["input_ids"].shape)
        result["monitor"] = found
        print(f"monitor on {loaded.name} ({found['n_sequences']} sequences, padded to {found['padded_length']}): "
              f"forward ×{found['ratio']:.2f}, outputs bit-for-bit equal: {found['outputs_bitwise_equal']}, "
              f"float16 overflow in {sum(c['float16_overflow'] for c in found['calls'])} of {len(found['calls'])} calls")
    path = Path(args.out) / "telemetry" / "summary.json"
    write_json_atomic(path, result)
    print(f"wrote {path}", file=sys.stderr)
    return 0
