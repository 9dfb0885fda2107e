"""The plain data of a verification run: its configuration, one result per claim, and the verdicts.

A claim's verdict is one of:
  "holds"             the claim (or the seed's printed number) is right;
  "fails"             a statement of the seed is false as stated (measured against its own criterion);
  "inconclusive"      not decided: the interval does not decide the criterion at this sample size (it
                      straddles the line, two intervals to compare overlap, or an equality's interval is
                      wider than its margin); or the results a claim is judged from are missing (the row
                      names the command); or the claim is not checkable by computation (method "citation");
  "seed number wrong" the seed prints a number that differs from the true value at the precision it
                      prints; ``correct_value`` then gives the true one at that precision.

Printed numbers are judged by :func:`judge_printed`: a number printed with k decimals holds when the
exact value lies within half a unit of its last shown digit (it is correctly rounded), whichever way
the seed rounds elsewhere ("148" for e⁵ in one place, "148.4" in another are both right).

Monte Carlo criteria are judged by :func:`judge_at_least`, :func:`judge_at_most` and
:func:`judge_below` (one interval against a line, or two intervals against each other), a trend along
a sequence by :func:`judge_rising` and :func:`judge_falling` (every step's intervals separated), and a
claim made of several parts (several n, several d_k) by :func:`judge_all`; :func:`by_n_note` and
:func:`per_n` word the parts of a claim judged for each n. An equality (Var(q·k) = d_k and
the like) is judged by :func:`judge_equal`: it holds only when the interval covers the claimed value
*and* is precise enough to say so, i.e. lies within a stated equivalence margin (``ClaimResult.margin``,
relative to the claimed value); a wide interval that merely covers the value is "inconclusive".

Claims judged from other programs' results (training, probes) name them in ``ClaimResult.sources``
(kind, quick or full, when written), and say "quick" in their text when only a quick result exists.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from decimal import Decimal, localcontext
from pathlib import Path
from typing import Any

from attnscale.errors import InputError
from attnscale.i18n import N_, _, current_lang
from attnscale.results import DEFAULT_ROOT
from attnscale.store import to_jsonable

__all__ = [
    "CHAPTERS",
    "METHODS",
    "VERDICTS",
    "WORDED",
    "ClaimResult",
    "VerifyConfig",
    "VerifyReport",
    "printed_decimal",
    "judge_printed",
    "format_like",
    "judge_at_least",
    "judge_at_most",
    "judge_below",
    "judge_equal",
    "judge_all",
    "judge_rising",
    "judge_falling",
    "count_verdicts",
    "level_text",
    "interval_text",
    "clauses",
    "per_n",
    "by_n_note",
    "selects",
]

# The seed's sections, in its order; every claim belongs to one.
CHAPTERS = (
    "formula",
    "without_scaling",
    "why_grows",
    "variance",
    "proof",
    "softmax_large",
    "why_sqrt",
    "real_numbers",
    "faq",
    "beyond",
)
METHODS = ("exact arithmetic", "symbolic", "closed form", "Monte Carlo", "training results", "model probe", "citation")
VERDICTS = ("holds", "fails", "inconclusive", "seed number wrong")
N_GROUPS = 10  # claim groups S1 … S10 (attnscale.claims.GROUPS)
WORDED = ("expected", "measured", "note")  # the computed texts a claim result holds in every language


def judge_at_least(lo: float, hi: float, threshold: float) -> str:
    """Is the quantity ≥ ``threshold``, given its interval [lo, hi]? "holds" when the whole interval is
    at or above the line, "fails" when it is wholly below, "inconclusive" when it straddles the line."""
    if lo >= threshold:
        return "holds"
    if hi < threshold:
        return "fails"
    return "inconclusive"


def judge_at_most(lo: float, hi: float, threshold: float) -> str:
    """Is the quantity ≤ ``threshold``? The mirror image of :func:`judge_at_least`."""
    if hi <= threshold:
        return "holds"
    if lo > threshold:
        return "fails"
    return "inconclusive"


def judge_below(lower: tuple[float, float], upper: tuple[float, float]) -> str:
    """Is the quantity of interval ``lower`` = (lo, hi) below that of interval ``upper``? "holds" when the
    intervals are separated in that order, "fails" when they are separated the other way round,
    "inconclusive" when they overlap."""
    if lower[1] < upper[0]:
        return "holds"
    if lower[0] > upper[1]:
        return "fails"
    return "inconclusive"


def judge_equal(lo: float, hi: float, value: float, margin: float) -> str:
    """Is the quantity equal to ``value``, given its interval [lo, hi] and a relative equivalence
    margin? "fails" when the interval excludes ``value``; "holds" when it covers ``value`` and lies
    within value·(1 ± margin); "inconclusive" when it covers ``value`` but is wider than the margin
    (the data cannot tell the claim from a deviation of that size)."""
    if not margin > 0:
        raise InputError(f"margin: expected a relative margin > 0, got {margin!r}")
    if not lo <= value <= hi:
        return "fails"
    band = abs(value) * margin
    return "holds" if value - band <= lo and hi <= value + band else "inconclusive"


def judge_all(verdicts) -> str:
    """A claim of several parts: "fails" if any part is decided false, "holds" if every part is decided
    true, else "inconclusive"."""
    verdicts = list(verdicts)
    bad = [v for v in verdicts if v not in ("holds", "fails", "inconclusive")]
    if not verdicts or bad:
        raise InputError(f"verdicts: expected a non-empty list of 'holds'/'fails'/'inconclusive', got {verdicts!r}")
    if "fails" in verdicts:
        return "fails"
    return "holds" if all(v == "holds" for v in verdicts) else "inconclusive"


def judge_rising(intervals) -> str:
    """Does the quantity rise along a sequence, given its intervals [(lo, hi), …]? Every step is judged
    by :func:`judge_below` (the earlier interval below the next), the steps by :func:`judge_all`."""
    intervals = list(intervals)
    if len(intervals) < 2:
        raise InputError(f"intervals: expected two or more (lo, hi) intervals, got {intervals!r}")
    return judge_all(judge_below(a, b) for a, b in zip(intervals, intervals[1:]))


def judge_falling(intervals) -> str:
    """Does the quantity fall along a sequence? The mirror image of :func:`judge_rising`."""
    return judge_rising(list(intervals)[::-1])


def count_verdicts(verdicts) -> dict[str, int]:
    """How many of each verdict: every one of VERDICTS (0 if absent), and any other value as it comes."""
    out = dict.fromkeys(VERDICTS, 0)
    for v in verdicts:
        out[v] = out.get(v, 0) + 1
    return out


def level_text(confidence: float) -> str:
    """A confidence level as a claim text prints it: 0.99 → "99%", 0.995 → "99.5%"."""
    return f"{confidence * 100:.6g}%"


def interval_text(value: float, lo: float, hi: float, spec: str = ".3f") -> str:
    """An estimate and its interval as a claim text prints them: "0.123 [0.101, 0.145]" (a text that
    prints them says what the brackets are: :func:`bracketed`)."""
    return f"{value:{spec}} [{lo:{spec}}, {hi:{spec}}]"


def bracketed(text: str, level: str) -> str:
    """``text``, whose brackets are the intervals its verdict rests on, saying so."""
    return _("{text} (in brackets: {level} CIs)", text=text, level=level)


# How a language joins the clauses of one text ("a; b" / "a；b") and the items of a list ("a, b" / "a，b"):
# messages, as the report's are; items of a measured text are longer than the report's short lists (、).
SEPARATORS = {";": N_("; ", "clauses"), ",": N_(", ", "items")}


def clauses(parts, sep: str = ";") -> str:
    """``parts`` joined the way the bound language joins clauses (``sep`` ";") or list items (``sep`` ",")."""
    return _(SEPARATORS[sep]).join(parts)


def per_n(texts: dict, sep: str = ";") -> str:
    """What was measured for each n, {n: text}, as one line: "n=16: …; n=128: …"."""
    return clauses((_("n={n}: {text}", n=n, text=text) for n, text in texts.items()), sep)


# by_n_note's clause for the n that have one verdict
BY_N = {
    "holds": N_("holds for n = {ns}"),
    "fails": N_("fails for n = {ns}"),
    "inconclusive": N_("inconclusive for n = {ns}"),
}


def by_n_note(parts: dict, why: str = "") -> str:
    """Which n a per-n verdict {n: verdict} holds, fails, or stays undecided for: "holds for n = 16;
    inconclusive for n = 128 (``why``)", ``why`` (already in the bound language) saying why, when an n is undecided."""
    groups = [(v, [str(n) for n, x in parts.items() if x == v]) for v in ("holds", "fails", "inconclusive")]
    text = clauses((_(BY_N[v], ns=", ".join(ns)) for v, ns in groups if ns))
    if "inconclusive" in parts.values() and why:
        return _("{verdicts} ({why})", verdicts=text, why=why)
    return text


