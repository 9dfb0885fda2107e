"""Closed forms behind the √d_k: moments of q·k, the entropy of softmax over many keys, and the
max weight of the Scalable-Softmax example.

The variance argument is Vaswani et al. 2017 ("Attention Is All You Need"), footnote 4: for
independent components with mean 0 and variance 1, q·k = Σᵢ qᵢkᵢ has mean 0 and variance d_k.
The general forms below drop "mean 0, variance 1" and allow qᵢ, kᵢ to be correlated (pairs
(qᵢ, kᵢ) independent across i). The softmax-entropy asymptote is the random-energy model's
(Derrida 1981); Scalable-Softmax is Nakanishi 2025 (arXiv:2501.19399), softmax₁ Miller 2023.

Every function is exact arithmetic on its inputs; the symbolic derivations (sympy) live at the end
and are what the tests and the claims check the formulas against.
"""

from __future__ import annotations

import math
import operator
from collections import Counter
from dataclasses import dataclass

from attnscale.errors import InputError
from attnscale.scales import SSMAX_DEFAULT_S
from attnscale.i18n import N_

__all__ = [
    "Component",
    "COMPONENTS",
    "product_mean",
    "product_variance",
    "dot_mean",
    "dot_variance",
    "dot_square_variance",
    "samples_for_relative_ci",
    "phase_boundary",
    "rem_entropy",
    "rem_normalized_entropy",
    "one_high_max_weight",
    "ssmax_one_high_max_weight",
    "qk_norm_logit_std",
    "attention_output_std_asymptote",
    "dot_square_terms",
    "symbolic_dot_square",
    "symbolic_dot_mean",
    "symbolic_dot_variance",
    "symbolic_gaussian_product_variance",
    "symbolic_scaled_variance",
]


@dataclass(frozen=True)
class Component:
    """A distribution of one vector component, scaled to mean 0 and variance 1."""

    name: str
    fourth_moment: float  # E[x⁴] (the kurtosis, since the variance is 1); inf if it diverges
    finite_moments_below: float  # E|x|^p < ∞ exactly for p below this (inf: all moments)
    how_drawn: str


# t(ν) has E|T|^p < ∞ iff p < ν; scaled to variance 1 (× √((ν−2)/ν)) its 4th moment is 3(ν−2)/(ν−4).
COMPONENTS: dict[str, Component] = {
    "gaussian": Component("gaussian", 3.0, math.inf, N_("N(0, 1)")),
    "uniform": Component("uniform", 9.0 / 5.0, math.inf, N_("U(−√3, √3)")),
    "rademacher": Component("rademacher", 1.0, math.inf, N_("±1 with probability ½ each")),
    "student_t5": Component("student_t5", 3.0 * (5 - 2) / (5 - 4), 5.0, N_("t(5) × √(3/5)")),
}


def _check_dk(d_k) -> int:
    """d_k as a Python int; any integer type (NumPy's too) is accepted, bools and floats are not."""
    try:
        value = operator.index(d_k)
    except TypeError:
        value = None
    if value is None or isinstance(d_k, bool) or value < 1:
        raise InputError(f"d_k: expected a positive integer, got {d_k!r}")
    return value


def product_mean(mu_q: float = 0.0, mu_k: float = 0.0, cov: float = 0.0) -> float:
    """E[qᵢkᵢ] = μ_q μ_k + Cov(qᵢ, kᵢ)."""
    return mu_q * mu_k + cov


def product_variance(
    mu_q: float = 0.0, var_q: float = 1.0, mu_k: float = 0.0, var_k: float = 1.0, cov: float = 0.0
) -> float:
    """Var(qᵢkᵢ).

    Independent qᵢ, kᵢ (cov = 0), any distributions: σ_q²σ_k² + μ_q²σ_k² + μ_k²σ_q².
    Correlated (cov ≠ 0): exact for jointly Gaussian (qᵢ, kᵢ) (Isserlis):
    σ_q²σ_k² + c² + μ_q²σ_k² + μ_k²σ_q² + 2μ_qμ_k c, with c = Cov(qᵢ, kᵢ). For other joint laws the
    c terms depend on the fourth mixed moment.
    """
    if var_q < 0 or var_k < 0:
        raise InputError(f"var_q, var_k: expected non-negative variances, got {var_q!r}, {var_k!r}")
    if cov * cov > var_q * var_k * (1 + 1e-12):
        raise InputError(f"cov: expected |cov| ≤ σ_q σ_k = {math.sqrt(var_q * var_k):.6g}, got {cov!r}")
    return var_q * var_k + cov * cov + mu_q**2 * var_k + mu_k**2 * var_q + 2 * mu_q * mu_k * cov


