"""The tables ``attnscale train`` prints of each experiment's analysis, in the bound language: one
printer per experiment (:data:`PRINTERS`), every cell from the result's ``analysis``."""

from __future__ import annotations

import math

from attnscale.cli.output import columns, pad
from attnscale.cli.train_early_warning import print_early_warning
from attnscale.i18n import N_, _
from attnscale.stored_words import TRAINING_VERDICT_MARK


def _fmt(x, spec=".3f") -> str:
    return "-" if x is None or (isinstance(x, float) and not math.isfinite(x)) else format(x, spec)


def _acc(s) -> str:
    a = s["final_accuracy"]
    div = " " + _("div{n}", n=s["diverged"]) if s["diverged"] else ""
    return f"{_fmt(a['mean'], '.2f')} [{_fmt(a['min'], '.2f')},{_fmt(a['max'], '.2f')}]{div}"


def _reach(s) -> str:
    if not s["reached"]:
        return _("never 0/{seeds}", seeds=s["seeds"])
    return f"{_fmt(s['steps_to_target']['mean'], '.0f')} {s['reached']}/{s['seeds']}"


def _mark(verdict) -> str:
    """A training verdict as a table cell marks it, in the bound language; "-" for none."""
    return _(TRAINING_VERDICT_MARK[verdict]) if verdict else "-"


def _verdict(s) -> str:
    if not s["verdict"]:
        return "-"
    ratio = f" x{s['steps_ratio']:.2g}" if s["verdict"] == "slower" and s["steps_ratio"] is not None else ""
    return f"{_mark(s['verdict'])}{ratio} {s['seeds_agreeing']}/{s['seeds']}"


def _row(cells) -> str:
    """A table row: (text, width, right-aligned) each, padded in terminal columns (CJK: two each); a
    right-aligned cell as wide as its column or wider (a header in Chinese) is kept apart by a space."""
    return "".join(
        (" " if right and columns(text) >= width else "") + pad(text, width, right) for text, width, right in cells
    )


# The grid edge a tuned rate sits at, as the tuning line says it.
EDGE = {"low": N_("at the grid's low edge"), "high": N_("at the grid's high edge")}


def _print_scale_vs_dk(a: dict) -> None:
    print(
        _(
            "target accuracy {target:g}; chance-level ceilings: prior {prior:.3f}, one attended key {single:.3f}",
            target=a["target_accuracy"],
            prior=a["prior_ceiling"],
            single=a["single_key_ceiling"],
        )
    )
    tuned = ", ".join(
        f"d_k={t['d_k']}: {t['lr']:g}" + (f" ({_(EDGE[t['edge']])})" if t["edge"] else "") for t in a["sgd_tuning"]
    )
    grid = ", ".join(f"{lr:g}" for lr in a["setup"]["sgd_lrs"])
    print(_("SGD learning rate tuned for 1/sqrt(d_k) on the grid {grid}: {tuned}", grid=grid, tuned=tuned))
    print(
        _("final accuracy mean [min,max] over seeds; steps to target: mean over seeds that reached it, reached/seeds;")
    )
    print(
        _(
            "verdict against 1/sqrt(d_k) on the same seeds: learns (within {x:g}x its steps), slower, fails, diverges; seeds agreeing",
            x=a["setup"]["like_reference_steps"],
        )
    )
    verdict, steps, acc = _("verdict"), _("steps"), _("acc")
    print(
        _row(
            [(_("rule"), 17, False), ("d_k", 4, True), ("  ", 2, False), (_("Adam acc"), 17, False), (steps, 11, False)]
            + [(verdict, 18, False), (_("SGD@tuned acc"), 17, False), (steps, 11, False), (verdict, 18, False)]
            + [(_("own lr"), 7, True), (" ", 1, False), (acc, 17, False), (steps, 11, False)]
        )
    )
    for row in a["table"]:
        adam, ref, best = row["adam"], row["sgd_reference_lr"], row["sgd_best_lr"]
        edge = {"low": "<", "high": ">"}.get(best.get("edge"), "")
        print(
            _row(
                [(row["rule"], 17, False), (str(row["d_k"]), 4, True), ("  ", 2, False), (_acc(adam), 17, False)]
                + [(_reach(adam), 11, False), (_verdict(adam), 18, False), (_acc(ref), 17, False)]
                + [(_reach(ref), 11, False), (_verdict(ref), 18, False), (edge + format(best["lr"], "g"), 7, True)]
                + [(" ", 1, False), (_acc(best), 17, False), (_reach(best), 11, False)]
            )
        )
    _print_chain_rule(a["chain_rule"])


