"""Report chapter: does unscaled attention really stop learning? (experiment A, ``train/scale-vs-dk``)

Reads the ``train/scale-vs-dk`` result (written by ``attnscale train scale-vs-dk``) and only formats and
places what its analysis holds (``scale_vs_dk.analyse`` in the experiments): the set-up, the SGD
rate tuned for 1/√d_k and whether it lies inside the grid, learning curves with the logit spread and the
saturated rows over training, the table of final accuracy, steps to target and verdicts, the findings,
the chain-rule check of the gradient at initialisation, and the measured run times. Every number comes
from the analysis; which sentence a finding calls for is chosen from its numbers by the small pure
functions beside each table of sentences in :mod:`.training_words` (with the thresholds the result
records), so rewording never needs a training run. What the result cannot show is said as a hypothesis
and marked so. The findings are worded by :mod:`.training_findings`, the chain-rule check by
:mod:`.training_chain`.
"""

from __future__ import annotations

from attnscale import results
from attnscale.i18n import N_, _
from attnscale.report.chapters.training_chain import chain_rule
from attnscale.report.chapters.training_findings import what_the_numbers_say
from attnscale.report.chapters.training_words import REFERENCE, SINGLE_KEY, reference_reach, single_key_versus
from attnscale.report.html import esc, note, para, table
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
    out += what_the_numbers_say(a, names)
    out += chain_rule(a["chain_rule"], names)
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
        note(
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


def _labels(setup: dict) -> dict[str, str]:
    """The report's one label table (report.text), soft-cap labels filled with the sweep's own cap."""
    return {rule: rule_label(rule, setup["caps"].get(rule)) for rule in setup["rules"]}


def _verdict(s: dict) -> str:
    if s["verdict"] is None:
        return number(None)
    word = _(TRAINING_VERDICT_MARK[s["verdict"]])
    if s["verdict"] == "slower" and s["steps_ratio"] is not None:
        word += f" ({_('×{r} the steps', r=number(s['steps_ratio'], '.2g'))})"
    return f"{word} {s['seeds_agreeing']}/{s['seeds']}"


def _acc(s: dict) -> str:
    a = s["final_accuracy"]
    div = f" ÷{s['diverged']}" if s["diverged"] else ""
    return f"{number(a['mean'], '.2f')} [{number(a['min'], '.2f')}, {number(a['max'], '.2f')}]{div}"


def _steps(s: dict) -> str:
    if not s["reached"]:
        return f"— 0/{s['seeds']}"
    return f"{number(s['steps_to_target']['mean'], '.0f')} {s['reached']}/{s['seeds']}"


def _lr(s: dict) -> str:
    mark = {"low": "‹", "high": "›"}.get(s.get("edge"), "")
    return f"{mark}{s['lr']:g}"


def _reference(ref: dict, s: dict) -> list[str]:
    reach = reference_reach(ref["rows"])
    if reach is None:
        return []
    where = ", ".join(
        f"{'Adam' if r['optimiser'] == 'adam' else 'SGD'} lr {r['lr']:g}, dₖ = {r['d_k']}: {r['reached']}/{r['seeds']}"
        for r in ref["rows"]
    )
    return [para(_(REFERENCE[reach], steps=s["steps"], target=s["target_accuracy"], where=where))]


def _tuning(tuning: list[dict]) -> list[str]:
    lrs = ", ".join(f"dₖ = {r['d_k']}: {_lr(r)}" for r in tuning)
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
            said = ", ".join(
                f"dₖ = {r['d_k']}" + (f" (lr {r[opt]['lr']:g})" if opt != "adam" else "") + f" {_verdict(r[opt])}"
                for r in mine
            )
            items.append(
                f"<li>{esc(_('{rule}, {opt}: {items}.', rule=names[rule], opt=_(OPTIMISERS[opt]), items=said))}</li>"
            )
    return [f"<ul>{''.join(items)}</ul>"]


def _timing(timing: results.CellSeconds | None, wall_s) -> str:
    if timing is None or not timing.timed:
        return ""  # cells computed by an attnscale that did not time them: the source line says so
    run = (
        _(
            "This run of the sweep took {wall} s of wall time (cells read from the cache cost nothing). ",
            wall=number(wall_s, ".0f"),
        )
        if wall_s is not None
        else ""
    )
    return note(
        _(
            "Measured run time: the {cells} cells took {cpu} CPU-seconds in all, {per} s of wall time per cell on average (at most {most} s). {run}Times depend on the machine and how loaded it was.",
            cells=timing.timed,
            cpu=number(timing.cpu_s, ".0f"),
            per=number(timing.wall_s / timing.timed, ".2g"),
            most=number(timing.wall_s_max, ".2g"),
            run=run,
        )
    )


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
