"""The configuration of a page in words, for its "How this page was made": which verification it
shows (full or quick, how it sampled and judged, which claims) and the widget's random seed, from
the configuration its result recorded (the fields of the verification's VerifyConfig).

    >>> config_sentences({"quick": False, "rel_ci_target": 0.01, "confidence": 0.99, "max_draws": None,
    ...     "margin": 0.05, "groups": None, "only": None}, widget_seed=0)[0]
    'a full verification: each Monte Carlo estimate drawn until its 99% interval is within ±1% of it, at most 134,217,728 random numbers per variance family'
"""

from __future__ import annotations

from attnscale.i18n import N_, _
from attnscale.report.numbers import number, percent

#: The verification's kind of run, by its ``quick``.
RUN = {False: N_("a full verification"), True: N_("a quick verification (--quick)")}
#: The sample budget per variance family when ``max_draws`` is None, by ``quick``: what
#: VerifyConfig.draw_cap gives (the report never imports the verification).
DEFAULT_DRAWS = {False: 2**27, True: 2**21}


def sampling_sentence(config: dict) -> str:
    """How the verification drew its Monte Carlo estimates: full or quick, the interval's level and
    relative width it stopped at, the budget of random numbers."""
    quick = bool(config.get("quick"))
    draws = config.get("max_draws")
    return _(
        "{run}: each Monte Carlo estimate drawn until its {level} interval is within ±{width} of it, at most {draws} random numbers per variance family",
        run=_(RUN[quick]),
        level=percent(float(config.get("confidence", 0.99))),
        width=percent(float(config.get("rel_ci_target", 0.01))),
        draws=number(int(draws if draws is not None else DEFAULT_DRAWS[quick]), digits=3),
    )


def selection_sentence(config: dict) -> str:
    """Which claims the verification computed: all, some groups, or the claims of some ids."""
    groups, only = config.get("groups"), config.get("only")
    if only:
        return _("only the claims {ids}", ids=", ".join(str(i) for i in only))
    if groups:
        return _("only the claim groups {groups}", groups=", ".join(str(g) for g in groups))
    return _("every claim group")


def config_sentences(config: dict, widget_seed: int) -> list[str]:
    """The page's configuration as short sentences, from the verification's recorded ``config``."""
    out = [sampling_sentence(config)]
    if config.get("margin") is not None:
        out.append(
            _("an equality claim holds only within ±{margin} of its value", margin=percent(float(config["margin"])))
        )
    out.append(selection_sentence(config))
    out.append(_("the interactive attention row's random seed: {seed}", seed=widget_seed))
    return out
