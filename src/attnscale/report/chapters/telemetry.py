"""Report chapter: attention health at fused-kernel cost — what the per-row figures cost, forward and
forward + backward, and the monitor's per-layer figures on a real model.

Reads the ``telemetry`` result (written by ``attnscale telemetry-bench``) and only formats it: every
ratio, verdict and per-layer aggregate comes from ``env.data``.
"""

from __future__ import annotations

from attnscale.report import text
from attnscale.report.html import bullets, number, para, table

KIND = "telemetry"
TITLE = text.entry("telemetry", "title")
_t = text.words("telemetry")
HOW_TO = "attnscale telemetry-bench"

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
    return [para(head), table(header, rows)]


def render(env, lang: str) -> str:
    d = env.data
    machine = ", ".join(str(x) for x in (d["machine"].get("cpu"), f"{d['machine'].get('cores')} cores") if x)
    parts = [para(_t('intro', lang, date=env.created[:10], machine=machine, device=d['device'], threads=d['threads'], repeats=d['repeats']))]
    if not d["kernel"]["available"]:
        parts.append(para(_t('kernel_missing', lang, reason=d['kernel']['reason'])))
    for pass_, variants in d["variants"].items():
        others = [v for v in variants if v != "sdpa"]
        rows = [[_case(r, lang), f"{number(r['median_s']['sdpa'] * 1e3, '.0f')} ms"] + [_cell(r, v) for v in others]
                for r in d["rows"] if r["pass"] == pass_]
        parts += [para(_t('time_caption', lang, pass_=pass_)),
                  table([_t("case", lang), _t("sdpa_time", lang)] + others, rows)]
    if d["memory"]:
        variants = list(dict.fromkeys(v for r in d["memory"] for v in r["peak_rise_bytes"]))
        rows = [[f"{r['pass']}, {_case(r, lang)}"] + [number(r["ratio_to_sdpa"].get(v), ".2f") for v in variants]
                for r in d["memory"]]
        parts += [para(_t('memory_caption', lang)), table([_t("case", lang)] + variants, rows)]
    parts.append(bullets(_verdict(v, lang) for v in d["verdicts"]))
    parts.append(para(_t('legend', lang)))
    if d.get("monitor"):
        parts += _monitor(d["monitor"], lang)
    return "\n".join(parts)