def dot_mean(d_k: int, mu_q: float = 0.0, mu_k: float = 0.0, cov: float = 0.0) -> float:
    """E[q·k] = d_k (μ_q μ_k + c)."""
    _check_dk(d_k)
    return d_k * product_mean(mu_q, mu_k, cov)


def dot_variance(
    d_k: int, mu_q: float = 0.0, var_q: float = 1.0, mu_k: float = 0.0, var_k: float = 1.0, cov: float = 0.0
) -> float:
    """Var(q·k) = d_k · Var(qᵢkᵢ): the d_k pairs are independent, so their variances add.

    >>> dot_variance(64)
    64.0
    >>> dot_variance(64, mu_q=0.5, mu_k=0.5)   # the iid prediction would be 64
    96.0
    """
    _check_dk(d_k)
    return d_k * product_variance(mu_q, var_q, mu_k, var_k, cov)


def dot_square_variance(d_k: int, fourth_q: float, fourth_k: float) -> float:
    """Var((q·k)²) for iid mean-0, variance-1 components with fourth moments E[qᵢ⁴], E[kᵢ⁴].

    With X = qᵢkᵢ (mean 0, E X² = 1, E X⁴ = E qᵢ⁴ · E kᵢ⁴): E[(ΣX)⁴] = d·E X⁴ + 3d(d−1), so
    Var((q·k)²) = d·E qᵢ⁴·E kᵢ⁴ + 2d² − 3d. It is what the sample mean of (q·k)², the variance
    estimator, needs to be finite for its confidence interval (Gaussian: 2d² + 6d).
    """
    _check_dk(d_k)
    return d_k * fourth_q * fourth_k + 2.0 * d_k * d_k - 3.0 * d_k


def pair_mean_variance(d_k: int, fourth_q: float, fourth_k: float, batch: int) -> float:
    """Variance of the mean of (qᵢ·kⱼ)² over all batch² pairs of ``batch`` iid queries and ``batch`` iid
    keys (iid mean-0, variance-1 components), the batch statistic of the variance Monte Carlo.

    Pairs sharing a query covary by Var(E[(q·k)²|q]) = Var(‖q‖²) = d(E qᵢ⁴ − 1), likewise for keys, so
    Var = [Var((q·k)²) + (batch − 1)·d·(E qᵢ⁴ − 1 + E kᵢ⁴ − 1)] / batch². ``batch = 1``: one pair.
    """
    _check_dk(d_k)
    if batch < 1:
        raise InputError(f"batch: expected an integer ≥ 1, got {batch!r}")
    shared = (batch - 1) * d_k * (fourth_q - 1.0 + fourth_k - 1.0)
    return (dot_square_variance(d_k, fourth_q, fourth_k) + shared) / batch**2


def samples_for_relative_ci(d_k: int, fourth: float, rel_half_width: float, z: float, batch: int = 1) -> int:
    """Draws (of q and k) the variance estimator needs for a CI half-width of ``rel_half_width`` × d_k
    (CLT, level z), in batches of ``batch`` draws averaged over all their pairs (:func:`pair_mean_variance`)."""
    sd = math.sqrt(pair_mean_variance(d_k, fourth, fourth, batch)) / d_k
    return batch * math.ceil((z * sd / rel_half_width) ** 2)


def phase_boundary(n: int) -> float:
    """σ_c = √(2 ln n): iid Gaussian logits with standard deviation σ > σ_c freeze the softmax of n keys
    (random-energy model). Unscaled logits of Gaussian q, k have σ ≈ √d_k: frozen once d_k > 2 ln n."""
    if n < 2:
        raise InputError(f"n: expected at least 2 keys, got {n!r}")
    return math.sqrt(2.0 * math.log(n))


