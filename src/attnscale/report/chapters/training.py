"""Report chapter: does unscaled attention really stop learning? (experiment A, ``train/scale-vs-dk``)

Reads the ``train/scale-vs-dk`` result (written by ``attnscale train scale-vs-dk``) and only formats and
places what its analysis holds (``scale_vs_dk.analyse`` in the experiments): the set-up, the SGD
rate tuned for 1/√d_k and whether it lies inside the grid, learning curves with the logit spread and the
saturated rows over training, the table of final accuracy, steps to target and verdicts, the findings,
the chain-rule check of the gradient at initialisation, and the measured run times. Every number comes
from the analysis; which sentence a finding calls for is chosen from its numbers by the small pure
functions beside each table of sentences in :mod:`.training_words` (with the thresholds the result
records), so rewording never needs a training run. What the result cannot show is said as a hypothesis
and marked so.
"""

from __future__ import annotations

from attnscale import results
from attnscale.i18n import N_, _
from attnscale.report.chapters.training_words import (
    GRADIENT,
    GRADIENT_FLOOR,
    PATHS,
    REFERENCE,
    SINGLE_KEY,
    SOFTCAP,
    TRENDS,
    dominant_path,
    gradient_direction,
    gradient_floor,
    growth_saturates,
    logit_trend,
    reference_reach,
    single_key_versus,
    softcap_lower_logits,
    softcap_outcomes,
)
from attnscale.report.html import esc, para, table, table_with_details
from attnscale.report.narrow import legend_columns
from attnscale.report.numbers import number
from attnscale.report.plotting import SERIES, responsive_figure, style
from attnscale.report.text import rule_label
from attnscale.stored_words import TRAINING_VERDICT_MARK

KIND = "train/scale-vs-dk"
TITLE = N_("Training: does unscaled attention really stop learning?")
HOW_TO = "attnscale train scale-vs-dk"

#: The two optimiser set-ups the chapter shows side by side, by their key in the analysis' table.
OPTIMISERS = {"adam": N_("Adam"), "sgd_reference_lr": N_("SGD at the rate tuned for 1/√dₖ")}


def render(env) -> str:
    a = env.data["analysis"]
    names = _labels(a["setup"])
    out = _task(a, env.quick)
    out += _reference(a["findings"]["reference"], a["setup"]) + _tuning(a["sgd_tuning"])
    out += _curves(a, names)
    out += _results(a, names)
    out += _verdicts(a, names)
    out += _what_the_numbers_say(a, names)
    out += _chain(a["chain_rule"], names)
    out.append(_timing(results.cell_seconds(env), env.data.get("wall_s")))
    return "\n".join(out)


def _task(a: dict, quick: bool) -> list[str]:
    """The task, why one attended key is not enough, and the run; in a quick sweep, that it is one."""
    s = a["setup"]
    versus = _(SINGLE_KEY[single_key_versus(a)], prior=a["prior_ceiling"])
    out = [
        para(
            _(
                "A one-layer transformer (width {d_model}, {heads} heads) learns to count the ones among {k} marked positions out of {n}: the query must spread its attention evenly over the {k} marked keys. "
                "One attended key is not enough: from one marked bit the best possible accuracy is {single:.3f}, {versus}. "
                "W_Q and W_K start with Var(q_i) ≈ 1, so Var(q·k) ≈ dₖ, the blog post's assumption. "
                "Every rule starts from the same weights for a given dₖ and seed; {steps} steps of batch {batch}, {seeds} seed(s), {cells} cells. "
                "Adam runs at lr {adam_lr:g}; plain SGD runs on the grid {sgd_lrs}.",
                d_model=s["d_model"],
                heads=s["n_heads"],
                k=s["n_marked"],
                n=s["n_keys"],
                single=a["single_key_ceiling"],
                versus=versus,
                steps=s["steps"],
                batch=s["batch"],
                seeds=s["seeds"],
                cells=s["cells"],
                adam_lr=s["adam_lr"],
                sgd_lrs=", ".join(f"{v:g}" for v in s["sgd_lrs"]),
            )
        )
    ]
    if quick:
        out.append(
            para(
                _(
                    "Quick sweep ({steps} steps, {seeds} seed(s)): every sentence below describes this short run only, not the full sweep.",
                    steps=s["steps"],
                    seeds=s["seeds"],
                )
            )
        )
    return out


