"""Report chapter: does unscaled attention really stop learning? (experiment A, ``scale-vs-dk``)

Reads ``train/scale-vs-dk/summary.json`` (written by ``attnscale train scale-vs-dk``) and only draws
it: learning curves and saturation over training per d_k, the tables of final accuracy and steps to
target for Adam and SGD, and the chain-rule check of the gradient at initialisation.
"""

from __future__ import annotations

import functools
import math
import statistics
import warnings

from attnscale.report.html import esc, figure_svg, number, table
from attnscale.report.text import localize

TITLE = {"en": "Training: does unscaled attention really stop learning?",
         "zh": "训练：不缩放的注意力真的学不动吗？"}
KIND = "train/scale-vs-dk"
HOW_TO = "attnscale train scale-vs-dk"

NAMES = {
    "inverse_sqrt_dk": {"en": "1/√dₖ", "zh": "1/√dₖ"},
    "unscaled": {"en": "unscaled", "zh": "不缩放"},
    "inverse_dk": {"en": "1/dₖ (µP)", "zh": "1/dₖ（µP）"},
    "qknorm": {"en": "QK-norm", "zh": "QK-norm"},
    "softcap_unscaled": {"en": "soft-cap 50, unscaled", "zh": "软截断 50，不缩放"},
}

TEXT = {
    "intro": {
        "en": ("A one-layer transformer (width {d_model}, {heads} heads) learns to count the ones among "
               "{k} marked positions out of {n}: the query must spread its attention evenly over the {k} "
               "marked keys. One attended key is not enough: from one marked bit the best possible "
               "accuracy is {single:.3f}, {versus}. "
               "W_Q and W_K start with Var(q_i) ≈ 1, so Var(q·k) ≈ dₖ, the seed's assumption. Every "
               "rule starts from the same weights for a given dₖ and seed; {steps} steps of batch {batch}, "
               "{seeds} seeds. Adam runs at lr {adam_lr:g}; plain SGD runs on the grid {sgd_lrs}."),
        "zh": ("一层 transformer（宽 {d_model}，{heads} 个头）学习数出 {n} 个位置中 {k} 个标记位置上 1 的个数："
               "查询必须把注意力均匀地分散到 {k} 个标记键上。只看一个键不够：仅凭一个标记位，最佳准确率为 "
               "{single:.3f}，{versus}。W_Q 与 W_K 的初始化使 Var(q_i) ≈ 1，"
               "于是 Var(q·k) ≈ dₖ，正是原文的假设。同一 dₖ 与种子下各规则从相同权重出发；训练 {steps} 步，"
               "批大小 {batch}，{seeds} 个种子。Adam 学习率 {adam_lr:g}；普通 SGD 在网格 {sgd_lrs} 上运行。"),
    },
    # Which of the two is said follows from the result's two ceilings, compared in render.
    "single_same": {"en": "the same as guessing the most likely count ({prior:.3f})",
                    "zh": "与猜最常见的计数（{prior:.3f}）相同"},
    "single_above": {"en": "against {prior:.3f} for guessing the most likely count",
                     "zh": "而猜最常见的计数可得 {prior:.3f}"},
    "tuned": {
        "en": "The SGD learning rate tuned for 1/√dₖ (best mean final accuracy over seeds), used for every rule: "
              "{lrs}. "
              "The same grid also gives each rule its own best rate. Both choices are made on the seeds "
              "they are reported on, which flatters the tuned cells a little.",
        "zh": "为 1/√dₖ 调好的 SGD 学习率（各种子平均最终准确率最高者），用于所有规则：{lrs}。"
              "同一网格也为每条规则选出各自最佳学习率。两种选择都基于报告所用的同一批种子，对调优格子略有偏袒。",
    },
    "findings": {"en": "What the numbers say", "zh": "数字说明了什么"},
    "glance": {
        "en": "The unscaled rules next to 1/√dₖ: how saturated the query rows start (logit standard deviation and "
              "mean largest weight at step 0), how many seeds reach {target:g} accuracy, and the fraction of "
              "saturated rows (largest weight > 0.99) at the end.",
        "zh": "不缩放的规则与 1/√dₖ 并列：查询行在第 0 步的饱和程度（logit 标准差与平均最大权重）、"
              "有多少种子达到 {target:g} 准确率，以及结束时饱和行（最大权重 > 0.99）的比例。",
    },
    "why_sd": {
        "en": "Without the scale the seed predicts logits of standard deviation √dₖ (here: {pred}); measured at "
              "step 0 on the query rows of unscaled attention: {meas}.",
        "zh": "不缩放时，原文预言 logit 标准差为 √dₖ（此处为 {pred}）；不缩放注意力的查询行在第 0 步实测为 {meas}。",
    },
    "why": {
        "en": ("Reading the table: where the rows start only partly saturated, unscaled attention can still "
               "learn — the gradient is smaller but not zero, and Adam divides each step by the gradient's "
               "running size. Where the rows start saturated and stay so, the gradient reaching W_Q and W_K "
               "shrinks by orders of magnitude and the model stays near the one-key regime within the budget. "
               "That Adam's normalisation is what rescues the partly saturated cells is our reading, not a "
               "separate measurement."),
        "zh": ("解读：查询行起初只是部分饱和时，不缩放的注意力仍能学会——梯度变小但不为 0，而 Adam 会用梯度的滑动大小去除每一步。"
               "查询行起初饱和且一直饱和时，到达 W_Q 与 W_K 的梯度缩小数个数量级，模型在预算内停留在“只看一个键”附近。"
               "说 Adam 的归一化挽救了部分饱和的格子，是我们的解读，而非另外的测量。"),
    },
    "table_note": {
        "en": "Final accuracy: mean [min, max] over seeds on {n_eval} fresh samples. Steps: first step at which "
              "the running training accuracy (window {window}, every batch fresh) reaches {target:g}, mean over "
              "the seeds that reached it, and how many did. '÷' = diverged seeds.",
        "zh": "最终准确率：在 {n_eval} 个新样本上，各种子的均值 [最小, 最大]。步数：滑动训练准确率（窗口 {window}，"
              "每批都是新数据）首次达到 {target:g} 的步数，对达到者取平均，并给出达到的种子数。“÷” 为发散的种子数。",
    },
    "chain": {
        "en": ("Why the gradient reaching W_Q and W_K has the size it has at step 0. For the query row, "
               "dL/dq = s·Kᵀ J V δ and dL/dK = s·(J V δ) qᵀ with J = diag(p) − ppᵀ (times cap′ for soft-capping): "
               "the scale s multiplies the gradient, and Kᵀ J V — the p-weighted covariance of keys and values — "
               "vanishes as the row saturates, however large the keys. Prediction: ‖∇W_Q‖ ≈ C·s·RMS‖Kᵀ J V‖ and "
               "‖∇W_K‖ ≈ C′·s·RMS(‖q‖·‖Xᵀ J V‖), with C, C′ fitted once on {anchor} at dₖ = {anchor_dk}; "
               "δ = dL/do is left out (the same weights start every rule). Measured / predicted ranges "
               "from {lo:.2f} to {hi:.2f} over {n} (rule, dₖ) pairs, while s alone spans a factor {span:.0f}. "
               "The column 'scale alone' is the 1/√dₖ rule's measured gradient times s/s_ref, blind to "
               "saturation: for unscaled attention at dₖ = {big} it predicts ‖∇W_Q‖ = {blind:.3g}; "
               "with the Jacobian factor the prediction is {pred:.3g}; measured: {meas:.3g}."),
        "zh": ("为什么第 0 步到达 W_Q 与 W_K 的梯度是这个大小。对查询行，dL/dq = s·Kᵀ J V δ，dL/dK = s·(J V δ) qᵀ，"
               "其中 J = diag(p) − ppᵀ（软截断时再乘 cap′）：缩放 s 直接乘在梯度上；Kᵀ J V 是按 p 加权的键–值协方差，"
               "行一旦饱和它就趋于 0，无论键有多大。预测：‖∇W_Q‖ ≈ C·s·RMS‖Kᵀ J V‖，‖∇W_K‖ ≈ C′·s·RMS(‖q‖·‖Xᵀ J V‖)，"
               "C、C′ 只在 {anchor}、dₖ = {anchor_dk} 上拟合一次；δ = dL/do 不计入（各规则从相同权重出发）。"
               "实测/预测在 {n} 组（规则, dₖ）上介于 {lo:.2f} 与 {hi:.2f} 之间，而 s 本身跨越 {span:.0f} 倍。"
               "“仅缩放”一列是 1/√dₖ 规则的实测梯度乘以 s/s_ref，对饱和视而不见：对 dₖ = {big} 的不缩放注意力，"
               "它预测 ‖∇W_Q‖ = {blind:.3g}；计入雅可比因子后预测为 {pred:.3g}；实测 {meas:.3g}。"),
    },
    "chain_rest": {
        "en": "What the prediction leaves out: the direction of δ relative to Kᵀ J V, and how the per-example "
              "gradients add up over the batch; both depend on the attention pattern, hence on the rule.",
        "zh": "预测没有计入的：δ 相对 Kᵀ J V 的方向，以及各样本梯度在批内如何叠加；两者都取决于注意力模式，因而取决于规则。",
    },
    "zero": {
        "en": "Cells in which the W_Q/W_K gradient was exactly zero (every entry 0.0 in float32) at some logged "
              "step: {n} of {total}.",
        "zh": "在某个记录步上 W_Q/W_K 梯度恰好为 0（float32 中每个元素都是 0.0）的格子：{n}/{total}。",
    },
    "small": {
        "en": "So the seed's 'the gradient vanishes' is, in these runs, 'the gradient becomes small': the smallest "
              "logged ‖∇W_Q‖ of unscaled attention with Adam at dₖ = {d_k} is {smallest:.2g}, against {first:.2g} "
              "at step 0 (seed mean).",
        "zh": "所以原文的“梯度消失”在这些运行中是“梯度变小”：dₖ = {d_k} 的不缩放注意力（Adam）记录到的最小 ‖∇W_Q‖ "
              "为 {smallest:.2g}，第 0 步为 {first:.2g}（种子平均）。",
    },
    "alt_curves": {"en": "Accuracy and saturated rows over training with Adam, per d_k and rule",
                   "zh": "使用 Adam 时准确率与饱和行比例随训练的变化，按 dₖ 与规则"},
    "cap_curves": {"en": "Adam, mean over seeds. Top: running training accuracy (dotted: the one-key ceiling). "
                         "Bottom: fraction of query rows whose largest weight exceeds 0.99.",
                   "zh": "Adam，各种子平均。上：滑动训练准确率（虚线：单键上限）。下：最大权重超过 0.99 的查询行比例。"},
    "alt_chain": {"en": "Predicted vs measured gradient norm at initialisation",
                  "zh": "初始化时梯度范数：预测与实测"},
    "cap_chain": {"en": "Each point a (rule, dₖ), mean over seeds, labelled by dₖ; the line is measured = predicted. "
                        "Filled: the chain-rule prediction; hollow: the scale alone, blind to saturation.",
                  "zh": "每点为一组（规则, dₖ），各种子平均，标注为 dₖ；直线为实测 = 预测。实心：链式法则的预测；"
                        "空心：仅凭缩放、对饱和视而不见的预测。"},
    "step": {"en": "step", "zh": "步"},
    "accuracy": {"en": "accuracy", "zh": "准确率"},
    "saturated": {"en": "saturated rows", "zh": "饱和行"},
    "predicted": {"en": "predicted", "zh": "预测"},
    "measured": {"en": "measured", "zh": "实测"},
    "h_rule": {"en": "rule", "zh": "规则"},
    "h_adam": {"en": "Adam: acc", "zh": "Adam：准确率"},
    "h_steps": {"en": "steps", "zh": "步数"},
    "h_sgd_ref": {"en": "SGD at 1/√dₖ's lr: acc", "zh": "SGD（1/√dₖ 的学习率）：准确率"},
    "h_best_lr": {"en": "own best lr", "zh": "自身最佳学习率"},
    "h_sgd_best": {"en": "SGD at it: acc", "zh": "该学习率下 SGD：准确率"},
    "h_grad": {"en": "gradient", "zh": "梯度"},
    "h_logit_sd": {"en": "logit sd", "zh": "logit 标准差"},
    "h_maxp": {"en": "mean max p", "zh": "平均最大 p"},
    "h_ratio": {"en": "measured / predicted", "zh": "实测/预测"},
    "h_adam_reached": {"en": "Adam: reached", "zh": "Adam：达到"},
    "h_adam_sat": {"en": "Adam: saturated at end", "zh": "Adam：结束时饱和"},
    "h_sgd_reached": {"en": "SGD (own best lr): reached", "zh": "SGD（自身最佳学习率）：达到"},
    "h_sgd_sat": {"en": "SGD: saturated at end", "zh": "SGD：结束时饱和"},
    "h_scale_only": {"en": "scale alone", "zh": "仅缩放"},
}


