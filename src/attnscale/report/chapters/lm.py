"""Report chapter: a small GPT on real English text with each scale rule (``attnscale train lm``).

Reads the ``train/lm`` result and only draws and words it: validation bits per byte against the step
(a panel per d_k, a line per rule, the band over seeds), the largest |logit| and the mean row entropy
against the step, the verdict table, and greedy samples from one prompt. Every sentence is chosen
and filled by the analysis' figures (verdicts, ratios, best rates, the interior check).
"""

from __future__ import annotations

import functools

from attnscale.report.html import esc, figure_svg, number, table
from attnscale.report.text import localize, pretty, t

KIND = "train/lm"
TITLE = {"en": "Training: a small GPT on real English text, with each scale rule",
         "zh": "训练：在真实英文文本上用各种缩放规则训练一个小 GPT"}
HOW_TO = "attnscale train lm"

TEXT = {
    "intro": {"en": ("A decoder-only GPT in nanoGPT's shape (width {d_model}, {layers} layers, context {context} "
                     "bytes, {params:,} parameters at d_k = {dk0}; heads = width ÷ d_k) on {train:,} bytes of "
                     "{source}, validated on the {valid:,} bytes after them. {steps} steps of {batch} sequences, "
                     "{seeds} seed(s); for a given d_k and seed every rule starts from the same weights. AdamW at "
                     "{adamw:g}; plain SGD over the rates {sgd}. Figures come from the attention the model trains "
                     "with. Unigram baseline: {unigram} bits per byte; at initialisation: {init}."),
              "zh": ("nanoGPT 形状的仅解码器 GPT（宽 {d_model}，{layers} 层，上下文 {context} 字节，dₖ = {dk0} 时 "
                     "{params:,} 个参数；头数 = 宽度 ÷ dₖ），在 {source} 的 {train:,} 个字节上训练，用其后的 {valid:,} "
                     "个字节验证。{steps} 步，每步 {batch} 个序列，{seeds} 个种子；同一 dₖ 与种子下各规则从相同权重出发。"
                     "AdamW 学习率 {adamw:g}；普通 SGD 的学习率网格为 {sgd}。各项指标来自模型训练时所用的注意力本身。"
                     "一元模型基线：每字节 {unigram} 比特；初始化时：{init}。")},
    "sgd_in": {"en": "The SGD rate best for 1/√d_k is inside the grid at every d_k ({rates}).",
               "zh": "对 1/√dₖ 最好的 SGD 学习率在每个 dₖ 下都位于网格内部（{rates}）。"},
    "sgd_edge": {"en": ("The SGD rate best for 1/√d_k lies at the edge of the grid at d_k = {dks} ({rates}): there "
                        "the comparison at its best rate is not bracketed, and may not be its optimum."),
                 "zh": ("在 dₖ = {dks} 时，对 1/√dₖ 最好的 SGD 学习率位于网格边缘（{rates}）：该处的比较没有被"
                        "包围，可能不是其最优学习率。")},
    "verdict_line": {"en": "{optimiser} — {rule}: {parts}.", "zh": "{optimiser} — {rule}：{parts}。"},
    "joiner": {"en": " · ", "zh": "、"},
    "learns": {"en": "learns like 1/√d_k at d_k = {dks}", "zh": "在 dₖ = {dks} 时与 1/√dₖ 学得一样快"},
    "slower": {"en": "learns slower at d_k = {dks} ({ratios}× the steps)",
               "zh": "在 dₖ = {dks} 时学得更慢（所需步数为 {ratios} 倍）"},
    "fails": {"en": "does not reach {factor:g}× the 1/√d_k run's final loss within {steps} steps at d_k = {dks}",
              "zh": "在 dₖ = {dks} 时 {steps} 步内未达到 1/√dₖ 最终损失的 {factor:g} 倍"},
    "diverges": {"en": "diverges at d_k = {dks}", "zh": "在 dₖ = {dks} 时发散"},
    "logits": {"en": ("At d_k = {dk} with AdamW the largest |logit| ends at {unscaled} unscaled against {ref} with "
                      "1/√d_k, and the mean row entropy at {ent_u} against {ent_r} nats."),
               "zh": ("dₖ = {dk}、AdamW 时，最大 |logit| 最终为：不缩放 {unscaled}，1/√dₖ {ref}；平均行熵为 {ent_u} "
                      "对 {ent_r} nats。")},
    "rule_of": {"en": ("Verdict against the 1/√d_k run of the same seed: steps to reach {factor:g}× its final "
                       "validation loss, “learns” up to {like:g}× its steps; the verdict of most seeds (a tie goes "
                       "to the worse), how many agree, and the median ratio."),
                "zh": ("判定以同一种子的 1/√dₖ 运行为参照：达到其最终验证损失 {factor:g} 倍所需的步数，不超过其 {like:g} "
                       "倍记为“学得一样”；取多数种子的判定（平局取较差者）、一致的种子数与比值的中位数。")},
    "samples": {"en": ("Greedy continuations of “{prompt}” (AdamW, seed {seed}; in brackets the run's final "
                        "validation bits per byte):"),
                "zh": "对“{prompt}”的贪心续写（AdamW，种子 {seed}；括号内为该运行最终的验证集比特/字节）："},
    "adamw": {"en": "AdamW", "zh": "AdamW"},
    "sgd": {"en": "SGD at the 1/√d_k rate", "zh": "SGD（1/√dₖ 的最佳学习率）"},
    "sgd-own-best": {"en": "SGD at its own best rate", "zh": "SGD（自身最佳学习率）"},
    "learns_w": {"en": "learns", "zh": "学得一样"}, "slower_w": {"en": "slower", "zh": "更慢"},
    "fails_w": {"en": "fails", "zh": "未达到"}, "diverges_w": {"en": "diverges", "zh": "发散"},
    "h_rule": {"en": "rule", "zh": "规则"},
    "h_diverged": {"en": "(diverged)", "zh": "（发散）"},
    "step": {"en": "step", "zh": "步"}, "bpb": {"en": "validation bits per byte", "zh": "验证集比特/字节"},
    "max_logit": {"en": "largest |logit|", "zh": "最大 |logit|"},
    "entropy": {"en": "mean row entropy (nats)", "zh": "平均行熵（nats）"},
    "unigram": {"en": "unigram baseline", "zh": "一元模型基线"},
    "alt_bpb": {"en": "Validation bits per byte against the step, per d_k and rule",
                "zh": "各 dₖ 与规则下验证集比特/字节随步数的变化"},
    "cap_bpb": {"en": "AdamW. Line: mean over seeds; band: min to max; dotted: the unigram baseline.",
                "zh": "AdamW。线：各种子平均；带：最小到最大；虚线：一元模型基线。"},
    "alt_health": {"en": "Largest |logit| and mean row entropy against the step", "zh": "最大 |logit| 与平均行熵随步数的变化"},
    "cap_health": {"en": "AdamW, means over seeds; over every layer and head, rows attending at least two keys.",
                   "zh": "AdamW，各种子平均；遍及每层每头、至少关注两个键的行。"},
}