def _curves(a: dict, names: dict) -> list[str]:
    """Accuracy, logit standard deviation and saturated rows over training, a figure per optimiser."""
    s = a["setup"]
    out = []
    for opt in ("adam", "sgd_reference_lr"):
        label = _(OPTIMISERS[opt])
        out.append(
            responsive_figure(
                lambda opt=opt: _curves_figure(a, opt, names),
                _(
                    "Accuracy, logit standard deviation and saturated rows over training ({opt}), per dₖ and rule",
                    opt=label,
                ),
                _(
                    "{opt}. "
                    "Thick: mean over the seeds still running; thin: each seed. "
                    "Top: running training accuracy (dotted: the one-key ceiling). "
                    "Middle: the query rows' logit standard deviation (log scale). "
                    "Bottom: fraction of query rows whose largest weight exceeds {w:g}.",
                    opt=label,
                    w=s["saturated_weight"],
                ),
            )
        )
    return out


def _results(a: dict, names: dict) -> list[str]:
    """The results table and how to read it."""
    s = a["setup"]
    out = [_results_table(a["table"], names)]
    out.append(
        _note(
            _(
                "Final accuracy: mean [min, max] over seeds on {n_eval} fresh samples. "
                "Steps: first step at which the running training accuracy (window {window}, every batch fresh) reaches {target:g}, mean over the seeds that reached it, and how many did. "
                "'÷' = diverged seeds.",
                n_eval=s["final_eval"],
                window=s["log_every"],
                target=s["target_accuracy"],
            )
        )
    )
    return out


def _verdicts(a: dict, names: dict) -> list[str]:
    """How a verdict is reached, and each (rule, dₖ)'s verdict."""
    s = a["setup"]
    out = [f"<h3>{esc(_('Verdicts'))}</h3>"]
    out.append(
        para(
            _(
                "Each (rule, dₖ) against 1/√dₖ on the same seeds and optimiser: learns like it (reaches {target:g} within {like:g}× the batches 1/√dₖ needs), slower, fails within the {steps}-step budget, or diverges (a non-finite loss, kept and shown). "
                "The verdict is the one most seeds share (a tie goes to the more severe); the fraction is the seeds agreeing.",
                target=s["target_accuracy"],
                like=s["like_reference_steps"],
                steps=s["steps"],
            )
        )
    )
    out += _verdict_lines(a["table"], names)
    return out


def _what_the_numbers_say(a: dict, names: dict) -> list[str]:
    """Adam's logits at step 0 and at the end, and what the findings say: the gradient at step 0, the
    path to saturation, the soft-cap, the optimiser, zero gradients."""
    s, f = a["setup"], a["findings"]
    out = [f"<h3>{esc(_('What the numbers say'))}</h3>"]
    out.append(
        para(
            _(
                "Adam, seed range [min, max]: the query rows' logit standard deviation and saturated fraction (largest weight > {w:g}) and the largest logit, at step 0 and at the last logged step.",
                w=s["saturated_weight"],
            )
        )
    )
    out.append(_glance_table(a["table"], names))
    if f["logit_sd_at_init"]:
        out.append(
            para(
                _(
                    "Without the scale the blog post predicts logits of standard deviation √dₖ (here: {pred}); measured at step 0 on the query rows of unscaled attention: {meas}.",
                    pred=_join(f"{_n(r['predicted'])} (dₖ = {r['d_k']})" for r in f["logit_sd_at_init"]),
                    meas=_join(_n(r["measured"]) for r in f["logit_sd_at_init"]),
                )
            )
        )
    out += _gradient(f["gradient_step0"]) + _saturation(f["saturation_path"], s)
    out += _softcap(f["softcap"], s) + _optimiser(f["optimiser"], s, names) + _zero(f["zero_gradient"])
    return out


# --- small formatting helpers ----------------------------------------------------------------------


def _note(text: str) -> str:
    return f"<p class='note'>{esc(text)}</p>"