def _print_chain_rule(chain: dict) -> None:
    rows = chain["rows"]
    if not rows:
        return
    anchor = chain["anchor"]
    print(
        "\n"
        + _(
            "gradient at initialisation, seed mean: predicted = C*s*RMS||K^T J V|| (W_Q), C'*s*RMS(||q||*||X^T J V||) (W_K),"
        )
    )
    print(
        _(
            "C and C' fitted once on {rule} d_k={d_k}; J rms = RMS ||J diag(cap')||_F",
            rule=anchor["rule"],
            d_k=anchor["d_k"],
        )
    )
    print(_("'s only' = the 1/sqrt(d_k) rule's measured gradient at the same d_k times s/s_ref (blind to saturation)"))
    headers = (_("grad"), _("rule"), "d_k", "s", _("logit sd"), _("max p"), _("J rms"), _("s only"))
    headers += (_("predicted"), _("measured"), _("ratio"))
    widths = (8, 17, 4, 9, 9, 7, 7, 10, 11, 11, 7)
    print(_row((h, w, i >= 2) for i, (h, w) in enumerate(zip(headers, widths))))
    for r in rows:
        cells = (
            r["gradient"],
            r["rule"],
            str(r["d_k"]),
            _fmt(r["factor"], ".4g"),
            _fmt(r["logit_std"], ".3g"),
            _fmt(r["max_weight_mean"]),
            _fmt(r["effective_jacobian_rms"]),
            _fmt(r["scale_only"], ".4g"),
            _fmt(r["predicted"], ".4g"),
            _fmt(r["measured"], ".4g"),
            _fmt(r["ratio"], ".2f"),
        )
        print(_row((c, w, i >= 2) for i, (c, w) in enumerate(zip(cells, widths))))


def _print_logit_growth(a: dict) -> None:
    headers = (_("variant"), "lr", _("final loss"), _("diverged"), _("init loss"), _("peak max logit"))
    headers += (_("final max logit"), _("train peak"), _("clips"))
    widths = (14, 8, 12, 9, 10, 15, 16, 12, 7)
    print(_row((h, w, i > 0) for i, (h, w) in enumerate(zip(headers, widths))))
    for r in a["table"]:
        cells = (
            r["variant"],
            f"{r['lr']:g}",
            _fmt(r["final_loss_mean"]),
            str(r["diverged"]),
            _fmt(r["init_loss"]),
            _fmt(r["max_logit_peak_mean"], ".4g"),
            _fmt(r["max_logit_final_mean"], ".4g"),
            _fmt(r["max_logit_train_peak_mean"], ".4g"),
            _fmt(r["clipped_heads_mean"], ".0f"),
        )
        print(_row((c, w, i > 0) for i, (c, w) in enumerate(zip(cells, widths))))
    for name, s in a["lr_sensitivity"].items():
        each = ", ".join(f"{v:.4f}" for v in s["per_seed"])
        print(_("LR sensitivity {name}: {mean:.4f} (per seed: {each})", name=name, mean=s["mean"], each=each))
    g = a.get("guard")
    if g:
        print(
            _(
                "QK-clip at tau {tau:g}: largest training-batch max logit {peak} ({ratio} x tau; measured before that step's clip), without the guard {baseline}",
                tau=g["tau"],
                peak=_fmt(g["train_peak"], ".4g"),
                ratio=_fmt(g["train_peak_over_tau"], ".3g"),
                baseline=_fmt(g["baseline_train_peak"], ".4g"),
            )
        )


