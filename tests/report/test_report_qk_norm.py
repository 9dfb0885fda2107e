"""The beyond chapter's QK-norm and output subsections: drawn from the verification's data when it has
them, their numbers taken from it, in both languages; absent from a result that predates them."""

import re

import pytest

from attnscale.claims import qk_norm
from attnscale.claims.context import Context
from attnscale.claims.result import VerifyConfig
from attnscale.i18n import LANGS, language
from attnscale.report import seed, seed_words
from attnscale.report.html import esc
from attnscale.store import to_jsonable
from helpers.report_data import fake_data


@pytest.fixture(scope="module")
def qk_run():
    ctx = Context(VerifyConfig(quick=True))
    qk_norm.run(ctx)
    return ctx


def _body(data, claims=()):
    values = seed_words.facts(data, {"confidence": 0.99})
    return seed.chapter_body("beyond", list(claims), data, 0, values)


@pytest.mark.slow
@pytest.mark.parametrize("lang", LANGS)
def test_subsections_carry_the_verifications_numbers(qk_run, lang):
    data = {**fake_data(), **to_jsonable(qk_run.data)}
    claims = [to_jsonable(c) for c in qk_run.claims]
    with language(lang):
        html = _body(data, claims)
        heading = seed_words.subsection("qk_norm", seed_words.facts(data, {"confidence": 0.99}))[0]
    assert 'class="error-box"' not in html
    assert esc(heading) in html
    std = data["qk_norm"]["logit_std"]["mc"][0]
    assert f"{std:.2f}" in html and f"{data['output_std']['mc'][0]:.4f}" in html
    # the QK-norm figure is drawn (inline SVG) besides the four of the chapter before it
    assert len(re.findall(r"<figure class=\"fig[^\"]*\"", html)) == len(seed.BEYOND_PARTS) + 1
    for cid in ("S8.6", "S8.7", "S8.8", "S8.9"):
        assert f'data-claim="{cid}"' in html


@pytest.mark.slow
def test_the_numbers_follow_the_data(qk_run):
    data = {**fake_data(), **to_jsonable(qk_run.data)}
    data["qk_norm"]["logit_std"]["mc"][0] = 12.34
    assert "12.34 at d = 256" in _body(data)


def test_a_result_without_the_blocks_has_no_such_subsections():
    html = _body(fake_data())
    with language("en"):
        assert "QK-norm" not in html and "fixes the logits, not the output" not in html