def rem_entropy(sigma: float, n: int) -> float:
    """Asymptotic entropy (nats) of softmax of n iid N(0, σ²) logits, as n → ∞ at fixed σ/σ_c:
    ln n − σ²/2 below the boundary; beyond it the entropy stays O(1), 0 on the ln n scale.
    An asymptote: at practical n it is off by O(1) near the boundary."""
    return max(0.0, math.log(n) - sigma * sigma / 2.0) if sigma < phase_boundary(n) else 0.0


def rem_normalized_entropy(sigma: float, n: int) -> float:
    """rem_entropy / ln n = max(0, 1 − σ²/(2 ln n))."""
    return rem_entropy(sigma, n) / math.log(n)


def one_high_max_weight(n: int, high: float = 3.0, low: float = -2.0, factor: float = 1.0) -> float:
    """Softmax max weight of n logits, all ``low`` but one ``high``, each multiplied by ``factor``:
    1 / (1 + (n − 1)·e^{factor·(low − high)})."""
    if n < 1:
        raise InputError(f"n: expected at least 1 key, got {n!r}")
    return 1.0 / (1.0 + (n - 1) * math.exp(factor * (low - high)))


def ssmax_one_high_max_weight(n: int, s: float = SSMAX_DEFAULT_S, high: float = 3.0, low: float = -2.0) -> float:
    """The same with Scalable-Softmax, which multiplies the logits by s·ln n (Nakanishi 2025, Fig. 1)."""
    return one_high_max_weight(n, high, low, factor=s * math.log(n))


def qk_norm_logit_std(scaling: float, g_q=None, g_k=None, d: int | None = None) -> float:
    """Standard deviation of the logit scaling·q·k when q = g_q ⊙ RMSNorm(x), k = g_k ⊙ RMSNorm(y) with
    x, y independent and isotropic (e.g. Gaussian): scaling·√(Σᵢ g_q,i² g_k,i²), exactly (no large-d
    limit). g_q, g_k: (d,) per-channel gains, None = all 1 (then give ``d``: the result is scaling·√d).

    RMSNorm puts u = x/‖x‖·√d on the sphere of radius √d, so E[uᵢuⱼ] = δᵢⱼ and, q and k being
    independent, Var(q·k) = Σᵢ g_q,i² g_k,i² E[uᵢ²]E[vᵢ²]. RMSNorm's ε and a rotary rotation between
    channels of unequal gains are left out.

    >>> qk_norm_logit_std(1.0, d=256)
    16.0
    """
    import numpy as np

    gains = [g for g in (g_q, g_k) if g is not None]
    sizes = {np.asarray(g).shape for g in gains}
    if d is None and not gains:
        raise InputError("d: expected the head dimension when no gains are given, got None")
    if len(sizes) > 1 or any(len(s) != 1 for s in sizes):
        raise InputError(f"g_q, g_k: expected two (d,) vectors of one length, got shapes {sorted(sizes)}")
    size = d if d is not None else next(iter(sizes))[0]
    if not isinstance(size, (int, np.integer)) or size < 1 or (sizes and size != next(iter(sizes))[0]):
        raise InputError(f"d: expected a positive integer matching the gains' length, got {d!r}")
    gq = np.ones(size) if g_q is None else np.asarray(g_q, dtype=float)
    gk = np.ones(size) if g_k is None else np.asarray(g_k, dtype=float)
    return abs(float(scaling)) * math.sqrt(float(np.sum(gq**2 * gk**2)))


