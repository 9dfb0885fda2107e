"""The headline answers beside the page's three measured cards: what training without the scale did
(the scale-vs-dk sweep; the language-model sweep too, once its result exists) and what a real decoder
LLM does without it (SmolLM2 rescaled). Each card is chosen by its result's numbers by a small pure
function of the result's data, says which result it shows (own full, reference, own quick: the same
one its chapter shows, through :func:`attnscale.results.read_preferred`) and links to its chapter.
A card whose result is missing or lacks a figure is left out; the report never fails for it.

    >>> card = training_card({"table": [{"rule": "unscaled", "d_k": 256,
    ...     "adam": {"verdict": "learns", "final_accuracy": {"mean": 0.97}},
    ...     "sgd_reference_lr": {"verdict": "fails", "final_accuracy": {"mean": 0.4}, "lr": 0.3},
    ...     "sgd_best_lr": {"verdict": "fails", "final_accuracy": {"mean": 0.5}, "lr": 0.9}},
    ...     {"rule": "inverse_sqrt_dk", "d_k": 256, "adam": {"final_accuracy": {"mean": 0.98}},
    ...      "sgd_reference_lr": {"final_accuracy": {"mean": 0.95}}}]})
    >>> card.value
    'fails with SGD'
"""

from __future__ import annotations

from dataclasses import dataclass

from attnscale import results
from attnscale.i18n import N_, _
from attnscale.report.html import esc
from attnscale.report.numbers import number
from attnscale.stored_words import OPTIMISER_NAMES, TRAINING_VERDICT_PHRASE, TRAINING_VERDICTS

#: A card's headline when every optimiser's verdict is the same one: TRAINING_VERDICT_PHRASE.
#: A card's headline when the optimisers differ: the worst verdict, with the optimisers where it holds.
WITH_VALUES = {
    "faster": N_("faster with {opts}"),
    "slower": N_("slower with {opts}"),
    "fails": N_("fails with {opts}"),
    "diverges": N_("diverges with {opts}"),
}
#: The real-model card's headline, by real_model_value.
REAL_MODEL_VALUES = {
    "much_worse": N_("perplexity ×{r}: much worse"),
    "worse": N_("perplexity ×{r}: worse"),
    "same": N_("about the same (×{r})"),
    "better": N_("perplexity ×{r} (lower)"),
    "unknown": N_("no finite perplexity"),
}
MUCH_WORSE_RATIO = 2.0  # perplexity without the scale ÷ with it, from which the card says "much worse"
SAME_WITHIN = 1.05  # a ratio within [1/SAME_WITHIN, SAME_WITHIN] is "about the same"
#: Which result a card shows (its envelope's origin).
ORIGINS = {"reference": N_("reference run"), "full": N_("your full run"), "quick": N_("your quick run")}


@dataclass(frozen=True)
class Card:
    label: str
    value: str
    sub: str
    href: str = ""  # the chapter it links to


def _row(table: list[dict], rule: str, d_k: int) -> dict | None:
    return next((r for r in table if r.get("rule") == rule and r.get("d_k") == d_k), None)


def _acc(summary: dict | None) -> str:
    return number(((summary or {}).get("final_accuracy") or {}).get("mean"), digits=2)


def training_value(verdicts: dict[str, str | None]) -> str:
    """The card's headline from the unscaled rule's verdicts per optimiser ("adam", "sgd"): one phrase
    for all when they agree, else the worst verdict and the optimisers where it holds (the mix of
    "faster" and "learns": "faster", where it is); "" without verdicts."""
    found = {opt: v for opt, v in verdicts.items() if v}
    if not found:
        return ""
    if len(set(found.values())) == 1:
        return _(TRAINING_VERDICT_PHRASE[next(iter(found.values()))])
    worst = max(found.values(), key=TRAINING_VERDICTS.index)
    shown = "faster" if worst == "learns" else worst
    where = [opt for opt, v in found.items() if v == shown]
    return _(WITH_VALUES[shown], opts=_(" and ", msgctxt="headline").join(_(OPTIMISER_NAMES[o]) for o in where))


