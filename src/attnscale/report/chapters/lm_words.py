"""The words of the LM chapter (:mod:`.lm`): the tables of sentences the ``train/lm`` analysis chooses
among, and the small pure functions of the analysis that choose and fill them (where a rule does not
reach the target, where the reference ends against the n-gram baselines, whether the seeds agree and
the verdicts hold, the learning-rate sensitivity, what each optimiser shows). Rewording needs no
training run; a test changes the data and sees the words change."""

from __future__ import annotations

import statistics

from attnscale.i18n import N_, _
from attnscale.report.numbers import number
from attnscale.report.text import listed, rule_label
from attnscale.stored_words import OPTIMISER_NAMES, TRAINING_VERDICT_MARK, TRAINING_VERDICT_PHRASE, TRAINING_VERDICTS

OPTIMISERS = ("adamw", "sgd")
GOOD = ("faster", "learns")  # verdicts under which a rule has not "stopped learning"
#: The baselines the reference is held against, weakest first: the caveat names the first it misses.
CAVEAT_ORDERS = (2, 3)
#: The n-gram baselines, by the name the result gives each.
BASELINE_NAMES = {"unigram": N_("unigram"), "bigram": N_("bigram"), "trigram": N_("trigram"), "4-gram": N_("4-gram")}
#: What the baseline of each order counts ("counts of byte pairs").
COUNTED = {1: N_("frequencies"), 2: N_("pairs"), 3: N_("triples"), 4: N_("quadruples")}
#: The four settings a rule is judged in (the result's "optimiser" of a verdict): each optimiser at
#: the reference's best rate, or at the rule's own.
SETTINGS = {
    "adamw": N_("AdamW at the 1/√d_k rate"),
    "adamw-own-best": N_("AdamW at its own best rate"),
    "sgd": N_("SGD at the 1/√d_k rate"),
    "sgd-own-best": N_("SGD at its own best rate"),
}
#: The sentence above the verdict table, by (any rule fails or diverges with AdamW, with SGD), each
#: optimiser at the rule's own best rate: see glance_key.
GLANCE_SENTENCES = {
    (False, False): N_(
        "Each at its own best rate, every rule reaches the 1/√d_k reference's target at every d_k, with AdamW and with SGD. Over all {n} verdicts below: {counts}."
    ),
    (True, False): N_(
        "Each at its own best rate, {adamw_rules} fails or diverges with AdamW at d_k = {adamw_dks}; with SGD every rule reaches the target. Over all {n} verdicts below: {counts}."
    ),
    (False, True): N_(
        "Each at its own best rate, every rule reaches the target with AdamW; with SGD {sgd_rules} fails or diverges at d_k = {sgd_dks}. Over all {n} verdicts below: {counts}."
    ),
    (True, True): N_(
        "Each at its own best rate, {adamw_rules} fails or diverges with AdamW at d_k = {adamw_dks}, and with SGD {sgd_rules} at d_k = {sgd_dks}. Over all {n} verdicts below: {counts}."
    ),
}
BAD = ("fails", "diverges")  # verdicts under which a rule does not reach the target
#: A verdict within a sentence (the one table of stored_words); None: no verdict, since the reference diverged.
VERDICT_PHRASES = {**TRAINING_VERDICT_PHRASE, None: N_("cannot be judged (the reference diverged)")}
#: What AdamW and SGD each show, by (AdamW's verdict is GOOD, SGD's is GOOD): see optimisers_key.
OPTIMISER_SENTENCES = {
    (True, True): N_(
        "Unscaled at d_k = {dk}, each at its own best rate: {adamw_verdict} with AdamW and {sgd_verdict} with SGD. "
        "Neither optimiser shows it stop learning there."
    ),
    (True, False): N_(
        "Unscaled at d_k = {dk}, each at its own best rate: {adamw_verdict} with AdamW but {sgd_verdict} with SGD, as expected if Adam's per-parameter step size makes up for the smaller gradients that slow plain SGD there."
    ),
    (False, True): N_(
        "Unscaled at d_k = {dk}, each at its own best rate: {sgd_verdict} with SGD but {adamw_verdict} with AdamW: here the adaptive optimiser is the one that suffers."
    ),
    (False, False): N_(
        "Unscaled at d_k = {dk}, each at its own best rate: {adamw_verdict} with AdamW and {sgd_verdict} with SGD: neither optimiser recovers what the scale gives."
    ),
}