def _hyp(text: str) -> str:
    """``text`` (a sentence completing "Hypothesis, not tested here: …") marked as a hypothesis."""
    return f"<p class='hypothesis'><em>{esc(_('Hypothesis, not tested here: '))}</em>{esc(text)}</p>"


def _n(x, spec: str = ".3g") -> str:
    return number(x, spec)


def _join(items) -> str:
    return ", ".join(items)


def _range(spread: dict, spec: str = ".2f") -> str:
    if spread["min"] is None:
        return number(None)
    lo, hi = number(spread["min"], spec), number(spread["max"], spec)
    return lo if lo == hi else f"{lo}–{hi}"


def _labels(setup: dict) -> dict[str, str]:
    """The report's one label table (report.text), soft-cap labels filled with the sweep's own cap."""
    return {rule: rule_label(rule, setup["caps"].get(rule)) for rule in setup["rules"]}


def _verdict(s: dict) -> str:
    if s["verdict"] is None:
        return number(None)
    word = _(TRAINING_VERDICT_MARK[s["verdict"]])
    if s["verdict"] == "slower" and s["steps_ratio"] is not None:
        word += f" ({_('×{r} the steps', r=_n(s['steps_ratio'], '.2g'))})"
    return f"{word} {s['seeds_agreeing']}/{s['seeds']}"


def _acc(s: dict) -> str:
    a = s["final_accuracy"]
    div = f" ÷{s['diverged']}" if s["diverged"] else ""
    return f"{_n(a['mean'], '.2f')} [{_n(a['min'], '.2f')}, {_n(a['max'], '.2f')}]{div}"


def _steps(s: dict) -> str:
    if not s["reached"]:
        return f"— 0/{s['seeds']}"
    return f"{_n(s['steps_to_target']['mean'], '.0f')} {s['reached']}/{s['seeds']}"


def _lr(s: dict) -> str:
    mark = {"low": "‹", "high": "›"}.get(s.get("edge"), "")
    return f"{mark}{s['lr']:g}"


# --- the parts of the chapter ----------------------------------------------------------------------


def _reference(ref: dict, s: dict) -> list[str]:
    reach = reference_reach(ref["rows"])
    if reach is None:
        return []
    where = _join(
        f"{'Adam' if r['optimiser'] == 'adam' else 'SGD'} lr {r['lr']:g}, dₖ = {r['d_k']}: {r['reached']}/{r['seeds']}"
        for r in ref["rows"]
    )
    return [para(_(REFERENCE[reach], steps=s["steps"], target=s["target_accuracy"], where=where))]


def _tuning(tuning: list[dict]) -> list[str]:
    lrs = _join(f"dₖ = {r['d_k']}: {_lr(r)}" for r in tuning)
    edges = [str(r["d_k"]) for r in tuning if r["edge"]]
    said = (
        _(
            "At dₖ = {d_ks} it lies on the grid's edge, so the best rate may lie outside the grid and 'the tuned rate' there means the best rate the grid has.",
            d_ks=", ".join(edges),
        )
        if edges
        else _("It lies inside the grid at every dₖ: a worse rate on either side.")
    )
    note = _(
        "The same grid gives each rule its own best rate (marked ‹ or › where it is the grid's lowest or highest). "
        "Both choices are made on the seeds they are reported on, which flatters the tuned cells a little."
    )
    tuned = _("The SGD rate tuned for 1/√dₖ (best mean final accuracy over seeds, then fewer steps): {lrs}.", lrs=lrs)
    return [f"<p>{esc(tuned)} {esc(said)} {esc(note)}</p>"]


def _results_table(rows: list[dict], names: dict) -> str:
    header = [
        _("rule"),
        "dₖ",
        _("{opt}: acc", opt="Adam"),
        _("steps"),
        _("verdict"),
        _("{opt}: acc", opt=_("SGD at 1/√dₖ's lr")),
        _("steps"),
        _("verdict"),
        _("own best lr"),
        _("{opt}: acc", opt=_("SGD at it")),
        _("steps"),
    ]
    body = [
        [
            names[r["rule"]],
            r["d_k"],
            _acc(r["adam"]),
            _steps(r["adam"]),
            _verdict(r["adam"]),
            _acc(r["sgd_reference_lr"]),
            _steps(r["sgd_reference_lr"]),
            _verdict(r["sgd_reference_lr"]),
            _lr(r["sgd_best_lr"]),
            _acc(r["sgd_best_lr"]),
            _steps(r["sgd_best_lr"]),
        ]
        for r in rows
    ]
    return table(header, body, cls="numeric")


