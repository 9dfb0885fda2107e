"""Report chapter: attention health at fused-kernel cost — what the per-row figures cost, forward and
forward + backward, and the monitor's per-layer figures on a real model.

Reads the ``telemetry`` result (written by ``attnscale telemetry-bench``) and only formats it: every
ratio, verdict and per-layer aggregate comes from ``env.data``.
"""

from __future__ import annotations


from attnscale.i18n import N_, _
from attnscale.report.html import bullets, para, table
from attnscale.report.numbers import number
from attnscale.softmax_rows import FLOAT16_MAX

KIND = "telemetry"
TITLE = N_("Watching attention health without the L×S matrix")
HOW_TO = "attnscale telemetry-bench"

#: A target of the benchmark against what was measured: see verdict_key.
VERDICT_SENTENCES = {
    "met": N_("{what} {pass_} at {where}: {ratio}× against a target of ≤ {target}× — met."),
    "missed": N_("{what} {pass_} at {where}: {ratio}× against a target of ≤ {target}× — missed by {excess}%."),
    "unmeasured": N_("{what} {pass_} at {where}: not measured (the run failed)."),
}
#: The result's passes and measures (its English keys) as the page names them.
PASS_NAME = {"forward": N_("forward", "pass"), "forward+backward": N_("forward + backward", "pass")}
MEASURE_NAME = {"time": N_("time", "measure"), "peak memory": N_("peak memory", "measure")}
#: The monitor's outputs against the unmonitored model's: bit-for-bit equal or not.
YES_NO = {True: N_("yes"), False: N_("no")}
#: The variants whose share of the float32 GEMM peak the time tables show (where the result has it).
SHARED = ("sdpa", "kernel")


def verdict_key(verdict: dict) -> str:
    """The key of :data:`VERDICT_SENTENCES` for one of the result's verdicts."""
    return "unmeasured" if verdict["ratio"] is None else "met" if verdict["met"] else "missed"


def _named(names: dict, key: str) -> str:
    """``key`` of the result as ``names`` words it in the bound language; a key this code does not know, as stored."""
    return _(names[key]) if key in names else key


def _case(row: dict) -> str:
    return str(tuple(row["shape"])) + (f", {_('causal')}" if row["causal"] else "")


def _cell(row: dict, variant: str) -> str:
    return (
        f"{number(row['ratio_to_sdpa'].get(variant), '.2f')} ({number(row['cpu_ratio_to_sdpa'].get(variant), '.2f')})"
    )


def _share(row: dict, variant: str) -> str:
    """The variant's ratio to the GEMM peak in ``row`` as a percentage; "—" where there is none."""
    x = row.get("ratio_to_peak", {}).get(variant)
    return "—" if x is None else f"{number(100 * x, '.1f')}%"


def _peak(peak: dict) -> str:
    """The result's fp32 GEMM peak, and what each share of it in the time tables divides."""
    return _(
        "% of GEMM peak: the attention's flops per second, as FlashAttention's papers count them (each matrix product 2·B·H·P·d flops, P the query–key pairs attended), ÷ this machine's float32 peak, measured in the same run by the same BLAS and threads: {gflops} GFLOP/s from one {n}×{n} torch.mm.",
        gflops=number(peak["gflops"], ".1f"),
        n=peak["n"],
    )


def verdict_sentence(v: dict) -> str:
    return _(
        VERDICT_SENTENCES[verdict_key(v)],
        what=_named(MEASURE_NAME, v["measure"]),
        pass_=_named(PASS_NAME, v["pass"]),
        where=_case(v),
        ratio=number(v["ratio"], ".2f"),
        target=number(v["target"], "g"),
        excess=number(None if v["excess"] is None else 100 * v["excess"], ".0f"),
    )


