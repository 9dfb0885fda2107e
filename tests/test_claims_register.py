"""The claim register (``attnscale/claims/claims.toml``) and its one reader, ``claims.register``: every
entry is a well-formed bilingual statement, a malformed register is refused naming the id and the
field, and ``claim`` fills a row's statement from it. That the register and a run of the checks
agree (each id added once, in the register's order) is tested on the run in test_claims.py."""

from __future__ import annotations

import pytest

from attnscale.claims import CHAPTERS, GROUPS, METHODS
from attnscale.claims import register as reg
from attnscale.templates import template_slots
from attnscale.claims.register import RegisterError, claim, parse_register
from attnscale.claims.result import CLAIM_ID


def test_the_register_holds_every_claim_as_a_bilingual_statement():
    entries = reg.register()
    assert list(entries)[:2] == ["S1.1", "S1.2"] and {cid.split(".")[0] for cid in entries} == {f"S{g}" for g in GROUPS}
    for cid, entry in entries.items():
        assert CLAIM_ID.fullmatch(cid) and "." in cid, cid
        assert entry["chapter"] in CHAPTERS and entry["method"] in METHODS, cid
        assert template_slots(entry["en"]) == template_slots(entry["zh"]), cid


def test_claim_fills_the_statement_and_passes_the_computed_fields():
    row = claim("S8.5", s="0.43", expected="e", measured="m", verdict="fails", note="n")
    assert row.claim_en == "with SSMax (logits × s·ln n, s = 0.43) the max weight stays near 1 as n grows"
    assert row.claim_zh.startswith("使用 SSMax（logits × s·ln n，s = 0.43）")
    assert (row.chapter, row.method, row.seed_value) == ("beyond", "closed form", None)
    assert (row.expected, row.measured, row.verdict, row.note) == ("e", "m", "fails", "n")
    # a slot worded per language; a seed_value with slots of its own
    row = claim("S3.3", case={"en": "non-zero means", "zh": "均值不为 0"}, params="μ_q=0.5", expected="", measured="")
    assert row.claim_en.startswith("non-zero means (μ_q=0.5)") and row.claim_zh.startswith("均值不为 0（μ_q=0.5）")
    row = claim("S1.30", values="[2, 4, 6]", mean="4", diffs="[-2, 0, 2]", squares="[4, 0, 4]", variance="2.67",
                expected="", measured="")
    assert row.seed_value == "4; [-2, 0, 2]; [4, 0, 4]; 2.67" and "[-2, 0, 2]" not in row.claim_en


def test_claim_names_an_unknown_id_and_wrong_slots():
    with pytest.raises(RegisterError, match=r"no claim 'S99\.1'"):
        claim("S99.1", expected="", measured="")
    with pytest.raises(RegisterError, match=r"claim 'S8\.5' has the slots \['s'\], the check passed \[\]"):
        claim("S8.5", expected="", measured="")
    with pytest.raises(RegisterError, match=r"claim 'S8\.5' has the slots \['s'\], the check passed \['s', 'x'\]"):
        claim("S8.5", s="0.43", x="1", expected="", measured="")
    with pytest.raises(RegisterError, match=r"claim 'S3\.3': slot 'case' given as a table needs exactly"):
        claim("S3.3", case={"en": "x"}, params="", expected="", measured="")


GOOD = 'chapter = "faq"\nmethod = "symbolic"\nen = "n = {n}"\nzh = "n 为 {n}"\n'


@pytest.mark.parametrize("toml, message", [
    ('["S1.1"]\n' + GOOD.replace('"faq"', '"nowhere"'), r"\['S1\.1'\] chapter: expected one of .*got 'nowhere'"),
    ('["S1.1"]\n' + GOOD.replace('"symbolic"', '"guesswork"'), r"\['S1\.1'\] method: expected one of"),
    ('["S1.1"]\n' + GOOD.replace('zh = "n 为 {n}"\n', ""), r"\['S1\.1'\] zh: expected a non-empty text, got None"),
    ('["S1.1"]\n' + GOOD.replace('en = "n = {n}"', 'en = ""'), r"\['S1\.1'\] en: expected a non-empty text"),
    ('["S1.1"]\n' + GOOD.replace("n 为 {n}", "n 为 {m}"), r"\['S1\.1'\] zh: its \{slots\} \['m'\] differ from en's \['n'\]"),
    ('["S1.1"]\n' + GOOD + '\n["S1.2"]\n' + GOOD + '\n["S1.1"]\n' + GOOD, r"\['S1\.1'\] id: given twice"),
    ('["S1.1"]\n' + GOOD + 'zh_note = "x"\n', r"\['S1\.1'\]: unknown field 'zh_note'"),
    ('["S1.1"]\n' + GOOD + 'seed_value = "{verdict}"\n', r"\['S1\.1'\] seed_value: the slot \{verdict\} is named like"),
    ('["S1.1"]\n' + GOOD.replace("n 为 {n}", "n 为 {n"), r"\['S1\.1'\] zh: expected '\}' before end of string"),
])
def test_a_bad_register_is_refused_naming_the_id_and_the_field(toml, message):
    with pytest.raises(RegisterError, match=r"test\.toml: " + message):
        parse_register(toml, "test.toml")


def test_a_good_register_parses():
    assert parse_register('["S1.1"]\n' + GOOD, "test.toml")["S1.1"]["en"] == "n = {n}"