def baseline_name(row: dict) -> str:
    return _(BASELINE_NAMES[row["name"]])


def reference_finals(a: dict, optimiser: str) -> dict[str, float | None]:
    """The 1/√d_k reference's final bits per byte at its best ``optimiser`` rate (mean over seeds), by d_k."""
    final = {
        (g["rule"], str(g["d_k"]), g["lr"]): g["final_bpb"]["mean"] for g in a["grid"] if g["optimiser"] == optimiser
    }
    return {d: final.get((a["reference_rule"], d, lr)) for d, lr in a["reference_best_lr"][optimiser].items()}


def reference_sentence(a: dict, optimiser: str) -> str:
    """Where the 1/√d_k reference ends against the baselines with ``optimiser`` at its best rate: the
    caveat when it misses the bigram or the trigram at some d_k (naming the weakest one it misses),
    else the highest it beats at every d_k. Each optimiser's verdicts compare against its own reference."""
    rows = {r["order"]: r for r in a["baselines"]["rows"]}
    finals = reference_finals(a, optimiser)
    name = _(OPTIMISER_NAMES[optimiser])
    listed_rows = _(", ", msgctxt="list").join(f"d_k {d}: {number(v, '.3f')}" for d, v in finals.items())
    for order in CAVEAT_ORDERS:
        missed = [d for d, v in finals.items() if v is None or v >= rows[order]["bpb"]]
        if missed:
            return _(
                "Caveat: the 1/√d_k reference, at its best {optimiser} rate, ends at {rows} bits per byte, not below the {missed} baseline at d_k = {dks}. "
                "There the models have not yet learned what counting the training bytes knows: the {optimiser} verdicts then describe early training, not a trained model.",
                optimiser=name,
                rows=listed_rows,
                missed=baseline_name(rows[order]),
                dks=listed(missed),
            )
    best = max(o for o in rows if all(v < rows[o]["bpb"] for v in finals.values()))
    return _(
        "The 1/√d_k reference, at its best {optimiser} rate, ends at {rows} bits per byte: below the {best} baseline at every d_k, so the {optimiser} verdicts compare models that have learned more than counts of byte {what} know.",
        optimiser=name,
        rows=listed_rows,
        best=baseline_name(rows[best]),
        what=_(COUNTED[best]),
    )


def best_rate_sentence(a: dict, optimiser: str) -> str:
    rates = _(", ", msgctxt="list").join(f"d_k {k}: {v:g}" for k, v in a["reference_best_lr"][optimiser].items())
    edge = [k for k, inside in a["reference_best_interior"][optimiser].items() if not inside]
    name = _(OPTIMISER_NAMES[optimiser])
    return (
        _(
            "The {optimiser} rate best for 1/√d_k lies at the edge of the grid at d_k = {dks} ({rates}): there the comparison at its best rate is not bracketed, and may not be its optimum.",
            optimiser=name,
            dks=listed(edge),
            rates=rates,
        )
        if edge
        else _(
            "The {optimiser} rate best for 1/√d_k is inside the grid at every d_k ({rates}).",
            optimiser=name,
            rates=rates,
        )
    )


def run_label(v: dict) -> str:
    return f"{rule_label(v['rule'])} d_k {v['d_k']} {_(SETTINGS[v['optimiser']])}"