@dataclass
class ClaimResult:
    id: str  # "S<group>.<n>", e.g. "S1.3"
    chapter: str  # one of CHAPTERS
    claim_en: str  # the claim in one line, English
    claim_zh: str  # the same in Chinese, the seed's language
    seed_value: str | None  # the seed's printed number, verbatim, if it prints one
    method: str  # one of METHODS
    expected: str  # what the claim says should come out
    measured: str  # what came out
    estimate: float | None = None  # Monte Carlo: the point estimate (else None)
    ci_low: float | None = None  # Monte Carlo: the interval the verdict judges (see ci_level)
    ci_high: float | None = None
    n_samples: int | None = None
    verdict: str = "holds"  # one of VERDICTS
    correct_value: str | None = None  # the right value when verdict == "seed number wrong"
    note: str = ""
    ci_level: float | None = None  # the level of [ci_low, ci_high], e.g. 0.99, or a Bonferroni level
    margin: float | None = None  # equality claims: the relative equivalence margin "holds" requires
    sources: list | None = None  # results read: [{"kind", "quick", "origin", "created", "path"}], else None
    expected_zh: str | None = None  # expected, measured, note in Chinese (None: written before they were,
    measured_zh: str | None = None  # or language-neutral: the English field reads the same)
    note_zh: str | None = None

    def __post_init__(self):
        if self.chapter not in CHAPTERS:
            raise InputError(f"chapter: expected one of {CHAPTERS}, got {self.chapter!r}")
        if self.method not in METHODS:
            raise InputError(f"method: expected one of {METHODS}, got {self.method!r}")
        if self.verdict not in VERDICTS:
            raise InputError(f"verdict: expected one of {VERDICTS}, got {self.verdict!r}")

    def claim(self) -> str:
        """The claim in the bound language (:func:`attnscale.i18n.language`)."""
        return self.claim_zh if current_lang() == "zh" else self.claim_en

    def text(self, field: str) -> str | None:
        """The row's ``field`` ("claim", "seed_value", "correct_value" or one of WORDED) in the bound
        language."""
        if field == "claim":
            return self.claim()
        worded = getattr(self, f"{field}_zh") if current_lang() == "zh" and field in WORDED else None
        return worded if worded is not None else getattr(self, field)