def _print_lm(a: dict) -> None:
    from attnscale.report.chapters.lm_words import BASELINE_NAMES  # the page's names of the baselines

    def baseline(name) -> str:
        return _(BASELINE_NAMES[name]) if name in BASELINE_NAMES else name

    m = a["model"]
    print(
        _(
            "GPT: width {d_model}, {n_layers} layers, context {context}, {parameters:,} parameters",
            d_model=m["d_model"],
            n_layers=m["n_layers"],
            context=m["context"],
            parameters=m["parameters"],
        )
    )
    rows = ", ".join(f"{baseline(r['name'])} {r['bpb']:.3f}" for r in a["baselines"]["rows"])
    print(_("baselines on the validation bytes scored (add-k smoothing): {rows} bits/byte", rows=rows))
    ends = ", ".join(
        f"d_k={d}: {_fmt(v)} ("
        + (_("below {name}", name=baseline(beats)) if (beats := a["reference_final"]["beats"][d]) else _("no baseline"))
        + ")"
        for d, v in a["reference_final"]["bpb"].items()
    )
    print(_("1/sqrt(d_k) at its best AdamW rate ends at {ends}", ends=ends))
    for o in ("adamw", "sgd"):
        interior = a["reference_best_interior"][o]
        best = ", ".join(
            f"d_k={k}: {v:g}" + ("" if interior[k] else " " + _("(at the edge of the grid)"))
            for k, v in a["reference_best_lr"][o].items()
        )
        print(_("{optimiser} rate best for 1/sqrt(d_k): {best}", optimiser=o, best=best))
    print(
        _(
            "verdict vs 1/sqrt(d_k) at its best rate, same seed: steps to {target:g}x its final loss, ratio <= {faster:.2g} faster, <= {like:g} learns; median ratio [min,max] over seeds; halfway: the verdict on the logs up to step {halfway}",
            target=a["target_factor"],
            faster=1 / a["like_ratio"],
            like=a["like_ratio"],
            halfway=a["halfway_step"],
        )
    )
    headers = ((_("rule"), 17, False), ("d_k", 4, True), ("  ", 2, False), (_("optimiser"), 15, False))
    headers += (("lr", 7, True), ("  ", 2, False), (_("final bpb"), 10, False), (_("below"), 9, False))
    headers += ((_("verdict"), 10, False), (_("seeds"), 7, False), (_("ratio"), 18, False), (_("halfway"), 9, False))
    print(_row(headers))
    for v in a["verdicts"]:
        s = v["steps_ratio_spread"]
        ratio = "-" if v["steps_ratio"] is None else f"{v['steps_ratio']:.2f} [{s['min']:.2f},{s['max']:.2f}]"
        cells = ((v["rule"], 17, False), (str(v["d_k"]), 4, True), ("  ", 2, False), (v["optimiser"], 15, False))
        cells += ((f"{v['lr']:g}", 7, True), ("  ", 2, False), (_fmt(v["final_bpb"]["mean"]), 10, False))
        cells += ((baseline(v["beats"]) if v["beats"] else "-", 9, False), (_mark(v["verdict"]), 10, False))
        cells += ((f"{v['seeds_agreeing']}/{v['seeds']}", 7, False), (ratio, 18, False))
        print(_row(cells + ((_mark(v["verdict_halfway"]), 9, False),)))
    sensitivity = "; ".join(
        f"{s['optimiser']} {s['rule']} d_k={s['d_k']}: {_fmt(s['lr_sensitivity'])}" for s in a["lr_sensitivity"]
    )
    print(_("LR sensitivity (Wortsman et al. 2023), bits/byte: {values}", values=sensitivity))


# The experiments this command runs, each with its table printer: those of
# attnscale.experiments.training.registry.EXPERIMENTS (a test holds the two equal; not imported here, so that the
# CLI starts without loading the experiments).
PRINTERS = {
    "scale-vs-dk": _print_scale_vs_dk,
    "logit-growth": _print_logit_growth,
    "lm": _print_lm,
    "early-warning": print_early_warning,
}
