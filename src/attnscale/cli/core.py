"""Core subcommands: ``softmax`` (weights and health figures of one row) and ``rules``."""

from __future__ import annotations

import re
import sys

import numpy as np

from attnscale.cli.options import add_command, add_lang_option
from attnscale.cli.output import add_json_option, check_json_target, emit_json, json_to_stdout, pad
from attnscale.errors import InputError
from attnscale.i18n import N_, _

# The health figures of one row (attnscale.softmax_rows.row_health) as a reader sees them, keyed by the
# names of RowHealth.as_dict().
HEALTH = {
    "n": N_("keys n"),
    "entropy": N_("entropy"),
    "normalized_entropy": N_("entropy / ln n"),
    "max_weight": N_("largest weight"),
    "effective_support": N_("effective keys 1/Σp²"),
    "jacobian_frobenius": N_("‖J‖ Frobenius"),
    "jacobian_spectral": N_("‖J‖ spectral"),
    "saturation_index": N_("saturation σ/√(2 ln n)"),
}

# What each scale rule (attnscale.scales.RULES, by name) is for, shown to the Chinese reader only:
# the English reader reads the same in the formula column and the rule's citation (a reference, kept
# as published), so the English table stays as it is; the Chinese reader gets it in words.
RULE_PURPOSE = {
    "inverse_sqrt_dk": N_("divide by √d_k (the blog post's and Vaswani et al.'s way)"),
    "inverse_dk": N_("divide by d_k (µP)"),
    "unscaled": N_("no scaling (the case the blog post argues against)"),
    "logn": N_("multiply by s·ln(n), n the number of keys attended to"),
    "qknorm": N_("RMS-normalise q and k first, then divide by √d_k"),
    "softcap": N_("divide by √d_k, then soft-cap with tanh"),
    "softcap_unscaled": N_("no scaling, soft-cap with tanh directly"),
}

#: What a negative logit may look like on the command line: -1, -1.5, -.5, -1e3, -inf, -infinity, -nan.
NEGATIVE_NUMBER = re.compile(r"^-(\d+\.?\d*([eE][-+]?\d+)?|\.\d+([eE][-+]?\d+)?|inf(inity)?|nan)$", re.IGNORECASE)


def register(sub) -> None:
    p = add_command(
        sub,
        "softmax",
        help="softmax weights and health figures of one row of logits",
        description="Softmax of the given logits (times --scale), with the row's health figures. "
        "Without logits (or with -), reads them from stdin: numbers separated by spaces, "
        "commas or new lines.",
        examples=[
            "attnscale softmax 14 10 12 --scale 0.125",
            "attnscale softmax -- 1 -inf -1e3    (after --, logits may start with '-')",
            "echo 14 10 12 | attnscale softmax --json -",
        ],
    )
    # Negative and infinite logits are arguments, not options: argparse, which takes "-1" and "-.5"
    # as numbers, would read "-inf" or "-1e3" as an unknown flag (the command has no option that
    # looks like a number, so none is shadowed).
    p._negative_number_matcher = NEGATIVE_NUMBER
    p.add_argument(
        "logits",
        nargs="*",
        metavar="LOGIT",
        help="the row's logits (-inf: a masked key); none or '-': read them from stdin",
    )
    p.add_argument("--scale", default="1", help="a finite number that multiplies the logits first (default 1)")
    add_json_option(p, "the logits, weights and health figures")
    add_lang_option(p, "the table")
    p.set_defaults(run=run_softmax)

    r = add_command(
        sub,
        "rules",
        help="list the named scale rules with formula and citation",
        examples=[
            "attnscale rules --lang zh       with what each rule is for, in Chinese",
            "attnscale rules --json -        the rules as strict JSON",
        ],
    )
    add_json_option(r, "the rules")
    add_lang_option(r, "the table")
    r.set_defaults(run=run_rules)


