"""The words of the blog post's chapters (its own, and the beyond chapter): each chapter's title and
paragraphs, the beyond chapter's subsections, each figure's alt text and caption, and the values that
fill their ``{named}`` placeholders, taken from the verification's result (:func:`facts`).

The messages are gettext messages (:mod:`attnscale.i18n`), marked with ``N_`` in tables keyed by the
chapter ids of the verification's outline and by the data blocks the figures draw; :mod:`attnscale.report.seed`
translates and fills them. A placeholder without a value is an error (:class:`attnscale.i18n.TextError`),
never a stand-in.
"""

from __future__ import annotations

from typing import NamedTuple

from attnscale.i18n import N_, _
from attnscale.report.numbers import percent
from attnscale.report.text import listed


class Chapter(NamedTuple):
    title: str  # an N_ message
    paras: tuple[str, ...]  # N_ messages, one per paragraph


# The blog post the verification checks (the code's "seed", as in seed.py: never a random seed on the page):
# named and linked on the page.
SEED_POST = {
    "title": N_("Why we scale the dot-product attention by √d_k"),
    "author": "Amit Shekhar",
    "published": N_("Outcome School blog"),
    "url": "https://outcomeschool.com/blog",
}

# The blog post's chapters, by the chapter ids of the verification's outline (data["chapters"]).
CHAPTERS: dict[str, Chapter] = {
    "formula": Chapter(
        N_("The formula (a quick recap)"),
        (
            N_(
                "Scaled dot-product attention turns queries, keys and values into outputs: every query is compared with every key by a dot product, the scores are divided by √d_k, a softmax turns each row of scores into weights that sum to 1, and the output is the weighted sum of the values. d_k is the length of the query and key vectors."
            ),
            N_(
                "This page is about the “÷ √d_k”. "
                "The blog post explains it in {n_seed_chapters} sections (its FAQ included); each chapter below retells one of them and then shows what we measured, with a verdict."
            ),
        ),
    ),
    "without_scaling": Chapter(
        N_("What happens without scaling?"),
        (
            N_(
                "Skip the division and feed Q·Kᵀ straight into the softmax. "
                "The blog post says that in real models d_k is 64, 128 or more, that the raw scores grow with it, and that a softmax of large scores is nearly one-hot (one key takes almost all the weight, the others almost none), so that the gradients that should teach the model shrink toward zero. "
                "The verdicts below say which of these hold as stated."
            ),
            N_("Try it below: pick “unscaled” and drag d_k to the right. Then switch back to 1/√d_k."),
            N_(
                "One row is an anecdote. "
                "The figures after it summarise many random rows: the typical row (median) and the spread of rows (10%–90% band), for n = {sat_ns} keys."
            ),
        ),
    ),
    "why_grows": Chapter(
        N_("Why does the dot product grow with d_k?"),
        (
            N_(
                "q·k = q₁k₁ + q₂k₂ + … adds d_k terms qᵢkᵢ, one per component i = 1, …, d_k. "
                "They are positive and negative and partly cancel, but not completely: the more terms, the wider the spread of the sum."
            ),
            N_(
                "The histograms below show q·k for random vectors at d_k = {hist_dks}. "
                "Unscaled (left), the spread widens with d_k; divided by √d_k (right), the {n_hist} curves lie almost on top of each other."
            ),
        ),
    ),
    "variance": Chapter(
        N_("The variance of the dot product"),
        (
            N_(
                "Variance measures spread. "
                "If every component of q and k has mean 0 and variance 1, each product qᵢkᵢ has mean 0 and variance 1, and the d_k independent products add up to a variance of d_k."
            ),
            N_(
                "We measured the variance by Monte Carlo for d_k from {var_dk_min} to {var_dk_max}. "
                "On log–log axes a variance equal to d_k is a line of slope 1; the error bars are {level} confidence intervals."
            ),
        ),
    ),
    "proof": Chapter(
        N_("Step by step: the variance is d_k"),
        (
            N_(
                "With mean 0, the variance is the average of the square. "
                "Squaring a sum of d_k terms gives d_k × d_k products: d_k of them pair a term with itself and average 1; the others mix different, independent components and average 0. "
                "So the variance is exactly d_k."
            ),
            N_("The verification expands E[(Σ qᵢkᵢ)²] symbolically and counts the terms."),
        ),
    ),
    "softmax_large": Chapter(
        N_("What large dot products do to softmax"),
        (
            N_(
                "eˣ grows extremely fast, so in a softmax the largest score takes over as the scores grow apart. "
                "The blog post's two examples, [50, 10, 5] and [5, 1, 0.5], show it; the figure also shows them divided by 8, as the next chapters will do."
            ),
            N_(
                "Every value of the blog post's eˣ table is recomputed with exact arithmetic and compared at the precision the blog post prints it."
            ),
        ),
    ),
    "why_sqrt": Chapter(
        N_("Why √d_k is the right factor"),
        (
            N_(
                "Dividing a random variable by a constant c divides its variance by c². "
                "The dot product has variance d_k, so d_k / c² = 1 gives c = √d_k: the one factor that brings the variance back to 1 at every d_k. "
                "The blog post's [2, 4, 6] example shows the c² rule."
            ),
        ),
    ),
    "real_numbers": Chapter(
        N_("Checking with real numbers"),
        (
            N_(
                "The blog post's worked examples: a dot product at d_k = 4, and three scores [14, 10, 12] at d_k = 64, before and after dividing by √64 = 8. "
                "Every digit it prints is recomputed below."
            ),
        ),
    ),
    "faq": Chapter(
        N_("FAQ"),
        (
            N_(
                "Does scaling matter when d_k is small? "
                "Is the variance only approximately d_k? "
                "The blog post's answers to these two, checked. "
                "(Who introduced the factor is a matter of record, Vaswani et al. 2017, not of measurement: nothing here checks it.)"
            ),
            N_(
                "“Exact, not approximate” can be watched: the Monte Carlo estimate of the variance closes in on d_k with an error that shrinks as 1/√N, as it must for an exact value."
            ),
        ),
    ),
    "beyond": Chapter(
        N_("Beyond the blog post"),
        (
            N_(
                "The blog post's argument rests on assumptions (independent components, mean 0, variance 1) and on one fixed number of keys. "
                "Here we change both and measure what happens."
            ),
        ),
    ),
}

