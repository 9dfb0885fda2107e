"""Group 1: every number the blog post prints, checked at the precision it prints.

Exact values come from sympy's arbitrary-precision evaluation (60 significant digits, with error
bounds), so no float rounding can hide or invent a wrong digit. A printed number holds when the
exact value rounds to it at its shown precision (``judge_printed``).
"""

from __future__ import annotations

from decimal import Decimal
from fractions import Fraction
from functools import partial

import numpy as np

from attnscale.claims.context import Context
from attnscale.claims.register import claim
from attnscale.claims.result import ClaimResult, clauses, format_like, judge_printed, printed_decimal
from attnscale.i18n import N_, _
from attnscale.theory import dot_square_terms

DIGITS = 60
# The statements several rows share: e^x of a row of the seed's scores ({x} as the seed writes it).
EXP_TABLE = N_("e^{x} = {seed} (the eˣ table)")
EXP_50_10_5 = N_("e^{x} = {seed} (scores [50, 10, 5])")
EXP_5_1_HALF = N_("e^{x} = {seed} (scores [5, 1, 0.5])")
EXP_14_10_12 = N_("e^{x} = {seed} (scores [14, 10, 12])")
EXP_SCALED = N_("e^{x} = {seed} (scaled scores)")
E50 = "5,184,705,528,587,072,045"  # e^50 as the seed prints it (S1.6, S1.7)


def _exact(expr) -> Decimal:
    return Decimal(str(expr.evalf(DIGITS)))


def _sym(x: str):
    import sympy

    return sympy.Rational(x)


def _exp(x: str) -> Decimal:
    import sympy

    return _exact(sympy.exp(_sym(x)))


def _softmax_exact(logits: list[str]) -> list[Decimal]:
    import sympy

    e = [sympy.exp(_sym(x)) for x in logits]
    total = sum(e)
    return [_exact(v / total) for v in e]


def _sum_exp(logits: list[str]) -> Decimal:
    import sympy

    return _exact(sum(sympy.exp(_sym(x)) for x in logits))


def _more_digits(text: str, exact: Decimal, extra: int = 3) -> str:
    """The exact value shown the seed's way with ``extra`` more decimals."""
    decimals = max(0, -printed_decimal(text).as_tuple().exponent) + extra
    template = ("1,000." if "," in text else "1.") + "0" * decimals + ("%" if text.strip().endswith("%") else "")
    return format_like(template, exact)


def _sum_of_printed(texts: list[str]) -> str:
    """What the seed's rounded addends add up to, printed like the first of them."""
    return format_like(texts[0], sum(printed_decimal(t) for t in texts))


def _e50_note(text: str) -> str:
    exact = _exp("50")
    shown = printed_decimal(text)
    digits_exact, digits_shown = len(str(int(exact))), len(str(int(shown)))
    common = next(
        (i for i, (a, b) in enumerate(zip(str(int(exact)), str(int(shown)))) if a != b), min(digits_exact, digits_shown)
    )
    return _(
        "e^50 = {exact:.6e} has {digits_exact} digits before the point; the blog post prints {digits_shown} digits, about {ratio:.0f}× too small (its first {common} digits are right)",
        exact=exact,
        digits_exact=digits_exact,
        digits_shown=digits_shown,
        ratio=float(exact / shown),
        common=common,
    )


def judge_numbers(texts: list[str], exact: list[Decimal]) -> tuple[str, str | None]:
    """Several printed numbers judged as one (``judge_printed`` each): ("holds", None) when all are
    right, else ("seed number wrong", the right values of the wrong ones, printed the seed's way)."""
    wrong = [c for v, c in (judge_printed(t, e) for t, e in zip(texts, exact)) if v != "holds"]
    return ("seed number wrong", ", ".join(wrong)) if wrong else ("holds", None)


class Printed(list):
    """The seed's printed numbers as a claim's ``{seed}`` slot: ``{seed}`` is all of them, "1.0, 0.0,
    0.0" (as the seed lists them), ``{seed[0]}`` the first."""

    def __format__(self, spec: str) -> str:
        return format(", ".join(self), spec)


