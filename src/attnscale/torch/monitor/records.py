"""What :mod:`attnscale.torch.monitor` hands out: one record per call, figures per (layer, head)
over a context or a step (made from the running aggregates of :mod:`attnscale.torch.head_summary`:
:func:`head_figures`), and a step's strict-JSON form for the sinks. Plain data, no tensors."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from attnscale.torch.head_summary import Running

__all__ = ["CallRecord", "HeadFigures", "Step", "SINK_WEIGHT", "head_figures", "pooled_figures"]

# A head whose rows put this much weight on the first key on average is a sink head: the threshold
# ε = 0.3 of Gu et al., "When Attention Sink Emerges in Language Models" (ICLR 2025), who call a head
# a sink when its mean weight on the first token is at least ε.
SINK_WEIGHT = 0.3


@dataclass(frozen=True)
class CallRecord:
    """One observed attention call (no tensors)."""

    index: int
    layer: str
    shape: tuple  # (B, H_q, L, S, d_k, d_v); B = product of all leading dims (1 head if 3-D)
    dtype: str
    source: str  # "sdpa", "interface", "module" (see capture) or "replaced" (replace mode)
    backend: str  # which attnscale.torch backend computed the figures
    max_abs_logit: float  # NaN when no row attends anything
    float16_overflow_rows: int  # rows with |logit| > 65504, over all heads


# Not frozen: a step makes one per head, and a frozen dataclass's __init__ took 2.4 µs where this
# one takes 0.4 (measured, 25 fields): MiniLM's 72 heads, twice that in a model's step.
@dataclass
class HeadFigures:
    """Figures of one head of one layer: over every row of every call seen in the monitor's context
    (:meth:`Monitor.summary`), or over one step's calls (:meth:`Monitor.step`). NaN where no row counted.

    A row attending a single key (a causal model's first query) is left out of ``rows`` and of the
    entropy, saturation, first-key and ‖q‖ figures, and counted in ``rows_single``: its weight is 1
    and its entropy 0 whatever the model learnt. The logit figures take every attended row, those and broken ones too."""

    layer: str
    head: int
    calls: int
    rows: int  # rows with at least two attended keys and finite logits
    rows_empty: int  # fully masked rows (no figure)
    rows_broken: int  # rows with a NaN or +inf logit (no entropy figure)
    saturated_rows: int  # of ``rows``: largest weight > SATURATED_WEIGHT
    float16_overflow_rows: int  # rows with |logit| > 65504 (broken rows included)
    entropy_mean: float  # nats
    entropy_median: float  # NaN with history=False
    entropy_min: float
    max_logit: float  # largest attended logit, single-key and broken rows' too (what the logit guard clips)
    min_logit: float  # smallest attended logit (same rows)
    max_abs_logit: float  # max |logit| (same rows)
    rows_of: int = 0  # query rows of the calls; more than rows + rows_empty + rows_broken with rows=K
    entropy_mean_se: float = 0.0  # standard error of entropy_mean as the mean of all rows_of (0: every row read)
    rows_single: int = 0  # rows attending a single key (weight 1, entropy 0): in the logit figures only
    entropy_sum: float = 0.0  # Σ entropy over ``rows`` (nats): what a combination over ranks adds up
    first_key_weight: float = math.nan  # mean weight on the first real key (key 0 unpadded) over ``rows`` (sinks)
    q_norm_mean: float = math.nan  # mean ‖q_i‖ (L2, as given to attention, before any scale) over ``rows``
    k_norm_mean: float = math.nan  # mean ‖k_j‖ over the ``keys`` of the calls (the KV head's, grouped-query)
    keys: int = 0  # real key rows of the calls, each once (per KV head, every leading index)
    first_key_sum: float = 0.0  # Σ weight on the first real key over ``rows``; the sums combine over ranks
    q_norm_sum: float = 0.0  # Σ ‖q_i‖ over ``rows``
    k_norm_sum: float = 0.0  # Σ ‖k_j‖ over ``keys``

    @property
    def saturated_fraction(self) -> float:
        """saturated_rows / rows; NaN when no row counted."""
        return self.saturated_rows / self.rows if self.rows else math.nan

    @property
    def sink_head(self) -> bool:
        """Whether the head is a sink: first_key_weight ≥ :data:`SINK_WEIGHT` (False when no row counted)."""
        return self.first_key_weight >= SINK_WEIGHT


_STEP_FIGURES = (
    "entropy_mean",
    "entropy_min",
    "max_logit",
    "max_abs_logit",
    "saturated_fraction",
    "first_key_weight",
    "q_norm_mean",
    "k_norm_mean",
)


@dataclass(frozen=True)
class Step:
    """What :meth:`Monitor.step` closes: the calls since the previous step."""

    step: int
    calls: int  # attention calls seen (replaced, observed and fallbacks)
    fallbacks: dict  # reason -> calls that ran on SDPA instead (replace mode)
    heads: list  # list[HeadFigures], layers in the order first seen
    measured: bool = True  # False: a step that every=N left to the model (no calls, no heads)
    alerts: tuple | None = None  # early-warning alerts of the step (Monitor(alerts=...)); None: no detector

    def by_layer(self) -> dict[str, list]:
        """{layer: its HeadFigures}, layers in the order first seen."""
        layers: dict[str, list] = {}
        for h in self.heads:
            layers.setdefault(h.layer, []).append(h)
        return layers

    def to_json(self) -> dict:
        """Strict JSON data (each head's fields and its ``saturated_fraction``): a figure that does
        not exist is null, with ``why_null`` beside it — in the head for what is the head's own, once
        in the step for what is every head's (a median that ``history=False`` does not keep)."""
        heads, medians_unkept = [], False
        for h in self.heads:
            entry = {
                k: (v if not isinstance(v, float) or math.isfinite(v) else None)
                for k, v in {**vars(h), "saturated_fraction": h.saturated_fraction}.items()
            }
            if any(entry[k] is None for k in _STEP_FIGURES):
                entry["why_null"] = (
                    "no row attended any key"
                    if h.rows + h.rows_broken + h.rows_single == 0
                    else "every attended row attended a single key"
                    if h.rows + h.rows_broken == 0
                    else "every attended row had a NaN or +inf logit"
                    if h.rows == 0
                    else "a non-finite figure"
                )
            elif entry["entropy_median"] is None:
                medians_unkept = True
            heads.append(entry)
        out = {
            "step": self.step,
            "measured": self.measured,
            "calls": self.calls,
            "fallbacks": dict(self.fallbacks),
            "heads": heads,
        }
        if medians_unkept:
            out["why_null"] = {"entropy_median": "history=False keeps no per-row entropies to take a median of"}
        if self.alerts is not None:
            out["alerts"] = [a.to_json() for a in self.alerts]
        return out


_MEANS = ("entropy_mean", "first_key_weight", "q_norm_mean", "k_norm_mean")  # row-weighted over heads


def pooled_figures(heads) -> dict:
    """The per-head figures over a set of heads (a layer's, or the whole model's): row-weighted
    means, extremes, pooled fractions, and the share of sink heads among the heads with rows counted.
    What trainer keys and TensorBoard log for a layer; a figure no row has is left out."""
    rows = sum(h.rows for h in heads)
    seen = [h for h in heads if h.rows]
    if not rows:
        return {"float16_overflow_rows": sum(h.float16_overflow_rows for h in heads)}
    return {
        **{f: sum(getattr(h, f) * h.rows for h in seen) / rows for f in _MEANS},
        "entropy_min": min(h.entropy_min for h in seen),
        "max_logit": max(h.max_logit for h in seen),
        "max_abs_logit": max(h.max_abs_logit for h in seen),
        "saturated_fraction": sum(h.saturated_rows for h in heads) / rows,
        "float16_overflow_rows": sum(h.float16_overflow_rows for h in heads),
        "sink_heads_share": sum(h.sink_head for h in seen) / len(seen),
    }


def _medians(calls: list | None, heads: int) -> list:
    """Each head's median row entropy over ``calls`` (row entropies (N, H, L), NaN where a row is
    not counted), NaN for a head without one (or no calls: history=False). All heads in one sort
    (NaN sorts last): the median of n numbers is the middle one, or the mean of the middle two, as
    NumPy's median takes it."""
    if not calls:
        return [math.nan] * heads
    rows = np.concatenate([e.transpose(1, 0, 2).reshape(heads, -1) for e in calls], axis=1).astype(np.float64)
    n = np.count_nonzero(~np.isnan(rows), axis=1)
    if not rows.shape[1]:
        return [math.nan] * heads
    rows.sort(axis=1)
    every = np.arange(heads)
    middle = (rows[every, np.maximum(n - 1, 0) // 2] + rows[every, n // 2]) / 2
    return [m if c else math.nan for m, c in zip(middle.tolist(), n.tolist())]


def head_figures(layer: str, run: Running, entropies: dict) -> list[HeadFigures]:
    """One :class:`HeadFigures` per head of ``run``; ``entropies``: {layer: [row entropies (N, H, L), ...]}
    over the same calls (empty with history=False: no median). In plain Python over the table's
    columns, one list of numbers per head (per head, an array operation costs more than the
    arithmetic, and after a forward's GEMMs a list per figure cost more than the figures: measured)."""
    nan, inf, population, keys, calls, total = math.nan, math.inf, run.population, run.keys, run.calls, run.total
    medians = _medians(entropies.get(layer), run.heads)
    out = []
    # Counts are exact integers in float64 (ROWS' order); they become ints for the record.
    for h, (no_entropy, empty, saturated, single, overflow, ent_sum, squares, first, q_norm, k_norm, _, hi, ent_min, lo) in enumerate(run.table.T.tolist()):  # fmt: skip
        rows = total - no_entropy - single  # rows with an entropy figure
        broken = no_entropy - empty
        mean = ent_sum / rows if rows else nan
        spread = (squares - rows * mean * mean) / (rows - 1) if rows > 1 else nan
        unread = 1.0 - (rows + empty + broken + single) / population if population else 0.0
        se = 0.0 if unread <= 0 else math.sqrt(max(spread, 0.0) / rows * unread) if rows > 1 else nan
        # lo ≤ hi in every row, so max |logit| = max(max hi, −min lo): no per-row |·| needed.
        top = max(hi, -lo)
        # The logits of single-key and broken rows count: −inf/+inf here are the reductions'
        # identities, no logit seen (an overflowed +inf max is a logit, and stays).
        out.append(
            HeadFigures(
                layer=layer,
                head=h,
                calls=calls,
                rows=int(rows),
                rows_empty=int(empty),
                rows_broken=int(broken),
                saturated_rows=int(saturated),
                float16_overflow_rows=int(overflow),
                entropy_mean=mean,
                entropy_median=medians[h],
                entropy_min=ent_min if rows else nan,
                max_logit=hi if hi > -inf else nan,
                min_logit=lo if lo < inf else nan,
                max_abs_logit=top if top > -inf else nan,
                rows_of=population,
                entropy_mean_se=se,
                rows_single=int(single),
                entropy_sum=ent_sum,
                first_key_weight=first / rows if rows else nan,
                q_norm_mean=q_norm / rows if rows else nan,
                k_norm_mean=k_norm / keys if keys else nan,
                keys=keys,
                first_key_sum=first,
                q_norm_sum=q_norm,
                k_norm_sum=k_norm,
            )
        )
    return out
