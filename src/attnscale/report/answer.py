"""The page's answer, above its number cards: one or two sentences that say why attention divides by
√d_k, each chosen from the results it states by a small pure function beside it.

    sentence 1  what the verification measured: Var(q·k) against d_k (:func:`variance_key`), and what
                ÷√d_k gives: the variance it leaves and the softmax gradient it keeps or not
                (:func:`scale_key`), from the verification's ``series``;
    sentence 2  what training without the scale did (:func:`training_sentence`): the scale-vs-dk
                sweep and the small GPT, their verdicts as the cards below them show them.

A part whose data is missing is left out (the sentence it belongs to too); the page never fails for it.

    >>> variance_key(4087.0, 4047.0, 4127.0, 4096), variance_key(5000.0, 4900.0, 5100.0, 4096)
    ('as_dk', 'above')
    >>> scale_key(0.30, 1e-10), scale_key(0.30, 0.29)
    ('keeps', 'no_gain')
"""

from __future__ import annotations

from attnscale import results
from attnscale.i18n import N_, _
from attnscale.report.headline import lm_verdicts, sweep_verdicts, training_value
from attnscale.report.html import esc
from attnscale.report.numbers import number

#: By :func:`variance_key`: what the measured Var(q·k) at the largest d_k says of the blog post's d_k.
VARIANCE = {
    "as_dk": N_(
        "The dot product q·k of two vectors of d_k random numbers (mean 0, variance 1) has variance d_k, as the blog post says ({var} measured at d_k = {d})"
    ),
    "above": N_(
        "The dot product q·k has a variance above d_k here ({var} measured at d_k = {d}, interval [{lo}, {hi}])"
    ),
    "below": N_(
        "The dot product q·k has a variance below d_k here ({var} measured at d_k = {d}, interval [{lo}, {hi}])"
    ),
}
#: By :func:`scale_key`: what dividing by √d_k does to the softmax's gradient at the largest d_k.
SCALE = {
    "keeps": N_(
        "divided by √d_k it is {scaled}, and the softmax keeps its gradient: ‖J‖ = {with_scale} with the scale, {without} without, at d_k = {d}"
    ),
    "no_gain": N_(
        "divided by √d_k it is {scaled}, yet the softmax's gradient gains nothing from it: ‖J‖ = {with_scale} with the scale, {without} without, at d_k = {d}"
    ),
}
#: The second sentence, by which training results there are.
TRAINING = {
    "sweep": N_("Trained without it at d_k = {d}, a small attention model {value}."),
    "lm": N_("Trained without it at d_k = {d}, a small GPT on real English text {value}."),
    "both": N_(
        "Trained without it, a small attention model at d_k = {d} {value}, and a small GPT on real English text at d_k = {d_lm} {lm_value}."
    ),
    "same": N_(
        "Trained without it, a small attention model at d_k = {d} {value}; the same holds for a small GPT on real English text at d_k = {d_lm}."
    ),
}
#: The gradient "vanished" without the scale when it is below this share of the scaled one.
VANISHED_BELOW = 0.1


def variance_key(estimate: float, low: float, high: float, d_k: int) -> str:
    """ "as_dk" when the interval [low, high] around the measured Var(q·k) holds d_k, else whether
    the estimate lies "above" or "below" it."""
    if low <= d_k <= high:
        return "as_dk"
    return "above" if estimate > d_k else "below"


def scale_key(with_scale: float, without: float) -> str:
    """ "keeps" when the softmax's gradient norm without the scale fell below :data:`VANISHED_BELOW`
    of the one with it, else "no_gain"."""
    return "keeps" if without < VANISHED_BELOW * with_scale else "no_gain"


def variance_clause(series: dict) -> str:
    """The measured Var(q·k) at the largest d_k of the first distribution the verification drew
    (the glance card's), against d_k; "" without that data."""
    try:
        g = next(iter(series["variance_vs_dk"].values()))
        d_k, var, lo, hi = int(g["d_k"][-1]), g["estimate"][-1], g["ci_low"][-1], g["ci_high"][-1]
    except (KeyError, IndexError, StopIteration, TypeError, ValueError):
        return ""
    key = variance_key(var, lo, hi, d_k)
    return _(VARIANCE[key], var=number(var, digits=4), d=d_k, lo=number(lo, digits=4), hi=number(hi, digits=4))


def scale_clause(series: dict) -> str:
    """Var(q·k/√d_k) at the largest d_k and the median softmax gradient norm ‖J‖ there, with and
    without the scale, for the fewest keys the verification drew (the glance card's); "" without."""
    try:
        scaled = next(iter(series["variance_vs_dk"].values()))["scaled"]["estimate"][-1]
        jac = series["jacobian"]
        n = next(iter(jac["by_n"]))
        per = jac["by_n"][n]
        with_scale = per["scaled"]["jacobian_frobenius"]["median"][-1]
        without = per["unscaled"]["jacobian_frobenius"]["median"][-1]
        d_k = jac["d_k"][-1]
    except (KeyError, IndexError, StopIteration, TypeError):
        return ""
    return _(
        SCALE[scale_key(with_scale, without)],
        scaled=number(scaled, digits=3),
        with_scale=number(with_scale, digits=2),
        without=number(without, digits=2),
        d=d_k,
    )


def measured_sentence(series: dict) -> str:
    """Sentence 1 from the verification's ``series``: the variance, then what ÷√d_k gives."""
    variance = variance_clause(series)
    if not variance:
        return ""
    scale = scale_clause(series)
    if not scale:
        return _("{variance}.", msgctxt="answer", variance=variance)
    return _("{variance}; {scale}.", msgctxt="answer", variance=variance, scale=scale)


def training_sentence(sweep: dict | None, lm: dict | None) -> str:
    """Sentence 2 from the ``analysis`` of the scale-vs-dk sweep and of the language-model sweep
    (either None when absent): the unscaled rule's verdicts at each one's largest d_k, in the
    words of :func:`attnscale.report.headline.training_value`; "" without either."""
    found = {}
    for name, analysis, verdicts in (("sweep", sweep, sweep_verdicts), ("lm", lm, lm_verdicts)):
        got = verdicts(analysis) if analysis else None
        value = training_value(got[1]) if got else ""
        if value:
            found[name] = (got[0], value)
    if len(found) == 2:
        (d, value), (d_lm, lm_value) = found["sweep"], found["lm"]
        key = "same" if value == lm_value else "both"
        return _(TRAINING[key], d=d, value=value, d_lm=d_lm, lm_value=lm_value)
    return "".join(_(TRAINING[name], d=d, value=value) for name, (d, value) in found.items())


def _analysis(kind: str, root) -> dict | None:
    """The ``analysis`` of the result of ``kind`` its chapter shows (read_preferred), or None."""
    try:
        analysis = results.read_preferred(kind, root).data.get("analysis")
    except (results.ResultError, AttributeError):
        return None
    return analysis if isinstance(analysis, dict) else None


def answer_text(series: dict, root) -> str:
    """The page's answer: :func:`measured_sentence` of the verification's ``series`` and
    :func:`training_sentence` of the training results under ``root``; "" when neither has data."""
    measured = measured_sentence(series)
    trained = training_sentence(_analysis("train/scale-vs-dk", root), _analysis("train/lm", root))
    if measured and trained:
        return _("{first} {then}", msgctxt="sentences", first=measured, then=trained)
    return measured or trained


def answer_html(series: dict, root) -> str:
    """:func:`answer_text` as the hero's answer paragraph; "" when there is none."""
    text = answer_text(series, root)
    return f'<p class="answer">{esc(text)}</p>' if text else ""
