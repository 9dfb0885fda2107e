"""``attnscale verify``: every claim of the blog post checked on this machine, one row per claim.

The verification's result is written into the results folder (kind ``verify``, quick apart from full)
like every experiment's, and where ``--json FILE|-`` says; the report reads it from there. The table
is a function of the results only (no timings), so the same random seed prints the same bytes.
"""

from __future__ import annotations

import sys
import textwrap

from attnscale.cli.options import (
    add_command,
    add_lang_option,
    add_results_option,
    add_seed_option,
    options_named,
    results_root,
)
from attnscale.cli.output import (
    add_json_option,
    add_quiet_option,
    check_json_target,
    check_out_folder,
    columns,
    emit_json,
    hold_results,
    json_to_stdout,
    pad,
)
from attnscale.stored_words import CLAIM_FIELDS, METHOD_NAME
from attnscale.i18n import N_, _

# A verdict (attnscale.claims.VERDICTS) as the table marks it: the ones to look at in capitals.
VERDICT_MARK = {
    "holds": N_("holds", "verify"),
    "fails": N_("FAILS", "verify"),
    "inconclusive": N_("UNDECIDED", "verify"),
    "seed number wrong": N_("POST WRONG", "verify"),
}
# The details of a claim, in the order shown, each with its label.
DETAILS = (
    ("seed_value", N_("the blog post prints", "verify")),
    ("expected", CLAIM_FIELDS["expected"]),
    ("measured", CLAIM_FIELDS["measured"]),
    ("correct_value", N_("correct value", "verify")),
    ("note", N_("note", "verify")),
)
RUN_LINE = {
    True: N_(
        "random seed {seed}, quick run, Monte Carlo target ±{target:g} (relative, {confidence:.0%} CI), attnscale {version}"
    ),
    False: N_(
        "random seed {seed}, full run, Monte Carlo target ±{target:g} (relative, {confidence:.0%} CI), attnscale {version}"
    ),
}


def register(sub) -> None:
    p = add_command(
        sub,
        "verify",
        help="check every claim and number of the blog post (exact arithmetic, symbolic, Monte Carlo)",
        description="Check every claim and every printed number of the blog post on this machine: one row per "
        "claim with the method, what is expected, what was measured (Monte Carlo: estimate, 99% "
        "confidence interval, sample count) and a verdict: holds, FAILS (shown false), UNDECIDED "
        "(inconclusive: the interval does not decide at this sample size) or POST WRONG (a number the blog post prints is wrong).",
        examples=[
            "attnscale verify --quick",
            "attnscale verify --json verify.json --lang zh",
            "attnscale verify --strict    exit 1 unless every verdict is 'holds'",
        ],
    )
    add_json_option(p, "the verification's result")
    add_quiet_option(p)
    add_results_option(p, "results folder: the result goes to DIR/verify/result.json (quick.json for --quick)")
    add_lang_option(p, "the claim text")
    p.add_argument("--strict", action="store_true", help="exit 1 when any verdict is not 'holds'")
    p.add_argument("--quick", action="store_true", help="small sample caps: seconds instead of a minute")
    add_seed_option(p, "random seed; same random seed, same output")
    p.add_argument(
        "--rel-ci-target",
        type=float,
        default=0.01,
        metavar="R",
        help="stop a Monte Carlo estimate when its 99%% CI half-width is R × |estimate| (default 0.01)",
    )
    p.add_argument(
        "--only",
        metavar="IDS",
        default=None,
        help="check only these claims, by id prefix, comma-separated: 'S5' (every S5.x), 'S5,S7.2'; "
        "a partial run is not written into the results folder",
    )
    p.set_defaults(run=run_verify)


def verify_data(report) -> dict:
    """The ``verify`` result's data: everything the report shows (claim rows, stored counts, the
    chapter outline in order with each chapter's part, the figures' series, timings), so the report
    computes nothing. The configuration, random seed and environment go in the envelope."""
    from attnscale.claims.result import CHAPTERS

    d = report.to_dict()
    # "beyond": the chapters past the blog post's own outline (claims.result.CHAPTERS ends with them)
    outline = [{"id": c, "part": "beyond" if c.startswith("beyond") else "seed"} for c in CHAPTERS]
    return {
        "claims": d["claims"],
        "counts": d["counts"],
        "chapters": outline,
        "series": d["data"],
        "timings": d["timings"],
    }


