"""Report chapter: a small GPT on real English text with each scale rule (``attnscale train lm``).

Reads the ``train/lm`` result and only draws and words it. First, at a glance: one sentence of what
the verdicts say (where a rule does not reach the target, each optimiser at the rule's own best rate,
and how many verdicts of each kind), where each optimiser's 1/√d_k reference ends against the n-gram
baselines (a caveat when it does not beat the trigram: those verdicts then describe early training),
the verdict table (rule × d_k × setting: a coloured mark, the steps ratio of the seeds that decided
it, marks where it changes with the target or the budget, each seed when they disagree, a rule's own
best rate at the grid's edge), which verdicts hold, and validation bits per byte against the step. Then the set-up, the baselines, the reference's best rates and whether they
lie inside the grids, whether the seeds agree and the verdicts halfway through are the same, the
learning-rate sensitivity and what each optimiser shows, final loss against the rate, the largest
|logit| and the mean row entropy against the step, the detailed table and greedy samples. Every
sentence is chosen and filled by the analysis' figures, by the small pure functions below.
"""

from __future__ import annotations

import statistics

from attnscale.i18n import N_, _
from attnscale.report.html import Markup, Verbatim, esc, para, table
from attnscale.report.narrow import legend_columns
from attnscale.report.numbers import number
from attnscale.report.plotting import SERIES, responsive_figure, style
from attnscale.report.text import listed, pretty, rule_label
from attnscale.stored_words import OPTIMISER_NAMES, TRAINING_VERDICT_MARK, TRAINING_VERDICT_PHRASE, TRAINING_VERDICTS

KIND = "train/lm"
TITLE = N_("Training: a small GPT on real English text, with each scale rule")
HOW_TO = "attnscale train lm"
OPTIMISERS = ("adamw", "sgd")
GOOD = ("faster", "learns")  # verdicts under which a rule has not "stopped learning"
#: The baselines the reference is held against, weakest first: the caveat names the first it misses.
CAVEAT_ORDERS = (2, 3)

# --- the words the data chooses among ----------------------------------------------------------------

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
#: A verdict's badge colour (the verification's badge classes): like or better, slower, worse.
VERDICT_BADGE = {"faster": "holds", "learns": "holds", "slower": "inconclusive", "fails": "fails", "diverges": "wrong"}
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


def _rule(name: str) -> str:
    return rule_label(name)


def _baseline_name(row: dict) -> str:
    return _(BASELINE_NAMES[row["name"]])


def _baseline_lines(ax, baselines: list) -> None:
    for row in baselines:
        if row["order"] >= 2:
            ax.axhline(row["bpb"], ls=":", color="#5d6677", lw=1)


def _panels(curves: list, d_ks: list, rules: list, rows: list[tuple[str, str, bool]], baselines=()):
    """One column per d_k, one row per (curve key, axis label, log scale); a line per rule (AdamW)."""
    with style() as plt:
        fig, axes = plt.subplots(
            len(rows),
            len(d_ks),
            figsize=(3.4 * len(d_ks), 2.9 * len(rows)),
            squeeze=False,
            sharey="row",
            constrained_layout=True,
        )
        for col, d_k in enumerate(d_ks):
            for row, (key, ylabel, log) in enumerate(rows):
                ax = axes[row][col]
                for i, rule in enumerate(rules):
                    c = next(c for c in curves if (c["d_k"], c["rule"], c["optimiser"]) == (d_k, rule, "adamw"))
                    y = c[key]["mean"] if key == "valid_bpb" else c[key]
                    pts = [(s, v) for s, v in zip(c["step"], y) if v is not None]
                    ax.plot(
                        [s for s, v in pts],
                        [v for s, v in pts],
                        color=SERIES[i % len(SERIES)],
                        label=pretty(_rule(rule)),
                    )
                    if key == "valid_bpb":
                        band = [
                            (s, lo, hi) for s, lo, hi in zip(c["step"], c[key]["min"], c[key]["max"]) if lo is not None
                        ]
                        ax.fill_between(
                            [b[0] for b in band],
                            [b[1] for b in band],
                            [b[2] for b in band],
                            color=SERIES[i % len(SERIES)],
                            alpha=0.15,
                            lw=0,
                        )
                if key == "valid_bpb":
                    _baseline_lines(ax, baselines)
                    ax.set_ylim(top=max(5.0, min(b["bpb"] for b in baselines) + 0.5) if baselines else None)
                if log:
                    ax.set_yscale("log")
                ax.set_title(pretty(f"d_k = {d_k}") if row == 0 else "")
                if row == len(rows) - 1:
                    ax.set_xlabel(_("step"))
                if col == 0:
                    ax.set_ylabel(_(ylabel))
        fig.legend(
            *axes[0][0].get_legend_handles_labels(), loc="outside lower center", ncol=legend_columns(3), fontsize=8.5
        )
    return fig