def seeds_sentence(verdicts: list, seeds: int, reference: str) -> str:
    """Whether the seeds agree on every verdict (the reference's own rows aside), else which split."""
    if seeds < 2:
        return _("One seed: the verdicts show no agreement between seeds.")
    judged = [v for v in verdicts if v["verdict"] and v["rule"] != reference]
    split = [v for v in judged if v["seeds_agreeing"] < v["seeds"]]
    if not split:
        return _("Every verdict is that of all {seeds} seeds.", seeds=seeds)
    return _(
        "The seeds disagree on {split} of the {total} verdicts ({which}); the table gives how many agree.",
        split=len(split),
        total=len(judged),
        which=_(" · ").join(run_label(v) for v in split),
    )


def halfway_sentence(verdicts: list, step: int, reference: str) -> str:
    """Whether the verdicts at the reference's rate (the reference's own rows aside) are the same
    judged on the first half of the runs."""
    at_ref = [v for v in verdicts if v["optimiser"] in OPTIMISERS and v["verdict"] and v["rule"] != reference]
    changed = [v for v in at_ref if v["verdict_halfway"] != v["verdict"]]
    if not changed:
        return _(
            "Judged on the same runs up to step {step} (half of them) instead, every verdict at the reference's rate is already the same: the second half of training does not change the answer.",
            step=step,
        )
    which = _(" · ").join(
        _(
            "{run}: {half} halfway, {end} at the end",
            run=run_label(v),
            half=_(VERDICT_PHRASES[v["verdict_halfway"] or None]),
            end=_(VERDICT_PHRASES[v["verdict"]]),
        )
        for v in changed
    )
    return _(
        "Judged on the same runs up to step {step} (half of them) instead, {changed} of the {total} verdicts at the reference's rate change ({which}): those still depend on the step budget.",
        step=step,
        changed=len(changed),
        total=len(at_ref),
        which=which,
    )


def sensitivity_sentence(a: dict, rules: list, d_k: int) -> str:
    rows = []
    for optimiser in OPTIMISERS:
        values = {
            s["rule"]: s["lr_sensitivity"]
            for s in a["lr_sensitivity"]
            if (s["optimiser"], s["d_k"]) == (optimiser, d_k)
        }
        rows.append(
            _(
                "{optimiser}: {rules}",
                optimiser=_(OPTIMISER_NAMES[optimiser]),
                rules=_(", ", msgctxt="list").join(
                    _("{rule} {value}", rule=rule_label(r), value=number(values.get(r), ".3f")) for r in rules
                ),
            )
        )
    return _(
        "Learning-rate sensitivity (Wortsman et al. 2023: the mean over the grid of min(final, initial) loss, a diverged run at its initial loss, minus the best), at d_k = {dk}: {rows} bits per byte.",
        dk=d_k,
        rows=_("; ", msgctxt="clauses").join(rows),
    )


def flat_sensitivity_sentences(a: dict, rules: list, d_k: int) -> list[str]:
    """Per optimiser: when the rule least sensitive to the rate at ``d_k`` is also one whose best
    loss is above TARGET_FACTOR × the reference's best, say that its curve is flat because no rate of
    the grid trains it well (a low sensitivity is not a virtue then)."""
    out = []
    for optimiser in OPTIMISERS:
        sens = {
            s["rule"]: s["lr_sensitivity"]
            for s in a["lr_sensitivity"]
            if (s["optimiser"], s["d_k"]) == (optimiser, d_k) and s["lr_sensitivity"] is not None
        }
        best = {
            r: min(
                (
                    g["score"]
                    for g in a["grid"]
                    if (g["optimiser"], g["d_k"], g["rule"]) == (optimiser, d_k, r) and g["score"] is not None
                ),
                default=None,
            )
            for r in rules
        }
        ref = best.get(a["reference_rule"])
        if not sens or ref is None:
            continue
        flat = min(sens, key=sens.__getitem__)
        if best[flat] is not None and best[flat] > a["target_factor"] * ref:
            out.append(
                _(
                    "With {optimiser} at d_k = {dk}, {rule} is the least sensitive ({value}), but its best loss over the grid, {best}, is above the 1/√d_k reference's {ref}: its curve is flat because no rate of the grid trains it well.",
                    rule=rule_label(flat),
                    optimiser=_(OPTIMISER_NAMES[optimiser]),
                    dk=d_k,
                    value=number(sens[flat], ".3f"),
                    best=number(best[flat], ".3f"),
                    ref=number(ref, ".3f"),
                )
            )
    return out


