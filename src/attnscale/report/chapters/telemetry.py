"""Report chapter: attention health at fused-kernel cost — what the per-row figures cost, forward and
forward + backward, and the monitor's per-layer figures on a real model.

Reads the ``telemetry`` result (written by ``attnscale telemetry-bench``) and only formats it: every
ratio, verdict and per-layer aggregate comes from ``env.data``.
"""

from __future__ import annotations

import functools

from attnscale.report.html import esc, number, table
from attnscale.report.text import localize

KIND = "telemetry"
TITLE = {"en": "Watching attention health without the L×S matrix",
         "zh": "不生成 L×S 矩阵也能监测注意力的健康"}
HOW_TO = "attnscale telemetry-bench"

TEXT = {
    "intro": {
        "en": ("Each row's entropy needs only two running sums next to the softmax sum: entropy = ln l − u/l with "
               "l = Σ e^(s−m) and u = Σ e^(s−m)(s−m). attnscale.torch.attention computes the output, the "
               "log-sum-exp and the entropy of every row, exactly, in memory O(L·d), and its backward recomputes "
               "the probabilities from the saved log-sum-exp. Measured {date} on {machine} ({device}, {threads} "
               "threads), medians of {repeats} interleaved runs; every ratio divides by plain torch SDPA measured "
               "in the same run (CPU time in brackets)."),
        "zh": ("每一行的熵只需在 softmax 求和旁再累加两个量：熵 = ln l − u/l，其中 l = Σ e^(s−m)，"
               "u = Σ e^(s−m)(s−m)。attnscale.torch.attention 精确计算每一行的输出、log-sum-exp 与熵，内存 O(L·d)；"
               "其反向传播由保存的 log-sum-exp 重算概率。{date} 在 {machine}（{device}，{threads} 线程）上测得，"
               "取 {repeats} 次交替运行的中位数；每个比值都除以同一次运行中测得的普通 torch SDPA（括号内为 CPU 时间）。"),
    },
    "time_caption": {"en": "{pass_}: time ÷ plain SDPA (lower is better; 1 = free).",
                     "zh": "{pass_}：时间 ÷ 普通 SDPA（越低越好；1 表示没有额外开销）。"},
    "memory_caption": {"en": "Peak memory rise ÷ plain SDPA, each variant in a fresh process.",
                       "zh": "峰值内存增量 ÷ 普通 SDPA，每个变体在新进程中测量。"},
    "case": {"en": "case", "zh": "情形"},
    "sdpa_time": {"en": "SDPA median", "zh": "SDPA 中位数"},
    "causal": {"en": "causal", "zh": "因果"},
    "met": {"en": "{what} {pass_} at {where}: {ratio}× against a target of ≤ {target}× — met.",
            "zh": "{where} 的 {pass_} {what}：{ratio}×，目标 ≤ {target}×，达到。"},
    "missed": {"en": "{what} {pass_} at {where}: {ratio}× against a target of ≤ {target}× — missed by {excess}%.",
               "zh": "{where} 的 {pass_} {what}：{ratio}×，目标 ≤ {target}×，差 {excess}%。"},
    "unmeasured": {"en": "{what} {pass_} at {where}: not measured (the run failed).",
                   "zh": "{where} 的 {pass_} {what}：未测得（运行失败）。"},
    "legend": {
        "en": ("sdpa: torch.nn.functional.scaled_dot_product_attention (output only). kernel: the fused C++ "
               "kernel, output + lse + entropy. kernel+range: also the max and min logit. composed: one fused "
               "PyTorch call on [V, K] (q, k zero-padded). naive: materialise the weights, then the entropy."),
        "zh": ("sdpa：torch 的 scaled_dot_product_attention（仅输出）。kernel：融合 C++ 内核，输出 + lse + 熵。"
               "kernel+range：另加最大与最小 logit。composed：对 [V, K] 调用一次 PyTorch 融合内核（q、k 补零）。"
               "naive：先生成权重矩阵，再算熵。"),
    },
    "kernel_missing": {"en": "The C++ kernel was not available in this run: {reason}.",
                       "zh": "本次运行中 C++ 内核不可用：{reason}。"},
    "monitor": {
        "en": ("The monitor on {model} ({n} sequences, padded to {length} tokens), per layer: forward time ×{ratio}; "
               "outputs bit-for-bit equal to the unmonitored model: {equal}; float16 overflow (|logit| > 65504) in "
               "{overflow} of {calls} calls."),
        "zh": ("在 {model} 上运行监测器（{n} 个序列，填充到 {length} 个词元），按层汇总：前向时间 ×{ratio}；"
               "输出与未监测时逐位相同：{equal}；{calls} 次调用中有 {overflow} 次在 float16 下会溢出（|logit| > 65504）。"),
    },
    "layer": {"en": "layer", "zh": "层"},
    "mean_entropy": {"en": "mean entropy (nats)", "zh": "平均熵（奈特）"},
    "median_entropy": {"en": "median of head medians", "zh": "各头中位数的中位数"},
    "min_entropy": {"en": "min entropy", "zh": "最小熵"},
    "max_logit": {"en": "max logit", "zh": "最大 logit"},
    "lowest_head": {"en": "head with lowest mean entropy", "zh": "平均熵最低的头"},
}

