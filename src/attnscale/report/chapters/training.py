"""Report chapter: does unscaled attention really stop learning? (experiment A, ``train/scale-vs-dk``)

Reads the ``train/scale-vs-dk`` result (written by ``attnscale train scale-vs-dk``) and only formats and
places what its analysis holds (``scale_vs_dk.analyse`` in the experiments): the set-up, the SGD
rate tuned for 1/√d_k and whether it lies inside the grid, learning curves with the logit spread and the
saturated rows over training, the table of final accuracy, steps to target and verdicts, the findings
each interpretive sentence is chosen by, the chain-rule check of the gradient at initialisation, and the
measured run times. Every number and every choice between two sentences comes from the analysis; what
the result cannot show is said as a hypothesis and marked so.
"""

from __future__ import annotations

from attnscale.report import text
from attnscale.report.figures import legend_columns, responsive_figure
from attnscale.report.html import esc, number, para, table, table_with_details
from attnscale.report.text import rule_label

KIND = "train/scale-vs-dk"
TITLE = text.entry("training", "title")
_t = text.words("training")
HOW_TO = "attnscale train scale-vs-dk"

def render(env, lang: str) -> str:
    a = env.data["analysis"]
    s, f = a["setup"], a["findings"]
    names = _labels(s, lang)
    versus = _t("single_same" if a["single_key_is_prior"] else "single_above", lang, prior=a["prior_ceiling"])
    out = [_p("intro", lang, d_model=s["d_model"], heads=s["n_heads"], k=s["n_marked"], n=s["n_keys"],
              single=a["single_key_ceiling"], versus=versus, steps=s["steps"], batch=s["batch"], seeds=s["seeds"],
              cells=s["cells"], adam_lr=s["adam_lr"], sgd_lrs=", ".join(f"{v:g}" for v in s["sgd_lrs"]))]
    if env.quick:
        out.append(_p("quick", lang, steps=s["steps"], seeds=s["seeds"]))
    out += _reference(f["reference"], s, lang) + _tuning(a["sgd_tuning"], lang)
    for opt in ("adam", "sgd_reference_lr"):
        label = _opt(opt, lang)
        out.append(responsive_figure(lambda: _curves_figure(a, opt, names, lang), _t("alt_curves", lang, opt=label),
                                     _t("cap_curves", lang, opt=label, w=s["saturated_weight"])))
    out.append(_results_table(a["table"], names, lang))
    out.append(_note("table_note", lang, n_eval=s["final_eval"], window=s["log_every"], target=s["target_accuracy"]))
    out.append(f"<h3>{esc(_t('verdict_head', lang))}</h3>")
    out.append(_p("verdict_def", lang, target=s["target_accuracy"], like=s["like_reference_steps"], steps=s["steps"]))
    out += _verdict_lines(a["table"], names, lang)
    out.append(f"<h3>{esc(_t('findings', lang))}</h3>")
    out.append(_p("glance", lang, w=s["saturated_weight"]))
    out.append(_glance_table(a["table"], names, lang))
    if f["logit_sd_at_init"]:
        out.append(_p("why_sd", lang, pred=_join(f"{_n(r['predicted'])} (dₖ = {r['d_k']})" for r in f["logit_sd_at_init"]),
                      meas=_join(_n(r["measured"]) for r in f["logit_sd_at_init"])))
    out += _gradient(f["gradient_step0"], lang) + _saturation(f["saturation_path"], s, lang)
    out += _softcap(f["softcap"], s, lang) + _optimiser(f["optimiser"], s, names, lang) + _zero(f["zero_gradient"], lang)
    out += _chain(a["chain_rule"], names, lang)
    out.append(_timing(a["timing"], env.data.get("wall_s"), lang))
    return "\n".join(out)


# --- small formatting helpers ----------------------------------------------------------------------

def _p(key: str, lang: str, **kw) -> str:
    return para(_t(key, lang, **kw))


def _note(key: str, lang: str, **kw) -> str:
    return f"<p class='note'>{esc(_t(key, lang, **kw))}</p>"