def _verdict_lines(rows: list[dict], names: dict) -> list[str]:
    items = []
    for rule in dict.fromkeys(r["rule"] for r in rows):
        for opt in ("adam", "sgd_reference_lr"):
            mine = [r for r in rows if r["rule"] == rule]
            said = _join(
                f"dₖ = {r['d_k']}" + (f" (lr {r[opt]['lr']:g})" if opt != "adam" else "") + f" {_verdict(r[opt])}"
                for r in mine
            )
            items.append(
                f"<li>{esc(_('{rule}, {opt}: {items}.', rule=names[rule], opt=_(OPTIMISERS[opt]), items=said))}</li>"
            )
    return [f"<ul>{''.join(items)}</ul>"]


def _glance_table(rows: list[dict], names: dict) -> str:
    header = [
        _("rule"),
        "dₖ",
        _("logit sd, step 0"),
        _("logit sd, end"),
        _("saturated, step 0"),
        _("saturated, end"),
        _("max logit, step 0"),
        _("max logit, end"),
        _("reached"),
    ]
    body = [
        [
            names[r["rule"]],
            r["d_k"],
            _range(r["adam"]["start"]["logit_std"], ".3g"),
            _range(r["adam"]["end"]["logit_std"], ".3g"),
            _range(r["adam"]["start"]["saturated_frac"]),
            _range(r["adam"]["end"]["saturated_frac"]),
            _range(r["adam"]["start"]["max_logit"], ".3g"),
            _range(r["adam"]["end"]["max_logit"], ".3g"),
            f"{r['adam']['reached']}/{r['adam']['seeds']}",
        ]
        for r in rows
    ]
    return table(header, body, cls="numeric")


def _gradient(finding: dict) -> list[str]:
    out = []
    for which, label in (("grad_wq", "W_Q"), ("grad_wk", "W_K")):
        rows = finding[which]["rows"]
        direction, larger, smaller = gradient_direction(rows)
        if direction is None:
            continue
        ratios = _join(f"{_n(r['ratio'], '.2f')}× (dₖ = {r['d_k']})" for r in rows)
        alone = _join(f"{_n(r['scale_alone'], '.3g')}×" for r in rows)
        out.append(
            para(
                _(
                    GRADIENT[direction],
                    w=label,
                    ratios=ratios,
                    alone=alone,
                    up=", ".join(map(str, larger)),
                    down=", ".join(map(str, smaller)),
                )
            )
        )
    return out


def _saturation(finding: dict, s: dict) -> list[str]:
    fails, reaches = finding["fails"], finding["reaches"]
    out = []
    if not fails["runs"]:
        out.append(para(_("No run fails within the budget.")))
    else:
        path, trend = dominant_path(fails), logit_trend(fails["growth_median"], s["logit_growth"])
        text = _(
            "Of the {n} runs (Adam, and SGD at the tuned rate) that fail within the budget, {stayed} start saturated (at least {thr:.0%} of query rows) and stay so, {became} become saturated during training, {left} leave saturation and {never} are never saturated at a logged step; their logit standard deviation goes from {s0} at step 0 to {s1} at the last logged step (median ratio {g}).",
            n=fails["runs"],
            thr=s["saturated_run"],
            s0=_range(fails["logit_std_start"], ".3g"),
            s1=_range(fails["logit_std_end"], ".3g"),
            g=_n(fails["growth_median"], ".2g"),
            stayed=fails["stayed_saturated"],
            became=fails["became_saturated"],
            left=fails["left_saturation"],
            never=fails["never_saturated"],
        )
        growth = _(TRENDS[trend], G=s["logit_growth"]) if trend else ""
        out.append(f"<p>{esc(text)} {esc(_(PATHS[path]))} {esc(growth)}</p>")
        if growth_saturates(trend, path):
            out.append(
                _hyp(
                    _(
                        "that growing logits are what saturate these rows, and that the saturated rows are what stops them learning; an intervention (e.g. capping the logits) would test it."
                    )
                )
            )
    if reaches["runs"]:
        out.append(
            para(
                _(
                    "The {n} runs that reach the target: logit standard deviation from {s0} to {s1} (median ratio {g}), saturated fraction at the end {e}.",
                    n=reaches["runs"],
                    s0=_range(reaches["logit_std_start"], ".3g"),
                    s1=_range(reaches["logit_std_end"], ".3g"),
                    g=_n(reaches["growth_median"], ".2g"),
                    e=_range(reaches["saturated_end"]),
                )
            )
        )
    return out