def attention_output_std_asymptote(n: int, d_k: int) -> float:
    """Large-n standard deviation of each component of softmax(QKᵀ/√d_k)·V for Q, K, V with iid N(0, 1)
    entries (n keys): √(E[e^{‖q‖²/d_k}]/n) = √((1 − 2/d_k)^{−d_k/2}/n), → √(e/n) as d_k grows.

    Given the weights p (independent of V), an output component is N(0, Σⱼ pⱼ²); given q, the logits are
    iid N(0, ‖q‖²/d_k) and Σⱼ pⱼ² → e^{σ²}/n; ‖q‖² is χ²(d_k), whose generating function gives the mean.
    An asymptote in n: at n = 256, d_k = 64 the Monte Carlo value is a little lower.

    >>> round(attention_output_std_asymptote(256, 64), 4)
    0.1039
    """
    if n < 1:
        raise InputError(f"n: expected at least 1 key, got {n!r}")
    if d_k < 3:
        raise InputError(f"d_k: expected d_k ≥ 3 (E[e^(χ²/d_k)] is finite only there), got {d_k!r}")
    return math.sqrt((1.0 - 2.0 / d_k) ** (-d_k / 2.0) / n)


# ---- symbolic derivations (sympy) -------------------------------------------------------------


def _expect_monomial(term, moments_of):
    """E[term] for a monomial in independent variables, given each variable's moment function."""
    import sympy

    coeff, factors = term.as_coeff_mul()
    value = coeff
    for f in factors:
        base, power = f.as_base_exp()
        value *= moments_of[base](int(power))
    return sympy.expand(value)


# E x = 0, E x² = 1 for every component under the seed's assumptions; higher powers do not occur
_UNIT_MOMENTS = {1: 0, 2: 1}


def symbolic_dot_square(d_k: int):
    """Expand (Σᵢ qᵢkᵢ)² for symbols qᵢ, kᵢ and take the expectation under iid mean 0, variance 1.

    Returns (expectation, n_terms, n_unit, n_zero): the expansion's products, counted from sympy's
    expanded sum (a monomial with coefficient 2 stands for two products), split by their expectation:
    n_unit products of expectation 1 (the seed's d_k "same pair" terms (qᵢkᵢ)²) and n_zero of
    expectation 0 (its d_k² − d_k cross terms) — the seed's 9 = 3 + 6 and 4096 = 64 + 4032. Nothing is
    counted from an index grid, so a wrong expansion or a wrong moment shows in the counts.
    """
    import sympy

    d_k = _check_dk(d_k)
    q = sympy.symbols(f"q1:{d_k + 1}")
    k = sympy.symbols(f"k1:{d_k + 1}")
    s = sum(q[i] * k[i] for i in range(d_k))
    moments = {v: (lambda p: sympy.Integer(_UNIT_MOMENTS[p])) for v in (*q, *k)}
    counts = Counter()
    expectation = sympy.Integer(0)
    for term in sympy.Add.make_args(sympy.expand(s * s)):
        coeff, monomial = term.as_coeff_Mul()
        value = _expect_monomial(monomial, moments)
        if value not in (0, 1) or not coeff.is_Integer:
            raise ArithmeticError(f"unexpected term {term} of expectation {value} in (Σ qᵢkᵢ)²")
        counts[int(value)] += int(coeff)
        expectation += coeff * value
    return expectation, counts[1] + counts[0], counts[1], counts[0]


def dot_square_terms(d_k: int) -> tuple[int, int, int, int]:
    """(Σᵢ qᵢkᵢ)² without sympy, fast enough for d_k = 64: enumerate the d_k² products (qᵢkᵢ)(qⱼkⱼ),
    collect each product's variables and powers, and take its expectation by the moment rules of
    independent components (E x = 0, E x² = 1, expectations of independent factors multiply).

    Returns (n_terms, n_unit, n_zero, expectation) like :func:`symbolic_dot_square`; the expectation is
    E[(q·k)²], which is Var(q·k) since E[q·k] = Σᵢ E qᵢ E kᵢ = 0.
    """
    d_k = _check_dk(d_k)
    counts = Counter()
    for i in range(d_k):
        for j in range(d_k):
            powers = Counter([("q", i), ("k", i), ("q", j), ("k", j)])
            value = math.prod(_UNIT_MOMENTS[p] for p in powers.values())
            counts[value] += 1
    if set(counts) - {0, 1}:
        raise ArithmeticError(f"unexpected expectations {sorted(counts)} in (Σ qᵢkᵢ)²")
    return counts[1] + counts[0], counts[1], counts[0], counts[1] * 1 + counts[0] * 0