def _hyp(key: str, lang: str, **kw) -> str:
    return f"<p class='hypothesis'><em>{esc(_t('hyp', lang))}</em>{esc(_t(key, lang, **kw))}</p>"


def _n(x, spec: str = ".3g") -> str:
    return number(x, spec)


def _join(items) -> str:
    return ", ".join(items)


def _range(spread: dict, spec: str = ".2f") -> str:
    if spread["min"] is None:
        return number(None)
    lo, hi = number(spread["min"], spec), number(spread["max"], spec)
    return lo if lo == hi else f"{lo}–{hi}"


def _labels(setup: dict, lang: str) -> dict[str, str]:
    """The report's one label table (report.text), soft-cap labels filled with the sweep's own cap."""
    return {rule: rule_label(rule, lang, setup["caps"].get(rule)) for rule in setup["rules"]}


def _opt(which: str, lang: str) -> str:
    return _t("opt_adam" if which == "adam" else "opt_sgd", lang)


def _verdict(s: dict, lang: str) -> str:
    if s["verdict"] is None:
        return number(None)
    word = _t(f"v_{s['verdict']}", lang)
    if s["verdict"] == "slower" and s["steps_ratio"] is not None:
        word += f" ({_t('ratio', lang, r=_n(s['steps_ratio'], '.2g'))})"
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

def _reference(ref: dict, s: dict, lang: str) -> list[str]:
    if ref["reached_everywhere"]:
        return []
    if ref["reached_nowhere"]:
        return [_p("ref_none", lang, steps=s["steps"], target=s["target_accuracy"])]
    where = _join(f"{'Adam' if r['optimiser'] == 'adam' else 'SGD'} lr {r['lr']:g}, dₖ = {r['d_k']}: "
                  f"{r['reached']}/{r['seeds']}" for r in ref["rows"])
    return [_p("ref_some", lang, target=s["target_accuracy"], where=where)]


def _tuning(tuning: list[dict], lang: str) -> list[str]:
    lrs = _join(f"dₖ = {r['d_k']}: {_lr(r)}" for r in tuning)
    edges = [str(r["d_k"]) for r in tuning if r["edge"]]
    said = _t("tuned_edge", lang, d_ks=", ".join(edges)) if edges else _t("tuned_inside", lang)
    return [f"<p>{esc(_t('tuned', lang, lrs=lrs))} {esc(said)} {esc(_t('tuned_note', lang))}</p>"]


def _results_table(rows: list[dict], names: dict, lang: str) -> str:
    header = [_t("h_rule", lang), "dₖ", _t("h_acc", lang, opt="Adam"), _t("h_steps", lang), _t("h_verdict", lang),
              _t("h_acc", lang, opt=_t("sgd_ref", lang)), _t("h_steps", lang), _t("h_verdict", lang),
              _t("h_best_lr", lang), _t("h_acc", lang, opt=_t("sgd_best", lang)), _t("h_steps", lang)]
    body = [[names[r["rule"]], r["d_k"], _acc(r["adam"]), _steps(r["adam"]), _verdict(r["adam"], lang),
             _acc(r["sgd_reference_lr"]), _steps(r["sgd_reference_lr"]), _verdict(r["sgd_reference_lr"], lang),
             _lr(r["sgd_best_lr"]), _acc(r["sgd_best_lr"]), _steps(r["sgd_best_lr"])] for r in rows]
    return table(header, body, cls="numeric")


def _verdict_lines(rows: list[dict], names: dict, lang: str) -> list[str]:
    items = []
    for rule in dict.fromkeys(r["rule"] for r in rows):
        for opt in ("adam", "sgd_reference_lr"):
            mine = [r for r in rows if r["rule"] == rule]
            said = _join(f"dₖ = {r['d_k']}" + (f" (lr {r[opt]['lr']:g})" if opt != "adam" else "") +
                         f" {_verdict(r[opt], lang)}" for r in mine)
            items.append(f"<li>{esc(_t('v_line', lang, rule=names[rule], opt=_opt(opt, lang), items=said))}</li>")
    return [f"<ul>{''.join(items)}</ul>"]