def _softcap(finding: dict, s: dict) -> list[str]:
    rows = {r["d_k"]: r for r in finding["rows"]}
    if not rows:
        return []
    cap = s["caps"]["softcap_unscaled"]
    out = [
        para(
            _(
                SOFTCAP[key],
                d_k=r["d_k"],
                cap=cap,
                cap0=_n(r["softcap_saturated_start"], ".2f"),
                un0=_n(r["unscaled_saturated_start"], ".2f"),
                r=r["softcap_reached"],
                n=r["seeds"],
                ru=r["unscaled_reached"],
            )
        )
        for key, r in softcap_outcomes(finding["rows"], s["saturated_run"])
    ]
    if not out:
        fracs = _join(f"{_n(r['softcap_saturated_start'], '.2f')} (dₖ = {d})" for d, r in rows.items())
        return [
            para(
                _(
                    "Soft-cap {cap:g} never starts with {thr:.0%} or more of its rows saturated here (step 0: {fracs}), so this sweep does not test whether starting saturated stops learning.",
                    cap=cap,
                    thr=s["saturated_run"],
                    fracs=fracs,
                )
            )
        ]
    lower = softcap_lower_logits(finding["rows"], s["saturated_run"])
    if lower:
        out.append(
            _hyp(
                _(
                    "the cap keeps the logits within ±{cap:g} while they grow (last logged logit standard deviation at dₖ = {d_ks}: {capped} soft-capped against {un} unscaled), so its rows can leave saturation.",
                    cap=cap,
                    d_ks=", ".join(map(str, lower)),
                    capped=_join(_n(rows[d]["softcap_logit_std_end"]) for d in lower),
                    un=_join(_n(rows[d]["unscaled_logit_std_end"]) for d in lower),
                )
            )
        )
    return out


def _optimiser(finding: dict, s: dict, names: dict) -> list[str]:
    pairs = lambda items: _join(f"{names[i['rule']]} dₖ = {i['d_k']}" for i in items)  # noqa: E731
    out = []
    if finding["adam_only"]:
        out += [
            para(
                _(
                    "{pairs}: reach the target with Adam, but not with SGD at the tuned rate nor at their own best rate.",
                    pairs=pairs(finding["adam_only"]),
                )
            ),
            _hyp(
                _(
                    "Adam divides each step by a running estimate of the gradient's size, so a gradient made large or small by the scale matters less to it than to plain SGD."
                )
            ),
        ]
    if finding["sgd_only"]:
        out.append(
            para(
                _(
                    "{pairs}: reach the target with SGD, but not with Adam at lr {lr:g}.",
                    pairs=pairs(finding["sgd_only"]),
                    lr=s["adam_lr"],
                )
            )
        )
    return out


def _zero(finding: dict) -> list[str]:
    out = [
        para(
            _(
                "Cells in which the W_Q/W_K gradient was exactly zero (every entry 0.0 in float32) at some logged step: {n} of {total}, {div} of which diverged afterwards.",
                n=finding["cells"],
                total=finding["total"],
                div=finding["cells_then_diverged"],
            )
        )
    ]
    floor = gradient_floor(finding)
    if floor is not None:
        out.append(
            para(
                _(
                    GRADIENT_FLOOR[floor],
                    d_k=finding["d_k"],
                    z=finding["group_zero"],
                    seeds=finding["group_seeds"],
                    smallest=_n(finding["smallest_grad_wq"], ".2g"),
                    first=_n(finding["step0_grad_wq"], ".2g"),
                )
            )
        )
    return out