def _lr_panels(grid: list, own_best: list, d_ks: list, rules: list, baselines: list):
    """Final loss (the LR sensitivity's score) against the rate: a row per optimiser, a column per
    d_k, a line per rule, its own best rate circled (the figure of Wortsman et al. 2023)."""
    from matplotlib.ticker import NullFormatter  # matplotlib loads only when a figure is drawn

    with style() as plt:
        fig, axes = plt.subplots(
            len(OPTIMISERS),
            len(d_ks),
            figsize=(3.4 * len(d_ks), 2.9 * len(OPTIMISERS)),
            squeeze=False,
            sharey=True,
            constrained_layout=True,
        )
        for row, optimiser in enumerate(OPTIMISERS):
            for col, d_k in enumerate(d_ks):
                ax = axes[row][col]
                for i, rule in enumerate(rules):
                    pts = sorted(
                        (g["lr"], g["score"])
                        for g in grid
                        if (g["optimiser"], g["d_k"], g["rule"]) == (optimiser, d_k, rule) and g["score"] is not None
                    )
                    color = SERIES[i % len(SERIES)]
                    ax.plot(
                        [x for x, y in pts], [y for x, y in pts], color=color, marker=".", label=pretty(_rule(rule))
                    )
                    best = next(
                        b["lr"] for b in own_best if (b["optimiser"], b["d_k"], b["rule"]) == (optimiser, d_k, rule)
                    )
                    ax.plot(
                        [x for x, y in pts if x == best],
                        [y for x, y in pts if x == best],
                        "o",
                        mfc="none",
                        color=color,
                        ms=9,
                    )
                _baseline_lines(ax, baselines)
                ax.set_xscale("log")
                # The grid's own rates as the ticks: a log axis spanning one decade would otherwise label
                # its minor ticks (2×10⁻³, 3×10⁻³, ...) into each other.
                rates = sorted({g["lr"] for g in grid if g["optimiser"] == optimiser})
                ax.set_xticks(rates, [f"{lr:g}" for lr in rates])
                ax.xaxis.set_minor_formatter(NullFormatter())
                ax.set_title(pretty(f"{_(OPTIMISER_NAMES[optimiser])} · d_k = {d_k}"))
                if row == len(OPTIMISERS) - 1:
                    ax.set_xlabel(_("peak learning rate"))
                if col == 0:
                    ax.set_ylabel(_("final validation bits per byte"))
        fig.legend(
            *axes[0][0].get_legend_handles_labels(), loc="outside lower center", ncol=legend_columns(3), fontsize=8.5
        )
    return fig


