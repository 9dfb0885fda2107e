"""``attnscale verify``: every claim of the seed checked on this machine, one row per claim.

The table is a function of the results only (no timings), so the same seed prints the same bytes.
"""

from __future__ import annotations

import argparse
import sys
import textwrap

VERDICT_MARK = {"holds": "holds", "fails": "FAILS", "inconclusive": "UNDECIDED", "seed number wrong": "SEED WRONG"}
LABELS = {
    "en": {"expected": "expected", "measured": "measured", "correct": "correct value", "note": "note",
           "seed": "seed prints", "summary": "{n} claims: {holds} hold, {fails} fail, {inconclusive} inconclusive, {wrong} seed numbers wrong",
           "legend": "UNDECIDED = inconclusive: the interval does not decide the criterion at this sample size"},
    "zh": {"expected": "预期", "measured": "实测", "correct": "正确值", "note": "说明", "seed": "原文数字",
           "summary": "共 {n} 条：{holds} 条成立，{fails} 条不成立，{inconclusive} 条无定论，{wrong} 个原文数字有误",
           "legend": "UNDECIDED = 无定论：在当前样本量下置信区间无法判定该标准"},
}


def register(sub) -> None:
    p = sub.add_parser(
        "verify", help="check every claim and number of the seed (exact arithmetic, symbolic, Monte Carlo)",
        description="Check every claim and every printed number of the seed post on this machine: one row per "
                    "claim with the method, what is expected, what was measured (Monte Carlo: estimate, 99% "
                    "confidence interval, sample count) and a verdict: holds, FAILS (shown false), UNDECIDED "
                    "(inconclusive: the interval does not decide at this sample size) or SEED WRONG.",
        epilog="examples:\n  attnscale verify --quick\n  attnscale verify --json verify.json --lang zh\n"
               "  attnscale verify --strict    exit 1 unless every verdict is 'holds'",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--json", metavar="FILE", help="also write the results as JSON to FILE ('-': stdout, no table)")
    p.add_argument("--lang", choices=("en", "zh"), default="en", help="language of the claim text (default en)")
    p.add_argument("--strict", action="store_true", help="exit 1 when any verdict is not 'holds'")
    p.add_argument("--quick", action="store_true", help="small sample caps: seconds instead of a minute")
    p.add_argument("--seed", type=int, default=0, help="random seed (default 0); same seed, same output")
    p.add_argument("--only", metavar="IDS", default=None,
                   help="compute only these claims: comma-separated id prefixes, e.g. S5 or S5,S7.2")
    p.add_argument("--rel-ci-target", type=float, default=0.01, metavar="R",
                   help="stop a Monte Carlo estimate when its 99%% CI half-width is R × |estimate| (default 0.01)")
    p.set_defaults(run=run_verify)


def run_verify(args) -> int:
    import json

    from attnscale.claims import VerifyConfig, run_claims
    from attnscale.cli.progress import Progress
    from attnscale.store import to_jsonable, write_json_atomic

    config = VerifyConfig(seed=args.seed, quick=args.quick, rel_ci_target=args.rel_ci_target,
                          only=None if args.only is None else tuple(p.strip() for p in args.only.split(",")))
    with Progress() as progress:
        report = run_claims(config, progress=progress)
    if args.json == "-":
        print(json.dumps(to_jsonable(report.to_dict()), indent=1, ensure_ascii=False))
    else:
        if args.json:
            write_json_atomic(args.json, report.to_dict())
        sys.stdout.write(render_table(report, args.lang))
    print(f"attnscale verify: {report.timings.get('total', 0.0):.1f} s", file=sys.stderr)
    if args.strict and any(c.verdict != "holds" for c in report.claims):
        return 1
    return 0


def render_table(report, lang: str = "en", width: int = 110) -> str:
    """The terminal table: a header line per claim (id, verdict, method, claim) and indented details."""
    labels = LABELS[lang]
    out = [f"{'ID':<6} {'VERDICT':<10} {'METHOD':<16} CLAIM", "-" * width]
    indent = " " * 7
    for c in report.claims:
        head = f"{c.id:<6} {VERDICT_MARK[c.verdict]:<10} {c.method:<16} "
        out.append(textwrap.fill(c.claim(lang), width=width, initial_indent=head,
                                 subsequent_indent=" " * len(head)))
        details = [("seed", c.seed_value), ("expected", c.expected), ("measured", c.measured),
                   ("correct", c.correct_value), ("note", c.note)]
        for key, value in details:
            if value:
                out.append(textwrap.fill(f"{labels[key]}: {value}", width=width, initial_indent=indent,
                                         subsequent_indent=indent + "  "))
    counts = report.counts()
    out.append("-" * width)
    out.append(labels["summary"].format(n=len(report.claims), holds=counts["holds"], fails=counts["fails"],
                                        inconclusive=counts["inconclusive"], wrong=counts["seed number wrong"]))
    if counts["inconclusive"]:
        out.append(labels["legend"])
    cfg = report.config
    out.append(f"seed {cfg.seed}, {'quick' if cfg.quick else 'full'} run, Monte Carlo target ±{cfg.rel_ci_target:g} "
               f"(relative, {cfg.confidence:.0%} CI), attnscale {report.environment.get('attnscale')}")
    return "\n".join(out) + "\n"