def sweep_verdicts(analysis: dict) -> tuple[int, dict[str, str | None]] | None:
    """The scale-vs-dk sweep's largest d_k and the unscaled rule's verdict there per optimiser
    (Adam; SGD at the rate tuned for 1/√d_k), or None without an unscaled row."""
    table = analysis.get("table") or []
    d_ks = [r["d_k"] for r in table if r.get("rule") == "unscaled" and isinstance(r.get("d_k"), int)]
    if not d_ks:
        return None
    row = _row(table, "unscaled", max(d_ks)) or {}
    return max(d_ks), {
        opt: (row.get(key) or {}).get("verdict") for opt, key in (("adam", "adam"), ("sgd", "sgd_reference_lr"))
    }


def training_card(analysis: dict) -> Card | None:
    """The scale-vs-dk card: what the unscaled rule did at the sweep's largest d_k, with Adam and with
    SGD (at the rate tuned for 1/√d_k, and at its own best rate), against 1/√d_k's final accuracy."""
    found = sweep_verdicts(analysis)
    if found is None:
        return None
    d_k, verdicts = found
    table = analysis["table"]
    row, ref = _row(table, "unscaled", d_k), _row(table, "inverse_sqrt_dk", d_k) or {}
    adam, sgd, best = row.get("adam") or {}, row.get("sgd_reference_lr") or {}, row.get("sgd_best_lr") or {}
    value = training_value(verdicts)
    if not value:
        return None
    sub = _(
        "final accuracy, unscaled: Adam {adam}, SGD {sgd} (1/√d_k: {adam_ref}, {sgd_ref}).",
        adam=_acc(adam),
        sgd=_acc(sgd),
        adam_ref=_acc(ref.get("adam")),
        sgd_ref=_acc(ref.get("sgd_reference_lr")),
    )
    if best.get("lr") is not None and best.get("lr") != sgd.get("lr"):
        sub = _(
            "{first} {then}",
            msgctxt="sentences",
            first=sub,
            then=_(
                "SGD at its own best rate {lr}: {acc}, {verdict}.",
                lr=number(best["lr"], digits=2),
                acc=_acc(best),
                verdict=_(TRAINING_VERDICT_PHRASE[best["verdict"]]) if best.get("verdict") else "—",
            ),
        )
    return Card(_("training without ÷√d_k at d_k = {d} (scale-vs-dk sweep)", d=d_k), value, sub, "#exp-training")


def _lm_row(verdicts: list[dict], rule: str, d_k: int, optimiser: str) -> dict:
    return next(
        (v for v in verdicts if (v.get("rule"), v.get("d_k"), v.get("optimiser")) == (rule, d_k, optimiser)), {}
    )


def _bpb(row: dict) -> str:
    return number(((row or {}).get("final_bpb") or {}).get("mean"), digits=3)


def lm_verdicts(analysis: dict) -> tuple[int, dict[str, str | None]] | None:
    """The language-model sweep's largest d_k and the unscaled rule's verdict there with AdamW and
    with SGD, each at its own best rate, or None without an unscaled row."""
    verdicts = [v for v in analysis.get("verdicts") or [] if isinstance(v, dict)]
    d_ks = [v["d_k"] for v in verdicts if v.get("rule") == "unscaled" and isinstance(v.get("d_k"), int)]
    if not d_ks:
        return None
    d_k = max(d_ks)
    return d_k, {opt: _lm_row(verdicts, "unscaled", d_k, f"{opt}-own-best").get("verdict") for opt in ("adamw", "sgd")}