_t = functools.partial(localize, TEXT)


def _p(key: str, lang: str, **kw) -> str:
    return f"<p>{esc(_t(key, lang, **kw))}</p>"


def _name(rule: str, lang: str) -> str:
    return NAMES.get(rule, {}).get(lang) or NAMES.get(rule, {}).get("en") or rule


def _num(x, spec: str = ".2f") -> str:
    return number(x, spec)


def _acc(s: dict) -> str:
    a = s["final_accuracy"]
    div = f" ÷{s['diverged']}" if s["diverged"] else ""
    return f"{_num(a['mean'])} [{_num(a['min'])}, {_num(a['max'])}]{div}"


def _steps(s: dict) -> str:
    if not s["reached"]:
        return f"— 0/{s['seeds']}"
    return f"{_num(s['steps_to_target']['mean'], '.0f')} {s['reached']}/{s['seeds']}"


def _mean_curves(summary: dict, rule: str, d_k: int, key: str):
    """Seed-mean of a logged metric for the Adam cells of (rule, d_k): steps, values."""
    logs = [c["result"]["log"] for c in summary["cells"]
            if c["cell"]["rule"] == rule and c["cell"]["d_k"] == d_k and c["cell"]["optimizer"] == "adam"]
    if not logs:
        return [], []
    n = min(len(log) for log in logs)
    steps = [logs[0][i]["step"] for i in range(n)]
    return steps, [statistics.fmean(log[i][key] for log in logs) for i in range(n)]


