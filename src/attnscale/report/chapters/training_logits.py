"""Report chapter: attention-logit growth at high learning rates (experiment B, ``logit-growth``).

Reads ``train/logit-growth/summary.json`` (written by ``attnscale train logit-growth``) and only
draws it: the layer-0 maximum attention logit over training per learning rate, with and without
QK-layernorm; the final loss against the learning rate; the LR sensitivity of each variant; and how
the setting differs from Wortsman et al. 2023, whose Figures 1–2 this experiment shrinks.
"""

from __future__ import annotations

import functools
import math
import statistics
import warnings

from attnscale.report.html import esc, figure_svg, number, table
from attnscale.report.text import localize

TITLE = {"en": "Training: attention logits grow at high learning rates (a small-scale proxy)",
         "zh": "训练：高学习率下注意力 logit 的增长（小规模代理实验）"}
KIND = "train/logit-growth"
HOW_TO = "attnscale train logit-growth"

TEXT = {
    "intro": {
        "en": ("After Wortsman et al. 2023 (Small-scale proxies for large-scale Transformer training "
               "instabilities): a decoder-only character LM, {layers} layers, width {width}, {heads} heads, "
               "context {context}, pre-LN, no biases, {params:,} parameters, on {chars:,} characters of text "
               "from a seeded grammar (vocabulary {vocab}). AdamW (β₁ 0.9, β₂ 0.95, ε 1e-8, weight decay 1e-4 "
               "independent of the LR, clipping at norm 1), {warmup} warm-up steps then cosine decay, "
               "{steps} steps of {batch} × {context} tokens, {seeds} seed(s), with and without per-head "
               "QK-layernorm."),
        "zh": ("仿照 Wortsman 等 2023（Small-scale proxies for large-scale Transformer training instabilities）："
               "仅解码器的字符级语言模型，{layers} 层，宽 {width}，{heads} 个头，上下文 {context}，前置 LN，无偏置，"
               "共 {params:,} 个参数；语料是由带种子的文法生成的 {chars:,} 个字符（字表 {vocab}）。AdamW（β₁ 0.9，"
               "β₂ 0.95，ε 1e-8，与学习率无关的权重衰减 1e-4，梯度范数裁剪到 1），先 {warmup} 步预热再余弦衰减，"
               "共 {steps} 步，每步 {batch} × {context} 个词元，{seeds} 个种子；有与没有逐头 QK-layernorm。"),
    },
    "growth": {
        "en": ("Layer-0 maximum attention logit at the highest learning rate ({lr:g}): {base:.4g} without "
               "QK-layernorm, {qk:.4g} with it (peak over training; at initialisation {init_base:.3g} and "
               "{init_qk:.3g}). At the lowest ({lr_lo:g}): {base_lo:.3g} and {qk_lo:.3g}."),
        "zh": ("最高学习率（{lr:g}）下第 0 层最大注意力 logit：没有 QK-layernorm 为 {base:.4g}，有则为 {qk:.4g}"
               "（训练中的峰值；初始化时分别为 {init_base:.3g} 与 {init_qk:.3g}）。最低学习率（{lr_lo:g}）下："
               "{base_lo:.3g} 与 {qk_lo:.3g}。"),
    },
    "sensitivity": {
        "en": ("LR sensitivity, E over the {n} learning rates of [min(ℓ, ℓ₀) − min ℓ] (ℓ₀: the loss at "
               "initialisation; a diverged run counts as ℓ₀): {base:.3f} without QK-layernorm, {qk:.3f} "
               "with it. Best final loss: {best_base:.3f} at lr {lr_base:g} without, {best_qk:.3f} at lr "
               "{lr_qk:g} with."),
        "zh": ("学习率敏感度，即对 {n} 个学习率取 [min(ℓ, ℓ₀) − min ℓ] 的平均（ℓ₀ 为初始化时的损失；发散记为 ℓ₀）："
               "没有 QK-layernorm 为 {base:.3f}，有则为 {qk:.3f}。最佳最终损失：没有时 {best_base:.3f}（学习率 "
               "{lr_base:g}），有时 {best_qk:.3f}（学习率 {lr_qk:g}）。"),
    },
    "collapse": {
        "en": ("With QK-layernorm at lr {lr:g} the layer-0 maximum logit ended at {end:.3g}, below its value at "
               "initialisation ({init:.3g}); both are means over {seeds} seed(s). The normalised q and k can "
               "only reach large logits through the LayerNorm gains; the product of their RMS values in layer 0 "
               "went from {g0:.3g} to {g1:.3g} over training (same mean)."),
        "zh": ("有 QK-layernorm 且学习率为 {lr:g} 时，第 0 层最大 logit 最终为 {end:.3g}，低于初始化时的 {init:.3g}"
               "（两者均为 {seeds} 个种子的平均）。归一化后的 q、k 只能通过 LayerNorm 增益得到大的 logit；"
               "第 0 层两组增益 RMS 之积在训练中从 {g0:.3g} 变为 {g1:.3g}（同样取平均）。"),
    },
    "low_end": {
        "en": ("Both variants lose {gap:.2f} nats or more at the lowest learning rate ({lr:g}) against their best. "
               "A likely cause, not measured here, is that {steps} steps are too few at that rate; the "
               "shortfall counts in both LR sensitivities."),
        "zh": ("在最低学习率（{lr:g}）下两种变体都比各自最佳差 {gap:.2f} nats 以上。一个可能的原因（此处未测量）是"
               "在该学习率下 {steps} 步太少；这一差距同样计入两者的学习率敏感度。"),
    },
    "paper": {
        "en": ("How this differs from the paper. Wortsman et al. train on C4 for 1e5 steps, with models from "
               "millions to over a billion parameters, and see the attention logits of the models without "
               "QK-layernorm grow by orders of magnitude at high learning rates — at lower learning rates the "
               "larger the model — while QK-layernorm keeps the loss low across the learning-rate range "
               "(their Figures 1–2). Here the model has {params:,} parameters and trains for {steps} steps, so "
               "the learning rate at which the logits run away is not comparable: growth needs many steps at a "
               "high rate, and a small model has little depth and width to amplify its updates. Compare "
               "shapes, not thresholds."),
        "zh": ("与论文的差别。Wortsman 等在 C4 上训练 1e5 步，模型从数百万到十亿以上参数；他们观察到在高学习率下，"
               "没有 QK-layernorm 的模型注意力 logit 增长数个数量级——模型越大，出现的学习率越低——而 QK-layernorm "
               "使损失在整个学习率范围内保持较低（其图 1–2）。这里模型只有 {params:,} 个参数，训练 {steps} 步，"
               "所以 logit 失控的学习率阈值不可直接比较：增长需要在高学习率下累积许多步，而小模型的深度与宽度也难以放大更新。"
               "请比较形状，而非阈值。"),
    },
    "alt_logits": {"en": "Layer-0 max attention logit over training per learning rate, with and without QK-layernorm",
                   "zh": "各学习率下第 0 层最大注意力 logit 随训练的变化，有与没有 QK-layernorm"},
    "cap_logits": {"en": "Maximum over heads and validation positions, logged every {every} steps (log scale).",
                   "zh": "对头与验证位置取最大，每 {every} 步记录一次（对数坐标）。"},
    "alt_loss": {"en": "Final validation loss against the learning rate", "zh": "最终验证损失与学习率"},
    "cap_loss": {"en": "Dotted: the loss at initialisation. A cross marks a diverged run.",
                 "zh": "虚线：初始化时的损失。叉号表示发散。"},
    "baseline": {"en": "without QK-layernorm", "zh": "没有 QK-layernorm"},
    "qk": {"en": "with QK-layernorm", "zh": "有 QK-layernorm"},
    "step": {"en": "step", "zh": "步"},
    "max_logit": {"en": "max attention logit, layer 0", "zh": "第 0 层最大注意力 logit"},
    "lr": {"en": "learning rate", "zh": "学习率"},
    "loss": {"en": "final validation loss", "zh": "最终验证损失"},
    "h_variant": {"en": "variant", "zh": "变体"},
    "h_final": {"en": "final loss", "zh": "最终损失"},
    "h_div": {"en": "diverged", "zh": "发散"},
    "h_peak": {"en": "peak max logit", "zh": "峰值最大 logit"},
    "h_end": {"en": "final max logit", "zh": "最终最大 logit"},
}