def lm_card(analysis: dict) -> Card | None:
    """The language-model card: what the unscaled rule did at the sweep's largest d_k with AdamW and
    with SGD, each at its own best rate of the grid (the fair test: "stops learning", not "needs
    another rate"), against 1/√d_k's final validation bits per byte and the trigram baseline."""
    found = lm_verdicts(analysis)
    if found is None:
        return None
    d_k, found_verdicts = found
    value = training_value(found_verdicts)
    if not value:
        return None
    verdicts = [v for v in analysis["verdicts"] if isinstance(v, dict)]
    own = {opt: _lm_row(verdicts, "unscaled", d_k, f"{opt}-own-best") for opt in ("adamw", "sgd")}
    ref = {
        opt: _lm_row(verdicts, analysis.get("reference_rule", "inverse_sqrt_dk"), d_k, f"{opt}-own-best") for opt in own
    }
    trigram = next(
        (r.get("bpb") for r in (analysis.get("baselines") or {}).get("rows") or [] if r.get("name") == "trigram"), None
    )
    sub = _(
        "validation bits per byte, unscaled, each at its own best rate: "
        "AdamW {adamw}, SGD {sgd} (1/√d_k: {adamw_ref}, {sgd_ref}; a trigram table: {trigram}).",
        adamw=_bpb(own["adamw"]),
        sgd=_bpb(own["sgd"]),
        adamw_ref=_bpb(ref["adamw"]),
        sgd_ref=_bpb(ref["sgd"]),
        trigram=number(trigram, digits=3),
    )
    return Card(_("a small GPT on real text without ÷√d_k at d_k = {d}", d=d_k), value, sub, "#exp-lm")


def real_model_value(ratio: float | None) -> str:
    """The key of :data:`REAL_MODEL_VALUES`, by the perplexity without the scale ÷ with it."""
    if ratio is None:
        return "unknown"
    return (
        "much_worse"
        if ratio >= MUCH_WORSE_RATIO
        else "worse"
        if ratio > SAME_WITHIN
        else "better"
        if ratio < 1 / SAME_WITHIN
        else "same"
    )


def real_model_card(data: dict) -> Card | None:
    """The SmolLM2 card: its perplexity on the text with its trained scale and with the scale removed
    (α = √d_k), from the rescale result's analysis."""
    a = data.get("analysis") or {}
    with_scale, without = a.get("perplexity_alpha1"), a.get("perplexity_unscaled")
    if with_scale is None or not a.get("has_unscaled"):
        return None
    ratio = None if without is None or not with_scale else without / with_scale
    name = (data.get("model") or {}).get("name", "SmolLM2")
    return Card(
        _("{model}: its trained scale removed", model=name),
        _(REAL_MODEL_VALUES[real_model_value(ratio)], r=number(ratio, digits=3)),
        _(
            "perplexity {with_scale} with 1/√d_k, {without} with none (α = {alpha}).",
            with_scale=number(with_scale, digits=3),
            without=number(without, digits=3),
            alpha=number(data.get("unscaled_alpha"), digits=3),
        ),
        "#exp-rescale",
    )


# (kind, card function, what it reads from the data)
CARDS = (
    ("train/scale-vs-dk", training_card, "analysis"),
    ("train/lm", lm_card, "analysis"),
    ("rescale/smollm2", real_model_card, None),
)


def cards(root) -> list[Card]:
    """The headline cards whose results exist under ``root`` (or ship as references), each labelled
    with the result it shows."""
    out = []
    for kind, make, part in CARDS:
        try:
            env = results.read_preferred(kind, root)
            data = env.data if part is None else env.data.get(part) or {}
            card = make(data)
        except (results.ResultError, KeyError, TypeError, ValueError, AttributeError):
            continue
        if card is not None:
            sub = _("{sub} ({origin})", sub=card.sub, origin=_(ORIGINS[env.origin]))
            out.append(Card(card.label, card.value, sub, card.href))
    return out


def cards_html(cards: list[Card]) -> str:
    """The cards as links, in the style of the page's glance cards, set as prose (d_k → dₖ)."""
    return "".join(
        f'<a class="glance-card headline-card" href="{esc(c.href)}">'
        f'<span class="glance-label">{esc(c.label)}</span>'
        f'<span class="glance-value">{esc(c.value)}</span>'
        f'<span class="glance-sub">{esc(c.sub)}</span></a>'
        for c in cards
    )