def verify_config(quick: bool, seed: int, rel_ci_target: float | None = None, results_root=None, only=None):
    """The VerifyConfig of a run: the results folder its claims about training and real models read,
    and the claim-id prefixes of ``only`` ("S5,S7.2")."""
    from attnscale.claims import VerifyConfig

    kw = {"seed": seed, "quick": quick}
    if rel_ci_target is not None:
        kw["rel_ci_target"] = rel_ci_target
    if results_root is not None:
        kw["results_root"] = str(results_root)
    if only is not None:
        kw["only"] = tuple(p.strip() for p in only.split(",") if p.strip())
    return VerifyConfig(**kw)


def run_and_save(config, root, progress=None, save: bool = True):
    """Run the verification of ``config`` and write its result under ``root`` (when ``save``; else the
    envelope is made but not written); (report, envelope)."""
    from attnscale import results
    from attnscale.claims import run_claims

    cfg = config.recorded()
    if not save:
        report = run_claims(config, progress=progress)
        return report, results.envelope("verify", verify_data(report), config=cfg, seed=config.seed, quick=config.quick)
    with hold_results("verify", root):  # one writer of DIR/verify at a time
        report = run_claims(config, progress=progress)
        env = results.write("verify", verify_data(report), config=cfg, seed=config.seed, quick=config.quick, root=root)
    return report, env


def run_verify(args) -> int:
    from attnscale.cli.progress import Progress

    check_json_target(args)
    root = check_out_folder(results_root(args), "--results", named=args.results is not None)
    with options_named({"rel_ci_target": "--rel-ci-target", "only": "--only", "seed": "--seed"}):
        config = verify_config(args.quick, args.seed, args.rel_ci_target, root, args.only)
    partial = args.only is not None
    with Progress(quiet=args.quiet) as progress:
        report, env = run_and_save(config, root, progress, save=not partial)
    emit_json(args, env)
    if not json_to_stdout(args):
        sys.stdout.write(render_table(report))
    if not args.quiet:
        seconds = f"{report.timings.get('total', 0.0):.1f}"
        done = (
            _("{s} s; not written into the results folder (--only: partial)", s=seconds)
            if partial
            else _("{s} s; wrote {path}", s=seconds, path=env.path)
        )
        print(f"attnscale verify: {done}", file=sys.stderr)
    if args.strict and any(c.verdict != "holds" for c in report.claims):
        return 1
    return 0


def render_table(report, width: int = 110) -> str:
    """The terminal table: a header line per claim (id, verdict, method, claim) and indented details."""
    verdict_header, method_header = _("VERDICT", msgctxt="verify"), _("METHOD", msgctxt="verify")
    # Each column as wide as its widest entry in this language, in terminal columns (CJK: two each).
    verdict_w = max(columns(t) for t in (verdict_header, *(_(m) for m in VERDICT_MARK.values())))
    method_w = max(columns(t) for t in (method_header, *(_(m) for m in METHOD_NAME.values())))
    out = [
        f"{pad(_('ID', msgctxt='verify'), 6)} {pad(verdict_header, verdict_w)} "
        f"{pad(method_header, method_w)} {_('CLAIM', msgctxt='verify')}",
        "-" * width,
    ]
    indent = " " * 7
    for c in report.claims:
        head = f"{c.id:<6} {pad(_(VERDICT_MARK[c.verdict]), verdict_w)} {pad(_(METHOD_NAME[c.method]), method_w)} "
        out.append(
            textwrap.fill(c.text("claim"), width=width, initial_indent=head, subsequent_indent=" " * columns(head))
        )
        for field, label in DETAILS:
            value = c.text(field)
            if value:
                out.append(
                    textwrap.fill(
                        _("{label}: {text}", msgctxt="verify", label=_(label), text=value),
                        width=width,
                        initial_indent=indent,
                        subsequent_indent=indent + "  ",
                    )
                )
    counts = report.counts()
    out.append("-" * width)
    out.append(
        _(
            "{n} claims: {holds} hold, {fails} fail, {inconclusive} inconclusive, {wrong} of the blog post's numbers wrong",
            n=len(report.claims),
            holds=counts["holds"],
            fails=counts["fails"],
            inconclusive=counts["inconclusive"],
            wrong=counts["seed number wrong"],
        )
    )
    if counts["inconclusive"]:
        out.append(
            _(
                "UNDECIDED = inconclusive: the interval does not decide the criterion at this sample size",
                msgctxt="verify",
            )
        )
    cfg = report.config
    out.append(
        _(
            RUN_LINE[cfg.quick],
            seed=cfg.seed,
            target=cfg.rel_ci_target,
            confidence=cfg.confidence,
            version=report.environment.get("attnscale"),
        )
    )
    return "\n".join(out) + "\n"