_t = functools.partial(localize, TEXT)


def _p(key: str, lang: str, **kw) -> str:
    return f"<p>{esc(_t(key, lang, **kw))}</p>"


def _num(x, spec: str = ".3f") -> str:
    return number(x, spec)


def _row(table_rows: list[dict], qk: bool, lr: float) -> dict:
    return next(r for r in table_rows if r["qk_layernorm"] == qk and r["lr"] == lr)


def logits_figure(summary: dict, lang: str):
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    from attnscale.report.figures import RC

    lrs = summary["config"]["lrs"]
    cmap = plt.get_cmap("viridis")
    with plt.rc_context(RC):
        fig, axes = plt.subplots(1, 2, figsize=(10.0, 3.9), sharey=True, constrained_layout=True)
        for ax, qk in zip(axes, (False, True)):
            for i, lr in enumerate(lrs):
                cells = [c for c in summary["cells"] if c["cell"]["qk_layernorm"] == qk and c["cell"]["lr"] == lr
                         and c["cell"]["seed"] == 0]
                if not cells:
                    continue
                log = cells[0]["result"]["log"]
                ax.plot([e["step"] for e in log], [abs(e["max_logit_layer0"]) for e in log],
                        color=cmap(i / max(1, len(lrs) - 1)), label=f"{lr:g}")
            ax.set_yscale("log")
            ax.set_title(_t("qk" if qk else "baseline", lang))
            ax.set_xlabel(_t("step", lang))
        axes[0].set_ylabel(_t("max_logit", lang))
        axes[1].legend(title=_t("lr", lang), fontsize=8, loc="upper left")
    return fig