def parse_numbers(tokens: list[str], where: str = "logits") -> np.ndarray:
    """``tokens`` as float64; a bad one is an error naming it and its place (1-based)."""
    values = []
    for i, token in enumerate(tokens, 1):
        try:
            values.append(float(token))
        except ValueError:
            raise InputError(f"{where}: expected numbers, got {token!r} (number {i})") from None
    if not values:
        raise InputError(f"{where}: expected at least one number, got none")
    return np.asarray(values, dtype=np.float64)


def _read_logits(args, stdin) -> np.ndarray:
    tokens = args.logits
    if tokens in ([], ["-"]):
        if stdin is None or stdin.isatty():
            raise InputError(
                "logits: expected numbers as arguments or on stdin, got neither (example: attnscale softmax 14 10 12)"
            )
        return parse_numbers([t for t in re.split(r"[\s,]+", stdin.read()) if t], "logits (stdin)")
    return parse_numbers(tokens)


def resolve_scale_option(text: str) -> float:
    """``--scale`` as the factor of :func:`attnscale.scales.resolve_scale`'s rule, with errors that
    name ``--scale`` (NaN, ±inf and overflowing values such as 1e400 are refused)."""
    from attnscale.scales import resolve_scale

    try:
        value = float(text)
    except ValueError:
        raise InputError(f"--scale: expected a number, got {text!r}") from None
    try:
        rule = resolve_scale(value)
    except InputError as err:
        raise InputError(f"--scale {text}: {str(err).removeprefix('scale: ')}") from None
    return float(rule.factor(1))


def run_softmax(args, stdin=None) -> int:
    from attnscale.softmax_rows import row_health, softmax

    check_json_target(args)
    raw = _read_logits(args, sys.stdin if stdin is None else stdin)
    scale = resolve_scale_option(args.scale)
    with np.errstate(over="ignore", invalid="ignore"):
        logits = raw * scale
    overflow = np.isfinite(raw) & ~np.isfinite(logits)
    if overflow.any():
        i = int(np.argmax(overflow))
        raise InputError(f"--scale {args.scale}: times the logit {raw[i]:g} it overflows float64")
    weights = softmax(logits)  # the library refuses NaN and +inf logits, naming them
    health = {
        k: (int(v) if k == "n" else float(v) if np.isfinite(v) else None)
        for k, v in row_health(logits).as_dict().items()
    }
    masked = [i for i, z in enumerate(logits) if z == -np.inf]
    data = {
        "scale": scale,
        "logits": [None if z == -np.inf else float(z) for z in logits],
        "masked": masked,  # the indices whose logit is -inf (null above): weight 0, not attended
        "weights": weights.tolist(),
        "health": health,  # null: a figure undefined for this row (e.g. entropy / ln n with one key)
        "health_null": "undefined for this row" if None in health.values() else None,
    }
    emit_json(args, data)
    if json_to_stdout(args):
        return 0
    print(f"{pad(_('logit'), 12, True)} {pad(_('weight'), 10, True)}")
    for z, p in zip(logits, weights):
        print(f"{z:12.6g} {p:10.4f}")
    for name, value in health.items():
        shown = _("undefined") if value is None else format(value, ".6g")
        print(f"{pad(_(HEALTH[name]), 24, True)}: {shown}")
    if masked:
        print(f"{len(masked)} {_('masked (-inf): weight 0')}")
    if scale != 1.0:
        print(_("logits multiplied by --scale {s:g}", s=scale))
    return 0


def run_rules(args) -> int:
    from attnscale.scales import RULES

    check_json_target(args)
    rows = [rule.describe() for rule in RULES.values()]
    if args.lang == "zh":
        rows = [{**row, "description_zh": _(RULE_PURPOSE[row["name"]])} for row in rows]
    emit_json(args, rows)
    if json_to_stdout(args):
        return 0
    print(f"{pad(_('rule'), 16)} {pad(_('formula'), 40)} {_('citation')}")
    for row in rows:
        print(f"{row['name']:<16} {row['formula']:<40} {_(row['citation'])}")
        if row.get("description_zh"):
            print(f"{'':<16} {row['description_zh']}")
    print(f"\n{_('use one with attnscale.attention(q, k, v, scale=NAME)')}")
    return 0