def optimisers_key(adamw_verdict: str, sgd_verdict: str) -> tuple[bool, bool]:
    """The key of :data:`OPTIMISER_SENTENCES`: whether each optimiser's verdict is one of GOOD."""
    return adamw_verdict in GOOD, sgd_verdict in GOOD


def optimisers_sentence(verdicts: list, d_k: int, rule: str = "unscaled") -> str | None:
    """What AdamW and SGD each show for ``rule`` at ``d_k``, each at its own best rate: one of four
    sentences by whether each verdict is faster/learns or not. None when either cannot be judged."""
    find = lambda o: next((v for v in verdicts if (v["rule"], v["d_k"], v["optimiser"]) == (rule, d_k, o)), None)  # noqa: E731
    adam, sgd = find("adamw-own-best"), find("sgd-own-best")
    if not adam or not sgd or not adam["verdict"] or not sgd["verdict"]:
        return None
    return _(
        OPTIMISER_SENTENCES[optimisers_key(adam["verdict"], sgd["verdict"])],
        dk=d_k,
        adamw_verdict=_(VERDICT_PHRASES[adam["verdict"]]),
        sgd_verdict=_(VERDICT_PHRASES[sgd["verdict"]]),
    )


def decided_ratio(v: dict) -> float | None:
    """The steps ratio behind a verdict: the median over the seeds whose own verdict is the one shown
    (the verdict follows the worse seed on a tie, so the median of all seeds may read otherwise)."""
    ratios = [
        s["steps_ratio"] for s in v.get("per_seed", []) if s["verdict"] == v["verdict"] and s["steps_ratio"] is not None
    ]
    return statistics.median(ratios) if ratios else None


def _bad_at_own_best(verdicts: list, optimiser: str, reference: str) -> tuple[list[str], list[int]]:
    """The rules (in order) and the d_k at which a rule fails or diverges with ``optimiser`` at its own best rate."""
    bad = [
        v
        for v in verdicts
        if v["optimiser"] == f"{optimiser}-own-best" and v["rule"] != reference and v["verdict"] in BAD
    ]
    return list(dict.fromkeys(v["rule"] for v in bad)), sorted({v["d_k"] for v in bad})


def glance_key(verdicts: list, reference: str) -> tuple[bool, bool]:
    """The key of :data:`GLANCE_SENTENCES`: whether any rule fails or diverges with AdamW, with SGD,
    each at the rule's own best rate."""
    return tuple(bool(_bad_at_own_best(verdicts, o, reference)[0]) for o in OPTIMISERS)


def glance_sentence(verdicts: list, reference: str) -> str:
    """What the verdict table shows, in one sentence: where a rule does not reach the target, each
    optimiser at the rule's own best rate, and how many verdicts of each kind the table holds."""
    judged = [v for v in verdicts if v["rule"] != reference and v["verdict"]]
    counts = (
        listed(
            [
                _("{n} {verdict}", n=n, verdict=_(TRAINING_VERDICT_MARK[k]))
                for k in TRAINING_VERDICTS
                if (n := sum(v["verdict"] == k for v in judged))
            ]
        )
        if judged
        else "0"
    )
    where = {}
    for o in OPTIMISERS:
        rules, dks = _bad_at_own_best(verdicts, o, reference)
        where[f"{o}_rules"] = listed([rule_label(r) for r in rules]) if rules else ""
        where[f"{o}_dks"] = listed([str(d) for d in dks]) if dks else ""
    return _(GLANCE_SENTENCES[glance_key(verdicts, reference)], n=len(judged), counts=counts, **where)