CLAIM_ID = re.compile(r"S(\d+)(?:\.(\d+))?")


def selects(prefix: str, claim_id: str) -> bool:
    """Does the ``only`` prefix select this claim? "S5" selects S5.1, S5.2, …; "S5.2" selects S5.2 only
    (not S5.20)."""
    return claim_id == prefix or claim_id.startswith(prefix + ".")


@dataclass(frozen=True)
class VerifyConfig:
    seed: int = 0  # every random draw derives from this seed
    quick: bool = False  # smaller sample caps (seconds instead of a minute)
    rel_ci_target: float = 0.01  # stop a Monte Carlo estimate when its 99% CI half-width / |estimate| ≤ this
    confidence: float = 0.99  # level of every interval reported
    max_draws: int | None = None  # sample budget per variance family, in random numbers (None: 2²⁷, quick 2²¹)
    groups: tuple[int, ...] | None = None  # run only these claim groups (1..10); None = all
    margin: float = 0.05  # equality claims hold only inside value·(1 ± margin) (see judge_equal)
    results_root: Path = DEFAULT_ROOT  # where the training and probe results are read from
    only: tuple[str, ...] | None = None  # claim id prefixes ("S5", "S7.2"): compute only these

    def __post_init__(self):
        if not isinstance(self.seed, int) or isinstance(self.seed, bool) or self.seed < 0:
            raise InputError(f"seed: expected a non-negative integer, got {self.seed!r}")
        if not 0 < self.rel_ci_target < 1:
            raise InputError(f"rel_ci_target: expected a number in (0, 1), got {self.rel_ci_target!r}")
        if not 0.5 < self.confidence < 1:
            raise InputError(f"confidence: expected a number in (0.5, 1), got {self.confidence!r}")
        if self.max_draws is not None and self.max_draws < 1024:
            raise InputError(f"max_draws: expected None or an integer ≥ 1024, got {self.max_draws!r}")
        if not (isinstance(self.margin, (int, float)) and 0 < self.margin < 1):
            raise InputError(f"margin: expected a relative equivalence margin in (0, 1), got {self.margin!r}")
        if self.groups is not None:
            bad = [g for g in self.groups if g not in range(1, N_GROUPS + 1)]
            if bad:
                raise InputError(f"groups: expected claim groups among 1..{N_GROUPS}, got {bad}")
        # JSON gives back a str and a list: normalise, so that a config survives its round trip
        object.__setattr__(self, "results_root", Path(self.results_root))
        if self.only is not None:
            only = (self.only,) if isinstance(self.only, str) else tuple(self.only)
            object.__setattr__(self, "only", only)
            bad = [
                p
                for p in only
                if not isinstance(p, str)
                or not CLAIM_ID.fullmatch(p)
                or not 1 <= int(CLAIM_ID.fullmatch(p).group(1)) <= N_GROUPS
            ]
            if not only or bad:
                raise InputError(
                    f"only: expected claim id prefixes like 'S5' or 'S7.2' (groups S1..S{N_GROUPS}), "
                    f"got {list(only) if only else 'nothing'}"
                )

    def recorded(self) -> dict:
        """The configuration a verification's result records: this one without its results folder (a
        path of this machine, not the result's)."""
        return {k: v for k, v in to_jsonable(self).items() if k != "results_root"}

    @property
    def selected_groups(self) -> list[int]:
        """The groups to run: ``groups`` (all if None), narrowed to those ``only`` names."""
        groups = set(self.groups) if self.groups is not None else set(range(1, N_GROUPS + 1))
        if self.only is not None:
            groups &= {int(CLAIM_ID.fullmatch(p).group(1)) for p in self.only}
        return sorted(groups)

    def keeps(self, claim_id: str) -> bool:
        return self.only is None or any(selects(p, claim_id) for p in self.only)

    @property
    def draw_cap(self) -> int:
        if self.max_draws is not None:
            return self.max_draws
        return 2**21 if self.quick else 2**27


