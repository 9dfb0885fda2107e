"""Report chapter: a small GPT on real English text with each scale rule (``attnscale train lm``).

Reads the ``train/lm`` result and only draws and words it: validation bits per byte against the step
(a panel per d_k, a line per rule, the band over seeds), the largest |logit| and the mean row entropy
against the step, the verdict table, and greedy samples from one prompt. Every sentence is chosen
and filled by the analysis' figures (verdicts, ratios, best rates, the interior check).
"""

from __future__ import annotations

from attnscale.report import text
from attnscale.report.figures import legend_columns, responsive_figure
from attnscale.report.html import number, para, table
from attnscale.report.text import pretty, rule_label

KIND = "train/lm"
TITLE = text.entry("lm", "title")
_t = text.words("lm")
HOW_TO = "attnscale train lm"

def _rule(name: str, lang: str) -> str:
    # The soft-cap's label names the cap of the rule the sweep trained with (the result does not record it).
    return rule_label(name, lang)


def _panels(curves: list, d_ks: list, rules: list, rows: list[tuple[str, str, bool]], lang: str, unigram=None):
    """One column per d_k, one row per (curve key, axis label, log scale); a line per rule."""
    from attnscale.report.figures import SERIES, style

    with style() as plt:
        fig, axes = plt.subplots(len(rows), len(d_ks), figsize=(3.4 * len(d_ks), 2.9 * len(rows)), squeeze=False,
                                 sharey="row", constrained_layout=True)
        for col, d_k in enumerate(d_ks):
            for row, (key, ylabel, log) in enumerate(rows):
                ax = axes[row][col]
                for i, rule in enumerate(rules):
                    c = next(c for c in curves if (c["d_k"], c["rule"], c["optimiser"]) == (d_k, rule, "adamw"))
                    y = c[key]["mean"] if key == "valid_bpb" else c[key]
                    pts = [(s, v) for s, v in zip(c["step"], y) if v is not None]
                    ax.plot([s for s, _ in pts], [v for _, v in pts], color=SERIES[i % len(SERIES)],
                            label=pretty(_rule(rule, lang)))
                    if key == "valid_bpb":
                        band = [(s, lo, hi) for s, lo, hi in zip(c["step"], c[key]["min"], c[key]["max"]) if lo is not None]
                        ax.fill_between([b[0] for b in band], [b[1] for b in band], [b[2] for b in band],
                                        color=SERIES[i % len(SERIES)], alpha=0.15, lw=0)
                if key == "valid_bpb" and unigram is not None:
                    ax.axhline(unigram, ls=":", color="#5d6677", lw=1)
                if log:
                    ax.set_yscale("log")
                ax.set_title(pretty(f"d_k = {d_k}") if row == 0 else "")
                if row == len(rows) - 1:
                    ax.set_xlabel(_t("step", lang))
                if col == 0:
                    ax.set_ylabel(_t(ylabel, lang))
        fig.legend(*axes[0][0].get_legend_handles_labels(), loc="outside lower center", ncol=legend_columns(3),
                   fontsize=8.5)
    return fig


def _verdict_lines(verdicts: list, reference: str, factor: float, steps: int, lang: str) -> list[str]:
    """One sentence per optimiser and outcome: rules whose verdicts read alike share a sentence."""
    lines = []
    for optimiser in ("adamw", "sgd", "sgd-own-best"):
        alike: dict[str, list[str]] = {}
        for rule in dict.fromkeys(v["rule"] for v in verdicts if v["rule"] != reference):
            rows = [v for v in verdicts if v["rule"] == rule and v["optimiser"] == optimiser and v["verdict"]]
            parts = []
            for verdict in ("learns", "slower", "fails", "diverges"):
                mine = [v for v in rows if v["verdict"] == verdict]
                if mine:
                    parts.append(_t(verdict, lang, dks=", ".join(str(v["d_k"]) for v in mine), factor=factor, steps=steps,
                                    ratios=", ".join(number(v["steps_ratio"], ".2f") for v in mine)))
            if parts:
                alike.setdefault("; ".join(parts), []).append(_rule(rule, lang))
        lines += [_t("verdict_line", lang, optimiser=_t(optimiser, lang), rule=_t("joiner", lang).join(rules),
                     parts=parts)
                  for parts, rules in alike.items()]
    return lines


