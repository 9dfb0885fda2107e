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
sentence is chosen and filled by the analysis' figures, by the small pure functions of
:mod:`.lm_words`; the figures are drawn by :mod:`.lm_figures`.
"""

from __future__ import annotations

from attnscale.i18n import N_, _
from attnscale.report.chapters.lm_figures import curve_panels, rate_panels
from attnscale.report.chapters.lm_words import (
    BASELINE_NAMES,
    FRAGILE_MARKS,
    OPTIMISERS,
    SETTINGS,
    VERDICT_PHRASES,
    baseline_name,
    best_rate_sentence,
    collapse_sentence,
    decided_ratio,
    flat_sensitivity_sentences,
    glance_sentence,
    halfway_sentence,
    optimisers_sentence,
    reference_sentence,
    robustness_sentence,
    seeds_sentence,
    sensitivity_sentence,
)
from attnscale.report.html import Markup, Verbatim, esc, para, table
from attnscale.report.numbers import number
from attnscale.report.plotting import responsive_figure
from attnscale.report.text import rule_label
from attnscale.stored_words import TRAINING_VERDICT_MARK

KIND = "train/lm"
TITLE = N_("Training: a small GPT on real English text, with each scale rule")
HOW_TO = "attnscale train lm"
#: A verdict's badge colour (the verification's badge classes): like or better, slower, worse.
VERDICT_BADGE = {"faster": "holds", "learns": "holds", "slower": "inconclusive", "fails": "fails", "diverges": "wrong"}


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


def verdicts_by_setting(a: dict) -> dict[tuple, dict]:
    """The analysis' verdicts by (rule, d_k, setting): a setting is a key of :data:`SETTINGS`."""
    return {(v["rule"], v["d_k"], v["optimiser"]): v for v in a["verdicts"]}


def glance_table(a: dict, d_ks: list, rules: list) -> str:
    """The verdicts at a glance: a row per rule (the reference's aside) × d_k, a column per setting
    (each optimiser at the reference's best rate and at the rule's own)."""
    find = verdicts_by_setting(a)
    edge = {(b["optimiser"], b["rule"], b["d_k"]): b["edge"] for b in a["own_best_lr"]}
    head = [_("rule"), "d_k"] + [_(name) for name in SETTINGS.values()]
    rows = [
        [rule_label(r), d]
        + [
            _verdict_cell(find[r, d, o], o.endswith("own-best") and bool(edge.get((o.split("-")[0], r, d))))
            for o in SETTINGS
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
    names = _(", ", msgctxt="list").join(baseline_name(r) for r in base["rows"] if r["order"] >= 2)
    glance = [para(glance_sentence(a["verdicts"], a["reference_rule"]))]
    glance += [para(reference_sentence(a, o)) for o in OPTIMISERS]
    glance.append(glance_table(a, d_ks, rules))
    if "target_band" in a:
        glance.append(para(robustness_sentence(a["verdicts"], a["target_band"], a["reference_rule"])))
    glance.append(
        responsive_figure(
            lambda: curve_panels(
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
                rules=_(", ", msgctxt="list").join(rule_label(r) for r in rules),
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
                    rules=_("; ", msgctxt="clauses").join(rule_label(r) for r in absent),
                )
            )
        )
    parts.append(
        para(
            _(
                "Baselines computed from the same split, on the same validation bytes, by counting the training bytes ({smoothing}): {rows} bits per byte.",
                smoothing=_("add-k smoothing, k chosen on the last tenth of the training part"),
                rows=_(", ", msgctxt="list").join(
                    _("{name} {bpb}", name=baseline_name(r), bpb=number(r["bpb"], ".3f")) for r in base["rows"]
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
            lambda: rate_panels(a["grid"], a["own_best_lr"], d_ks, rules, a["baselines"]["rows"]),
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
            lambda: curve_panels(
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
        [[rule_label(row["rule"])] + [sample(*tb) for tb in zip(row["texts"], row["final_bpb"])] for row in s["rows"]],
    )
    return [prompt, continuations]


def _table(a: dict, d_ks: list, rules: list) -> str:
    """Per rule × d_k: the four verdicts, the final loss at its own best AdamW rate against the
    baselines, its own best rates (edge marked) and LR sensitivities."""
    find = verdicts_by_setting(a)

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
        + [_(name) for name in SETTINGS.values()]
        + [_("final bpb (AdamW, own best)"), _("own best rate (AdamW · SGD)"), _("LR sensitivity (AdamW · SGD)")]
    )
    rows = [
        [rule_label(r), d]
        + [cell(find[r, d, o]) for o in SETTINGS]
        + [final(find[r, d, "adamw-own-best"]), best(r, d), sens(r, d)]
        for d in d_ks
        for r in rules
    ]
    return table(head, rows, cls="numeric")