_t = functools.partial(localize, TEXT)


def _case(row: dict, lang: str) -> str:
    return str(tuple(row["shape"])) + (f", {_t('causal', lang)}" if row["causal"] else "")


def _cell(row: dict, variant: str) -> str:
    return f"{number(row['ratio_to_sdpa'].get(variant), '.2f')} ({number(row['cpu_ratio_to_sdpa'].get(variant), '.2f')})"


def _verdict(v: dict, lang: str) -> str:
    key = "unmeasured" if v["ratio"] is None else ("met" if v["met"] else "missed")
    return _t(key, lang, what=v["measure"], pass_=v["pass"], where=_case(v, lang), ratio=number(v["ratio"], ".2f"),
              target=number(v["target"], "g"), excess=number(None if v["excess"] is None else 100 * v["excess"], ".0f"))


def _monitor(m: dict, lang: str) -> list[str]:
    head = _t("monitor", lang, model=m["model"], n=m["n_sequences"], length=m["padded_length"],
              ratio=number(m["ratio"], ".2f"), equal=m["outputs_bitwise_equal"],
              overflow=m["float16_overflow_calls"], calls=m["calls_per_forward"])
    rows = [[r["layer"], number(r["entropy_mean"]), number(r["entropy_median_of_medians"]), number(r["entropy_min"]),
             number(r["max_logit"], ".2f"), f"{r['lowest_head']} ({number(r['lowest_head_entropy_mean'])})"]
            for r in m["layers"]]
    header = [_t(k, lang) for k in ("layer", "mean_entropy", "median_entropy", "min_entropy", "max_logit", "lowest_head")]
    return [f"<p>{esc(head)}</p>", table(header, rows)]


def render(env, lang: str) -> str:
    d = env.data
    machine = ", ".join(str(x) for x in (d["machine"].get("cpu"), f"{d['machine'].get('cores')} cores") if x)
    parts = [f"<p>{esc(_t('intro', lang, date=env.created[:10], machine=machine, device=d['device'], threads=d['threads'], repeats=d['repeats']))}</p>"]
    if not d["kernel"]["available"]:
        parts.append(f"<p>{esc(_t('kernel_missing', lang, reason=d['kernel']['reason']))}</p>")
    for pass_, variants in d["variants"].items():
        others = [v for v in variants if v != "sdpa"]
        rows = [[_case(r, lang), f"{number(r['median_s']['sdpa'] * 1e3, '.0f')} ms"] + [_cell(r, v) for v in others]
                for r in d["rows"] if r["pass"] == pass_]
        parts += [f"<p>{esc(_t('time_caption', lang, pass_=pass_))}</p>",
                  table([_t("case", lang), _t("sdpa_time", lang)] + others, rows)]
    if d["memory"]:
        variants = list(dict.fromkeys(v for r in d["memory"] for v in r["peak_rise_bytes"]))
        rows = [[f"{r['pass']}, {_case(r, lang)}"] + [number(r["ratio_to_sdpa"].get(v), ".2f") for v in variants]
                for r in d["memory"]]
        parts += [f"<p>{esc(_t('memory_caption', lang))}</p>", table([_t("case", lang)] + variants, rows)]
    parts.append("<ul>" + "".join(f"<li>{esc(_verdict(v, lang))}</li>" for v in d["verdicts"]) + "</ul>")
    parts.append(f"<p>{esc(_t('legend', lang))}</p>")
    if d.get("monitor"):
        parts += _monitor(d["monitor"], lang)
    return "\n".join(parts)