# The beyond chapter's subsections: (heading, paragraph), by the key of seed.BEYOND_PARTS.
BEYOND: dict[str, tuple[str, str]] = {
    "broken": (
        N_("When the assumptions break"),
        N_(
            "With means μ, variances σ² or correlated q and k, the measured variance follows the general formula Var(q·k) = d_k(σ_q²σ_k² + μ_q²σ_k² + μ_k²σ_q²) (plus the correlation term), and ÷√d_k no longer brings it back to 1."
        ),
    ),
    "phase": (
        N_("√d_k removes d_k, not the number of keys n"),
        N_(
            "Softmax of n random logits with standard deviation σ freezes onto a few keys once σ passes √(2 ln n). "
            "Unscaled logits have σ = √d_k, so unscaled attention on random inputs is frozen once d_k > 2 ln n; after ÷√d_k, σ = 1 and the boundary is never reached."
        ),
    ),
    "ssmax": (
        N_("Scalable-Softmax: the fading maximum"),
        N_(
            "Fix the logits (all −2 but one +3) and add keys: the largest weight fades as n grows. "
            "Multiplying the logits by s·ln n (s = {ssmax_s}) keeps it near 1."
        ),
    ),
    "give": (
        N_("Softmax must give all its weight away"),
        N_(
            "Softmax's weights sum to 1 even when nothing deserves attention: equal logits give uniform weights, whatever their value. softmax₁ (Miller 2023) adds 1 to the denominator and can give almost nothing away."
        ),
    ),
}

# The beyond chapter's subsections on QK-norm and the output's scale (seed.BEYOND_QK), drawn only when
# the verification holds their data.
BEYOND_QK: dict[str, tuple[str, str]] = {
    "qk_norm": (
        N_("QK-norm: a design that sets the logits' spread"),
        N_(
            "RMSNorm on q and k (QK-norm: Gemma 3 and 4, Qwen3) puts both on the sphere of radius √d, so the logits' standard deviation is scaling·√d, whatever the inputs (with per-channel gains g: scaling·√(Σ g_q² g_k²)): "
            "{qk_std} at d = {qk_d} with scaling 1, Gemma 4's choice, where the blog post's ÷√d_k would give 1. "
            "At T = {qk_t} keys the mean entropy is then {qk_h1} bits against {qk_hs} with 1/√d, and the largest weight {qk_m1} against {qk_ms}. "
            "A checkpoint's learned gains change the spread: attnscale probe predicts it per layer from the gains and measures it on text."
        ),
    ),
    "output": (
        N_("÷√d_k fixes the logits, not the output"),
        N_(
            "With Q, K, V ~ N(0, 1), an output component of softmax(QKᵀ/√d_k)·V has variance Σⱼ pⱼ², not 1: "
            "at n = {out_n} keys and d_k = {out_d} its standard deviation is {out_std} (Monte Carlo), near the large-n closed form {out_asymptote}; Graphcore's unit-scaling repository prints {out_published}. "
            "By the closed form it shrinks like 1/√n as keys are added."
        ),
    ),
}