def render(env, lang: str) -> str:
    a = env.data["analysis"]
    cfg, m, sgd = env.config, a["model"], a["sgd"]
    d_ks, rules = cfg["d_ks"], cfg["rules"]
    p = lambda key, **kw: para(pretty(_t(key, lang, **kw)))   # noqa: E731
    parts = [p("intro", d_model=m["d_model"], layers=m["n_layers"], context=m["context"], params=m["parameters"],
               dk0=d_ks[0], train=a["text"]["train_bytes"], source=a["text"]["source"], valid=a["text"]["valid_bytes"],
               steps=cfg["steps"], batch=cfg["batch"], seeds=cfg["seeds"], adamw=a["adamw_lr"],
               sgd=", ".join(f"{lr:g}" for lr in sgd["lrs"]), unigram=number(a["unigram_bpb"], ".3f"),
               init=number(a["init_bpb"]["mean"], ".3f"))]
    rates = ", ".join(f"d_k {k}: {v:g}" for k, v in sgd["reference_best_lr"].items())
    edge = [k for k, inside in sgd["reference_best_interior"].items() if not inside]
    parts.append(p("sgd_edge", dks=", ".join(edge), rates=rates) if edge else p("sgd_in", rates=rates))
    parts += [para(pretty(line)) for line in
              _verdict_lines(a["verdicts"], a["reference_rule"], a["target_factor"], cfg["steps"], lang)]
    parts.append(responsive_figure(lambda: _panels(a["curves"], d_ks, rules, [("valid_bpb", "bpb", False)], lang,
                                                   a["unigram_bpb"]), _t("alt_bpb", lang), _t("cap_bpb", lang)))
    if "unscaled" in rules:
        last = {c["rule"]: c for c in a["curves"] if c["d_k"] == d_ks[-1] and c["optimiser"] == "adamw"}
        u, r = last["unscaled"], last[a["reference_rule"]]
        parts.append(p("logits", dk=d_ks[-1], unscaled=number(u["max_abs_logit"][-1]), ref=number(r["max_abs_logit"][-1]),
                       ent_u=number(u["entropy_mean"][-1]), ent_r=number(r["entropy_mean"][-1])))
    parts.append(responsive_figure(lambda: _panels(a["curves"], d_ks, rules, [("max_abs_logit", "max_logit", True),
                                                                      ("entropy_mean", "entropy", False)], lang),
                                   _t("alt_health", lang), _t("cap_health", lang)))
    parts.append(p("rule_of", factor=a["target_factor"], like=a["like_ratio"]))
    head = [_t("h_rule", lang), pretty("d_k")] + [pretty(_t(o, lang)) for o in ("adamw", "sgd", "sgd-own-best")]
    cell = lambda v: (f"{_t(v['verdict'] + '_w', lang) if v['verdict'] else '—'} {v['seeds_agreeing']}/{v['seeds']}"   # noqa: E731
                      f" ×{number(v['steps_ratio'], '.2f')} (lr {v['lr']:g})")
    find = lambda rule, d_k, o: next(v for v in a["verdicts"] if (v["rule"], v["d_k"], v["optimiser"]) == (rule, d_k, o))   # noqa: E731
    parts.append(table(head, [[pretty(_rule(r, lang)), d] + [cell(find(r, d, o)) for o in ("adamw", "sgd", "sgd-own-best")]
                              for d in d_ks for r in rules], cls="numeric"))
    s = a["samples"]
    parts.append(p("samples", prompt=s["prompt"], seed=s["seed"]))
    sample = lambda text, bpb: (s["prompt"] + text + f" ({number(bpb, '.2f')})" if text is not None   # noqa: E731
                                else _t("h_diverged", lang))
    parts.append(table([_t("h_rule", lang)] + [pretty(f"d_k = {d}") for d in s["d_ks"]],
                       [[pretty(_rule(row["rule"], lang))] + [sample(*tb) for tb in zip(row["texts"], row["final_bpb"])]
                        for row in s["rows"]]))
    return "\n".join(parts)
