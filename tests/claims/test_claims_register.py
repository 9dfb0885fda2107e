"""The claim register (``attnscale.claims.register.REGISTER``: each claim's chapter, method and printed
number) and ``claim``, which builds a row from it and the statement its check writes inline: a
malformed entry is refused naming the id and the field, a statement's placeholders must be given,
and every worded field is held in both languages. That the register and a run of the checks agree
(each id added once, in the register's order) is tested on the run in test_claims.py."""

from __future__ import annotations

import pytest

from attnscale.claims import CHAPTERS, GROUPS, METHODS
from attnscale.claims.register import REGISTER, Entry, RegisterError, check_register, claim
from attnscale.claims.result import CLAIM_ID
from attnscale.i18n import N_, _, language

SSMAX = N_("with SSMax (logits × s·ln n, s = {s}) the max weight stays near 1 as n grows")


def test_the_register_holds_every_claim_with_a_known_chapter_and_method():
    assert list(REGISTER)[:2] == ["S1.1", "S1.2"] and {cid.split(".")[0] for cid in REGISTER} == {
        f"S{g}" for g in GROUPS
    }
    for cid, entry in REGISTER.items():
        assert CLAIM_ID.fullmatch(cid) and "." in cid, cid
        assert entry.chapter in CHAPTERS and entry.method in METHODS, cid


def test_claim_fills_the_statement_and_the_worded_fields_in_both_languages():
    row = claim(
        "S8.5", SSMAX, s="0.43", expected=lambda: _("no probe results"), measured="m", verdict="fails", note="n"
    )
    assert row.claim_en == "with SSMax (logits × s·ln n, s = 0.43) the max weight stays near 1 as n grows"
    assert row.claim_zh.startswith("使用 SSMax（logits × s·ln n，s = 0.43）")
    assert (row.chapter, row.method, row.seed_value) == ("beyond", "closed form", None)
    assert (row.expected, row.expected_zh, row.measured, row.measured_zh) == (
        "no probe results",
        "没有探测结果",
        "m",
        None,
    )
    assert row.text("measured") == "m" and row.text("expected") == "no probe results"
    with language("zh"):  # a row holds both languages, whichever was bound when it was made
        assert row.text("measured") == "m"  # a language-neutral text is stored once
        assert row.text("expected") == "没有探测结果"
    assert (row.verdict, row.note) == ("fails", "n")
    # a placeholder worded per language; a seed_value with placeholders of its own
    row = claim(
        "S3.3",
        N_("{case} ({params}): Var(q·k) follows the general formula, not d_k"),
        case=lambda: _("non-zero means"),
        params="μ_q=0.5",
        expected="",
        measured="",
    )
    assert row.claim_en.startswith("non-zero means (μ_q=0.5)") and row.claim_zh.startswith("均值不为 0（μ_q=0.5）")
    row = claim(
        "S1.30",
        N_("{values}: mean {mean}, squared differences {squares}, variance {variance}"),
        values="[2, 4, 6]",
        mean="4",
        diffs="[-2, 0, 2]",
        squares="[4, 0, 4]",
        variance="2.67",
        expected="",
        measured="",
    )
    assert row.seed_value == "4; [-2, 0, 2]; [4, 0, 4]; 2.67" and "[-2, 0, 2]" not in row.claim_en


def test_claim_names_an_unknown_id_and_wrong_placeholders():
    with pytest.raises(RegisterError, match=r"claim 'S99\.1': not in the register"):
        claim("S99.1", SSMAX, expected="", measured="")
    with pytest.raises(RegisterError, match=r"claim 'S8\.5' has the placeholders \['s'\], the check passed \[\]"):
        claim("S8.5", SSMAX, expected="", measured="")
    with pytest.raises(
        RegisterError, match=r"claim 'S8\.5' has the placeholders \['s'\], the check passed \['s', 'x'\]"
    ):
        claim("S8.5", SSMAX, s="0.43", x="1", expected="", measured="")


@pytest.mark.parametrize(
    "entry, message",
    [
        (Entry("nowhere", "symbolic"), r"claim 'S1\.1' chapter: expected one of .*got 'nowhere'"),
        (Entry("faq", "guesswork"), r"claim 'S1\.1' method: expected one of .*got 'guesswork'"),
        (Entry("faq", "symbolic", "{verdict}"), r"claim 'S1\.1' seed_value: the placeholder \{verdict\} is named like"),
    ],
)
def test_a_bad_register_is_refused_naming_the_id_and_the_field(entry, message):
    with pytest.raises(RegisterError, match=message):
        check_register({"S1.1": entry})
    assert check_register({"S1.1": Entry("faq", "symbolic", "{n}")})
