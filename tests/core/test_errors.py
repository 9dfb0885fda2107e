"""The shared input checks: each names the argument, what it got and what was expected."""

import math

import numpy as np
import pytest

from attnscale.errors import InputError, check_choice, check_count, check_positive


@pytest.mark.parametrize("value", [0, -3, 2.5, True, "4", None])
def test_check_count_refuses_what_is_not_a_count(value):
    with pytest.raises(InputError, match=r"^steps: expected an integer >= 1, got "):
        check_count("steps", value)


def test_check_count_accepts_counts_and_its_minimum():
    assert check_count("seeds", np.int64(3)) == 3 and type(check_count("seeds", np.int64(3))) is int
    assert check_count("max_retries", 0, minimum=0) == 0
    with pytest.raises(InputError, match="max_retries: expected an integer >= 0, got -1"):
        check_count("max_retries", -1, minimum=0)


@pytest.mark.parametrize("value", [0, -1e-3, math.nan, math.inf, False, "0.1"])
def test_check_positive_refuses(value):
    with pytest.raises(InputError, match=r"^lr: expected a finite number > 0, got "):
        check_positive("lr", value)


def test_check_positive_returns_a_float():
    assert check_positive("tau", 100) == 100.0 and isinstance(check_positive("tau", 100), float)


def test_check_choice_lists_the_choices():
    check_choice("mode", "observe", ("observe", "replace"))
    with pytest.raises(InputError, match=r"mode: expected one of \('observe', 'replace'\), got 'watch'"):
        check_choice("mode", "watch", ("observe", "replace"))
    with pytest.raises(InputError, match=r"rule: expected one of \['a', 'b'\], got 'c'"):
        check_choice("rule", "c", {"b": 1, "a": 2})