# --- the sentences: small pure functions of the analysis ---------------------------------------------


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
                missed=_baseline_name(rows[order]),
                dks=listed(missed),
            )
    best = max(o for o in rows if all(v < rows[o]["bpb"] for v in finals.values()))
    return _(
        "The 1/√d_k reference, at its best {optimiser} rate, ends at {rows} bits per byte: below the {best} baseline at every d_k, so the {optimiser} verdicts compare models that have learned more than counts of byte {what} know.",
        optimiser=name,
        rows=listed_rows,
        best=_baseline_name(rows[best]),
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


def _label(v: dict) -> str:
    return f"{_rule(v['rule'])} d_k {v['d_k']} {_(SETTINGS[v['optimiser']])}"


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
        which=_(" · ").join(_label(v) for v in split),
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
            run=_label(v),
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
                    _("{rule} {value}", rule=_rule(r), value=number(values.get(r), ".3f")) for r in rules
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
                    rule=_rule(flat),
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
        where[f"{o}_rules"] = listed([_rule(r) for r in rules]) if rules else ""
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
        _("{run} ({verdict})", run=_label(v), verdict=_(TRAINING_VERDICT_MARK[v["verdict"]]))
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


def _verdict_cell(v: dict, edge: bool) -> Markup:
    """A verdict in the glance table: its coloured mark, the steps ratio that decided it, the marks of
    :data:`FRAGILE_MARKS` where it does not hold, the seeds' split when they disagree (each seed's
    verdict and ratio), and a rule's own best rate when it is the grid's edge (not bracketed: its
    optimum may lie beyond)."""
    if not v["verdict"]:
        return Markup(esc(_(VERDICT_PHRASES[None])))
    mark = f'<span class="badge {VERDICT_BADGE[v["verdict"]]}">{esc(_(TRAINING_VERDICT_MARK[v["verdict"]]))}</span>'
    parts = [mark]
    ratio = decided_ratio(v)
    if ratio is not None:
        parts.append(esc(f"×{number(ratio, '.2f')}"))
    fragile = "".join(mark for key, mark in FRAGILE_MARKS.items() if v.get(key) is False)
    if fragile:
        parts.append(esc(fragile))
    if v["seeds_agreeing"] < v["seeds"]:
        seeds = _(" · ").join(
            f"{_(TRAINING_VERDICT_MARK[s['verdict']])}"
            + (f" ×{number(s['steps_ratio'], '.2f')}" if s["steps_ratio"] is not None else "")
            for s in v["per_seed"]
            if s["verdict"]
        )
        parts.append(esc(_("({agree}/{n} seeds; each: {seeds})", agree=v["seeds_agreeing"], n=v["seeds"], seeds=seeds)))
    if edge:
        parts.append(esc(_("(own best rate {lr:g}: the grid's edge)", lr=v["lr"])))
    return Markup(" ".join(parts))


def glance_table(a: dict, d_ks: list, rules: list) -> str:
    """The verdicts at a glance: a row per rule (the reference's aside) × d_k, a column per setting
    (each optimiser at the reference's best rate and at the rule's own)."""
    columns = ("adamw", "adamw-own-best", "sgd", "sgd-own-best")
    find = {(v["rule"], v["d_k"], v["optimiser"]): v for v in a["verdicts"]}
    edge = {(b["optimiser"], b["rule"], b["d_k"]): b["edge"] for b in a["own_best_lr"]}
    head = [_("rule"), "d_k"] + [_(SETTINGS[o]) for o in columns]
    rows = [
        [_rule(r), d]
        + [
            _verdict_cell(find[r, d, o], o.endswith("own-best") and bool(edge.get((o.split("-")[0], r, d))))
            for o in columns
        ]
        for r in rules
        if r != a["reference_rule"]
        for d in d_ks
    ]
    return table(head, rows, cls="numeric verdicts")


def render(env) -> str:
    a = env.data["analysis"]
    cfg = env.config
    d_ks, rules = cfg["d_ks"], cfg["rules"]
    parts = _at_a_glance(a, d_ks, rules)
    parts += _set_up(a, cfg)
    parts += _learning_rates(a, cfg)
    parts += _logits(a, d_ks, rules)
    parts += _verdicts_in_detail(a, d_ks, rules)
    parts += _samples(a["samples"])
    return "\n".join(parts)


def _at_a_glance(a: dict, d_ks: list, rules: list) -> list[str]:
    """What the verdicts say, against which reference, the verdict table, whether the verdicts hold,
    and validation bits per byte against the step."""
    base = a["baselines"]
    names = _(", ", msgctxt="list").join(_baseline_name(r) for r in base["rows"] if r["order"] >= 2)
    glance = [para(glance_sentence(a["verdicts"], a["reference_rule"]))]
    glance += [para(reference_sentence(a, o)) for o in OPTIMISERS]
    glance.append(glance_table(a, d_ks, rules))
    if "target_band" in a:
        glance.append(para(robustness_sentence(a["verdicts"], a["target_band"], a["reference_rule"])))
    glance.append(
        responsive_figure(
            lambda: _panels(
                a["curves"], d_ks, rules, [("valid_bpb", N_("validation bits per byte"), False)], base["rows"]
            ),
            _("Validation bits per byte against the step, per d_k and rule"),
            _(
                "AdamW at the rate best for 1/√d_k. "
                "Line: mean over seeds; band: min to max; dotted: the n-gram baselines ({names}, top to bottom).",
                names=names,
            ),
        )
    )
    return glance


def _set_up(a: dict, cfg: dict) -> list[str]:
    """The model, the text, the run and the rules; the rules left out; the n-gram baselines; the runs
    that collapsed, if any."""
    m, base, d_ks, rules = a["model"], a["baselines"], cfg["d_ks"], cfg["rules"]
    parts = [
        para(
            _(
                "A decoder-only GPT in nanoGPT's shape (width {d_model}, {layers} layers, context {context} bytes, {params:,} parameters at d_k = {dk0}; heads = width ÷ d_k) on {train:,} bytes of {source}, validated on {scored:,} bytes of the {valid:,} after them. {steps} steps of {batch} sequences, {seeds} seed(s); for a given d_k and seed every rule starts from the same weights and sees the same batches. "
                "Rules: {rules}. "
                "AdamW over the rates {adamw}; plain SGD over {sgd}. "
                "Figures come from the attention the model trains with. "
                "At initialisation: {init} bits per byte.",
                d_model=m["d_model"],
                layers=m["n_layers"],
                context=m["context"],
                params=m["parameters"],
                dk0=d_ks[0],
                train=a["text"]["train_bytes"],
                source=a["text"]["source"],
                valid=a["text"]["valid_bytes"],
                scored=base["scored_bytes"],
                steps=cfg["steps"],
                batch=cfg["batch"],
                seeds=cfg["seeds"],
                rules=_(", ", msgctxt="list").join(_rule(r) for r in rules),
                adamw=_(", ", msgctxt="list").join(f"{lr:g}" for lr in a["lr_grids"]["adamw"]),
                sgd=_(", ", msgctxt="list").join(f"{lr:g}" for lr in a["lr_grids"]["sgd"]),
                init=number(a["init_bpb"]["mean"], ".3f"),
            )
        )
    ]
    absent = [r for r in a.get("rule_choices", []) if r not in rules]
    if absent:
        parts.append(
            para(
                _(
                    "Not in this run (available with --rules): {rules}.",
                    rules=_("; ", msgctxt="clauses").join(_rule(r) for r in absent),
                )
            )
        )
    parts.append(
        para(
            _(
                "Baselines computed from the same split, on the same validation bytes, by counting the training bytes ({smoothing}): {rows} bits per byte.",
                smoothing=_("add-k smoothing, k chosen on the last tenth of the training part"),
                rows=_(", ", msgctxt="list").join(
                    _("{name} {bpb}", name=_baseline_name(r), bpb=number(r["bpb"], ".3f")) for r in base["rows"]
                ),
            )
        )
    )
    collapsed = collapse_sentence(a)
    if collapsed:
        parts.append(para(collapsed))
    return parts


def _learning_rates(a: dict, cfg: dict) -> list[str]:
    """Where the reference's best rates lie, whether the seeds agree and the verdicts halfway are the
    same, the learning-rate sensitivity, what each optimiser shows, and final loss against the rate."""
    d_ks, rules = cfg["d_ks"], cfg["rules"]
    parts = [para(best_rate_sentence(a, o)) for o in OPTIMISERS]
    parts.append(para(seeds_sentence(a["verdicts"], cfg["seeds"], a["reference_rule"])))
    parts.append(para(halfway_sentence(a["verdicts"], a["halfway_step"], a["reference_rule"])))
    parts.append(para(sensitivity_sentence(a, rules, d_ks[-1])))
    parts += [para(s) for s in flat_sensitivity_sentences(a, rules, d_ks[-1])]
    if "unscaled" in rules:
        said = optimisers_sentence(a["verdicts"], d_ks[-1])
        if said:
            parts.append(para(said))
    parts.append(
        responsive_figure(
            lambda: _lr_panels(a["grid"], a["own_best_lr"], d_ks, rules, a["baselines"]["rows"]),
            _("Final validation bits per byte against the learning rate, per optimiser and d_k, a line per rule"),
            _(
                "Mean over seeds of min(final, initial) loss (a diverged run at its initial loss, the LR sensitivity's count); circles: each rule's own best rate; dotted: the n-gram baselines. "
                "Top row AdamW, bottom row SGD."
            ),
        )
    )
    return parts


def _logits(a: dict, d_ks: list, rules: list) -> list[str]:
    """The largest |logit| and the mean row entropy at the largest d_k, and against the step."""
    parts = []
    if "unscaled" in rules:
        last = {c["rule"]: c for c in a["curves"] if c["d_k"] == d_ks[-1] and c["optimiser"] == "adamw"}
        u, r = last["unscaled"], last[a["reference_rule"]]
        parts.append(
            para(
                _(
                    "At d_k = {dk} with AdamW the largest |logit| ends at {unscaled} unscaled against {ref} with 1/√d_k, and the mean row entropy at {ent_u} against {ent_r} nats.",
                    dk=d_ks[-1],
                    unscaled=number(u["max_abs_logit"][-1]),
                    ref=number(r["max_abs_logit"][-1]),
                    ent_u=number(u["entropy_mean"][-1]),
                    ent_r=number(r["entropy_mean"][-1]),
                )
            )
        )
    parts.append(
        responsive_figure(
            lambda: _panels(
                a["curves"],
                d_ks,
                rules,
                [
                    ("max_abs_logit", N_("largest |logit|"), True),
                    ("entropy_mean", N_("mean row entropy (nats)"), False),
                ],
            ),
            _("Largest |logit| and mean row entropy against the step"),
            _(
                "AdamW at the 1/√d_k rate, means over seeds; over every layer and head, rows attending at least two keys."
            ),
        )
    )
    return parts


def _verdicts_in_detail(a: dict, d_ks: list, rules: list) -> list[str]:
    """How a verdict is reached, and the detailed table."""
    return [
        para(
            _(
                "Verdict against the 1/√d_k run of the same seed: steps to reach {factor:g}× its final validation loss, “faster” within {fast:.2g}× its steps, “learns” up to {like:g}×; the verdict of most seeds (a tie goes to the worse), how many agree, the median ratio and the seeds' final loss (mean, min–max) with the highest baseline it beats.",
                factor=a["target_factor"],
                like=a["like_ratio"],
                fast=1 / a["like_ratio"],
            )
        ),
        _table(a, d_ks, rules),
    ]


def _samples(s: dict) -> list[str]:
    """The greedy continuations of the prompt, a row per rule, a column per d_k."""
    prompt = para(
        _(
            "Greedy continuations of “{prompt}” (AdamW at the reference's best rate, seed {seed}; in brackets the run's final validation bits per byte):",
            prompt=s["prompt"],
            seed=s["seed"],
        )
    )

    def sample(text, bpb):
        return Verbatim(s["prompt"] + text + f" ({number(bpb, '.2f')})") if text is not None else _("(diverged)")

    continuations = table(
        [_("rule")] + [f"d_k = {d}" for d in s["d_ks"]],
        [[_rule(row["rule"])] + [sample(*tb) for tb in zip(row["texts"], row["final_bpb"])] for row in s["rows"]],
    )
    return [prompt, continuations]


def _table(a: dict, d_ks: list, rules: list) -> str:
    """Per rule × d_k: the four verdicts, the final loss at its own best AdamW rate against the
    baselines, its own best rates (edge marked) and LR sensitivities."""
    columns = ("adamw", "adamw-own-best", "sgd", "sgd-own-best")

    def find(rule, d_k, o):
        return next(v for v in a["verdicts"] if (v["rule"], v["d_k"], v["optimiser"]) == (rule, d_k, o))

    def cell(v):
        mark = _(TRAINING_VERDICT_MARK[v["verdict"]]) if v["verdict"] else "—"
        return f"{mark} {v['seeds_agreeing']}/{v['seeds']} ×{number(v['steps_ratio'], '.2f')} (lr {v['lr']:g})"

    def final(v):
        f = v["final_bpb"]
        where = _("below {name}", name=_(BASELINE_NAMES[v["beats"]])) if v["beats"] else _("above every baseline")
        return f"{number(f['mean'], '.3f')} [{number(f['min'], '.3f')}–{number(f['max'], '.3f')}] {where}"

    def best(rule, d_k):
        out = []
        for o in OPTIMISERS:
            b = next(b for b in a["own_best_lr"] if (b["optimiser"], b["rule"], b["d_k"]) == (o, rule, d_k))
            out.append(f"{b['lr']:g}" + (_(" (edge)") if b["edge"] else ""))
        return " · ".join(out)

    def sens(rule, d_k):
        return " · ".join(
            number(
                next(
                    s["lr_sensitivity"]
                    for s in a["lr_sensitivity"]
                    if (s["optimiser"], s["rule"], s["d_k"]) == (o, rule, d_k)
                ),
                ".3f",
            )
            for o in OPTIMISERS
        )

    head = (
        [_("rule"), "d_k"]
        + [_(SETTINGS[o]) for o in columns]
        + [_("final bpb (AdamW, own best)"), _("own best rate (AdamW · SGD)"), _("LR sensitivity (AdamW · SGD)")]
    )
    rows = [
        [_rule(r), d]
        + [cell(find(r, d, o)) for o in columns]
        + [final(find(r, d, "adamw-own-best")), best(r, d), sens(r, d)]
        for d in d_ks
        for r in rules
    ]
    return table(head, rows, cls="numeric")