def curves_figure(summary: dict, lang: str):
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    from attnscale.report.figures import RC, SERIES

    cfg, analysis = summary["config"], summary["analysis"]
    d_ks = cfg["d_ks"]
    with plt.rc_context(RC):
        fig, axes = plt.subplots(2, len(d_ks), figsize=(4.1 * len(d_ks), 5.6), sharex=True, squeeze=False,
                                 constrained_layout=True)
        for col, d_k in enumerate(d_ks):
            for i, rule in enumerate(cfg["rules"]):
                color = SERIES[i % len(SERIES)]
                steps, acc = _mean_curves(summary, rule, d_k, "accuracy")
                axes[0][col].plot(steps, acc, color=color, label=_name(rule, lang))
                steps, sat = _mean_curves(summary, rule, d_k, "saturated_frac")
                axes[1][col].plot(steps, sat, color=color)
            axes[0][col].axhline(analysis["single_key_ceiling"], color="#5d6677", ls=":", lw=1)
            axes[0][col].set_title(f"dₖ = {d_k}")
            axes[0][col].set_ylim(0, 1.02)
            axes[1][col].set_ylim(-0.02, 1.02)
            axes[1][col].set_xlabel(_t("step", lang))
        axes[0][0].set_ylabel(_t("accuracy", lang))
        axes[1][0].set_ylabel(_t("saturated", lang))
        handles, labels = axes[0][0].get_legend_handles_labels()
        fig.legend(handles, labels, loc="outside lower center", ncol=len(labels))
    return fig


