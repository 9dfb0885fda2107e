"""Monte Carlo estimates with honest confidence intervals, in bounded memory, from a seed.

The engine estimates several means at once (e.g. E[(q·k)²] at every d_k of a grid) from *batches*:
a batch is ``batch_size`` samples reduced to one statistic per estimand by the caller's function
(the mean of (q·k)² over the batch, or an unbiased sample variance). The estimate is the mean of the
batch statistics, and its interval comes from their spread (batch means): valid by the central limit
theorem whenever the statistic has a finite variance, and conservative-leaning for heavy-tailed
statistics, because each batch already averages many samples. Intervals use Student's t with
(batches − 1) degrees of freedom.

Each estimand stops on its own when its relative CI half-width reaches ``rel_ci_target`` (with at
least ``min_batches`` batches) or when its sample cap is reached; draws continue only for the estimands
still active, so cheap ones do not pay for expensive ones. Memory is bounded by ``chunk_elements``
random numbers per call, whatever the sample count. Stopping on the data biases coverage slightly
(a sequential-testing effect); the caps keep it deterministic for a given seed.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from statistics import NormalDist

import numpy as np

from attnscale.errors import InputError

__all__ = [
    "Estimate",
    "t_quantile",
    "z_quantile",
    "mean_ci",
    "quantile_ci",
    "adaptive_means",
    "SAMPLERS",
    "draw_components",
    "prefix_dots",
    "all_pairs_dot_square_means",
    "dot_variance_estimates",
]


@dataclass(frozen=True)
class Estimate:
    value: float
    ci_low: float
    ci_high: float
    n_samples: int
    n_batches: int
    converged: bool  # reached the relative CI target (False: stopped at the sample cap)

    @property
    def half_width(self) -> float:
        return (self.ci_high - self.ci_low) / 2.0

    @property
    def rel_half_width(self) -> float:
        return self.half_width / abs(self.value) if self.value != 0 else math.inf

    def covers(self, x: float) -> bool:
        return self.ci_low <= x <= self.ci_high


def z_quantile(p: float) -> float:
    """Standard normal quantile."""
    return NormalDist().inv_cdf(p)


@lru_cache(maxsize=256)
def t_quantile(p: float, df: int) -> float:
    """Student's t quantile, by bisection on the regularized incomplete beta function (mpmath)."""
    import mpmath

    if df < 1:
        raise InputError(f"df: expected at least 1 degree of freedom, got {df!r}")
    if not 0.5 <= p < 1:
        raise InputError(f"p: expected a probability in [0.5, 1), got {p!r}")
    tail = 1.0 - p

    def upper_tail(t):  # P(T > t) for t ≥ 0
        return 0.5 * mpmath.betainc(df / 2.0, 0.5, 0, df / (df + t * t), regularized=True)

    lo, hi = 0.0, 1.0
    while upper_tail(hi) > tail:
        hi *= 2.0
    for _ in range(80):
        mid = (lo + hi) / 2.0
        lo, hi = (mid, hi) if upper_tail(mid) > tail else (lo, mid)
    return (lo + hi) / 2.0


def mean_ci(x, confidence: float = 0.99) -> Estimate:
    """Mean of iid samples with a t interval from their sample standard deviation."""
    x = np.asarray(x, dtype=np.float64).ravel()
    if x.size < 2:
        raise InputError(f"x: expected at least 2 samples, got {x.size}")
    m = float(np.mean(x))
    half = t_quantile(0.5 + confidence / 2.0, x.size - 1) * float(np.std(x, ddof=1)) / math.sqrt(x.size)
    return Estimate(m, m - half, m + half, int(x.size), int(x.size), True)


def quantile_ci(x, q: float, confidence: float = 0.99) -> tuple[float, float, float]:
    """(sample quantile, low, high): a distribution-free interval for the q-quantile from order
    statistics (the count of samples below the true quantile is Binomial(n, q); normal approximation)."""
    x = np.sort(np.asarray(x, dtype=np.float64).ravel())
    n = x.size
    if n < 2 or not 0 < q < 1:
        raise InputError(f"x, q: expected ≥ 2 samples and 0 < q < 1, got {n} samples and q = {q!r}")
    z = z_quantile(0.5 + confidence / 2.0)
    spread = z * math.sqrt(n * q * (1 - q))
    lo = max(0, math.floor(n * q - spread) - 1)
    hi = min(n - 1, math.ceil(n * q + spread))
    return float(np.quantile(x, q)), float(x[lo]), float(x[hi])