def _chain(chain: dict, names: dict) -> list[str]:
    summary = chain.get("summary")
    if not chain["rows"] or summary is None:
        return []
    quoted = summary["quoted"] or {}
    out = [
        para(
            _(
                "Why the gradient reaching W_Q and W_K has the size it has at step 0. "
                "For the query row, dL/dq = s·Kᵀ J V δ and dL/dK = s·(J V δ) qᵀ with J = diag(p) − ppᵀ (times cap′ for soft-capping): the scale s multiplies the gradient, and Kᵀ J V — the p-weighted covariance of keys and values — vanishes as the row saturates, however large the keys. "
                "Prediction: ‖∇W_Q‖ ≈ C·s·RMS‖Kᵀ J V‖ and ‖∇W_K‖ ≈ C′·s·RMS(‖q‖·‖Xᵀ J V‖), with C, C′ fitted once on {anchor} at dₖ = {anchor_dk}; δ = dL/do is left out (the same weights start every rule). "
                "Measured ÷ predicted ranges from {lo} to {hi} over {n} other (rule, dₖ) pairs, while s alone spans a factor {span}. "
                "The column 'scale alone' is the 1/√dₖ rule's measured gradient times s/s_ref, blind to saturation: for unscaled attention at dₖ = {big} it predicts ‖∇W_Q‖ = {blind}; with the Jacobian factor the prediction is {pred}; measured: {meas}.",
                anchor=names[chain["anchor"]["rule"]],
                anchor_dk=chain["anchor"]["d_k"],
                lo=_n(summary["ratio_min"], ".2f"),
                hi=_n(summary["ratio_max"], ".2f"),
                n=summary["pairs"],
                span=_n(summary["factor_span"], ".0f"),
                big=quoted.get("d_k"),
                blind=_n(quoted.get("scale_only")),
                pred=_n(quoted.get("predicted")),
                meas=_n(quoted.get("measured")),
            )
        )
    ]
    out.append(
        responsive_figure(
            lambda: _chain_figure(chain["rows"], names),
            _("Predicted vs measured gradient norm at initialisation"),
            _(
                "Each point a (rule, dₖ), mean over seeds, labelled by dₖ; the line is measured = predicted. "
                "Filled: the chain-rule prediction; hollow: the scale alone, blind to saturation."
            ),
        )
    )
    header = [
        _("gradient"),
        _("rule"),
        "dₖ",
        "s",
        _("logit sd"),
        _("mean max p"),
        _("scale alone"),
        _("predicted"),
        _("measured", msgctxt="training"),
        _("measured ÷ predicted"),
    ]
    body = [
        [
            "W_Q" if r["gradient"] == "grad_wq" else "W_K",
            names[r["rule"]],
            r["d_k"],
            _n(r["factor"], ".4g"),
            _n(r["logit_std"], ".2f"),
            _n(r["max_weight_mean"], ".3f"),
            _n(r["scale_only"]),
            _n(r["predicted"]),
            _n(r["measured"]),
            _n(r["ratio"], ".2f"),
        ]
        for r in chain["rows"]
    ]
    # at a glance the largest d_k (where the rules differ most); every row behind a <details>
    top = max(r["d_k"] for r in chain["rows"])
    glance = [row for row, r in zip(body, chain["rows"]) if r["d_k"] == top]
    return out + [
        table_with_details(header, body, glance, cls="numeric"),
        para(
            _(
                "What the prediction leaves out: the direction of δ relative to Kᵀ J V, and how the per-example gradients add up over the batch; both depend on the attention pattern, hence on the rule."
            )
        ),
    ]


def _timing(timing: results.CellSeconds | None, wall_s) -> str:
    if timing is None or not timing.timed:
        return ""  # cells computed by an attnscale that did not time them: the source line says so
    run = (
        _(
            "This run of the sweep took {wall} s of wall time (cells read from the cache cost nothing). ",
            wall=_n(wall_s, ".0f"),
        )
        if wall_s is not None
        else ""
    )
    return _note(
        _(
            "Measured run time: the {cells} cells took {cpu} CPU-seconds in all, {per} s of wall time per cell on average (at most {most} s). {run}Times depend on the machine and how loaded it was.",
            cells=timing.timed,
            cpu=_n(timing.cpu_s, ".0f"),
            per=_n(timing.wall_s / timing.timed, ".2g"),
            most=_n(timing.wall_s_max, ".2g"),
            run=run,
        )
    )


