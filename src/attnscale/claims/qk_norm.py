"""Group 8, continued: designs that break the blog post's argument on purpose, and the output's scale.

QK-norm (RMSNorm on q and k, as in Gemma 3/4, Qwen3, OLMo 2) puts q and k on the sphere of radius √d, so
the logit scaling·q·k has standard deviation scaling·√d exactly (with per-channel gains g_q, g_k:
scaling·√(Σ g_q,i² g_k,i²), :func:`attnscale.theory.qk_norm_logit_std`). Gemma 4's text attention
uses scaling = 1.0: σ = 16 at head_dim 256 instead of 1. The figures of transformers issue #45676
(mean entropy ≈ 0.43 bits against 6.30 at T = 128, mean largest weight ≈ 0.885, at d = 256 on
synthetic RMS-normalised Gaussians) are judged here at the precision they print.

The output: with Q, K, V ~ N(0, 1) an output component of softmax(QKᵀ/√d_k)·V is N(0, Σⱼ pⱼ²) given
the weights, so ÷√d_k fixes the logits' scale but not the output's, which shrinks like √(Σ p²)
(Graphcore's unit-scaling repository prints 0.102 at n = 256, d_k = 64). The Monte Carlo averages
Σ p² exactly over V (V is independent of p), which leaves only Q and K to draw.
"""

from __future__ import annotations

import math

import numpy as np

from attnscale.claims.context import Context
from attnscale.claims.register import claim
from attnscale.claims.result import bracketed, clauses, interval_text, judge_all, judge_equal, judge_falling
from attnscale.i18n import N_, _
from attnscale.montecarlo import mean_ci
from attnscale.softmax_rows import softmax
from attnscale.theory import attention_output_std_asymptote, qk_norm_logit_std

T = 128  # keys (and queries) per row set, #45676's T
D_HEADS = (64, 128, 256, 512)
D_PUBLISHED = 256
# transformers #45676, on RMS-normalised Gaussians at T = 128, d = 256: the printed figures
PUBLISHED = {"entropy_1": "0.43", "entropy_sqrt": "6.30", "max_weight_1": "0.885"}
OUTPUT_N, OUTPUT_D, OUTPUT_PUBLISHED = 256, 64, "0.102"  # Graphcore's (seq, d_head) and printed std
STD_MARGIN = 0.01  # the logit std claim holds inside ±1% of its closed form
FLAT_BITS = 0.1  # "does not depend on d": the 1/√d entropies within this many bits of each other


def run(ctx: Context) -> None:
    rows = _saturation_by_d(ctx)
    _logit_std(ctx, rows.pop("draws"))
    _entropy_against_d(ctx, rows)
    _as_published(ctx, rows)
    _output_std(ctx)
    ctx.tick(N_("QK-norm and the output's scale"))


def rms_normalised(rng: np.random.Generator, shape: tuple[int, ...], d: int) -> np.ndarray:
    """Gaussian vectors put through RMSNorm without gain: (*shape, d), each of norm √d exactly."""
    x = rng.standard_normal((*shape, d))
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True))