def loss_figure(summary: dict, lang: str):
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    from attnscale.report.figures import SCALED, UNSCALED, RC

    rows = summary["analysis"]["table"]
    lrs = summary["config"]["lrs"]
    with plt.rc_context(RC):
        fig, ax = plt.subplots(figsize=(9.5, 3.6), constrained_layout=True)
        for qk, color in ((False, UNSCALED), (True, SCALED)):
            ys = [_row(rows, qk, lr)["final_loss_mean"] for lr in lrs]
            ax.plot(lrs, ys, "o-", color=color, label=_t("qk" if qk else "baseline", lang))
            init = [_row(rows, qk, lr)["init_loss"] for lr in lrs]
            ax.plot(lrs, init, ":", color=color, lw=1)
            for lr in lrs:
                r = _row(rows, qk, lr)
                if r["diverged"]:
                    ax.plot([lr], [r["init_loss"]], "x", color=color, ms=9)
        ax.set_xscale("log")
        ax.set_xlabel(_t("lr", lang))
        ax.set_ylabel(_t("loss", lang))
        ax.legend()
    return fig


def render(env, lang: str) -> str:
    result = {**env.data, "config": env.config}
    cfg, analysis = result["config"], result["analysis"]
    cell0 = result["cells"][0]
    first, res0 = cell0["cell"], cell0["result"]
    lrs = cfg["lrs"]
    rows = analysis["table"]
    intro = _t("intro", lang, layers=first["n_layers"], width=first["d_model"], heads=first["n_heads"],
               context=first["context"], params=res0.get("parameters", 0), chars=first["corpus_chars"],
               vocab=res0["vocab"], warmup=cfg["warmup"], steps=cfg["steps"], batch=cfg["batch"],
               seeds=cfg["seeds"])
    parts = [f"<p>{esc(intro)}</p>"]
    hi, lo = max(lrs), min(lrs)

    def seed_mean(qk: bool, lr: float, entry: int, key: str) -> float:
        """Mean over seeds of log[entry][key] of the cells at (qk, lr): as the table's means."""
        return statistics.fmean(c["result"]["log"][entry][key] for c in result["cells"]
                                if c["cell"]["qk_layernorm"] == qk and c["cell"]["lr"] == lr)

    def init_logit(qk: bool, lr: float) -> float:
        return seed_mean(qk, lr, 0, "max_logit_layer0")

    peak = lambda qk, lr: _row(rows, qk, lr)["max_logit_peak_mean"]   # noqa: E731
    parts.append(_p("growth", lang, lr=hi, base=peak(False, hi), qk=peak(True, hi), init_base=init_logit(False, hi),
                    init_qk=init_logit(True, hi), lr_lo=lo, base_lo=peak(False, lo), qk_lo=peak(True, lo)))
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Glyph .* missing from font")
        parts.append(figure_svg(logits_figure(result, lang), _t("alt_logits", lang),
                                _t("cap_logits", lang, every=cfg["log_every"])))
        parts.append(figure_svg(loss_figure(result, lang), _t("alt_loss", lang), _t("cap_loss", lang)))
    sens = analysis["lr_sensitivity"]

    def best(qk: bool):
        finite = [r for r in rows if r["qk_layernorm"] == qk and math.isfinite(r["final_loss_mean"])]
        if not finite:
            return math.nan, math.nan
        top = min(finite, key=lambda r: r["final_loss_mean"])
        return top["final_loss_mean"], top["lr"]

    (bb, lb), (bq, lq) = best(False), best(True)
    parts.append(_p("sensitivity", lang, n=len(lrs), base=sens["baseline"]["mean"], qk=sens["qk_layernorm"]["mean"],
                    best_base=bb, lr_base=lb, best_qk=bq, lr_qk=lq))
    low_gap = min(_row(rows, qk, lo)["final_loss_mean"] - best_ for qk, best_ in ((False, bb), (True, bq)))
    if math.isfinite(low_gap) and low_gap > 0:
        parts.append(_p("low_end", lang, gap=low_gap, lr=lo, steps=cfg["steps"]))
    collapsed = [lr for lr in lrs if _row(rows, True, lr)["max_logit_final_mean"] < init_logit(True, lr)]
    if collapsed:
        lr_c = max(collapsed)
        parts.append(_p("collapse", lang, lr=lr_c, end=_row(rows, True, lr_c)["max_logit_final_mean"],
                        init=init_logit(True, lr_c), seeds=_row(rows, True, lr_c)["seeds"],
                        g0=seed_mean(True, lr_c, 0, "qk_gain_layer0"), g1=seed_mean(True, lr_c, -1, "qk_gain_layer0")))
    header = [_t("h_variant", lang), _t("lr", lang), _t("h_final", lang), _t("h_div", lang), _t("h_peak", lang),
              _t("h_end", lang)]
    body = [[_t("qk" if r["qk_layernorm"] else "baseline", lang), f"{r['lr']:g}", _num(r["final_loss_mean"]),
             f"{r['diverged']}/{r['seeds']}", _num(r["max_logit_peak_mean"], ".4g"),
             _num(r["max_logit_final_mean"], ".4g")]
            for r in rows]
    parts.append(table(header, body, cls="numeric"))
    parts.append(_p("paper", lang, steps=cfg["steps"], params=res0.get("parameters", 0)))
    return "\n".join(parts)
