"""The slots of a template, as the three catalogs of words compare them between languages."""

import pytest

from attnscale.templates import template_slots


def test_a_slot_is_named_by_what_precedes_its_index_attribute_or_format():
    assert template_slots("e^{x} = {seed[0]}, {seed.real:g} and {n:,} {{literal}}") == {"x", "seed", "n"}
    assert template_slots("no slot") == set()


def test_a_lone_brace_is_refused():
    with pytest.raises(ValueError):
        template_slots("half a {slot")