def printed(ctx: Context, cid: str, statement: str, texts: list[str], exact: list[Decimal], note="", **slots) -> None:
    """One claim row for one or more printed numbers (the statement's ``{seed}`` placeholder, see
    :class:`Printed`; ``slots`` fills any other); the worst verdict of its numbers wins."""
    verdict, correct = judge_numbers(texts, exact)
    ctx.add(
        claim(
            cid,
            statement,
            seed=Printed(texts),
            **slots,
            expected=lambda: _("the exact value, rounded at the blog post's shown precision"),
            measured=", ".join(_more_digits(t, e) for t, e in zip(texts, exact)),
            verdict=verdict,
            correct_value=correct,
            note=note,
        )
    )


def _exp_row(ctx, cid, statement: str, x: str, text: str, note=""):
    """The claim e^x = ``text``, the statement's ``{x}`` shown as the seed writes it: 0.5, 1.75."""
    printed(ctx, cid, statement, [text], [_exp(x)], note, x=format(float(_sym(x)), "g"))


def run(ctx: Context) -> None:
    _exp_table(ctx)
    _scores_50_10_5(ctx)
    _scores_5_1_half(ctx)
    _dot_example(ctx)
    _scores_14_10_12(ctx)
    _scaled_scores(ctx)
    # why_sqrt: the variances of [2, 4, 6] and [1, 2, 3], exactly
    _variance_rows(ctx)
    # proof: the term counts
    _count_rows(ctx)
    _formula_row(ctx)
    ctx.data["seed_softmax_examples"] = _softmax_examples()
    ctx.tick(N_("the blog post's printed numbers"))


def _exp_table(ctx: Context) -> None:
    """S1.1–S1.6, softmax_large: the eˣ table."""
    printed(ctx, "S1.1", N_("e is about {seed}"), ["2.718"], [_exp("1")])
    table = [("1", "2.718"), ("5", "148.4"), ("10", "22,026"), ("20", "485,165,195"), ("50", E50)]
    for i, (x, text) in enumerate(table, start=2):
        _exp_row(ctx, f"S1.{i}", EXP_TABLE, x, text, partial(_e50_note, E50) if x == "50" else "")


def _scores_50_10_5(ctx: Context) -> None:
    """S1.7–S1.10, softmax_large: the scores [50, 10, 5], their exponentials and softmax."""
    _exp_row(
        ctx,
        "S1.7",
        EXP_50_10_5,
        "50",
        E50,
        lambda: _("{e50_note}; printed again as the numerator of the softmax line", e50_note=_e50_note(E50)),
    )
    _exp_row(ctx, "S1.8", EXP_50_10_5, "10", "22,026")
    _exp_row(
        ctx,
        "S1.9",
        EXP_50_10_5,
        "5",
        "148",
        lambda: _("printed as 148 here and as 148.4 elsewhere: both are correctly rounded"),
    )
    w50 = _softmax_exact(["50", "10", "5"])
    printed(
        ctx,
        "S1.10",
        N_("softmax([50, 10, 5]) ≈ [{seed}]"),
        ["1.0", "0.0", "0.0"],
        w50,
        lambda: _(
            "the exact weights are 1 − {first:.1e}, {second:.1e} and {third:.1e}",
            first=float(1 - w50[0]),
            second=float(w50[1]),
            third=float(w50[2]),
        ),
    )


def _scores_5_1_half(ctx: Context) -> None:
    """S1.11–S1.15, softmax_large: the scores [5, 1, 0.5], their exponentials, sum and softmax."""
    for i, (x, text) in enumerate([("5", "148.4"), ("1", "2.718"), ("1/2", "1.649")], start=11):
        _exp_row(ctx, f"S1.{i}", EXP_5_1_HALF, x, text)
    printed(
        ctx,
        "S1.14",
        N_("Sum = {seed} for scores [5, 1, 0.5]"),
        ["152.780"],
        [_sum_exp(["5", "1", "1/2"])],
        lambda: _(
            "the sum of the exact exponentials; the printed, rounded addends add up to {total}",
            total=_sum_of_printed(["148.400", "2.718", "1.649"]),
        ),
    )
    printed(
        ctx,
        "S1.15",
        N_("softmax([5, 1, 0.5]) = [{seed}]"),
        ["0.971", "0.018", "0.011"],
        _softmax_exact(["5", "1", "1/2"]),
    )