def chain_figure(rows: list[dict], lang: str):
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    from attnscale.report.figures import RC, SERIES

    rules = list(dict.fromkeys(r["rule"] for r in rows))
    with plt.rc_context(RC):
        fig, axes = plt.subplots(1, 2, figsize=(9.0, 3.8), constrained_layout=True)
        for ax, which in zip(axes, ("grad_wq", "grad_wk")):
            sel = [r for r in rows if r["gradient"] == which]
            for i, rule in enumerate(rules):
                pts = [r for r in sel if r["rule"] == rule]
                color = SERIES[i % len(SERIES)]
                ax.scatter([r["predicted"] for r in pts], [r["measured"] for r in pts], color=color,
                           label=_name(rule, lang), s=28)
                # Hollow: the scale alone (blind to saturation), on the same row as the full prediction.
                ax.scatter([r["scale_only"] for r in pts], [r["measured"] for r in pts], facecolors="none",
                           edgecolors=color, s=28, lw=0.9)
                for r in pts:
                    ax.annotate(str(r["d_k"]), (r["predicted"], r["measured"]), fontsize=7, xytext=(3, 2),
                                textcoords="offset points", color="#5d6677")
            values = [v for r in sel for v in (r["predicted"], r["measured"], r["scale_only"]) if v > 0]
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


