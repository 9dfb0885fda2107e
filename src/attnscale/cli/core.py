"""Core subcommands: ``softmax`` (weights and health figures of one row) and ``rules``."""

from __future__ import annotations

import argparse
import json

import numpy as np


def register(sub) -> None:
    p = sub.add_parser(
        "softmax", help="softmax weights and health figures of one row of logits",
        description="Softmax of the given logits (times --scale), with the row's health figures.",
        epilog="examples:\n  attnscale softmax 14 10 12 --scale 0.125\n"
               "  attnscale softmax -- 1 -inf -1e3    (after --, logits may start with '-')",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("logits", nargs="+", type=float, help="the row's logits")
    p.add_argument("--scale", type=float, default=1.0, help="multiplies the logits first (default 1)")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(run=run_softmax)

    r = sub.add_parser("rules", help="list the named scale rules with formula and citation")
    r.add_argument("--json", action="store_true", help="print JSON instead of a table")
    r.set_defaults(run=run_rules)


def run_softmax(args) -> int:
    from attnscale.softmax import row_health, softmax

    logits = np.asarray(args.logits, dtype=np.float64) * args.scale
    weights = softmax(logits)
    # NaN (a figure undefined for this row, e.g. entropy / ln n with one key) is null in JSON.
    health = {k: (int(v) if k == "n" else float(v) if np.isfinite(v) else None)
              for k, v in row_health(logits).as_dict().items()}
    if args.json:
        print(json.dumps({"logits": logits.tolist(), "weights": weights.tolist(), "health": health},
                         indent=1, allow_nan=False))
        return 0
    print(f"{'logit':>12} {'weight':>10}")
    for z, p in zip(logits, weights):
        print(f"{z:12.6g} {p:10.4f}")
    for name, value in health.items():
        print(f"{name:>20}: {'undefined' if value is None else format(value, '.6g')}")
    return 0


def run_rules(args) -> int:
    from attnscale.scales import RULES

    rows = [rule.describe() for rule in RULES.values()]
    if args.json:
        print(json.dumps(rows, indent=1, ensure_ascii=False))
        return 0
    for row in rows:
        print(f"{row['name']:<16} {row['formula']:<40} {row['citation']}")
    return 0