def _dot_example(ctx: Context) -> None:
    """S1.16, real_numbers: the d_k = 4 example's q·k, √d_k and scaled score, exactly."""
    q, k = [1, 0, 1, 0], [0, 1, 1, 1]
    dot = sum(Fraction(a) * b for a, b in zip(q, k))
    root = Fraction(2)  # √4, checked below as an exact square
    ok = dot == 1 and root * root == 4 and dot / root == Fraction(1, 2)
    ctx.add(
        claim(
            "S1.16",
            N_("d_k = 4: q = [1,0,1,0], k = [0,1,1,1] give q·k = 1, √4 = 2, scaled score 0.5"),
            expected="1, 2, 1/2",
            measured=f"{dot}, {root}, {dot / root}",
            verdict="holds" if ok else "seed number wrong",
            correct_value=None if ok else f"{dot}, {root}, {dot / root}",
        )
    )


def _scores_14_10_12(ctx: Context) -> None:
    """S1.17–S1.22, real_numbers: the unscaled scores [14, 10, 12], their exponentials, sum and softmax."""
    for i, (x, text) in enumerate([("14", "1,202,604"), ("10", "22,026"), ("12", "162,755")], start=17):
        _exp_row(ctx, f"S1.{i}", EXP_14_10_12, x, text)
    printed(
        ctx,
        "S1.20",
        N_("Sum = {seed} for scores [14, 10, 12]"),
        ["1,387,386"],
        [_sum_exp(["14", "10", "12"])],
        lambda: _(
            "the exact sum {exact} rounds to {printed}; the printed, rounded addends add up to {total}",
            exact=format_like("1,000.00", _sum_exp(["14", "10", "12"])),
            printed="1,387,386",
            total=_sum_of_printed(["1,202,604", "22,026", "162,755"]),
        ),
    )
    w = _softmax_exact(["14", "10", "12"])
    printed(ctx, "S1.21", N_("softmax([14, 10, 12]) = [{seed}]"), ["0.867", "0.016", "0.117"], w)
    printed(ctx, "S1.22", N_("the first word gets {seed[0]}, the second {seed[1]}"), ["86.7%", "1.6%"], w[:2])


def _scaled_scores(ctx: Context) -> None:
    """S1.23–S1.29 and S1.36, real_numbers: [14, 10, 12] after ÷ √64 = 8, their exponentials, sum,
    softmax, and the softmax as the seed writes it, quotients of its rounded numbers."""
    scaled = [Fraction(x, 8) for x in (14, 10, 12)]
    ok = Fraction(8) ** 2 == 64 and scaled == [Fraction(7, 4), Fraction(5, 4), Fraction(3, 2)]
    ctx.add(
        claim(
            "S1.23",
            N_("√64 = 8; [14, 10, 12] / 8 = [1.75, 1.25, 1.5]"),
            expected="8; 7/4, 5/4, 3/2",
            measured="8; " + ", ".join(str(s) for s in scaled),
            verdict="holds" if ok else "seed number wrong",
        )
    )
    for i, (x, text) in enumerate([("7/4", "5.755"), ("5/4", "3.490"), ("3/2", "4.482")], start=24):
        _exp_row(ctx, f"S1.{i}", EXP_SCALED, x, text)
    printed(
        ctx,
        "S1.27",
        N_("Sum = {seed} for the scaled scores [1.75, 1.25, 1.5]"),
        ["13.727"],
        [_sum_exp(["7/4", "5/4", "3/2"])],
    )
    ws = _softmax_exact(["7/4", "5/4", "3/2"])
    printed(
        ctx,
        "S1.28",
        N_("softmax([1.75, 1.25, 1.5]) = [{seed}]"),
        ["0.419", "0.254", "0.326"],
        ws,
        lambda: _(
            "the rounded weights add up to {total}: rounding, not an error",
            total=_sum_of_printed(["0.419", "0.254", "0.326"]),
        ),
    )
    printed(ctx, "S1.29", N_("after scaling: {seed[0]}, {seed[1]} and {seed[2]}"), ["41.9%", "25.4%", "32.6%"], ws)
    _quotient_row(ctx, ["5.755", "3.490", "4.482"], "13.727", ["0.419", "0.254", "0.326"], ws)