@dataclass
class VerifyReport:
    config: VerifyConfig
    environment: dict[str, Any]
    claims: list[ClaimResult]
    data: dict[str, Any] = field(default_factory=dict)  # the series the report's figures draw
    timings: dict[str, float] = field(default_factory=dict)  # seconds per group; not reproducible

    def counts(self) -> dict[str, int]:
        return count_verdicts(c.verdict for c in self.claims)

    def to_dict(self, timings: bool = True) -> dict[str, Any]:
        """JSON-able data. ``timings=False`` leaves out the only part that differs between two runs
        with the same seed on the same machine."""
        out = {
            "config": to_jsonable(self.config),
            "environment": to_jsonable(self.environment),
            "counts": self.counts(),
            "claims": [to_jsonable(c) for c in self.claims],
            "data": to_jsonable(self.data),
        }
        if timings:
            out["timings"] = to_jsonable(self.timings)
        return out

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> VerifyReport:
        config = dict(d["config"])
        for key in ("groups", "only"):
            if config.get(key) is not None:
                config[key] = tuple(config[key])
        return cls(
            config=VerifyConfig(**config),
            environment=dict(d["environment"]),
            claims=[ClaimResult(**c) for c in d["claims"]],
            data=d.get("data", {}),
            timings=d.get("timings", {}),
        )


def printed_decimal(text: str) -> Decimal:
    """The value of a number as the seed prints it: thousands separators, optional % sign.

    >>> printed_decimal("5,184,705,528,587,072,045")
    Decimal('5184705528587072045')
    """
    s = text.strip().replace(",", "").replace("%", "")
    try:
        return Decimal(s)
    except ArithmeticError:
        raise InputError(f"printed number: expected digits like '1,387,386' or '0.971', got {text!r}") from None


def _half_ulp(text: str) -> Decimal:
    """Half a unit of the last digit shown: '148.4' → 0.05, '22,026' → 0.5."""
    d = printed_decimal(text)
    exponent = d.as_tuple().exponent
    scale = Decimal(100) if text.strip().endswith("%") else Decimal(1)
    return Decimal(5).scaleb(exponent - 1) / scale


def judge_printed(text: str, exact: Decimal) -> tuple[str, str | None]:
    """("holds", None) when ``text`` is ``exact`` correctly rounded at its shown precision; else
    ("seed number wrong", the right value printed the same way). ``exact`` must carry more digits
    than ``text`` shows (callers pass ≥ 40 significant digits)."""
    value = printed_decimal(text)
    if text.strip().endswith("%"):
        value = value / 100
    with localcontext() as ctx:
        ctx.prec = 80
        if abs(exact - value) <= _half_ulp(text):
            return "holds", None
    return "seed number wrong", format_like(text, exact)


def format_like(text: str, exact: Decimal) -> str:
    """``exact`` rounded and formatted the way ``text`` is (decimals, thousands separators, %).

    >>> format_like("22,026", Decimal("22026.4657948"))
    '22,026'
    """
    percent = text.strip().endswith("%")
    decimals = max(0, -printed_decimal(text).as_tuple().exponent)
    with localcontext() as ctx:
        ctx.prec = 80
        value = exact * 100 if percent else exact
        q = value.quantize(Decimal(1).scaleb(-decimals))
    body = f"{q:,.{decimals}f}" if "," in text else f"{q:.{decimals}f}"
    return body + ("%" if percent else "")