def render(env, lang: str) -> str:
    result = {**env.data, "config": env.config}
    cfg, analysis = result["config"], result["analysis"]
    task = cfg["task"]
    first = result["cells"][0]["cell"] if result["cells"] else {}
    single, prior = analysis["single_key_ceiling"], analysis["prior_ceiling"]
    same = math.isclose(single, prior, rel_tol=1e-9, abs_tol=1e-12)
    versus = _t("single_same" if same else "single_above", lang, prior=prior)
    parts = [_p("intro", lang, d_model=first.get("d_model"), heads=first.get("n_heads"), k=task["n_marked"],
                n=task["n_keys"], single=single, versus=versus,
                steps=cfg["steps"], batch=cfg["batch"], seeds=cfg["seeds"], adam_lr=cfg["adam_lr"],
                sgd_lrs=", ".join(f"{v:g}" for v in cfg["sgd_lrs"]))]
    tuned = ", ".join(f"dₖ = {k}: {v:g}" for k, v in analysis["sgd_lr_tuned_for_reference"].items())
    parts.append(_p("tuned", lang, lrs=tuned))
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Glyph .* missing from font")
        parts.append(figure_svg(curves_figure(result, lang), _t("alt_curves", lang), _t("cap_curves", lang)))
    header = [_t("h_rule", lang), "dₖ", _t("h_adam", lang), _t("h_steps", lang), _t("h_sgd_ref", lang),
              _t("h_steps", lang), _t("h_best_lr", lang), _t("h_sgd_best", lang), _t("h_steps", lang)]
    rows = [[_name(r["rule"], lang), r["d_k"], _acc(r["adam"]), _steps(r["adam"]), _acc(r["sgd_reference_lr"]),
             _steps(r["sgd_reference_lr"]), f"{r['sgd_best_lr']['lr']:g}", _acc(r["sgd_best_lr"]),
             _steps(r["sgd_best_lr"])] for r in analysis["table"]]
    parts.append(table(header, rows, cls="numeric"))
    note = _t("table_note", lang, n_eval=cfg["final_eval"], window=cfg["log_every"], target=analysis["target_accuracy"])
    parts.append(f"<p class='note'>{esc(note)}</p>")
    parts.append(f"<h3>{esc(_t('findings', lang))}</h3>")
    parts.append(f"<p>{esc(_t('glance', lang, target=analysis['target_accuracy']))}</p>")
    init = {(r["rule"], r["d_k"]): r for r in analysis["chain_rule"]["rows"] if r["gradient"] == "grad_wq"}
    header = [_t("h_rule", lang), "dₖ", _t("h_logit_sd", lang), _t("h_maxp", lang), _t("h_adam_reached", lang),
              _t("h_adam_sat", lang), _t("h_sgd_reached", lang), _t("h_sgd_sat", lang)]
    body = []
    for r in analysis["table"]:
        if r["rule"] not in ("unscaled", "softcap_unscaled", "inverse_sqrt_dk"):
            continue
        start = init.get((r["rule"], r["d_k"]), {})
        adam, sgd = r["adam"], r["sgd_best_lr"]
        body.append([_name(r["rule"], lang), r["d_k"], _num(start.get("logit_std")), _num(start.get("max_weight_mean")),
                     f"{adam['reached']}/{adam['seeds']}", _num(adam["final_saturated_frac"]["mean"]),
                     f"{sgd['reached']}/{sgd['seeds']} (lr {sgd['lr']:g})", _num(sgd["final_saturated_frac"]["mean"])])
    parts.append(table(header, body, cls="numeric"))
    unscaled_rows = sorted((r for r in analysis["chain_rule"]["rows"]
                            if r["rule"] == "unscaled" and r["gradient"] == "grad_wq"), key=lambda r: r["d_k"])
    if unscaled_rows:
        pred = ", ".join(f"{math.sqrt(r['d_k']):.3g} (dₖ = {r['d_k']})" for r in unscaled_rows)
        meas = ", ".join(f"{r['logit_std']:.3g}" for r in unscaled_rows)
        parts.append(f"<p>{esc(_t('why_sd', lang, pred=pred, meas=meas))}</p>")
    parts.append(f"<p>{esc(_t('why', lang))}</p>")
    zero_cells = sum(bool(c["result"]["grad_zero_ever"]) for c in result["cells"])
    parts.append(f"<p>{esc(_t('zero', lang, n=zero_cells, total=len(result['cells'])))}</p>")
    big = max(cfg["d_ks"])
    logs = [c["result"]["log"] for c in result["cells"] if c["cell"]["rule"] == "unscaled"
            and c["cell"]["d_k"] == big and c["cell"]["optimizer"] == "adam" and c["result"]["log"]]
    if logs and zero_cells == 0:
        smallest = min(e["grad_wq"] for log in logs for e in log)
        first = statistics.fmean(log[0]["grad_wq"] for log in logs)
        parts.append(f"<p>{esc(_t('small', lang, d_k=big, smallest=smallest, first=first))}</p>")
    chain = analysis["chain_rule"]
    if chain["rows"]:
        anchor = (chain["anchor"]["rule"], chain["anchor"]["d_k"])
        ratios = [r["ratio"] for r in chain["rows"] if (r["rule"], r["d_k"]) != anchor]
        factors = [r["factor"] for r in chain["rows"]]
        big = max(r["d_k"] for r in chain["rows"])
        unscaled = next((r for r in chain["rows"] if r["rule"] == "unscaled" and r["d_k"] == big
                         and r["gradient"] == "grad_wq"), None) or chain["rows"][0]
        parts.append(_p("chain", lang, anchor=_name(anchor[0], lang), anchor_dk=anchor[1],
                        lo=min(ratios, default=math.nan), hi=max(ratios, default=math.nan), n=len(ratios) // 2,
                        span=max(factors) / min(factors), big=big, blind=unscaled["scale_only"],
                        pred=unscaled["predicted"], meas=unscaled["measured"]))
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Glyph .* missing from font")
            parts.append(figure_svg(chain_figure(chain["rows"], lang), _t("alt_chain", lang), _t("cap_chain", lang)))
        header = [_t("h_grad", lang), _t("h_rule", lang), "dₖ", "s", _t("h_logit_sd", lang), _t("h_maxp", lang),
                  _t("h_scale_only", lang), _t("predicted", lang), _t("measured", lang), _t("h_ratio", lang)]
        rows = [["W_Q" if r["gradient"] == "grad_wq" else "W_K", _name(r["rule"], lang), r["d_k"], f"{r['factor']:.4g}",
                 _num(r["logit_std"]), _num(r["max_weight_mean"], ".3f"), _num(r["scale_only"], ".3g"),
                 f"{r['predicted']:.3g}", f"{r['measured']:.3g}", _num(r["ratio"])] for r in chain["rows"]]
        parts.append(table(header, rows, cls="numeric"))
        parts.append(f"<p>{esc(_t('chain_rest', lang))}</p>")
    return "\n".join(parts)
