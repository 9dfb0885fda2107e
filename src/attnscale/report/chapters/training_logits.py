"""Report chapter: attention-logit growth at high learning rates (experiment B, ``logit-growth``).

Draws the result of ``attnscale train logit-growth`` (kind ``train/logit-growth``): the layer-0
maximum attention logit over training per learning rate for each variant (plain, QK-layernorm,
QK-clip), the final loss against the learning rate, the LR sensitivities, what the guard held, and
how the setting differs from Wortsman et al. 2023. Every number comes from ``env.data["analysis"]``
(the curves from its cells); which sentences appear is chosen by those numbers.
"""

from __future__ import annotations

import functools

from attnscale.report.html import esc, figure_svg, number, table
from attnscale.report.text import localize

KIND = "train/logit-growth"
TITLE = {"en": "Training: attention logits grow at high learning rates (a small-scale proxy)",
         "zh": "训练：高学习率下注意力 logit 的增长（小规模代理实验）"}
HOW_TO = "attnscale train logit-growth"
VARIANTS = ("baseline", "qk_layernorm", "qk_clip")
_SHORT = ("base", "qk", "clip")                  # their names in TEXT's fields

TEXT = {
    "intro": {
        "en": ("After Wortsman et al. 2023 (Small-scale proxies for large-scale Transformer training "
               "instabilities): a decoder-only character LM, {n_layers} layers, width {d_model}, {n_heads} heads, "
               "context {context}, pre-LN, no biases, {parameters:,} parameters, on {corpus_chars:,} characters of "
               "text from a seeded grammar (vocabulary {vocab}). AdamW (β₁ 0.9, β₂ 0.95, ε 1e-8, weight decay 1e-4 "
               "independent of the LR, clipping at norm 1), {warmup} warm-up steps then cosine decay, {steps} "
               "steps of {batch} × {context} tokens, {seeds} seed(s), in three variants: plain attention, per-head "
               "QK-layernorm, and QK-clip at τ = {tau:g} (the logit guard of MuonClip, Kimi K2: after each "
               "optimiser step, a head whose largest logit exceeded τ has its W_Q and W_K rows scaled by "
               "√(τ / max logit)). The logits are read from the model's own attention by attnscale's monitor."),
        "zh": ("仿照 Wortsman 等 2023（Small-scale proxies for large-scale Transformer training instabilities）："
               "仅解码器的字符级语言模型，{n_layers} 层，宽 {d_model}，{n_heads} 个头，上下文 {context}，前置 LN，无偏置，"
               "共 {parameters:,} 个参数；语料是由带种子的文法生成的 {corpus_chars:,} 个字符（字表 {vocab}）。AdamW"
               "（β₁ 0.9，β₂ 0.95，ε 1e-8，与学习率无关的权重衰减 1e-4，梯度范数裁剪到 1），先 {warmup} 步预热再余弦衰减，"
               "共 {steps} 步，每步 {batch} × {context} 个词元，{seeds} 个种子；三种变体：普通注意力、逐头 QK-layernorm、"
               "以及 τ = {tau:g} 的 QK-clip（Kimi K2 的 MuonClip 所用的 logit 护栏：每次优化步之后，最大 logit 超过 τ "
               "的头把其 W_Q 与 W_K 的行乘以 √(τ / 最大 logit)）。logit 由 attnscale 的监视器从模型自己的注意力中读出。"),
    },
    "growth": {
        "en": ("Layer-0 maximum attention logit at the highest learning rate ({hi:g}), peak over training: {base} "
               "plain, {qk} with QK-layernorm, {clip} with QK-clip (plain at initialisation: {init}). At the lowest "
               "({lo:g}): {base_lo}, {qk_lo} and {clip_lo}."),
        "zh": ("最高学习率（{hi:g}）下第 0 层最大注意力 logit 在训练中的峰值：普通 {base}，QK-layernorm {qk}，"
               "QK-clip {clip}（普通注意力初始化时为 {init}）。最低学习率（{lo:g}）下：{base_lo}、{qk_lo} 与 {clip_lo}。"),
    },
    "guard_held": {
        "en": ("QK-clip held every training step's largest logit at or under τ = {tau:g} (largest seen: {peak}); "
               "without it the largest was {base}. {clips} head clips over {runs} runs."),
        "zh": ("QK-clip 使每个训练步的最大 logit 都不超过 τ = {tau:g}（所见最大 {peak}）；没有它时最大为 {base}。"
               "{runs} 次运行中共裁剪 {clips} 个头次。"),
    },
    "guard_overshoot": {
        "en": ("With QK-clip the largest logit on a training batch was {peak}, {ratio}× τ = {tau:g}, against {base} "
               "without it. It is measured in the step's forward, before that step's clip: after one optimiser "
               "update's growth, which the clip then undoes; right after each clip a head's largest logit on its "
               "batch is τ. {clips} head clips over {runs} runs."),
        "zh": ("有 QK-clip 时训练批次上的最大 logit 为 {peak}，即 τ = {tau:g} 的 {ratio} 倍；没有它时为 {base}。"
               "它在该步的前向中测得，早于该步的裁剪：包含一次优化更新带来的增长，随后被裁剪抵消；每次裁剪后，"
               "头在其批次上的最大 logit 恰为 τ。{runs} 次运行中共裁剪 {clips} 个头次。"),
    },
    "guard_idle": {
        "en": "No head's logit exceeded τ = {tau:g} in any run (largest: {peak}), so QK-clip never acted.",
        "zh": "所有运行中没有任何头的 logit 超过 τ = {tau:g}（最大 {peak}），QK-clip 从未起作用。",
    },
    "sensitivity": {
        "en": ("LR sensitivity, E over the {n} learning rates of [min(ℓ, ℓ₀) − min ℓ] (ℓ₀: the loss at "
               "initialisation; a diverged run counts as ℓ₀): {s_base} plain, {s_qk} with QK-layernorm, {s_clip} "
               "with QK-clip. Best final loss: {b_base} at lr {l_base}, {b_qk} at lr {l_qk}, {b_clip} at lr {l_clip}."),
        "zh": ("学习率敏感度，即对 {n} 个学习率取 [min(ℓ, ℓ₀) − min ℓ] 的平均（ℓ₀ 为初始化时的损失；发散记为 ℓ₀）："
               "普通 {s_base}，QK-layernorm {s_qk}，QK-clip {s_clip}。最佳最终损失：{b_base}（学习率 {l_base}）、"
               "{b_qk}（学习率 {l_qk}）、{b_clip}（学习率 {l_clip}）。"),
    },
    "collapse": {
        "en": ("With QK-layernorm at lr {lr:g} the layer-0 maximum logit ended at {end}, below its value at "
               "initialisation ({init}); both are means over {seeds} seed(s). The normalised q and k can only reach "
               "large logits through the LayerNorm gains; the product of their RMS values in layer 0 went from {g0} "
               "to {g1} over training (same mean)."),
        "zh": ("有 QK-layernorm 且学习率为 {lr:g} 时，第 0 层最大 logit 最终为 {end}，低于初始化时的 {init}"
               "（两者均为 {seeds} 个种子的平均）。归一化后的 q、k 只能通过 LayerNorm 增益得到大的 logit；"
               "第 0 层两组增益 RMS 之积在训练中从 {g0} 变为 {g1}（同样取平均）。"),
    },
    "low_end": {
        "en": ("Every variant loses {gap:.2f} nats or more at the lowest learning rate ({lr:g}) against its best. "
               "A likely cause, not measured here, is that {steps} steps are too few at that rate; the shortfall "
               "counts in every LR sensitivity."),
        "zh": ("在最低学习率（{lr:g}）下每种变体都比各自最佳差 {gap:.2f} nats 以上。一个可能的原因（此处未测量）是"
               "在该学习率下 {steps} 步太少；这一差距同样计入各自的学习率敏感度。"),
    },
    "paper": {
        "en": ("How this differs from the paper. Wortsman et al. train on C4 for 1e5 steps, with models from "
               "millions to over a billion parameters, and see the attention logits of the models without "
               "QK-layernorm grow by orders of magnitude at high learning rates — at lower learning rates the "
               "larger the model — while QK-layernorm keeps the loss low across the learning-rate range "
               "(their Figures 1–2). Here the model has {parameters:,} parameters and trains for {steps} steps, so "
               "the learning rate at which the logits run away is not comparable. Compare shapes, not thresholds."),
        "zh": ("与论文的差别。Wortsman 等在 C4 上训练 1e5 步，模型从数百万到十亿以上参数；他们观察到在高学习率下，"
               "没有 QK-layernorm 的模型注意力 logit 增长数个数量级——模型越大，出现的学习率越低——而 QK-layernorm "
               "使损失在整个学习率范围内保持较低（其图 1–2）。这里模型只有 {parameters:,} 个参数，训练 {steps} 步，"
               "所以 logit 失控的学习率阈值不可直接比较。请比较形状，而非阈值。"),
    },
    "alt_logits": {"en": "Layer-0 max attention logit over training per learning rate, for each variant",
                   "zh": "各学习率下第 0 层最大注意力 logit 随训练的变化，按变体"},
    "cap_logits": {"en": "Maximum over heads and validation positions, logged every {every} steps (log scale); "
                         "dashed: τ. Seed 0.",
                   "zh": "对头与验证位置取最大，每 {every} 步记录一次（对数坐标）；虚线：τ。种子 0。"},
    "alt_loss": {"en": "Final validation loss against the learning rate", "zh": "最终验证损失与学习率"},
    "cap_loss": {"en": "Dotted: the loss at initialisation. A cross marks a diverged run.",
                 "zh": "虚线：初始化时的损失。叉号表示发散。"},
    "baseline": {"en": "plain", "zh": "普通"},
    "qk_layernorm": {"en": "QK-layernorm", "zh": "QK-layernorm"},
    "qk_clip": {"en": "QK-clip", "zh": "QK-clip"},
    "step": {"en": "step", "zh": "步"},
    "max_logit": {"en": "max attention logit, layer 0", "zh": "第 0 层最大注意力 logit"},
    "lr": {"en": "learning rate", "zh": "学习率"},
    "loss": {"en": "final validation loss", "zh": "最终验证损失"},
    "h_variant": {"en": "variant", "zh": "变体"},
    "h_final": {"en": "final loss", "zh": "最终损失"},
    "h_div": {"en": "diverged", "zh": "发散"},
    "h_peak": {"en": "peak max logit", "zh": "峰值最大 logit"},
    "h_end": {"en": "final max logit", "zh": "最终最大 logit"},
    "h_train": {"en": "training peak", "zh": "训练峰值"},
    "h_clips": {"en": "head clips", "zh": "裁剪头次"},
}