def _sets(ctx: Context, per_set: int) -> int:
    """How many independent sets of ``per_set`` random numbers the budget affords (at least 64)."""
    budget = 2**22 if ctx.config.quick else 2**23
    return max(64, budget // per_set)


def set_means(values: np.ndarray, conf: float):
    """The mean of (sets, …) values and its interval from the per-set means (the sets are independent;
    the rows within a set share their keys)."""
    return mean_ci(values.reshape(values.shape[0], -1).mean(axis=1), conf)


def entropy_and_max(z: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Entropy (bits) and largest weight of the softmax rows of logits z: (..., n), both (...,): the two
    figures of :func:`attnscale.softmax_rows.row_health` this group needs, without its others (time)."""
    shifted = z - z.max(axis=-1, keepdims=True)
    e = np.exp(shifted)
    total = e.sum(axis=-1)
    nats = np.log(total) - np.sum(e * shifted, axis=-1) / total
    return nats / math.log(2), 1.0 / total  # the largest shifted logit is 0: its weight is 1/total


def _saturation_by_d(ctx: Context) -> dict:
    """Per d: entropy (bits) and largest weight of softmax rows of T RMS-normalised keys at scaling 1
    and 1/√d, their intervals, in ``ctx.data["qk_norm"]``; returned as {d: {scale: (H, max)}}, with
    the draws (q, k) at d = 256 that S8.6 also uses."""
    conf = ctx.config.confidence
    out: dict = {}
    series: dict = {"T": T, "d": list(D_HEADS), "scaling_1": {}, "scaling_sqrt": {}}
    for d in D_HEADS:
        rng = ctx.rng(f"qk-norm rows d={d}")
        sets = _sets(ctx, 2 * T * d)
        q, k = rms_normalised(rng, (sets, T), d), rms_normalised(rng, (sets, T), d)
        z = q @ k.transpose(0, 2, 1)
        out[d] = {"sets": sets}
        for key, scale in (("scaling_1", 1.0), ("scaling_sqrt", 1.0 / math.sqrt(d))):
            h, m = (set_means(x, conf) for x in entropy_and_max(scale * z))
            out[d][key] = (h, m)
            series[key][str(d)] = {
                "entropy_bits": [h.value, h.ci_low, h.ci_high],
                "max_weight": [m.value, m.ci_low, m.ci_high],
            }
        if d == D_PUBLISHED:
            out["draws"] = (q, k)
    ctx.data["qk_norm"] = series
    return out


def hand_gains(rng: np.random.Generator, d: int) -> tuple[np.ndarray, np.ndarray]:
    """Per-channel gains g_q, g_k of the kind trained q/k-norms hold: log-normal around 1, spread 0.5."""
    return np.exp(0.5 * rng.standard_normal(d)), np.exp(0.5 * rng.standard_normal(d))


def _logit_std(ctx: Context, draws: tuple[np.ndarray, np.ndarray]) -> None:
    """S8.6: the logit std of RMS-normalised q, k is scaling·√(Σ g_q,i² g_k,i²), at d = 256, scaling 1;
    draws: q, k (sets, T, 256) of :func:`_saturation_by_d`."""
    d, conf = D_PUBLISHED, ctx.config.confidence
    q, k = draws
    g_q, g_k = hand_gains(ctx.rng("qk-norm gains"), d)
    found = []  # (gains' label, estimate, lo, hi, closed form)
    for label, gq, gk in (("g = 1", None, None), ("g ~ logN(0, 0.5²)", g_q, g_k)):
        z = q @ k.transpose(0, 2, 1) if gq is None else (q * gq) @ (k * gk).transpose(0, 2, 1)
        var = set_means(z * z, conf)  # the mean of z is 0 by symmetry: E[z²] is the variance
        std = (math.sqrt(var.value), math.sqrt(max(var.ci_low, 0.0)), math.sqrt(var.ci_high))
        found.append((label, *std, qk_norm_logit_std(1.0, gq, gk, d=d)))
    parts = [judge_equal(lo, hi, exact, STD_MARGIN) for _label, _v, lo, hi, exact in found]
    unit = found[0]
    ctx.data["qk_norm"]["logit_std"] = {"d": d, "closed_form": unit[4], "mc": list(unit[1:4])}
    ctx.add(
        claim(
            "S8.6",
            N_(
                "RMS-normalised q, k (QK-norm): the logit std is scaling·√(Σ g_q,i² g_k,i²), scaling·√d with unit gains: {std} at d = {d}, scaling 1"
            ),
            std=f"{unit[4]:g}",
            d=str(d),
            expected=lambda: _(
                "the Monte Carlo std within ±{margin:.0%} of the closed form, with unit gains and with log-normal gains",
                margin=STD_MARGIN,
            ),
            measured=lambda: bracketed(
                clauses(
                    _("{gains}: {interval} against {exact:.3f}", gains=g, interval=interval_text(v, lo, hi), exact=x)
                    for g, v, lo, hi, x in found
                ),
                ctx.level,
            ),
            estimate=unit[1],
            ci_low=unit[2],
            ci_high=unit[3],
            margin=STD_MARGIN,
            n_samples=q.shape[0] * T * T,
            verdict=judge_all(parts),
            note=lambda: _(
                "exact for independent isotropic q, k: RMSNorm puts them on the sphere of radius √d; the ÷√d_k argument presumes std 1"
            ),
        )
    )


def judge_flat(intervals, width: float) -> str:
    """Are the quantities of ``intervals`` [(lo, hi), …] within ``width`` of one another? "holds" when all
    the intervals fit in one band of that width, "fails" when two are separated by more, else "inconclusive"."""
    lows, highs = [lo for lo, _hi in intervals], [hi for _lo, hi in intervals]
    if max(highs) - min(lows) <= width:
        return "holds"
    return "fails" if max(lows) - min(highs) > width else "inconclusive"


def _entropy_against_d(ctx: Context, rows: dict) -> None:
    """S8.7: with scaling 1 the entropy at T = 128 falls as d grows; with 1/√d it does not depend on d."""
    ci = {
        key: [(rows[d][key][0].ci_low, rows[d][key][0].ci_high) for d in D_HEADS]
        for key in ("scaling_1", "scaling_sqrt")
    }
    verdict = judge_all([judge_falling(ci["scaling_1"]), judge_flat(ci["scaling_sqrt"], FLAT_BITS)])

    def measured() -> str:
        per_d = (
            _(
                "d={d}: {one} vs {sqrt} bits, largest weight {m_one:.3f} vs {m_sqrt:.3f}",
                d=d,
                one=interval_text(rows[d]["scaling_1"][0].value, *ci["scaling_1"][i], ".2f"),
                sqrt=interval_text(rows[d]["scaling_sqrt"][0].value, *ci["scaling_sqrt"][i], ".2f"),
                m_one=rows[d]["scaling_1"][1].value,
                m_sqrt=rows[d]["scaling_sqrt"][1].value,
            )
            for i, d in enumerate(D_HEADS)
        )
        return bracketed(clauses(per_d), ctx.level)

    ctx.add(
        claim(
            "S8.7",
            N_(
                "QK-norm at T = {t} keys: with scaling 1 the attention saturates more as d grows ({d_min}…{d_max}); with 1/√d the entropy does not depend on d"
            ),
            t=str(T),
            d_min=str(D_HEADS[0]),
            d_max=str(D_HEADS[-1]),
            expected=lambda: _(
                "mean entropy (bits) at scaling 1 falls with d ({level} CIs separated); at 1/√d every d within {width} bits",
                level=ctx.level,
                width=FLAT_BITS,
            ),
            measured=measured,
            verdict=verdict,
            n_samples=sum(rows[d]["sets"] for d in D_HEADS) * T,
            note=lambda: _(
                "scaling 1 vs 1/√d; entropy of a uniform row is log₂ {t} = {bits:.2f} bits", t=T, bits=math.log2(T)
            ),
        )
    )


def judge_published(text: str, lo: float, hi: float) -> str:
    """A printed figure against a Monte Carlo interval: "holds" when the interval lies within half a unit
    of the figure's last digit, "fails" when it lies wholly outside that band, else "inconclusive"."""
    value = float(text)
    decimals = len(text.split(".")[1]) if "." in text else 0
    half = 0.5 * 10.0**-decimals
    if value - half <= lo and hi <= value + half:
        return "holds"
    return "fails" if hi < value - half or lo > value + half else "inconclusive"


def _as_published(ctx: Context, rows: dict) -> None:
    """S8.8: #45676's figures at d = 256, T = 128, at the precision they print."""
    at = rows[D_PUBLISHED]
    est = {"entropy_1": at["scaling_1"][0], "entropy_sqrt": at["scaling_sqrt"][0], "max_weight_1": at["scaling_1"][1]}
    parts = {key: judge_published(PUBLISHED[key], e.ci_low, e.ci_high) for key, e in est.items()}
    names = {
        "entropy_1": N_("entropy at scaling 1 (bits)"),
        "entropy_sqrt": N_("entropy at 1/√d (bits)"),
        "max_weight_1": N_("largest weight at scaling 1"),
    }
    differ = [key for key, v in parts.items() if v == "fails"]
    ctx.add(
        claim(
            "S8.8",
            N_(
                "transformers #45676, QK-norm at d = {d}, T = {t}: mean entropy ≈ {entropy_1} bits with scaling 1 against {entropy_sqrt} with 1/√d, mean largest weight ≈ {max_weight_1}"
            ),
            d=str(D_PUBLISHED),
            t=str(T),
            **PUBLISHED,
            expected=lambda: _(
                "each printed figure within half a unit of its last digit of the Monte Carlo mean ({level} CI)",
                level=ctx.level,
            ),
            measured=lambda: bracketed(
                clauses(
                    _(
                        "{name}: {interval} (printed {printed})",
                        name=_(names[k]),
                        interval=interval_text(e.value, e.ci_low, e.ci_high, ".4f"),
                        printed=PUBLISHED[k],
                    )
                    for k, e in est.items()
                ),
                ctx.level,
            ),
            estimate=est["entropy_1"].value,
            ci_low=est["entropy_1"].ci_low,
            ci_high=est["entropy_1"].ci_high,
            n_samples=at["sets"] * T,
            verdict=judge_all(parts.values()),
            note=lambda: published_note(differ, names),
        )
    )


def published_note(differ: list[str], names: dict[str, str]) -> str:
    """What the Monte Carlo says of the printed figures: which of them differ at their precision."""
    if not differ:
        return _("the printed figures agree with the Monte Carlo at their precision (or the interval cannot tell)")
    return _(
        "differs at its printed precision: {which}; the measured value is the true one",
        which=clauses((_(names[k]) for k in differ), ","),
    )


def _output_std(ctx: Context) -> None:
    """S8.9: the output std of softmax(QKᵀ/√d_k)V with Q, K, V ~ N(0, 1) at (256, 64), Graphcore's 0.102."""
    n, d, conf = OUTPUT_N, OUTPUT_D, ctx.config.confidence
    rng = ctx.rng("output std")
    sets = _sets(ctx, 2 * n * d)
    q, k = rng.standard_normal((sets, n, d)), rng.standard_normal((sets, n, d))
    p = softmax(q @ k.transpose(0, 2, 1) / math.sqrt(d))
    var = set_means(np.sum(p * p, axis=-1), conf)  # E[O²] = E[Σⱼ pⱼ²]: V averaged out exactly
    std, lo, hi = math.sqrt(var.value), math.sqrt(var.ci_low), math.sqrt(var.ci_high)
    asymptote = attention_output_std_asymptote(n, d)
    ctx.data["output_std"] = {
        "n": n,
        "d_k": d,
        "mc": [std, lo, hi],
        "asymptote": asymptote,
        "published": OUTPUT_PUBLISHED,
    }
    ctx.add(
        claim(
            "S8.9",
            N_(
                "÷√d_k fixes the logits, not the output: with Q, K, V ~ N(0, 1), n = {n}, d_k = {d_k}, the output std of softmax(QKᵀ/√d_k)V is about {published} (Graphcore), not 1"
            ),
            n=str(n),
            d_k=str(d),
            published=OUTPUT_PUBLISHED,
            expected=lambda: _(
                "std = √E[Σⱼ pⱼ²]; the printed {published} within half a unit of its last digit of the Monte Carlo ({level} CI)",
                published=OUTPUT_PUBLISHED,
                level=ctx.level,
            ),
            measured=lambda: bracketed(
                _(
                    "{interval}; large-n closed form √((1 − 2/d_k)^(−d_k/2)/n) = {asymptote:.4f}, √(e/n) = {e_n:.4f}",
                    interval=interval_text(std, lo, hi, ".4f"),
                    asymptote=asymptote,
                    e_n=math.sqrt(math.e / n),
                ),
                ctx.level,
            ),
            estimate=std,
            ci_low=lo,
            ci_high=hi,
            n_samples=sets * n,
            verdict=judge_published(OUTPUT_PUBLISHED, lo, hi),
            note=lambda: _(
                "the output shrinks like √(Σ p²) ≈ √(e/n): ÷√d_k keeps each weight's logit at std 1, not the weighted sum of values"
            ),
        )
    )
