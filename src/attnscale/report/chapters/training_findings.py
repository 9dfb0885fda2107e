"""The "What the numbers say" part of the scale-vs-d_k chapter (:mod:`.training`): Adam's logits at step 0
and at the end, then what each finding of the analysis says: the gradient at step 0, the path to
saturation, the soft-cap, the optimiser, zero gradients. Which sentence a finding calls for is chosen
from its numbers by the small pure functions of :mod:`.training_words`; what the result cannot show
is said as a hypothesis and marked so."""

from __future__ import annotations

from attnscale.i18n import _
from attnscale.report.chapters.training_words import (
    GRADIENT,
    GRADIENT_FLOOR,
    PATHS,
    SOFTCAP,
    TRENDS,
    dominant_path,
    gradient_direction,
    gradient_floor,
    growth_saturates,
    logit_trend,
    softcap_lower_logits,
    softcap_outcomes,
)
from attnscale.report.html import esc, para, table
from attnscale.report.numbers import number


def what_the_numbers_say(a: dict, names: dict) -> list[str]:
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
    out.append(logits_table(a["table"], names))
    if f["logit_sd_at_init"]:
        out.append(
            para(
                _(
                    "Without the scale the blog post predicts logits of standard deviation √dₖ (here: {pred}); measured at step 0 on the query rows of unscaled attention: {meas}.",
                    pred=", ".join(f"{number(r['predicted'])} (dₖ = {r['d_k']})" for r in f["logit_sd_at_init"]),
                    meas=", ".join(number(r["measured"]) for r in f["logit_sd_at_init"]),
                )
            )
        )
    out += gradient_step0(f["gradient_step0"]) + saturation_path(f["saturation_path"], s)
    out += softcap(f["softcap"], s) + optimiser(f["optimiser"], s, names) + zero_gradient(f["zero_gradient"])
    return out


def hypothesis(text: str) -> str:
    """``text`` (a sentence completing "Hypothesis, not tested here: …") marked as a hypothesis."""
    return f"<p class='hypothesis'><em>{esc(_('Hypothesis, not tested here: '))}</em>{esc(text)}</p>"


def seeds_range(spread: dict, spec: str = ".2f") -> str:
    if spread["min"] is None:
        return number(None)
    lo, hi = number(spread["min"], spec), number(spread["max"], spec)
    return lo if lo == hi else f"{lo}–{hi}"


def logits_table(rows: list[dict], names: dict) -> str:
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
            seeds_range(r["adam"]["start"]["logit_std"], ".3g"),
            seeds_range(r["adam"]["end"]["logit_std"], ".3g"),
            seeds_range(r["adam"]["start"]["saturated_frac"]),
            seeds_range(r["adam"]["end"]["saturated_frac"]),
            seeds_range(r["adam"]["start"]["max_logit"], ".3g"),
            seeds_range(r["adam"]["end"]["max_logit"], ".3g"),
            f"{r['adam']['reached']}/{r['adam']['seeds']}",
        ]
        for r in rows
    ]
    return table(header, body, cls="numeric")


def gradient_step0(finding: dict) -> list[str]:
    out = []
    for which, label in (("grad_wq", "W_Q"), ("grad_wk", "W_K")):
        rows = finding[which]["rows"]
        direction, larger, smaller = gradient_direction(rows)
        if direction is None:
            continue
        ratios = ", ".join(f"{number(r['ratio'], '.2f')}× (dₖ = {r['d_k']})" for r in rows)
        alone = ", ".join(f"{number(r['scale_alone'], '.3g')}×" for r in rows)
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


def saturation_path(finding: dict, s: dict) -> list[str]:
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
            s0=seeds_range(fails["logit_std_start"], ".3g"),
            s1=seeds_range(fails["logit_std_end"], ".3g"),
            g=number(fails["growth_median"], ".2g"),
            stayed=fails["stayed_saturated"],
            became=fails["became_saturated"],
            left=fails["left_saturation"],
            never=fails["never_saturated"],
        )
        growth = _(TRENDS[trend], G=s["logit_growth"]) if trend else ""
        out.append(f"<p>{esc(text)} {esc(_(PATHS[path]))} {esc(growth)}</p>")
        if growth_saturates(trend, path):
            out.append(
                hypothesis(
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
                    s0=seeds_range(reaches["logit_std_start"], ".3g"),
                    s1=seeds_range(reaches["logit_std_end"], ".3g"),
                    g=number(reaches["growth_median"], ".2g"),
                    e=seeds_range(reaches["saturated_end"]),
                )
            )
        )
    return out


def softcap(finding: dict, s: dict) -> list[str]:
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
                cap0=number(r["softcap_saturated_start"], ".2f"),
                un0=number(r["unscaled_saturated_start"], ".2f"),
                r=r["softcap_reached"],
                n=r["seeds"],
                ru=r["unscaled_reached"],
            )
        )
        for key, r in softcap_outcomes(finding["rows"], s["saturated_run"])
    ]
    if not out:
        fracs = ", ".join(f"{number(r['softcap_saturated_start'], '.2f')} (dₖ = {d})" for d, r in rows.items())
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
            hypothesis(
                _(
                    "the cap keeps the logits within ±{cap:g} while they grow (last logged logit standard deviation at dₖ = {d_ks}: {capped} soft-capped against {un} unscaled), so its rows can leave saturation.",
                    cap=cap,
                    d_ks=", ".join(map(str, lower)),
                    capped=", ".join(number(rows[d]["softcap_logit_std_end"]) for d in lower),
                    un=", ".join(number(rows[d]["unscaled_logit_std_end"]) for d in lower),
                )
            )
        )
    return out


def optimiser(finding: dict, s: dict, names: dict) -> list[str]:
    pairs = lambda items: ", ".join(f"{names[i['rule']]} dₖ = {i['d_k']}" for i in items)  # noqa: E731
    out = []
    if finding["adam_only"]:
        out += [
            para(
                _(
                    "{pairs}: reach the target with Adam, but not with SGD at the tuned rate nor at their own best rate.",
                    pairs=pairs(finding["adam_only"]),
                )
            ),
            hypothesis(
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


def zero_gradient(finding: dict) -> list[str]:
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
                    smallest=number(finding["smallest_grad_wq"], ".2g"),
                    first=number(finding["step0_grad_wq"], ".2g"),
                )
            )
        )
    return out