# Each figure's (alt text, caption), by the data block it draws (its figure function in report.figures).
CAPTIONS: dict[str, tuple[str, str]] = {
    "variance_vs_dk": (
        N_("Variance of q·k against d_k, unscaled and scaled"),
        N_(
            "Monte Carlo variance of q·k (left) and of q·k/√d_k (right) for several component distributions, with {level} confidence intervals. "
            "Left: the dashed line Var = d_k has slope 1 on these log–log axes. "
            "Right: after ÷√d_k every point sits on Var = 1."
        ),
    ),
    "dot_histograms": (
        N_("Histograms of q·k at d_k = {hist_dks}"),
        N_(
            "Distribution of q·k for random q, k with iid N(0, 1) components. "
            "Unscaled, the spread grows like √d_k; divided by √d_k the {n_hist} histograms coincide."
        ),
    ),
    "seed_softmax_examples": (
        N_("The blog post's softmax examples, before and after ÷8"),
        N_(
            "Softmax weights of the blog post's score vectors, recomputed: as given (red) and divided by √64 = 8 (blue)."
        ),
    ),
    "error_vs_samples": (
        N_("The error of the variance estimate against the number of samples"),
        N_(
            "Root-mean-square error of the Monte Carlo estimate of Var(q·k) around the exact d_k, over repeated runs, against the sample count N. "
            "The dashed line is the predicted σ/√N: an exact value is approached at exactly this rate."
        ),
    ),
    "give_away": (
        N_("Softmax gives all its weight away; softmax₁ need not"),
        N_("Total weight of a row of n equal logits c: always 1 for softmax, n·e^c/(1 + n·e^c) for softmax₁."),
    ),
    "saturation": (
        N_("Saturation: the largest weight and the entropy against d_k"),
        N_(
            "For rows of n random keys: the median row (line) and the 10%–90% band of rows (shade). "
            "Solid red: unscaled; dashed blue: ÷√d_k; darker = more keys. "
            "Entropy is divided by ln n, its value for uniform weights."
        ),
    ),
    "jacobian": (
        N_("The softmax Jacobian's norm against d_k"),
        N_(
            "Frobenius norm of ∂softmax/∂z per row: median (line) and 10%–90% band; dotted: the mean over rows, unscaled. {jac_story}"
        ),
    ),
    "phase": (
        N_("Phase diagram over the logits' spread σ and the number of keys n"),
        N_(
            "Mean entropy / ln n of softmax rows of n iid N(0, σ²) logits (Monte Carlo, {level} CI bands on the right). "
            "Unscaled attention has σ = √d_k (top axis). "
            "The red dashed line is the boundary σ = √(2 ln n), i.e. d_k = 2 ln n: beyond it the rows are frozen. "
            "Right: dashed, the random-energy-model asymptote ln n − σ²/2 — an asymptote, visibly off near the boundary."
        ),
    ),
    "broken_assumptions": (
        N_("Variance when the blog post's assumptions break"),
        N_(
            "Measured variance after ÷√d_k (dots, {level} CI) against the general formula (bars). "
            "The dotted line is the variance 1 that ÷√d_k promises under the blog post's assumptions."
        ),
    ),
    "ssmax": (
        N_("Scalable-Softmax keeps the maximum from fading"),
        N_(
            "All logits −2 except the last, +3: the largest softmax weight against the number of keys n, plain softmax vs logits multiplied by s·ln n (Nakanishi 2025, Figure 1)."
        ),
    ),
}

# The QK-norm subsection's figure (figures_qk), apart from CAPTIONS: drawn only with its data.
QK_CAPTIONS: dict[str, tuple[str, str]] = {
    "qk_norm": (
        N_("Entropy and largest weight of QK-normed attention against d, scaling 1 and 1/√d"),
        N_(
            "Softmax rows of T = {qk_t} RMS-normalised Gaussian keys: mean entropy in bits (left; dashed, the uniform row's log₂ T) and mean largest weight (right), with {level} confidence intervals. "
            "Red: scaling 1 (logit std √d); blue: 1/√d (std 1)."
        ),
    ),
}

# The Jacobian caption's reading of its curve, one clause per number of keys n: whether the unscaled
# median drops below the scaled one for good on the grid, and whether the verification found its peak.
JACOBIAN_CLAUSES = {
    (True, True): N_("n = {n}: below the scaled one from d_k = {d_k} on, peaks at d_k = {peak}"),
    (True, False): N_("n = {n}: below the scaled one from d_k = {d_k} on"),
    (False, True): N_("n = {n}: never below the scaled one on this grid, peaks at d_k = {peak}"),
    (False, False): N_("n = {n}: never below the scaled one on this grid"),
}