_t = functools.partial(localize, TEXT)


def _p(key: str, lang: str, **kw) -> str:
    return f"<p>{esc(_t(key, lang, **kw))}</p>"


def _lr(x) -> str:
    return number(x, "g")


def render(env, lang: str) -> str:
    a = env.data["analysis"]
    setup, row = a["setup"], {(r["variant"], r["lr"]): r for r in a["table"]}
    hi, lo = a["lr_high"], a["lr_low"]
    peak = lambda v, lr: number(row[v, lr]["max_logit_peak_mean"], ".4g")   # noqa: E731
    parts = [_p("intro", lang, **setup),
             _p("growth", lang, hi=hi, lo=lo, init=number(row["baseline", hi]["max_logit_init_mean"], ".3g"),
                **{k + sfx: peak(v, lr) for lr, sfx in ((hi, ""), (lo, "_lo")) for v, k in zip(VARIANTS, _SHORT)})]
    g = a["guard"]
    guard_key = ("guard_idle" if g["clipped_heads"] == 0 else
                 "guard_held" if g["train_peak_over_tau"] is not None and g["train_peak_over_tau"] <= 1 else "guard_overshoot")
    parts.append(_p(guard_key, lang, tau=g["tau"], peak=number(g["train_peak"], ".4g"), base=number(g["baseline_train_peak"], ".4g"),
                    ratio=number(g["train_peak_over_tau"], ".3g"), clips=g["clipped_heads"], runs=g["runs"]))
    parts.append(figure_svg(logits_figure(env.data["cells"], setup, lang), _t("alt_logits", lang),
                            _t("cap_logits", lang, every=setup["log_every"])))
    parts.append(figure_svg(loss_figure(a["table"], setup["lrs"], lang), _t("alt_loss", lang), _t("cap_loss", lang)))
    sens, best = a["lr_sensitivity"], a["best"]
    parts.append(_p("sensitivity", lang, n=len(setup["lrs"]),
                    **{f"{x}_{k}": f for v, k in zip(VARIANTS, _SHORT) for x, f in (
                        ("s", number(sens[v]["mean"], ".3f")), ("b", number(best[v]["final_loss"], ".3f")),
                        ("l", _lr(best[v]["lr"])))}))
    gap = a["low_lr_gap"]["gap"]
    if gap is not None and gap > 0:
        parts.append(_p("low_end", lang, gap=gap, lr=lo, steps=setup["steps"]))
    lr_c = a["collapsed"]["highest"]
    if lr_c is not None:
        r = row["qk_layernorm", lr_c]
        parts.append(_p("collapse", lang, lr=lr_c, end=number(r["max_logit_final_mean"]), init=number(r["max_logit_init_mean"]),
                        seeds=r["seeds"], g0=number(r["qk_gain_init_mean"]), g1=number(r["qk_gain_final_mean"])))
    header = [_t(k, lang) for k in ("h_variant", "lr", "h_final", "h_div", "h_peak", "h_end", "h_train", "h_clips")]
    body = [[_t(r["variant"], lang), _lr(r["lr"]), number(r["final_loss_mean"], ".3f"), f"{r['diverged']}/{r['seeds']}",
             number(r["max_logit_peak_mean"], ".4g"), number(r["max_logit_final_mean"], ".4g"),
             number(r["max_logit_train_peak_mean"], ".4g"), number(r["clipped_heads_mean"], ".0f")] for r in a["table"]]
    parts.append(table(header, body, cls="numeric"))
    parts.append(_p("paper", lang, steps=setup["steps"], parameters=setup["parameters"]))
    return "\n".join(parts)