def _glance_table(rows: list[dict], names: dict, lang: str) -> str:
    header = [_t("h_rule", lang), "dₖ", _t("h_sd0", lang), _t("h_sd1", lang), _t("h_sat0", lang), _t("h_sat1", lang),
              _t("h_max0", lang), _t("h_max1", lang), _t("h_reached", lang)]
    body = [[names[r["rule"]], r["d_k"], _range(r["adam"]["start"]["logit_std"], ".3g"),
             _range(r["adam"]["end"]["logit_std"], ".3g"), _range(r["adam"]["start"]["saturated_frac"]),
             _range(r["adam"]["end"]["saturated_frac"]), _range(r["adam"]["start"]["max_logit"], ".3g"),
             _range(r["adam"]["end"]["max_logit"], ".3g"), f"{r['adam']['reached']}/{r['adam']['seeds']}"] for r in rows]
    return table(header, body, cls="numeric")


def _gradient(finding: dict, lang: str) -> list[str]:
    out = []
    for which, label in (("grad_wq", "W_Q"), ("grad_wk", "W_K")):
        g = finding[which]
        if g["direction"] is None:
            continue
        ratios = _join(f"{_n(r['ratio'], '.2f')}× (dₖ = {r['d_k']})" for r in g["rows"])
        alone = _join(f"{_n(r['scale_alone'], '.3g')}×" for r in g["rows"])
        out.append(_p(f"grad_{g['direction']}", lang, w=label, ratios=ratios, alone=alone,
                      up=", ".join(map(str, g["larger_at"])), down=", ".join(map(str, g["smaller_at"]))))
    return out


def _saturation(finding: dict, s: dict, lang: str) -> list[str]:
    fails, reaches = finding["fails"], finding["reaches"]
    out = []
    if not fails["runs"]:
        out.append(_p("sat_none", lang))
    else:
        path = fails["dominant_path"]
        text = _t("sat_fails", lang, n=fails["runs"], thr=s["saturated_run"], s0=_range(fails["logit_std_start"], ".3g"),
                  s1=_range(fails["logit_std_end"], ".3g"), g=_n(fails["growth_median"], ".2g"),
                  stayed=fails["stayed_saturated"], became=fails["became_saturated"], left=fails["left_saturation"],
                  never=fails["never_saturated"])
        growth = _t(f"grow_{fails['growth']}", lang, G=s["logit_growth"]) if fails["growth"] else ""
        out.append(f"<p>{esc(text)} {esc(_t('path_' + path, lang))} {esc(growth)}</p>")
        if fails["growth"] == "grows" and path == "became":
            out.append(_hyp("hyp_growth", lang))
    if reaches["runs"]:
        out.append(_p("sat_reaches", lang, n=reaches["runs"], s0=_range(reaches["logit_std_start"], ".3g"),
                      s1=_range(reaches["logit_std_end"], ".3g"), g=_n(reaches["growth_median"], ".2g"),
                      e=_range(reaches["saturated_end"])))
    return out


def _softcap(finding: dict, s: dict, lang: str) -> list[str]:
    rows = {r["d_k"]: r for r in finding["rows"]}
    if not rows:
        return []
    out = []
    for key, d_ks in (("cap_learns", finding["saturated_yet_learns"]), ("cap_fails", finding["saturated_and_fails"])):
        for d_k in d_ks:
            r = rows[d_k]
            out.append(_p(key, lang, d_k=d_k, cap0=_n(r["softcap_saturated_start"], ".2f"),
                          un0=_n(r["unscaled_saturated_start"], ".2f"), r=r["softcap_reached"], n=r["seeds"],
                          ru=r["unscaled_reached"]))
    if not out:
        fracs = _join(f"{_n(r['softcap_saturated_start'], '.2f')} (dₖ = {d})" for d, r in rows.items())
        return [_p("cap_never", lang, thr=s["saturated_run"], fracs=fracs)]
    lower = finding["learns_with_lower_logits"]
    if lower:
        out.append(_hyp("hyp_cap", lang, d_ks=", ".join(map(str, lower)),
                        cap=_join(_n(rows[d]["softcap_logit_std_end"]) for d in lower),
                        un=_join(_n(rows[d]["unscaled_logit_std_end"]) for d in lower)))
    return out


