"""One step's attention figures of every rank of a ``torch.distributed`` job, combined.

Each rank's :class:`~attnscale.torch.monitor.Monitor` sees its own rows only. :func:`combine_step`
packs a rank's :class:`~attnscale.torch.monitor.records.Step` into one float64 vector, gathers the
vectors of every rank of the group with ONE collective (``all_gather_single``), and reduces
them on each rank in rank order::

    calls, rows, rows_empty, rows_broken, rows_single, saturated_rows,
    float16_overflow_rows, rows_of, keys                                         sum (counts)
    entropy_sum, first_key_sum, q_norm_sum, k_norm_sum                           sum
    max_logit, max_abs_logit                                                     max
    entropy_min, min_logit                                                       min

so every rank holds the same combined figures, bit for bit (the same numbers reduced in the same
order): the figures of one process that saw every rank's rows (counts exactly; sums and the means
— entropy_mean, first_key_weight and q_norm_mean over ``rows``, k_norm_mean over ``keys`` — within
float64 rounding; extremes exactly), and the logit guard clips identically on every rank
when each gives it the combined step. Gathering rather than all-reducing is what lets one call
carry sums, maxima and minima at once; it moves world × (9 + 17 · heads) numbers: kilobytes.

    with Monitor(ddp_model, mode="replace", history=False) as mon:    # no sinks: rank 0 writes below
        for step, batch in enumerate(batches):
            ...
            combined = combine_step(mon.step(step, log=False))       # on every rank (a collective)
            guard.apply(combined)
            if dist.get_rank() == 0:
                sink.write(combined)

The model may be wrapped in ``DistributedDataParallel`` or sharded by FSDP2's ``fully_shard``
(each rank's monitor reads the calls its forward makes on the gathered parameters; the logit guard
rescales each rank's shard: :class:`~attnscale.torch.guard.LogitGuard`). Both are tested with gloo
on CPU, 2 processes against one process on the union of their batches.

What cannot be combined from a step's figures: ``entropy_median`` (each rank keeps its own rows'
entropies only with history=True; combined it is NaN) and ``entropy_mean_se`` (rows=K; combined
it is 0.0). A rank's logit figures count whatever rows it attended (a +inf max from broken rows
only is kept: an overflow on one rank is the combined max). Every rank must report
the same layers and heads in the same order (the same model, each layer called in the step); a
rank that does not is an :class:`InputError` on every rank, naming the layouts.
"""

from __future__ import annotations

import dataclasses
import math
import zlib
from typing import Any

import numpy as np
import torch

from attnscale.errors import InputError, InputTypeError
from attnscale.torch.monitor import FALLBACK_REASONS
from attnscale.torch.monitor.records import HeadFigures, Step

__all__ = ["combine_step", "FALLBACK_REASONS"]

# Fallback counts are packed in FALLBACK_REASONS' order, so that one collective carries them.
_SUMS = (
    "calls",
    "rows",
    "rows_empty",
    "rows_broken",
    "rows_single",
    "saturated_rows",
    "float16_overflow_rows",
    "rows_of",
    "keys",
)
_FLOAT_SUMS = ("entropy_sum", "first_key_sum", "q_norm_sum", "k_norm_sum")
# Each mean of HeadFigures: (its sum, the count it is over).
_MEANS = {
    "entropy_mean": ("entropy_sum", "rows"),
    "first_key_weight": ("first_key_sum", "rows"),
    "q_norm_mean": ("q_norm_sum", "rows"),
    "k_norm_mean": ("k_norm_sum", "keys"),
}
_MAXES = ("max_logit", "max_abs_logit")
_MINS = ("entropy_min", "min_logit")
_PER_HEAD = len(_SUMS) + len(_FLOAT_SUMS) + len(_MAXES) + len(_MINS)
_HEADER = 3 + len(FALLBACK_REASONS)  # layout checksum, head count, step calls, fallbacks


def _layout(step: Step) -> list[tuple[str, int]]:
    return [(h.layer, h.head) for h in step.heads]


def _checksum(layout) -> float:
    """The layout as a number a float64 holds exactly (32 bits), equal on ranks with equal layouts."""
    return float(zlib.crc32(repr(layout).encode("utf-8")))