#: What the table marks of a verdict that does not hold (see robustness_sentence).
FRAGILE_MARKS = {"robust_to_target": "†", "robust_to_budget": "‡"}
#: The sentence under the verdict table, by (some verdict does not hold within the band of targets or
#: the budgets, some verdict other than faster/learns holds): see robustness_key.
ROBUSTNESS_SENTENCES = {
    (False, False): N_(
        "Every verdict holds for any target from {lo:g}× to {hi:g}× the reference's final loss and with half the steps, and no failing seed would reach the target within as many steps again at the rate of its last quarter; each of them is learns or faster."
    ),
    (False, True): N_(
        "Every verdict holds for any target from {lo:g}× to {hi:g}× the reference's final loss and with half the steps, and no failing seed would reach the target within as many steps again at the rate of its last quarter; those other than learns or faster: {robust_bad}."
    ),
    (True, False): N_(
        "{robust} of the {n} verdicts hold for any target from {lo:g}× to {hi:g}× the reference's final loss and with half the steps, and none of their failing seeds would reach the target within as many steps again at the rate of its last quarter; each of those is learns or faster. † marks the {target} verdicts that change within that range of targets, ‡ the {budget} that change with the budget: read those as undecided."
    ),
    (True, True): N_(
        "{robust} of the {n} verdicts hold for any target from {lo:g}× to {hi:g}× the reference's final loss and with half the steps, and none of their failing seeds would reach the target within as many steps again at the rate of its last quarter; those other than learns or faster: {robust_bad}. † marks the {target} verdicts that change within that range of targets, ‡ the {budget} that change with the budget: read those as undecided."
    ),
}


def _holds(v: dict) -> bool:
    return v["robust_to_target"] is not False and v["robust_to_budget"] is not False


def robustness_key(verdicts: list, reference: str) -> tuple[bool, bool]:
    """The key of :data:`ROBUSTNESS_SENTENCES`: whether some verdict (the reference's own aside) does
    not hold, whether some verdict other than GOOD holds."""
    judged = [v for v in verdicts if v["rule"] != reference and v["verdict"]]
    return (any(not _holds(v) for v in judged), any(_holds(v) and v["verdict"] not in GOOD for v in judged))


def robustness_sentence(verdicts: list, band: list, reference: str) -> str:
    """Which verdicts hold for every target of ``band`` (factors of the reference's final loss) and
    with another step budget, and what the table's marks say of the others."""
    judged = [v for v in verdicts if v["rule"] != reference and v["verdict"]]
    robust_bad = [
        _("{run} ({verdict})", run=run_label(v), verdict=_(TRAINING_VERDICT_MARK[v["verdict"]]))
        for v in judged
        if _holds(v) and v["verdict"] not in GOOD
    ]
    return _(
        ROBUSTNESS_SENTENCES[robustness_key(verdicts, reference)],
        lo=band[0],
        hi=band[1],
        n=len(judged),
        robust=sum(_holds(v) for v in judged),
        robust_bad=_(" · ").join(robust_bad),
        target=sum(v["robust_to_target"] is False for v in judged),
        budget=sum(v["robust_to_budget"] is False for v in judged),
    )


def collapse_sentence(a: dict) -> str | None:
    """How many runs collapsed to the uniform prediction, counted as diverged; None when none did."""
    c = a.get("collapse") or {}
    if not c.get("runs"):
        return None
    return _(
        "{n} run(s) ended at the uniform prediction's {bpb:g} bits per byte (within {tol:g}), having learnt and lost it: they are counted as diverged from the step they reached it, in the grids and the verdicts.",
        n=c["runs"],
        bpb=c["uniform_bpb"],
        tol=c["tol"],
    )