def _dot_moments(d_k: int):
    """(E S, E S², symbols) for S = Σᵢ qᵢkᵢ, independent qᵢ ~ (μ_q, σ_q²), kᵢ ~ (μ_k, σ_k²)."""
    import sympy

    mq, mk = sympy.symbols("mu_q mu_k", real=True)
    vq, vk = sympy.symbols("sigma_q2 sigma_k2", positive=True)
    q = sympy.symbols(f"q1:{d_k + 1}")
    k = sympy.symbols(f"k1:{d_k + 1}")
    mom_q = {1: mq, 2: vq + mq**2}
    mom_k = {1: mk, 2: vk + mk**2}
    moments = {**{v: (lambda p: mom_q[p]) for v in q}, **{v: (lambda p: mom_k[p]) for v in k}}
    s = sum(q[i] * k[i] for i in range(d_k))
    second = sum(_expect_monomial(t, moments) for t in sympy.Add.make_args(sympy.expand(s * s)))
    first = sum(_expect_monomial(t, moments) for t in sympy.Add.make_args(sympy.expand(s)))
    return sympy.expand(first), second, (mq, mk, vq, vk)


def symbolic_dot_mean(d_k: int):
    """E[Σᵢ qᵢkᵢ] with independent qᵢ ~ (μ_q, σ_q²), kᵢ ~ (μ_k, σ_k²), from the expansion's moments
    (symbols mu_q, mu_k, sigma_q2, sigma_k2); d_k·μ_qμ_k when right."""
    d_k = _check_dk(d_k)
    return _dot_moments(d_k)[0]


def symbolic_dot_variance(d_k: int):
    """Var(Σᵢ qᵢkᵢ) with independent qᵢ ~ (μ_q, σ_q²), kᵢ ~ (μ_k, σ_k²), by expanding E[S²] − (E S)².

    Returns (variance, formula, difference): the difference simplifies to 0 when the general formula
    d_k(σ_q²σ_k² + μ_q²σ_k² + μ_k²σ_q²) is right.
    """
    import sympy

    d_k = _check_dk(d_k)
    first, second, (mq, mk, vq, vk) = _dot_moments(d_k)
    variance = sympy.expand(second - first**2)
    formula = d_k * (vq * vk + mq**2 * vk + mk**2 * vq)
    return variance, formula, sympy.simplify(variance - formula)


def symbolic_gaussian_product_variance():
    """Var(qk) for jointly Gaussian (q, k) with means μ, variances σ², covariance c, from the moment
    generating function exp(μ_q t + μ_k u + ½(σ_q² t² + 2c t u + σ_k² u²)).

    Returns (variance, formula, difference) with formula σ_q²σ_k² + c² + μ_q²σ_k² + μ_k²σ_q² + 2μ_qμ_k c.
    """
    import sympy

    t, u = sympy.symbols("t u")
    mq, mk, c = sympy.symbols("mu_q mu_k c", real=True)
    vq, vk = sympy.symbols("sigma_q2 sigma_k2", positive=True)
    mgf = sympy.exp(mq * t + mk * u + (vq * t**2 + 2 * c * t * u + vk * u**2) / 2)
    at0 = {t: 0, u: 0}
    e_qk = sympy.diff(mgf, t, u).subs(at0)
    e_q2k2 = sympy.diff(mgf, t, 2, u, 2).subs(at0)
    variance = sympy.expand(e_q2k2 - e_qk**2)
    formula = vq * vk + c**2 + mq**2 * vk + mk**2 * vq + 2 * mq * mk * c
    return variance, formula, sympy.simplify(variance - formula)


def symbolic_scaled_variance():
    """Var(X/c) = Var(X)/c² for a random variable X with finitely many equally likely values x₁..x₃
    (symbols) and c ≠ 0; returns (lhs, rhs, difference)."""
    import sympy

    c = sympy.symbols("c", nonzero=True)
    xs = sympy.symbols("x1:4", real=True)

    def var(values):
        mean = sum(values) / len(values)
        return sum((v - mean) ** 2 for v in values) / len(values)

    lhs = var([x / c for x in xs])
    rhs = var(list(xs)) / c**2
    return lhs, rhs, sympy.simplify(lhs - rhs)