def _monitor(m: dict) -> list[str]:
    head = _(
        "The monitor on {model} ({n} sequences, padded to {length} tokens), per layer: forward time ×{ratio}; outputs bit-for-bit equal to the unmonitored model: {equal}; float16 overflow (|logit| > {limit}) in {overflow} of {calls} calls.",
        limit=f"{FLOAT16_MAX:g}",
        model=m["model"],
        n=m["n_sequences"],
        length=m["padded_length"],
        ratio=number(m["ratio"], ".2f"),
        equal=_(YES_NO[bool(m["outputs_bitwise_equal"])]),
        overflow=m["float16_overflow_calls"],
        calls=m["calls_per_forward"],
    )
    rows = [
        [
            r["layer"],
            number(r["entropy_mean"]),
            number(r["entropy_median_of_medians"]),
            number(r["entropy_min"]),
            number(r["max_logit"], ".2f"),
            f"{r['lowest_head']} ({number(r['lowest_head_entropy_mean'])})",
        ]
        for r in m["layers"]
    ]
    header = [
        _("layer"),
        _("mean entropy (nats)"),
        _("median of head medians"),
        _("min entropy"),
        _("max logit"),
        _("head with lowest mean entropy"),
    ]
    return [para(head), table(header, rows)]


def render(env) -> str:
    d = env.data
    machine = ", ".join(str(x) for x in (d["machine"].get("cpu"), f"{d['machine'].get('cores')} cores") if x)
    parts = [
        para(
            _(
                "Each row's entropy needs only two running sums next to the softmax sum: entropy = ln l − u/l with l = Σ e^(s−m) and u = Σ e^(s−m)(s−m). attnscale.torch.attention computes the output, the log-sum-exp and the entropy of every row, exactly, in memory O(L·d), and its backward recomputes the probabilities from the saved log-sum-exp. "
                "Measured {date} on {machine} ({device}, {threads} threads), medians of {repeats} interleaved runs; every ratio divides by plain torch SDPA measured in the same run (CPU time in brackets).",
                date=env.created[:10],
                machine=machine,
                device=d["device"],
                threads=d["threads"],
                repeats=d["repeats"],
            )
        )
    ]
    if d.get("peak"):  # results made before the peak was measured have none
        parts.append(para(_peak(d["peak"])))
    if not d["kernel"]["available"]:
        parts.append(para(_("The C++ kernel was not available in this run: {reason}.", reason=d["kernel"]["reason"])))
    for pass_, variants in d["variants"].items():
        others = [v for v in variants if v != "sdpa"]
        shared = [v for v in SHARED if v in variants] if d.get("peak") else []
        rows = [
            [_case(r), f"{number(r['median_s']['sdpa'] * 1e3, '.0f')} ms"]
            + [_cell(r, v) for v in others]
            + [_share(r, v) for v in shared]
            for r in d["rows"]
            if r["pass"] == pass_
        ]
        parts += [
            para(_("{pass_}: time ÷ plain SDPA (lower is better; 1 = free).", pass_=_named(PASS_NAME, pass_))),
            table(
                [_("case"), _("SDPA median")] + others + [_("{variant}: % of GEMM peak", variant=v) for v in shared],
                rows,
            ),
        ]
    if d["memory"]:
        variants = list(dict.fromkeys(v for r in d["memory"] for v in r["peak_rise_bytes"]))
        rows = [
            [f"{_named(PASS_NAME, r['pass'])}, {_case(r)}"]
            + [number(r["ratio_to_sdpa"].get(v), ".2f") for v in variants]
            for r in d["memory"]
        ]
        parts += [
            para(_("Peak memory rise ÷ plain SDPA, each variant in a fresh process.")),
            table([_("case")] + variants, rows),
        ]
    parts.append(bullets(verdict_sentence(v) for v in d["verdicts"]))
    parts.append(
        para(
            _(
                "sdpa: torch.nn.functional.scaled_dot_product_attention (output only). kernel: the fused C++ kernel, output + lse + entropy. kernel+range: also the max and min logit. composed: one fused PyTorch call on [V, K] (q, k zero-padded). naive: materialise the weights, then the entropy."
            )
        )
    )
    if d.get("monitor"):
        parts += _monitor(d["monitor"])
    return "\n".join(parts)