def _quotient_row(
    ctx: Context, numerators: list[str], denominator: str, texts: list[str], exact_weights: list[Decimal]
) -> None:
    """S1.36: the seed writes its weights as quotients of its own rounded numbers; each quotient is
    judged as written, and the exact softmax weight is shown beside it (S1.28 judges those)."""
    quotients = [printed_decimal(a) / printed_decimal(denominator) for a in numerators]
    verdict, correct = judge_numbers(texts, quotients)
    exact_ok = [judge_printed(t, w)[0] == "holds" for t, w in zip(texts, exact_weights)]
    differ = [t for t, q, w in zip(texts, quotients, exact_weights) if format_like(t, q) != format_like(t, w)]

    def measured() -> str:
        return clauses(
            (
                _(
                    "{quotient} = {value} → {rounded}; exact softmax {exact} → {exact_rounded}",
                    quotient=f"{a}/{denominator}",
                    value=_more_digits(t, q),
                    rounded=format_like(t, q),
                    exact=_more_digits(t, w),
                    exact_rounded=format_like(t, w),
                )
                for a, t, q, w in zip(numerators, texts, quotients, exact_weights)
            )
        )

    def note() -> str:
        rounded = ", ".join(format_like(t, q) for t, q in zip(texts, quotients))
        text = (
            _(
                "the quotients as written round to {quotients}; the printed weights are the exact softmax weights rounded (all right, S1.28)",
                quotients=rounded,
            )
            if all(exact_ok)
            else _(
                "the quotients as written round to {quotients}; the printed weights are the exact softmax weights rounded (not all: see S1.28)",
                quotients=rounded,
            )
        )
        if not differ:
            return text
        return _(
            "{note}: {weights} is right as a weight but not as the quotient written beside it — rounding the numerator and the denominator first moves the last digit",
            note=text,
            weights=", ".join(differ),
        )

    ctx.add(
        claim(
            "S1.36",
            N_("softmax = [{quotients}] = [{seed}]"),
            quotients=", ".join(f"{a}/{denominator}" for a in numerators),
            seed=Printed(texts),
            expected=lambda: _("each quotient of the printed numbers, rounded at the blog post's shown precision"),
            measured=measured,
            verdict=verdict,
            correct_value=correct,
            note=note,
        )
    )


def _population_variance(values) -> tuple[Fraction, list[Fraction], list[Fraction], Fraction]:
    xs = [Fraction(v) for v in values]
    mean = sum(xs) / len(xs)
    diffs = [x - mean for x in xs]
    squares = [d * d for d in diffs]
    return mean, diffs, squares, sum(squares) / len(xs)


def _variance_rows(ctx: Context) -> None:
    for cid, values, seed_mean, seed_diffs, seed_sq, seed_var in [
        ("S1.30", (2, 4, 6), 4, [-2, 0, 2], [4, 0, 4], "2.67"),
        ("S1.31", (1, 2, 3), 2, [-1, 0, 1], [1, 0, 1], "0.67"),
    ]:
        ctx.add(_variance_row(cid, values, seed_mean, seed_diffs, seed_sq, seed_var))
    big = _population_variance((2, 4, 6))[3]
    small = _population_variance((1, 2, 3))[3]
    rounded_ratio = Decimal("2.67") / 4  # the seed divides its rounded 2.67
    verdict, correct = judge_printed("0.67", rounded_ratio)
    exact_ratio_ok = big / 4 == small
    ctx.add(
        claim(
            "S1.32",
            N_("dividing by c = 2 divides the variance by c² = 4: 2.67 / 4 = 0.67"),
            expected=lambda: _("(8/3) / 4 = Var([1, 2, 3]) exactly; 2.67 / 4 rounds to 0.67"),
            measured=lambda: _(
                "({big}) / 4 = {quarter}, Var([1,2,3]) = {small}; 2.67 / 4 = {ratio}",
                big=big,
                quarter=big / 4,
                small=small,
                ratio=rounded_ratio,
            ),
            verdict=verdict if exact_ratio_ok else "fails",
            correct_value=correct,
        )
    )