def logits_figure(cells: list[dict], setup: dict, lang: str):
    """Seed 0's logged layer-0 max logit per learning rate, one panel per variant."""
    from attnscale.report.figures import REFERENCE, style

    lrs = setup["lrs"]
    with style() as plt:
        cmap = plt.get_cmap("viridis")
        fig, axes = plt.subplots(1, len(VARIANTS), figsize=(12.0, 3.9), sharey=True, constrained_layout=True)
        for ax, v in zip(axes, VARIANTS):
            for i, lr in enumerate(lrs):
                logs = [c["result"]["log"] for c in cells if c["result"]["variant"] == v and c["cell"]["lr"] == lr
                        and c["cell"]["seed"] == 0]
                points = [(e["step"], abs(e["max_logit_layer0"])) for e in (logs[0] if logs else [])
                          if e["max_logit_layer0"] is not None]
                if points:
                    ax.plot(*zip(*points), color=cmap(i / max(1, len(lrs) - 1)), label=f"{lr:g}")
            ax.axhline(setup["tau"], color=REFERENCE, ls="--", lw=0.8)
            ax.set_yscale("log")
            ax.set_title(_t(v, lang))
            ax.set_xlabel(_t("step", lang))
        axes[0].set_ylabel(_t("max_logit", lang))
        axes[-1].legend(title=_t("lr", lang), fontsize=8, loc="upper left")
    return fig


def loss_figure(rows: list[dict], lrs: list[float], lang: str):
    """Mean final loss per variant against the learning rate; loss at initialisation dotted."""
    from attnscale.report.figures import SERIES, style

    with style() as plt:
        fig, ax = plt.subplots(figsize=(9.5, 3.6), constrained_layout=True)
        for v, color in zip(VARIANTS, SERIES):
            mine = [r for r in rows if r["variant"] == v]
            ax.plot([r["lr"] for r in mine], [r["final_loss_mean"] if r["final_loss_mean"] is not None else float("nan")
                                              for r in mine], "o-", color=color, label=_t(v, lang))
            ax.plot([r["lr"] for r in mine], [r["init_loss"] for r in mine], ":", color=color, lw=1)
            ax.plot([r["lr"] for r in mine if r["diverged"]], [r["init_loss"] for r in mine if r["diverged"]],
                    "x", color=color, ms=9)
        ax.set_xscale("log")
        ax.set_xlabel(_t("lr", lang))
        ax.set_ylabel(_t("loss", lang))
        ax.legend()
    return fig

