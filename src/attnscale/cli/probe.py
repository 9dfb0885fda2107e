"""``attnscale probe``: do a pretrained model's queries and keys obey the seed's assumptions?"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

EPILOG = """examples:
  attnscale probe                           all-MiniLM-L6-v2 on the built-in sentences
  attnscale probe --text my.txt             ... on your text, one sequence per line
  attnscale probe --json                    print the full per-head JSON instead of the table
  attnscale probe --model ./my-bert-folder  any local BERT-style folder (config.json, weights, tokenizer)
"""

# Summary-table columns: (figure, header, width); heads are averaged per layer.
COLUMNS = (
    ("ratio", "ratio", 6), ("part_uneven_variances", "unevn", 6), ("part_means", "means", 6),
    ("part_cross_dimension", "xdim", 6), ("part_correlation", "corr", 6), ("within_row_share", "within", 6),
    ("normalized_entropy", "H/lnn", 6), ("normalized_entropy_unscaled", "H/lnn*", 6),
    ("max_weight", "maxw", 5), ("max_weight_unscaled", "maxw*", 5), ("saturation_index", "sat", 5),
    ("saturation_index_unscaled", "sat*", 5), ("sink_any", "sink", 5), ("previous_token", "prev", 5),
    ("next_token", "next", 5),
)
LEGEND = """ratio: Var(q·k)/(d_k σ_q² σ_k²), 1 if q, k had iid components; it splits (ratio − 1 =
  unevn + means + xdim + corr) into uneven per-dimension variances, non-zero means, covariance across
  dimensions, and q–k correlation. within: share of Var(q·k) inside rows (what softmax feels).
  H/lnn: normalized entropy; maxw: max weight; sat: saturation index (≥ 1 frozen); * = scale removed.
  sink: weight on [CLS]/[SEP]/punctuation; prev/next: weight on the previous/next token."""


def register(sub) -> None:
    p = sub.add_parser(
        "probe", help="probe a pretrained model's queries and keys against the seed's assumptions",
        description="Capture the attention of a pretrained BERT-style encoder (offline), check that the "
                    "capture reproduces the model's own attention probabilities, and measure per layer "
                    "and head how far q and k are from iid components with mean 0.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="all-MiniLM-L6-v2",
                   help="all-MiniLM-L6-v2 (the pinned PyPI package; default) or a local model folder")
    p.add_argument("--text", metavar="FILE", help="UTF-8 text, one sequence per line (blank lines skipped)")
    p.add_argument("--json", nargs="?", const="-", metavar="FILE",
                   help="print the full JSON result (or write it to FILE) instead of the table")
    p.add_argument("--out", default="attnscale-results", metavar="DIR",
                   help="results folder; writes DIR/probe/summary.json (default ./attnscale-results)")
    p.add_argument("--batch-size", type=int, default=32, help="sequences per padded batch (default 32)")
    p.set_defaults(run=run_probe_command)


def run_probe_command(args) -> int:
    from attnscale.cli.progress import Progress
    from attnscale.experiments.pretrained import load_encoder
    from attnscale.experiments.probe_run import builtin_sentences, read_texts, run_probe
    from attnscale.store import to_jsonable, write_json_atomic

    texts = read_texts(args.text) if args.text else builtin_sentences()
    loaded = load_encoder(args.model)
    with Progress() as progress:
        result = run_probe(loaded, texts, batch_size=args.batch_size, progress=progress)
    result["config"]["text"] = args.text or "built-in sentences"
    path = write_json_atomic(Path(args.out) / "probe" / "summary.json", result)
    if args.json == "-":
        print(json.dumps(to_jsonable(result), indent=1, ensure_ascii=False))
    elif args.json:
        write_json_atomic(args.json, result)
    if not result["check"]["passed"]:
        diffs = ", ".join(f"{d:.2g}" for d in result["check"]["max_abs_diff_per_layer"])
        print(f"attnscale probe: check FAILED: the captured q, k, scale and mask do not reproduce the model's "
              f"own attention probabilities to {result['check']['tolerance']:g} (largest difference per "
              f"layer: {diffs}); no statistics computed. Result: {path}", file=sys.stderr)
        return 1
    if args.json != "-":
        print(summary_table(result))
        print(f"full per-head data: {path}")
    return 0


def _cell(value: float, width: int) -> str:
    return f"{'nan':>{width}}" if math.isnan(value) else f"{value:>{width}.{2 if abs(value) < 100 else 0}f}"


def summary_table(result: dict) -> str:
    """One screen: layers × figures (heads averaged), then the striking heads."""
    cfg, check = result["config"], result["check"]
    lines = [
        f"{cfg['model']} ({len(result['layers'])} layers × {result['n_heads']} heads, d_k = {result['d_k']}, "
        f"scale = {result['scale']:.4g}) on {cfg['n_sequences']} sequences, {cfg['n_tokens']} tokens",
        f"check: rebuilt probabilities match the model's own to {max(check['max_abs_diff_per_layer']):.1e} "
        f"(tolerance {check['tolerance']:g}, {check['rows_checked']} rows) — passed",
        "",
        "layer " + " ".join(f"{h:>{w}}" for _, h, w in COLUMNS),
    ]
    per_layer = result["per_layer"]
    for i in range(len(result["layers"])):
        lines.append(f"{i:>5} " + " ".join(_cell(per_layer[f][i], w) for f, _, w in COLUMNS))
    lines += [LEGEND, "", "striking heads (layer.head):"]
    by_kind: dict[str, list[dict]] = {}
    for entry in result["striking_heads"]:
        by_kind.setdefault(entry["what"], []).append(entry)
    for what, entries in by_kind.items():
        heads = ", ".join(f"{e['layer']}.{e['head']} ({e['value']:.2f})" for e in entries)
        more = f" — {entries[0]['of']} heads in all" if (entries[0]["of"] or 0) > len(entries) else ""
        lines.append(f"  {what}: {heads}{more}")
    return "\n".join(lines)
