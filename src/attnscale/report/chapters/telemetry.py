"""Report chapter: attention health at fused-kernel speed — what the per-row figures cost.

Reads ``telemetry/summary.json`` (written by ``attnscale telemetry-bench``) and only draws it: time and
peak-memory ratios against plain PyTorch SDPA, and the monitor's per-layer figures on a real model.
"""

from __future__ import annotations

import functools
import statistics

from attnscale.report.html import esc, figure_svg, table
from attnscale.report.text import localize

TITLE = {"en": "Watching attention health without the L×S matrix",
         "zh": "不生成 L×S 矩阵也能监测注意力的健康"}
KIND = "telemetry"
HOW_TO = "attnscale telemetry-bench"

TEXT = {
    "intro": {
        "en": ("Fast attention kernels never return the attention weights: materialising the L×S matrix is what "
               "makes attention slow. Yet each row's entropy needs only two running sums next to the softmax "
               "sum: entropy = ln l − u/l with l = Σ e^(s−m) and u = Σ e^(s−m)(s−m). attnscale.torch.attention "
               "computes the output, the log-sum-exp and the entropy of every row, exactly, in memory O(L·d). "
               "Measured below on {device} with {threads} threads, float32, medians of {repeats} interleaved "
               "runs; every ratio divides by plain torch SDPA measured in the same run."),
        "zh": ("快速注意力内核从不返回注意力权重：生成 L×S 矩阵正是注意力慢的原因。但每一行的熵只需在 softmax "
               "求和旁再累加两个量：熵 = ln l − u/l，其中 l = Σ e^(s−m)，u = Σ e^(s−m)(s−m)。"
               "attnscale.torch.attention 精确计算每一行的输出、log-sum-exp 与熵，内存 O(L·d)。"
               "以下在 {device}（{threads} 线程，float32）上测得，取 {repeats} 次交替运行的中位数；"
               "每个比值都除以同一次运行中测得的普通 torch SDPA。"),
    },
    "time_caption": {"en": "Time ÷ plain SDPA (lower is better; 1 = free).",
                     "zh": "时间 ÷ 普通 SDPA（越低越好；1 表示没有额外开销）。"},
    "memory_caption": {"en": "Peak memory rise ÷ plain SDPA at {shape}, each variant in a fresh process.",
                       "zh": "{shape} 时的峰值内存增量 ÷ 普通 SDPA，每个变体在新进程中测量。"},
    "shape": {"en": "(B, H, L, d)", "zh": "(B, H, L, d)"},
    "variant": {"en": "variant", "zh": "变体"},
    "ratio": {"en": "ratio", "zh": "比值"},
    "mib": {"en": "MiB", "zh": "MiB"},
    "legend": {
        "en": ("sdpa: torch.nn.functional.scaled_dot_product_attention (output only). kernel: the fused C++ "
               "kernel, output + lse + entropy. kernel+range: also the max and min logit. composed: one fused "
               "PyTorch call on [V, K] (q, k zero-padded). naive: materialise the weights, then the entropy."),
        "zh": ("sdpa：torch 的 scaled_dot_product_attention（仅输出）。kernel：融合 C++ 内核，输出 + lse + 熵。"
               "kernel+range：另加最大与最小 logit。composed：对 [V, K] 调用一次 PyTorch 融合内核（q、k 补零）。"
               "naive：先生成权重矩阵，再算熵。"),
    },
    "alt_time": {"en": "Bar chart of time ratios to plain SDPA per variant and shape",
                 "zh": "各变体、各形状相对普通 SDPA 的时间比柱状图"},
    "kernel_missing": {"en": "The C++ kernel was not available in this run: {reason}.",
                       "zh": "本次运行中 C++ 内核不可用：{reason}。"},
    "noisy": {"en": "Load average after the run: {load}; on a busy machine the ratios are noisy.",
              "zh": "运行结束后的平均负载：{load}；机器繁忙时比值有噪声。"},
    "monitor": {
        "en": ("The monitor on {model} ({n} sequences, padded to {length} tokens): every attention call's rows, "
               "recomputed from q, k, v and aggregated per layer and head, never storing q, k or weights. "
               "Forward time ×{ratio:.2f}; outputs bit-for-bit equal to the unmonitored model: {equal}. "
               "float16 overflow (|logit| > 65504) in {overflow} of {calls} calls."),
        "zh": ("在 {model} 上运行监测器（{n} 个序列，填充到 {length} 个词元）：每次注意力调用的每一行都由 q、k、v "
               "重算，按层和头汇总，从不保存 q、k 或权重。前向时间 ×{ratio:.2f}；输出与未监测时逐位相同：{equal}。"
               "{calls} 次调用中有 {overflow} 次在 float16 下会溢出（|logit| > 65504）。"),
    },
    "layer": {"en": "layer", "zh": "层"},
    "mean_entropy": {"en": "mean entropy (nats)", "zh": "平均熵（奈特）"},
    "median_entropy": {"en": "median of head medians", "zh": "各头中位数的中位数"},
    "min_entropy": {"en": "min entropy", "zh": "最小熵"},
    "max_logit": {"en": "max logit", "zh": "最大 logit"},
    "lowest_head": {"en": "head with lowest mean entropy", "zh": "平均熵最低的头"},
}