def _pack(step: Step) -> np.ndarray:
    """step → float64 (_HEADER + _PER_HEAD · heads,): header, then per head its counts, float sums,
    maxima and minima; a figure that does not exist (NaN) packs as the reduction's identity."""
    unknown = sorted(set(step.fallbacks) - set(FALLBACK_REASONS))
    if unknown:
        raise InputError(
            f"step: fallback reasons {unknown} are not among the {list(FALLBACK_REASONS)} that combine_step packs"
        )
    out = np.empty(_HEADER + _PER_HEAD * len(step.heads))
    out[:_HEADER] = [
        _checksum(_layout(step)),
        len(step.heads),
        step.calls,
        *(step.fallbacks.get(r, 0) for r in FALLBACK_REASONS),
    ]
    known = lambda v, identity: identity if math.isnan(v) else v  # noqa: E731
    for i, h in enumerate(step.heads):
        out[_HEADER + _PER_HEAD * i : _HEADER + _PER_HEAD * (i + 1)] = [
            *(getattr(h, f) for f in _SUMS + _FLOAT_SUMS),
            *(known(getattr(h, f), -math.inf) for f in _MAXES),
            *(known(getattr(h, f), math.inf) for f in _MINS),
        ]
    return out


def _reduce(gathered: np.ndarray, template: Step) -> Step:
    """(world, n) packed steps → the combined :class:`Step` (layers and heads of ``template``)."""
    heads = gathered[:, _HEADER:].reshape(len(gathered), len(template.heads), _PER_HEAD)
    s, f = len(_SUMS), len(_SUMS) + len(_FLOAT_SUMS)
    sums = heads[:, :, :f].sum(axis=0)  # (heads, counts + float sums)
    maxes = heads[:, :, f : f + len(_MAXES)].max(axis=0)
    mins = heads[:, :, f + len(_MAXES) :].min(axis=0)
    combined = []
    for i, h in enumerate(template.heads):
        counts = {name: int(sums[i, j]) for j, name in enumerate(_SUMS)}
        totals = {name: float(sums[i, j]) for j, name in enumerate(_FLOAT_SUMS, start=s)}
        means = {name: totals[total] / counts[n] if counts[n] else math.nan for name, (total, n) in _MEANS.items()}
        # ±inf left by the reduction is its identity (no rank saw the figure), but a +inf max logit is an overflow.
        logits = {name: float(v) if v > -math.inf else math.nan for name, v in zip(_MAXES, maxes[i])}
        logits.update({name: float(v) if v < math.inf else math.nan for name, v in zip(_MINS, mins[i])})
        figures: dict[str, Any] = {**counts, **totals, **means, **logits}  # disjoint names, ints and floats
        combined.append(HeadFigures(layer=h.layer, head=h.head, entropy_median=math.nan, **figures))
    header = gathered[:, :_HEADER].sum(axis=0)
    fallbacks = {r: int(n) for r, n in zip(FALLBACK_REASONS, header[3:]) if n}
    return dataclasses.replace(template, calls=int(header[2]), fallbacks=fallbacks, heads=combined)


def combine_step(step: Step, process_group=None) -> Step:
    """The figures of ``step`` (this rank's :meth:`Monitor.step`) combined over every rank of
    ``process_group`` (None: the default group), returned on every rank; one collective. Call it on
    every rank of the group, at the same steps. Without an initialised process group, ``step`` itself."""
    if not isinstance(step, Step):
        raise InputTypeError(f"step: expected the Step that Monitor.step returns, got {type(step).__name__}")
    dist = torch.distributed
    if not (dist.is_available() and dist.is_initialized()):
        return step
    world = dist.get_world_size(process_group)
    packed = torch.from_numpy(_pack(step))
    # The collective runs on the backend's device: CPU for gloo, the rank's GPU for nccl.
    device = (
        torch.device("cuda", torch.cuda.current_device())
        if dist.get_backend(process_group) == "nccl"
        else torch.device("cpu")
    )
    mine = packed.to(device)
    gathered = torch.empty(world * mine.numel(), dtype=mine.dtype, device=device)
    # Ranks with different layouts fail the checksum below. Where they also differ in head count the
    # vectors differ in length, which the collective itself does not survive: measured with gloo,
    # the rank with the shorter vector aborts ("Received data size doesn't match expected size"), the
    # other reads the first rank's checksum and raises here; the job stops either way.
    dist.all_gather_single(gathered, mine, group=process_group)
    rows = gathered.view(world, -1).cpu().numpy()
    if len(set(rows[:, 0].tolist())) > 1:
        raise InputError(
            f"step: the ranks report different layers or heads (this rank: {_layout(step)}); "
            "every rank must run the same attention layers in each step"
        )
    return _reduce(rows, step)
