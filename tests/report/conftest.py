"""Fixtures of the report tests: a report built without running the verification or drawing figures."""

import pytest


@pytest.fixture
def no_engine(monkeypatch):
    """Fail loudly if anything runs the verification instead of reading its result."""
    import attnscale.claims

    def boom(*a, **k):
        raise AssertionError("the verification ran although its result was there")

    monkeypatch.setattr(attnscale.claims, "run_claims", boom)


@pytest.fixture
def fast_figures(monkeypatch):
    """Stand-in figures for tests about everything but figures (matplotlib takes seconds)."""
    from attnscale.report import seed

    monkeypatch.setattr(
        seed,
        "figure_html",
        lambda block, data, keys=None, values=None: f'<figure class="fig" data-block="{block}"></figure>',
    )