def _optimiser(finding: dict, s: dict, names: dict, lang: str) -> list[str]:
    pairs = lambda items: _join(f"{names[i['rule']]} dₖ = {i['d_k']}" for i in items)  # noqa: E731
    out = []
    if finding["adam_only"]:
        out += [_p("adam_only", lang, pairs=pairs(finding["adam_only"])), _hyp("hyp_adam", lang)]
    if finding["sgd_only"]:
        out.append(_p("sgd_only", lang, pairs=pairs(finding["sgd_only"]), lr=s["adam_lr"]))
    return out


def _zero(finding: dict, lang: str) -> list[str]:
    out = [_p("zero", lang, n=finding["cells"], total=finding["total"], div=finding["cells_then_diverged"])]
    if finding["group_zero"]:
        out.append(_p("small_zero", lang, d_k=finding["d_k"], z=finding["group_zero"], seeds=finding["group_seeds"]))
    elif finding["falls_below_start"] is not None:
        out.append(_p("small_falls" if finding["falls_below_start"] else "small_stays", lang, d_k=finding["d_k"],
                      smallest=_n(finding["smallest_grad_wq"], ".2g"), first=_n(finding["step0_grad_wq"], ".2g")))
    return out


def _chain(chain: dict, names: dict, lang: str) -> list[str]:
    summary = chain.get("summary")
    if not chain["rows"] or summary is None:
        return []
    quoted = summary["quoted"] or {}
    out = [_p("chain", lang, anchor=names[chain["anchor"]["rule"]], anchor_dk=chain["anchor"]["d_k"],
              lo=_n(summary["ratio_min"], ".2f"), hi=_n(summary["ratio_max"], ".2f"), n=summary["pairs"],
              span=_n(summary["factor_span"], ".0f"), big=quoted.get("d_k"), blind=_n(quoted.get("scale_only")),
              pred=_n(quoted.get("predicted")), meas=_n(quoted.get("measured")))]
    out.append(responsive_figure(lambda: _chain_figure(chain["rows"], names, lang), _t("alt_chain", lang),
                                 _t("cap_chain", lang)))
    header = [_t("h_grad", lang), _t("h_rule", lang), "dₖ", "s", _t("logit_sd", lang), _t("h_maxp", lang),
              _t("h_scale_only", lang), _t("predicted", lang), _t("measured", lang), _t("h_ratio", lang)]
    body = [["W_Q" if r["gradient"] == "grad_wq" else "W_K", names[r["rule"]], r["d_k"], _n(r["factor"], ".4g"),
             _n(r["logit_std"], ".2f"), _n(r["max_weight_mean"], ".3f"), _n(r["scale_only"]), _n(r["predicted"]),
             _n(r["measured"]), _n(r["ratio"], ".2f")] for r in chain["rows"]]
    # at a glance the largest d_k (where the rules differ most); every row behind a <details>
    top = max(r["d_k"] for r in chain["rows"])
    glance = [row for row, r in zip(body, chain["rows"]) if r["d_k"] == top]
    return out + [table_with_details(header, body, glance, lang, cls="numeric"), _p("chain_rest", lang)]


def _timing(timing: dict, wall_s, lang: str) -> str:
    run = _t("timing_run", lang, wall=_n(wall_s, ".0f")) if wall_s is not None else ""
    return _note("timing", lang, cells=timing["timed"], cpu=_n(timing["cpu_s"], ".0f"),
                 per=_n(timing["wall_s_per_cell"], ".2g"), most=_n(timing["wall_s_max"], ".2g"), run=run)