_t = functools.partial(localize, TEXT)


def _rule(name: str, lang: str) -> str:
    return t(f"rule_{name}", lang)


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
        fig.legend(*axes[0][0].get_legend_handles_labels(), loc="outside lower center", ncol=3, fontsize=8.5)
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
    p = lambda key, **kw: f"<p>{esc(pretty(_t(key, lang, **kw)))}</p>"   # noqa: E731
    parts = [p("intro", d_model=m["d_model"], layers=m["n_layers"], context=m["context"], params=m["parameters"],
               dk0=d_ks[0], train=a["text"]["train_bytes"], source=a["text"]["source"], valid=a["text"]["valid_bytes"],
               steps=cfg["steps"], batch=cfg["batch"], seeds=cfg["seeds"], adamw=a["adamw_lr"],
               sgd=", ".join(f"{lr:g}" for lr in sgd["lrs"]), unigram=number(a["unigram_bpb"], ".3f"),
               init=number(a["init_bpb"]["mean"], ".3f"))]
    rates = ", ".join(f"d_k {k}: {v:g}" for k, v in sgd["reference_best_lr"].items())
    edge = [k for k, inside in sgd["reference_best_interior"].items() if not inside]
    parts.append(p("sgd_edge", dks=", ".join(edge), rates=rates) if edge else p("sgd_in", rates=rates))
    parts += [f"<p>{esc(pretty(line))}</p>" for line in
              _verdict_lines(a["verdicts"], a["reference_rule"], a["target_factor"], cfg["steps"], lang)]
    parts.append(figure_svg(_panels(a["curves"], d_ks, rules, [("valid_bpb", "bpb", False)], lang, a["unigram_bpb"]),
                            _t("alt_bpb", lang), _t("cap_bpb", lang)))
    if "unscaled" in rules:
        last = {c["rule"]: c for c in a["curves"] if c["d_k"] == d_ks[-1] and c["optimiser"] == "adamw"}
        u, r = last["unscaled"], last[a["reference_rule"]]
        parts.append(p("logits", dk=d_ks[-1], unscaled=number(u["max_abs_logit"][-1]), ref=number(r["max_abs_logit"][-1]),
                       ent_u=number(u["entropy_mean"][-1]), ent_r=number(r["entropy_mean"][-1])))
    parts.append(figure_svg(_panels(a["curves"], d_ks, rules, [("max_abs_logit", "max_logit", True),
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
