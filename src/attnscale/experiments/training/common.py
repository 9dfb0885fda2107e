"""What every training cell shares: determinism, the optimiser, and the metrics of one attention layer.

The metrics read the rows that feed the loss (``rows``): for the readout model, the query's row.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

import numpy as np

from attnscale.errors import InputError
from attnscale.experiments.sweeps.process_settings import remember_first_settings
from attnscale.results import finite_or_none
from attnscale.softmax_rows import SATURATED_WEIGHT, row_health
from attnscale.stored_words import TRAINING_VERDICTS

__all__ = [
    "seed_everything",
    "make_optimizer",
    "finite",
    "spread",
    "mean_or_none",
    "seeds_verdict",
    "attention_metrics",
    "grad_norm",
    "capped_loss",
    "lr_sensitivity",
]


def seed_everything(seed: int):
    """Seed torch, force deterministic kernels and one thread (cells run in parallel processes).
    Returns a torch.Generator for the data, seeded independently of the weights.

    The deterministic flag and the thread count are process-wide: a cell run in the caller's own
    process (:class:`~attnscale.experiments.sweeps.runner.SerialBackend`) gets them put back afterwards
    (:mod:`attnscale.experiments.sweeps.process_settings`)."""
    import torch

    remember_first_settings()
    torch.manual_seed(seed)
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    return torch.Generator().manual_seed(10_000 + seed)


def make_optimizer(name: str, params, lr: float):
    """``adam`` (PyTorch defaults), ``sgd`` (plain: no momentum, no weight decay)."""
    import torch

    if name == "adam":
        return torch.optim.Adam(params, lr=lr)
    if name == "sgd":
        return torch.optim.SGD(params, lr=lr)
    raise InputError(f"optimizer: expected 'adam' or 'sgd', got {name!r}")


def grad_norm(*params) -> tuple[float, bool]:
    """Frobenius norm of the gradients of ``params`` together, and whether all of them are exactly 0."""
    import torch

    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return 0.0, True
    norm = float(torch.sqrt(sum((g.double() ** 2).sum() for g in grads)))
    return norm, all(bool((g == 0).all()) for g in grads)


def attention_metrics(logits) -> dict[str, object]:
    """Health of attention rows. logits: (B, H, R, S) torch tensor (R rows per head), −inf where a
    key is masked.

    Returns the median row entropy per head (nats), the largest finite logit, the mean over rows of
    each row's logit standard deviation (over its finite logits: the spread that saturates a row), and
    the fraction of rows whose largest weight exceeds :data:`SATURATED_WEIGHT`. Entropy and largest
    weight are :func:`attnscale.softmax_rows.row_health`'s, in float64 from the logits; a row holding
    a NaN or +inf logit (a diverging run) has neither (NaN entropy, not saturated). A figure that does
    not exist (no finite logit) is None.
    """
    import torch

    z = logits.detach().cpu().double()
    broken = (torch.isnan(z) | (z == math.inf)).any(-1, keepdim=True)
    health = row_health(torch.where(broken, -math.inf, z).numpy(), spectral=False)  # a broken row: empty
    entropy = torch.from_numpy(health.entropy)  # (B, H, R)
    per_head = entropy.transpose(0, 1).reshape(entropy.shape[1], -1)  # (H, B·R)
    present = z > -math.inf  # masked keys are -inf
    count = present.sum(-1)  # (B, H, R)
    zf = torch.where(present, z, torch.zeros_like(z))
    mean = zf.sum(-1) / count.clamp_min(1)
    var = (torch.where(present, z - mean[..., None], torch.zeros_like(z)) ** 2).sum(-1) / count.clamp_min(1)
    finite = z[present]
    return {
        "entropy_median": [float(v) for v in per_head.median(dim=1).values],
        "max_logit": finite_or_none(finite.max()) if finite.numel() else None,
        "logit_std": finite_or_none(var.sqrt()[count > 0].mean()) if bool((count > 0).any()) else None,
        "saturated_frac": float(np.mean(health.max_weight > SATURATED_WEIGHT)),
    }


def capped_loss(final: float | None, initial: float) -> float:
    """A run's loss as the LR sensitivity counts it: min(final, initial); a run that diverged (final
    None or not finite) or ended worse than it began counts at its initial loss."""
    return min(final, initial) if final is not None and math.isfinite(final) else initial


def lr_sensitivity(scores: Sequence[float]) -> float:
    """E over the rates of a log-spaced grid of the runs' capped losses (:func:`capped_loss`) minus the
    best of them (Wortsman et al. 2023, arXiv 2309.14322, eq. 1): 0 when the rate does not matter."""
    return statistics.fmean(scores) - min(scores)


# --- figures over seeds: only the finite values count (a diverged run records None) ------------------


def finite(values) -> list[float]:
    """The finite values, as floats (None and NaN/±inf left out)."""
    return [float(v) for v in values if v is not None and math.isfinite(v)]


def spread(values) -> dict:
    """Mean, min, max and count of the finite values; None for each figure when there are none."""
    kept = finite(values)
    if not kept:
        return {"mean": None, "min": None, "max": None, "n": 0}
    return {"mean": statistics.fmean(kept), "min": min(kept), "max": max(kept), "n": len(kept)}


def mean_or_none(values) -> float | None:
    kept = finite(values)
    return statistics.fmean(kept) if kept else None


def seeds_verdict(per_seed: list[str]) -> tuple[str | None, int]:
    """The verdict most seeds share and how many do; a tie goes to the more severe verdict (the later
    one of :data:`~attnscale.stored_words.TRAINING_VERDICTS`, mildest first), so that "learns" is
    never said of a split it does not win. (None, 0) without a verdict."""
    if not per_seed:
        return None, 0
    counts = {v: per_seed.count(v) for v in TRAINING_VERDICTS}
    top = max(counts.values())
    return [v for v in TRAINING_VERDICTS if counts[v] == top][-1], top