# --- figures: drawn from the analysis' curves and chain-rule rows only ---------------------------------

def _curves_figure(a: dict, opt: str, names: dict, lang: str):
    from attnscale.report.figures import SERIES, style

    setup = a["setup"]
    choice = "adam" if opt == "adam" else "tuned_for_reference"
    curves = [c for c in a["curves"] if c["lr_choice"] == choice]
    metrics = ("accuracy", "logit_std", "saturated_frac")
    with style() as plt:
        fig, axes = plt.subplots(3, len(setup["d_ks"]), figsize=(4.1 * len(setup["d_ks"]), 7.6), sharex=True,
                                 squeeze=False, constrained_layout=True)
        for col, d_k in enumerate(setup["d_ks"]):
            for i, rule in enumerate(setup["rules"]):
                color = SERIES[i % len(SERIES)]
                for c in (c for c in curves if c["rule"] == rule and c["d_k"] == d_k):
                    for row, key in enumerate(metrics):
                        ax = axes[row][col]
                        for seed in c["per_seed"][key]:
                            ax.plot(c["steps"][:len(seed)], [_nan(v) for v in seed], color=color, lw=0.6, alpha=0.35)
                        ax.plot(c["steps"], [_nan(v) for v in c["mean"][key]], color=color, lw=1.6,
                                label=names[rule] if row == 0 else None)
            axes[0][col].axhline(a["single_key_ceiling"], color="#5d6677", ls=":", lw=1)
            axes[0][col].set_title(f"dₖ = {d_k}")
            axes[0][col].set_ylim(0, 1.02)
            axes[1][col].set_yscale("log")
            axes[2][col].set_ylim(-0.02, 1.02)
            axes[2][col].set_xlabel(_t("step", lang))
        for row, key in enumerate(("accuracy", "logit_sd", "saturated")):
            axes[row][0].set_ylabel(_t(key, lang))
        handles, labels = axes[0][0].get_legend_handles_labels()
        fig.legend(handles, labels, loc="outside lower center", ncol=legend_columns(max(1, len(labels))))
    return fig


def _nan(v):
    return float("nan") if v is None else v


def _chain_figure(rows: list[dict], names: dict, lang: str):
    from attnscale.report.figures import SERIES, style

    rules = list(dict.fromkeys(r["rule"] for r in rows))
    with style() as plt:
        fig, axes = plt.subplots(1, 2, figsize=(9.0, 3.8), constrained_layout=True)
        for ax, which in zip(axes, ("grad_wq", "grad_wk")):
            sel = [r for r in rows if r["gradient"] == which and r["predicted"] and r["measured"]]
            for i, rule in enumerate(rules):
                pts = [r for r in sel if r["rule"] == rule]
                color = SERIES[i % len(SERIES)]
                ax.scatter([r["predicted"] for r in pts], [r["measured"] for r in pts], color=color,
                           label=names[rule], s=28)
                # Hollow: the scale alone (blind to saturation), on the same row as the full prediction.
                blind = [r for r in pts if r["scale_only"]]
                ax.scatter([r["scale_only"] for r in blind], [r["measured"] for r in blind], facecolors="none",
                           edgecolors=color, s=28, lw=0.9)
                for r in pts:
                    ax.annotate(str(r["d_k"]), (r["predicted"], r["measured"]), fontsize=7, xytext=(3, 2),
                                textcoords="offset points", color="#5d6677")
            values = [v for r in sel for v in (r["predicted"], r["measured"], r["scale_only"]) if v]
            if values:
                lo, hi = min(values) / 1.5, max(values) * 1.5
                ax.plot([lo, hi], [lo, hi], color="#1d2330", lw=0.8)
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_title("‖∇W_Q‖" if which == "grad_wq" else "‖∇W_K‖")
            ax.set_xlabel(_t("predicted", lang))
            ax.set_ylabel(_t("measured", lang))
        axes[0].legend(loc="upper left", fontsize=8)
    return fig
