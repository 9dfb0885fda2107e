"""The verification's claim results as HTML: verdict badges, one card per claim, and the table of all.

Claims arrive as plain dicts (the ``claims`` of the ``verify`` result, fields of a claim result:
id, chapter, claim_en/zh, verdict, expected, measured, ci_low/high/level, n_samples, method, note);
the tally is the result's stored ``counts``. Nothing here computes, it only formats what was measured.
"""

from __future__ import annotations

from attnscale.i18n import N_, _, current_lang
from attnscale.report.html import esc, note
from attnscale.report.numbers import number, percent
from attnscale.stored_words import CLAIM_FIELDS, METHOD_NAME

# verdict → CSS class of its badge, its mark, its word, and the words after its count in the tally
BADGE_CLASS = {"holds": "holds", "fails": "fails", "inconclusive": "inconclusive", "seed number wrong": "wrong"}
BADGE_MARK = {"holds": "✓", "fails": "✗", "inconclusive": "?", "seed number wrong": "≠"}
VERDICTS = {
    "holds": N_("holds"),
    "fails": N_("fails", msgctxt="verdict"),
    "inconclusive": N_("inconclusive", msgctxt="verdict"),
    "seed number wrong": N_("blog post's number wrong"),
}
TALLY = {
    "holds": N_("claims hold"),
    "fails": N_("fail"),
    "inconclusive": N_("inconclusive", msgctxt="tally"),
    "seed number wrong": N_("of the blog post's numbers wrong"),
}


def badge(verdict: str) -> str:
    cls = BADGE_CLASS.get(verdict, "other")
    label = _(VERDICTS[verdict]) if verdict in VERDICTS else verdict
    # "inconclusive" is new to readers: the badge says what it means on hover
    title = (
        f' title="{esc(_("the interval does not decide the criterion at this sample size"))}"'
        if verdict == "inconclusive"
        else ""
    )
    return f'<span class="badge {cls}"{title}>{BADGE_MARK.get(verdict, "•")} {esc(label)}</span>'


def claim_text(claim: dict) -> str:
    return (claim.get("claim_zh") if current_lang() == "zh" else None) or claim.get("claim_en") or claim.get("id", "")


def worded(claim: dict, field: str) -> str:
    """A row's ``expected``, ``measured`` or ``note`` in the bound language: the verification writes each in both
    languages (``expected_zh``, …); a result written before it did holds the English alone."""
    return (claim.get(f"{field}_zh") if current_lang() == "zh" else None) or claim.get(field) or ""


def method_name(claim: dict) -> str:
    """How the claim was checked, in the bound language (a result stores the English key of METHODS)."""
    method = claim.get("method", "")
    return _(METHOD_NAME[method]) if method in METHOD_NAME else method


def _interval(claim: dict) -> str:
    low, high = claim.get("ci_low"), claim.get("ci_high")
    if low is None or high is None:
        return ""
    return f"[{number(low, digits=4)}, {number(high, digits=4)}]"


def _ci_label(claim: dict) -> str:
    """ "99% CI", or the level the stored interval really has (e.g. a Bonferroni 99.98%)."""
    level = claim.get("ci_level")
    if level is None:
        return _("CI")
    return _("{level} CI (judged)", level=percent(level))


def claim_card(claim: dict) -> str:
    verdict = claim.get("verdict", "")
    facts = []
    if claim.get("seed_value"):
        facts.append((_("the blog post says"), claim["seed_value"]))
    facts.append((_(CLAIM_FIELDS["expected"]), worded(claim, "expected")))
    facts.append((_(CLAIM_FIELDS["measured"]), worded(claim, "measured")))
    if _interval(claim):
        facts.append((_ci_label(claim), _interval(claim)))
    if claim.get("n_samples"):
        facts.append((_("samples"), number(int(claim["n_samples"]), digits=4)))
    facts.append((_("method"), method_name(claim)))
    facts_html = "".join(f'<span><b>{esc(k)}</b><span class="mono">{esc(v)}</span></span>' for k, v in facts)
    extra = ""
    if claim.get("correct_value"):
        extra += f'<p class="verdict-note correct">{esc(_("correct value"))}: {esc(claim["correct_value"])}</p>'
    if claim.get("note"):
        extra += f'<p class="verdict-note">{esc(worded(claim, "note"))}</p>'
    return (
        f'<li class="{BADGE_CLASS.get(verdict, "other")}" data-claim="{esc(claim.get("id", ""))}">'
        f'<div class="verdict-head">{badge(verdict)}'
        f'<span class="verdict-claim">{esc(claim_text(claim))}</span>'
        f'<span class="verdict-id mono">{esc(claim.get("id", ""))}</span></div>'
        f'<div class="verdict-facts">{facts_html}</div>{extra}</li>'
    )


def claim_list(claims: list[dict], visible: int = 8) -> str:
    """Cards for a chapter's claims; beyond ``visible`` of them the rest fold into a <details>."""
    if not claims:
        return note(_("No claim of the verification belongs to this chapter."))
    # Problems first: a reader should not have to scroll past twenty "holds" to find a "fails".
    order = {"fails": 0, "seed number wrong": 1, "inconclusive": 2, "holds": 3}
    ranked = sorted(claims, key=lambda c: order.get(c.get("verdict"), 4))
    head = "".join(claim_card(c) for c in ranked[:visible])
    html = f'<ul class="verdicts">{head}</ul>'
    if len(ranked) > visible:
        rest = "".join(claim_card(c) for c in ranked[visible:])
        more = _("{n} more claims", n=len(ranked) - visible)
        html += (
            f'<details class="verdicts-more"><summary>{esc(more)}</summary><ul class="verdicts">{rest}</ul></details>'
        )
    return html


def tally_badges(counts: dict[str, int]) -> str:
    """The page's summary line: how many claims have each verdict, as the result counted them."""
    n = {v: int(counts.get(v, 0)) for v in BADGE_CLASS}
    hint = _("the interval does not decide the criterion at this sample size")
    return "".join(
        f'<span class="badge {BADGE_CLASS[v]}"'
        + (f' title="{esc(hint)}"' if v == "inconclusive" else "")
        + f">{n[v]} {esc(_(TALLY[v]))}</span>"
        for v in BADGE_CLASS
    )


def all_claims_table(claims: list[dict]) -> str:
    """Every claim in one table (verdicts as badges); it scrolls inside its own box on a phone."""
    header = [
        "id",
        _("claim"),
        _("verdict"),
        _(CLAIM_FIELDS["expected"]),
        _(CLAIM_FIELDS["measured"]),
        _("interval judged (level)"),
        _("samples"),
        _("method"),
    ]
    head = "".join(f"<th>{esc(h)}</th>" for h in header)
    rows = []
    for c in claims:
        cells = [
            esc(c.get("id", "")),
            esc(claim_text(c)),
            badge(c.get("verdict", "")),
            esc(worded(c, "expected")),
            esc(worded(c, "measured")),
            esc(_interval(c) + (f" ({percent(c['ci_level'])})" if _interval(c) and c.get("ci_level") else "")),
            esc(number(int(c["n_samples"]), digits=4) if c.get("n_samples") else ""),
            esc(method_name(c)),
        ]
        rows.append("<tr>" + "".join(f"<td>{cell}</td>" for cell in cells) + "</tr>")
    return (
        f'<div class="table-wrap"><table class="all-verdicts"><thead><tr>{head}</tr></thead>'
        f"<tbody>{''.join(rows)}</tbody></table></div>"
    )