_t = functools.partial(localize, TEXT)


def _time_figure(result: dict, lang: str):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    variants = [v for v in result["variants"] if v != "sdpa"]
    timing = result["timing"]
    fig, ax = plt.subplots(figsize=(6.4, 3.0))
    width = 0.8 / max(1, len(timing))
    for i, t in enumerate(timing):
        xs = [j + i * width for j in range(len(variants))]
        ax.bar(xs, [t["ratio_to_sdpa"][v] for v in variants], width, label=str(tuple(t["shape"])))
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks([j + width * (len(timing) - 1) / 2 for j in range(len(variants))], variants)
    ax.set_yscale("log")
    ax.set_ylabel("time ÷ SDPA")
    ax.legend(title=_t("shape", lang), fontsize=8)
    return fig


def _monitor_part(found: dict, lang: str) -> list[str]:
    overflow = sum(1 for c in found["calls"] if c["float16_overflow"])
    parts = [f"<p>{esc(_t('monitor', lang, model=found.get('model', '?'), n=found.get('n_sequences', '?'), length=found.get('padded_length', '?'), ratio=found['ratio'], equal=found['outputs_bitwise_equal'], overflow=overflow, calls=len(found['calls'])))}</p>"]
    layers: dict[str, list[dict]] = {}
    for head in found["heads"]:
        layers.setdefault(head["layer"], []).append(head)
    rows = []
    for name, heads in layers.items():
        lowest = min(heads, key=lambda h: h["entropy_mean"])
        rows.append([name, f"{sum(h['entropy_mean'] for h in heads) / len(heads):.3f}",
                     f"{statistics.median(h['entropy_median'] for h in heads):.3f}",
                     f"{min(h['entropy_min'] for h in heads):.3g}", f"{max(h['max_logit'] for h in heads):.2f}",
                     f"{lowest['head']} ({lowest['entropy_mean']:.3f})"])
    header = [_t(k, lang) for k in ("layer", "mean_entropy", "median_entropy", "min_entropy", "max_logit",
                                    "lowest_head")]
    parts.append(table(header, rows))
    return parts


def render(env, lang: str) -> str:
    result = {**env.data, "config": env.config}
    cfg = result["config"]
    parts = [f"<p>{esc(_t('intro', lang, device=cfg['device'], threads=result['threads'], repeats=cfg['repeats']))}</p>"]
    if not result["kernel"]["available"]:
        parts.append(f"<p>{esc(_t('kernel_missing', lang, reason=result['kernel']['reason']))}</p>")
    variants = result["variants"]
    rows = [[str(tuple(t["shape"]))] + [f"{t['ratio_to_sdpa'][v]:.2f}" for v in variants]
            + [f"{t['median_s']['sdpa'] * 1e3:.1f} ms"] for t in result["timing"]]
    parts.append(f"<p>{esc(_t('time_caption', lang))}</p>")
    parts.append(table([_t("shape", lang)] + variants + ["sdpa"], rows))
    parts.append(figure_svg(_time_figure(result, lang), _t("alt_time", lang), _t("time_caption", lang)))
    for m in result["memory"]:
        cells = [("—" if m["ratio_to_sdpa"].get(v) is None else f"{m['ratio_to_sdpa'][v]:.2f}") for v in variants]
        mib = [("—" if m["peak_rise_bytes"].get(v) is None else f"{m['peak_rise_bytes'][v] / 2**20:.0f}")
               for v in variants]
        parts.append(f"<p>{esc(_t('memory_caption', lang, shape=tuple(m['shape'])))}</p>")
        parts.append(table([_t("variant", lang)] + variants, [[_t("ratio", lang)] + cells, [_t("mib", lang)] + mib]))
    parts.append(f"<p>{esc(_t('legend', lang))}</p>")
    if result.get("load_average"):
        load = ", ".join(f"{x:.1f}" for x in result["load_average"])
        parts.append(f"<p>{esc(_t('noisy', lang, load=load))}</p>")
    if result.get("monitor"):
        parts += _monitor_part(result["monitor"], lang)
    return "\n".join(parts)