def adaptive_means(
    draw_batches: Callable[[np.random.Generator, int, np.ndarray], np.ndarray],
    n_estimands: int,
    *,
    batch_size: int,
    cost: Sequence[int],
    rng: np.random.Generator,
    max_samples: int | Sequence[int],
    rel_ci_target: float = 0.01,
    confidence: float = 0.99,
    min_batches: int = 30,
    chunk_elements: int = 2**21,
    progress: Callable[[int, int, str], None] | None = None,
    label: str = "",
) -> list[Estimate]:
    """Estimate ``n_estimands`` means from batches until each reaches its CI target or its cap.

    draw_batches(rng, n_batches, active) -> (n_batches, n_estimands): one statistic per batch of
        ``batch_size`` samples and per estimand; columns of inactive estimands are ignored (the function
        may skip them, e.g. by drawing fewer vector components).
    cost: random numbers one sample of each estimand needs; a call draws at most ``chunk_elements``
        numbers, counted at the largest cost among the active estimands.
    max_samples: a cap per estimand (or one for all), rounded up to whole batches.
    """
    cost, caps = _checked_plan(n_estimands, cost, max_samples, batch_size, chunk_elements, rel_ci_target)
    count = np.zeros(n_estimands, dtype=np.int64)  # batches so far
    mean = np.zeros(n_estimands)
    m2 = np.zeros(n_estimands)  # Σ (stat − mean)², merged per block (Chan et al.)
    converged = np.zeros(n_estimands, dtype=bool)
    active = np.ones(n_estimands, dtype=bool)
    cap_batches = -(-caps // batch_size)
    total_work = int(np.sum(cap_batches * cost))
    done_work = 0
    while active.any():
        widest = int(cost[active].max())
        room = int(np.max(cap_batches[active] - count[active]))
        n_batches = max(1, min(chunk_elements // (batch_size * widest), room))
        stats = np.asarray(draw_batches(rng, n_batches, active), dtype=np.float64)
        if stats.shape != (n_batches, n_estimands):
            raise InputError(f"draw_batches: expected shape {(n_batches, n_estimands)}, got {stats.shape}")
        # Estimands whose cap falls inside this block keep only the batches up to the cap.
        take = np.where(active, np.minimum(n_batches, cap_batches - count), 0)
        _merge_blocks(stats, take, active, count, mean, m2)
        done_work += int(np.sum(take * cost))
        half = _half_widths(count, m2, confidence)
        reached = (count >= min_batches) & (half <= rel_ci_target * np.abs(mean))
        converged |= active & reached
        active &= ~reached & (count < cap_batches)
        if progress is not None:
            progress(min(done_work, total_work), total_work, label)
    half = _half_widths(count, m2, confidence)
    return [
        Estimate(
            float(mean[j]),
            float(mean[j] - half[j]),
            float(mean[j] + half[j]),
            int(count[j] * batch_size),
            int(count[j]),
            bool(converged[j]),
        )
        for j in range(n_estimands)
    ]


def _checked_plan(
    n_estimands: int, cost, max_samples, batch_size: int, chunk_elements: int, rel_ci_target: float
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`adaptive_means`' cost per sample and cap per estimand as arrays of shape (n_estimands,),
    or :class:`InputError` naming the argument that cannot make a plan."""
    cost = np.asarray(cost, dtype=np.int64)
    caps = np.broadcast_to(np.asarray(max_samples, dtype=np.int64), (n_estimands,)).copy()
    if cost.shape != (n_estimands,) or np.any(cost < 1):
        raise InputError(f"cost: expected {n_estimands} positive integers, got {cost.tolist()}")
    if batch_size < 1 or batch_size * int(cost.max()) > chunk_elements:
        raise InputError(
            f"batch_size: expected 1 ≤ batch_size ≤ chunk_elements / max(cost) = "
            f"{chunk_elements // int(cost.max())}, got {batch_size}"
        )
    if np.any(caps < batch_size):
        raise InputError(f"max_samples: expected at least one batch ({batch_size}) each, got {caps.tolist()}")
    if not 0 < rel_ci_target < 1:
        raise InputError(f"rel_ci_target: expected a number in (0, 1), got {rel_ci_target!r}")
    return cost, caps


def _merge_blocks(
    stats: np.ndarray, take: np.ndarray, active: np.ndarray, count: np.ndarray, mean: np.ndarray, m2: np.ndarray
) -> None:
    """Merge the first ``take[j]`` rows of ``stats`` (n_batches, n_estimands) into each active
    estimand's running ``count``, ``mean`` and ``m2``, in place (Chan et al.'s pairwise update)."""
    for j in np.flatnonzero(active):
        block = stats[: take[j], j]
        b_mean = float(block.mean())
        b_m2 = float(np.sum((block - b_mean) ** 2))
        n_a, n_b = count[j], take[j]
        delta = b_mean - mean[j]
        mean[j] += delta * n_b / (n_a + n_b)
        m2[j] += b_m2 + delta * delta * n_a * n_b / (n_a + n_b)
        count[j] = n_a + n_b


def _half_widths(count: np.ndarray, m2: np.ndarray, confidence: float) -> np.ndarray:
    half = np.full(count.shape, np.inf)
    for j in np.flatnonzero(count >= 2):
        sd = math.sqrt(m2[j] / (count[j] - 1))
        half[j] = t_quantile(0.5 + confidence / 2.0, int(count[j]) - 1) * sd / math.sqrt(count[j])
    return half


# ---- samplers of unit-variance components, and the variance statistic ------------------------


def _rademacher(rng, shape):
    return rng.integers(0, 2, size=shape, dtype=np.int8) * np.int8(2) - np.int8(1)


SAMPLERS: dict[str, Callable[[np.random.Generator, tuple[int, ...]], np.ndarray]] = {
    "gaussian": lambda rng, shape: rng.standard_normal(shape),
    "uniform": lambda rng, shape: rng.uniform(-math.sqrt(3.0), math.sqrt(3.0), shape),
    "rademacher": _rademacher,
    "student_t5": lambda rng, shape: rng.standard_t(5, shape) * math.sqrt(3.0 / 5.0),
}


def draw_components(name: str, rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Independent components of mean 0 and variance 1 (see ``attnscale.theory.COMPONENTS``)."""
    try:
        sampler = SAMPLERS[name]
    except KeyError:
        raise InputError(f"component: expected one of {sorted(SAMPLERS)}, got {name!r}") from None
    return sampler(rng, shape)


def prefix_dots(q: np.ndarray, k: np.ndarray, d_ks: Sequence[int]) -> np.ndarray:
    """q·k at every d_k of an increasing grid, from one draw: q·k at d_k uses the first d_k components.

    q, k: (m, max(d_ks)); returns (m, len(d_ks)) in float64. The products are summed segment by
    segment (between consecutive d_k) and the segment sums accumulated, so the cost is one pass.
    """
    d_ks = np.asarray(d_ks, dtype=np.int64)
    if q.shape != k.shape or q.ndim != 2 or q.shape[1] != d_ks[-1]:
        raise InputError(
            f"q, k: expected equal shapes (m, {int(d_ks[-1])}) (the largest d_k), got {q.shape}, {k.shape}"
        )
    starts = np.concatenate([[0], d_ks[:-1]])
    prod = q * k
    acc = np.int64 if prod.dtype.kind in "iu" else np.float64
    segments = np.add.reduceat(prod, starts, axis=1, dtype=acc)
    return np.cumsum(segments, axis=1, dtype=np.float64)


def batch_plan(
    max_samples: int | Sequence[int],
    n_estimates: int,
    widest: int,
    *,
    min_batches: int = 30,
    chunk_elements: int = 2**21,
    min_batch_size: int = 1,
) -> tuple[int, np.ndarray]:
    """(batch size, per-estimate sample caps) for :func:`adaptive_means` over a d_k grid whose widest
    draw is ``widest`` components per vector: a batch of q, k pairs fits in ``chunk_elements`` random
    numbers, at least ``min_batches`` batches fit under the smallest cap (caps are raised to that if
    needed), and a batch has at least ``min_batch_size`` samples (2 for a within-batch sample variance)."""
    caps = np.broadcast_to(np.asarray(max_samples, dtype=np.int64), (n_estimates,))
    batch_size = int(max(min_batch_size, min(chunk_elements // (2 * widest), int(caps.min()) // min_batches)))
    return batch_size, np.maximum(caps, batch_size * min_batches)


BLAS_FROM = 64  # segment width from which the (b, b) products go to BLAS


def all_pairs_dot_square_means(
    q: np.ndarray, k: np.ndarray, d_ks: Sequence[int], chunk_elements: int = 2**21
) -> np.ndarray:
    """Per batch, the mean of (qᵢ·kⱼ)² over all b² pairs (i, j) of its b queries and b keys, at every d_k
    of an increasing grid (prefixes, as :func:`prefix_dots`).

    q, k: (batches, b, max(d_ks)); returns (batches, len(d_ks)) in float64. The dot products of a
    batch are a (b, b) matrix product, accumulated segment by segment between consecutive d_k; batches
    go a stack at a time, the stack's (b, b) products holding at most ``chunk_elements`` numbers.
    """
    d_ks = [int(d) for d in d_ks]
    if q.shape != k.shape or q.ndim != 3 or q.shape[2] != d_ks[-1]:
        raise InputError(
            f"q, k: expected equal shapes (batches, b, {d_ks[-1]}) (the largest d_k), got {q.shape}, {k.shape}"
        )
    n_batches, b = q.shape[0], q.shape[1]
    step = max(1, chunk_elements // (b * b))
    out = np.empty((n_batches, len(d_ks)))
    for first in range(0, n_batches, step):
        qs = q[first : first + step].astype(np.float64, copy=False)  # ±1 int8 → exact in float64
        ks = k[first : first + step].astype(np.float64, copy=False)
        dots = np.zeros((qs.shape[0], b, b))
        for g, (start, end) in enumerate(zip([0, *d_ks[:-1]], d_ks)):
            qa, ka = qs[:, :, start:end], ks[:, :, start:end]
            # narrow segments: numpy's own loop; a multi-threaded BLAS call costs more than it saves there
            dots += (
                np.einsum("bik,bjk->bij", qa, ka) if end - start < BLAS_FROM else np.matmul(qa, ka.transpose(0, 2, 1))
            )
            out[first : first + step, g] = np.einsum("bij,bij->b", dots, dots) / (b * b)
    return out


def dot_variance_estimates(
    component: str,
    d_ks: Sequence[int],
    *,
    rng: np.random.Generator,
    max_samples: int | Sequence[int],
    rel_ci_target: float = 0.01,
    confidence: float = 0.99,
    min_batches: int = 30,
    chunk_elements: int = 2**21,
    progress: Callable[[int, int, str], None] | None = None,
    max_batch: int = 64,
) -> list[Estimate]:
    """Var(q·k) = E[(q·k)²] for iid mean-0, variance-1 components, at every d_k of an increasing grid.

    A batch draws b independent queries and b independent keys and averages (qᵢ·kⱼ)² over all b² pairs
    (:func:`all_pairs_dot_square_means`): every pair is a draw of (q·k)² with the right law, the pairs
    of a batch share vectors (so they are not independent), and the batches are. The interval comes
    from the spread of the batch means as always; the variance of one batch mean has the closed form
    :func:`attnscale.theory.pair_mean_variance`, about b/2 to b times smaller than with b independent
    pairs for the same random numbers. ``n_samples`` counts the draws (queries = keys), not the pairs.
    ``max_batch`` bounds b: the pairs cost b² per batch, which only pays where d_k is large; 64 keeps the
    CPU time of the whole grid at or below that of independent pairs.

    One draw of width max(active d_k) serves every d_k through prefixes, so the estimates at different
    d_k are correlated but each interval is valid on its own. The batch size is fixed so that at least
    ``min_batches`` batches fit under the smallest cap.
    """
    d_ks = tuple(int(d) for d in d_ks)
    if not d_ks or any(b <= a for a, b in zip(d_ks, d_ks[1:])) or d_ks[0] < 1:
        raise InputError(f"d_ks: expected an increasing sequence of positive integers, got {list(d_ks)}")
    batch_size, caps = batch_plan(
        max_samples, len(d_ks), d_ks[-1], min_batches=min_batches, chunk_elements=chunk_elements, min_batch_size=2
    )
    batch_size = min(batch_size, max_batch)

    def draw(rng, n_batches, active):
        grid = d_ks[: int(np.flatnonzero(active).max()) + 1]
        q = draw_components(component, rng, (n_batches, batch_size, grid[-1]))
        k = draw_components(component, rng, (n_batches, batch_size, grid[-1]))
        stats = np.full((n_batches, len(d_ks)), np.nan)
        stats[:, : len(grid)] = all_pairs_dot_square_means(q, k, grid, chunk_elements)
        return stats

    return adaptive_means(
        draw,
        len(d_ks),
        batch_size=batch_size,
        cost=[2 * d for d in d_ks],
        rng=rng,
        max_samples=caps,
        rel_ci_target=rel_ci_target,
        confidence=confidence,
        min_batches=min_batches,
        chunk_elements=chunk_elements,
        progress=progress,
        label=f"Var(q·k), {component}",
    )