# --- figures: drawn from the analysis' curves and chain-rule rows only ---------------------------------


def _curves_figure(a: dict, opt: str, names: dict):
    setup = a["setup"]
    choice = "adam" if opt == "adam" else "tuned_for_reference"
    curves = [c for c in a["curves"] if c["lr_choice"] == choice]
    metrics = ("accuracy", "logit_std", "saturated_frac")
    with style() as plt:
        fig, axes = plt.subplots(
            3,
            len(setup["d_ks"]),
            figsize=(4.1 * len(setup["d_ks"]), 7.6),
            sharex=True,
            squeeze=False,
            constrained_layout=True,
        )
        for col, d_k in enumerate(setup["d_ks"]):
            for i, rule in enumerate(setup["rules"]):
                color = SERIES[i % len(SERIES)]
                for c in (c for c in curves if c["rule"] == rule and c["d_k"] == d_k):
                    for row, key in enumerate(metrics):
                        ax = axes[row][col]
                        for seed in c["per_seed"][key]:
                            ax.plot(c["steps"][: len(seed)], [_nan(v) for v in seed], color=color, lw=0.6, alpha=0.35)
                        ax.plot(
                            c["steps"],
                            [_nan(v) for v in c["mean"][key]],
                            color=color,
                            lw=1.6,
                            label=names[rule] if row == 0 else None,
                        )
            axes[0][col].axhline(a["single_key_ceiling"], color="#5d6677", ls=":", lw=1)
            axes[0][col].set_title(f"dₖ = {d_k}")
            axes[0][col].set_ylim(0, 1.02)
            axes[1][col].set_yscale("log")
            axes[2][col].set_ylim(-0.02, 1.02)
            axes[2][col].set_xlabel(_("step"))
        for row, label in enumerate((_("accuracy"), _("logit sd"), _("saturated rows"))):
            axes[row][0].set_ylabel(label)
        handles, labels = axes[0][0].get_legend_handles_labels()
        fig.legend(handles, labels, loc="outside lower center", ncol=legend_columns(max(1, len(labels))))
    return fig


def _nan(v):
    return float("nan") if v is None else v


def _chain_figure(rows: list[dict], names: dict):
    rules = list(dict.fromkeys(r["rule"] for r in rows))
    with style() as plt:
        fig, axes = plt.subplots(1, 2, figsize=(9.0, 3.8), constrained_layout=True)
        for ax, which in zip(axes, ("grad_wq", "grad_wk")):
            sel = [r for r in rows if r["gradient"] == which and r["predicted"] and r["measured"]]
            for i, rule in enumerate(rules):
                pts = [r for r in sel if r["rule"] == rule]
                color = SERIES[i % len(SERIES)]
                ax.scatter(
                    [r["predicted"] for r in pts], [r["measured"] for r in pts], color=color, label=names[rule], s=28
                )
                # Hollow: the scale alone (blind to saturation), on the same row as the full prediction.
                blind = [r for r in pts if r["scale_only"]]
                ax.scatter(
                    [r["scale_only"] for r in blind],
                    [r["measured"] for r in blind],
                    facecolors="none",
                    edgecolors=color,
                    s=28,
                    lw=0.9,
                )
                for r in pts:
                    ax.annotate(
                        str(r["d_k"]),
                        (r["predicted"], r["measured"]),
                        fontsize=7,
                        xytext=(3, 2),
                        textcoords="offset points",
                        color="#5d6677",
                    )
            values = [v for r in sel for v in (r["predicted"], r["measured"], r["scale_only"]) if v]
            if values:
                lo, hi = min(values) / 1.5, max(values) * 1.5
                ax.plot([lo, hi], [lo, hi], color="#1d2330", lw=0.8)
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_title("‖∇W_Q‖" if which == "grad_wq" else "‖∇W_K‖")
            ax.set_xlabel(_("predicted"))
            ax.set_ylabel(_("measured", msgctxt="training"))
        axes[0].legend(loc="upper left", fontsize=8)
    return fig