def _variance_row(
    cid: str, values: tuple[int, ...], seed_mean: int, seed_diffs: list[int], seed_sq: list[int], seed_var: str
) -> ClaimResult:
    mean, diffs, squares, var = _population_variance(values)
    ok_steps = mean == seed_mean and diffs == seed_diffs and squares == seed_sq
    verdict, correct = judge_printed(seed_var, Decimal(var.numerator) / Decimal(var.denominator))
    diffs_text, squares_text = ", ".join(map(str, diffs)), ", ".join(map(str, squares))
    if not ok_steps:  # the right steps, written the way the seed_value writes the seed's
        verdict = "seed number wrong"
        correct = f"{mean}; [{diffs_text}]; [{squares_text}]; {format_like(seed_var, Decimal(var.numerator) / Decimal(var.denominator))}"
    return claim(
        cid,
        N_("{values}: mean {mean}, squared differences {squares}, variance {variance}"),
        values=str(list(values)),
        mean=str(seed_mean),
        diffs=str(seed_diffs),
        squares=str(seed_sq),
        variance=seed_var,
        expected=lambda: _("the population variance (divide by n = 3), rounded at 2 decimals"),
        measured=lambda: _(
            "mean {mean}; [{diffs}]; [{squares}]; variance {variance} = {value:.5f}",
            mean=mean,
            diffs=diffs_text,
            squares=squares_text,
            variance=var,
            value=float(var),
        ),
        verdict=verdict,
        correct_value=correct,
    )


def _count_rows(ctx: Context) -> None:
    for cid, d in [("S1.33", 3), ("S1.34", 64)]:
        ctx.add(_count_row(cid, d))


def _count_row(cid: str, d: int) -> ClaimResult:
    # counted from the products' expectations under the moment rules, not from an index grid
    n_terms, unit, zero, variance = dot_square_terms(d)
    expected = {3: (9, 3, 6, 3), 64: (4096, 64, 4032, 64)}[d]
    ok = (n_terms, unit, zero, variance) == expected
    return claim(
        cid,
        N_("d_k = {d_k}: (Σ qᵢkᵢ)² has {terms} terms, {ones} of mean 1 and {zeros} of mean 0"),
        d_k=d,
        terms=expected[0],
        ones=expected[1],
        zeros=expected[2],
        expected=lambda: _("d_k² terms = d_k diagonal + (d_k² − d_k) cross"),
        measured=lambda: _(
            "{terms} terms = {ones} of mean 1 + {zeros} of mean 0; variance {variance}",
            terms=n_terms,
            ones=unit,
            zeros=zero,
            variance=variance,
        ),
        verdict="holds" if ok else "seed number wrong",
        # the right counts, written the way the seed_value writes the seed's
        correct_value=None if ok else f"{n_terms} = {unit} + {zero}; {variance}",
        note=lambda: _(
            "each product (qᵢkᵢ)(qⱼkⱼ) is classified by its expectation under E x = 0, E x² = 1 (attnscale.theory.dot_square_terms); sympy's expansion agrees for d_k ≤ 8 (S2.1)"
        ),
    )


def _formula_row(ctx: Context) -> None:
    """The formula itself: attnscale.attention's default scale is 1/√d_k, against the formula written out."""
    from attnscale.functional import attention
    from attnscale.softmax_rows import softmax

    rng = ctx.rng("formula")
    q, k, v = (rng.standard_normal((5, 64)), rng.standard_normal((7, 64)), rng.standard_normal((7, 3)))
    written_out = softmax(q @ k.T / np.sqrt(64)) @ v
    diff = float(np.max(np.abs(attention(q, k, v) - written_out)))
    tol = 1e-12
    ctx.add(
        claim(
            "S1.35",
            N_("Attention(Q, K, V) = softmax(Q·Kᵀ / √d_k)·V (d_k = 64: divide by 8)"),
            expected=lambda: _(
                "attnscale.attention (default scale) = the formula written out, |diff| ≤ {tol:g}", tol=tol
            ),
            measured=lambda: _("max |diff| = {diff:.2e} (float64, L = 5, S = 7, d_k = 64)", diff=diff),
            verdict="holds" if diff <= tol else "fails",
        )
    )


def _softmax_examples() -> dict:
    from attnscale.softmax_rows import softmax

    out = {}
    for name, logits in [
        ("[50, 10, 5]", [50.0, 10.0, 5.0]),
        ("[5, 1, 0.5]", [5.0, 1.0, 0.5]),
        ("[14, 10, 12]", [14.0, 10.0, 12.0]),
    ]:
        x = np.asarray(logits)
        out[name] = {
            "logits": x,
            "weights": softmax(x),
            "logits_scaled": x / 8.0,
            "weights_scaled": softmax(x / 8.0),
            "scale": 1.0 / 8.0,
        }
    return out