def facts(data: dict, config: dict | None = None, outline: list | None = None) -> dict[str, str]:
    """The values of the prose's placeholders in the bound language, from the verification's result (its
    settings, formatted, never typed here): which d_k the histograms use, which n the saturation rows
    have, SSMax's s, the range of d_k of the variance, the reading of the Jacobian's curve, the
    confidence level (``config``), the number of the blog post's chapters (``outline``). A value the
    result does not hold is absent: a message that needs it raises."""
    out = {}
    if (config or {}).get("confidence") is not None:
        out["level"] = percent(config["confidence"])
    if outline:
        out["n_seed_chapters"] = str(sum(entry["part"] == "seed" for entry in outline))
    var = next(iter((data.get("variance_vs_dk") or {}).values()), None)
    if var and var.get("d_k"):
        out["var_dk_min"], out["var_dk_max"] = str(min(var["d_k"])), str(max(var["d_k"]))
    hist = data.get("dot_histograms") or {}
    dks = [str(h.get("d_k", k)) for k, h in hist.items()]
    if dks:
        out["hist_dks"] = listed(dks)
        out["n_hist"] = str(len(dks))
    ns = list((data.get("saturation") or {}).get("by_n", {}))
    if ns:
        out["sat_ns"] = listed(ns)
    out["jac_story"] = jacobian_story(data.get("jacobian") or {})
    if (data.get("ssmax") or {}).get("s") is not None:
        out["ssmax_s"] = f"{data['ssmax']['s']:g}"
    out.update(qk_facts(data))
    return out


def qk_facts(data: dict) -> dict[str, str]:
    """The QK-norm and output subsections' values, from the verification's ``qk_norm`` and ``output_std``
    blocks (absent keys when the result has no such block)."""
    out = {}
    qk = data.get("qk_norm") or {}
    std = qk.get("logit_std")
    if std:
        d = str(std["d"])
        one, sqrt = qk["scaling_1"][d], qk["scaling_sqrt"][d]
        out.update(
            qk_std=f"{std['mc'][0]:.2f}",
            qk_d=d,
            qk_t=str(qk["T"]),
            qk_h1=f"{one['entropy_bits'][0]:.2f}",
            qk_hs=f"{sqrt['entropy_bits'][0]:.2f}",
            qk_m1=f"{one['max_weight'][0]:.3f}",
            qk_ms=f"{sqrt['max_weight'][0]:.3f}",
        )
    output = data.get("output_std")
    if output:
        out.update(
            out_n=str(output["n"]),
            out_d=str(output["d_k"]),
            out_std=f"{output['mc'][0]:.4f}",
            out_asymptote=f"{output['asymptote']:.4f}",
            out_published=output["published"],
        )
    return out


def jacobian_story(jac: dict) -> str:
    """The Jacobian caption's reading of the curve, from the verification's crossover per n (where the
    unscaled median drops below the scaled one for good) and the d_k of its peak; without them, only
    what the figure shows."""
    cross, peaks = jac.get("crossover"), jac.get("peak_d_k") or {}
    if not cross:
        return _("Compare the red (unscaled) and blue (÷√d_k) medians at each d_k.")
    clauses = [
        _(JACOBIAN_CLAUSES[c.get("d_k") is not None, n in peaks], n=n, d_k=c.get("d_k"), peak=peaks.get(n))
        for n, c in cross.items()
    ]
    return _("The unscaled median, per number of keys: {items}.", items=_("; ", msgctxt="clauses").join(clauses))


def title(chapter: str) -> str:
    """The title of the blog post's chapter ``chapter`` (an id of the verification's outline)."""
    return _(CHAPTERS[chapter].title)


def paragraphs(chapter: str, values: dict) -> list[str]:
    """The paragraphs of ``chapter``, placeholders filled from ``values`` (:func:`facts`)."""
    return [_(p, **values) for p in CHAPTERS[chapter].paras]


def subsection(key: str, values: dict) -> tuple[str, str]:
    """(heading, paragraph) of the beyond chapter's subsection ``key``."""
    heading, para = BEYOND[key] if key in BEYOND else BEYOND_QK[key]
    return _(heading), _(para, **values)


def caption(block: str, values: dict) -> tuple[str, str]:
    """(alt text, caption) of the figure drawn from data block ``block``, filled from ``values``."""
    alt, cap = CAPTIONS[block] if block in CAPTIONS else QK_CAPTIONS[block]
    return _(alt, **values), _(cap, **values)
