"""The one key scheme of a step's figures as flat scalars, for every logger: the trainer callbacks
(:mod:`attnscale.integrations`) add these keys to the trainer's log entries, and
:class:`~attnscale.torch.sinks.TensorBoardSink` writes them as its tags. Where comes first, then
what, so that a layer's (or a head's) figures sit together under one prefix; ``docs/trainers.md``
shows the same table.

Each key is a number; a figure that does not exist in a step (no row counted) is left out rather
than logged as NaN. ``<layer>`` is the attention module's path in the model
(``model.layers.0.self_attn``), ``<h>`` the head index:

==========================================  =================================================================
``attn/<layer>/entropy_mean``               mean row entropy over the layer's heads and rows (nats)
``attn/<layer>/entropy_min``                smallest row entropy of the layer (nats)
``attn/<layer>/max_logit``                  largest attended logit of the layer (what QK-clip bounds)
``attn/<layer>/max_abs_logit``              largest |logit| of the layer
``attn/<layer>/saturated_fraction``         share of rows whose largest weight exceeds SATURATED_WEIGHT
``attn/<layer>/float16_overflow_rows``      rows with a |logit| > 65504 (they overflow in float16)
``attn/<layer>/first_key_weight``           mean weight on the first key over the layer's heads and rows
                                            (attention sinks)
``attn/<layer>/q_norm_mean``                mean ‖q‖ of the query rows (L2, as given to attention, before
                                            any scale), over the layer's heads and rows
``attn/<layer>/k_norm_mean``                mean ‖k‖ of the keys (each head's: its KV head's), row-weighted
                                            over the layer's heads
``attn/<layer>/sink_heads_share``           share of the layer's heads (with rows) whose mean weight on the
                                            first key is ≥ SINK_WEIGHT = 0.3 (Gu et al., ICLR 2025)
``attn/<layer>/head<h>/<figure>``           the same nine figures for one head, all but sink_heads_share
                                            (``per_head=True``)
``attn/model/<figure>``                     the ten layer figures over every head of the model
``attn/calls``                              attention calls seen in the step (all ranks)
``attn/clipped_heads``                      heads QK-clip rescaled in the step (would have, ``log_only``);
                                            only with ``tau``
``attn/alerts``                             early-warning alerts raised since the previous logged step
                                            (:mod:`attnscale.early_warning`); only with ``alerts``
``attn/fallbacks/<reason>``                 replace-mode calls that ran on the model's own attention
==========================================  =================================================================

A row that attends a single key (a causal model's first query) is in none of the means: its one
key is the first, weight 1 whatever the model learnt. Means are row-weighted over the heads; each
combines exactly over the ranks (sums and counts are gathered, not means).
"""

from __future__ import annotations

import math

from attnscale.torch.monitor.records import pooled_figures

__all__ = ["FIGURES", "MODEL", "step_keys"]

# The per-head figures logged, in the order of the key table: fields (or properties) of HeadFigures.
FIGURES = (
    "entropy_mean",
    "entropy_min",
    "max_logit",
    "max_abs_logit",
    "saturated_fraction",
    "float16_overflow_rows",
    "first_key_weight",
    "q_norm_mean",
    "k_norm_mean",
)
#: Where the figures over every head go: ``attn/model/<figure>``.
MODEL = "model"


def step_keys(step, clips=None, per_head: bool = True, alerts=None, prefix: str = "attn") -> dict[str, float]:
    """A :class:`~attnscale.torch.monitor.records.Step` → {key: number} (the table above).

    clips: the step's QK-clip, a list of :class:`~attnscale.torch.guard.Clip` (None: no guard, no key);
    alerts: how many alerts to log as ``attn/alerts`` (None: no detector, no key); prefix: the keys'
    first part. Non-finite figures are left out (a NaN or an overflowed +inf breaks some loggers' charts)."""
    out: dict[str, float] = {f"{prefix}/calls": float(step.calls)}
    groups = [(f"{prefix}/{layer}", heads) for layer, heads in step.by_layer().items()]
    if step.heads:
        groups.append((f"{prefix}/{MODEL}", step.heads))
    for where, heads in groups:
        out.update({f"{where}/{name}": float(v) for name, v in pooled_figures(heads).items() if math.isfinite(v)})
    if per_head:
        for h in step.heads:
            where = f"{prefix}/{h.layer}/head{h.head}"
            out.update({f"{where}/{f}": float(v) for f in FIGURES if math.isfinite(v := getattr(h, f))})
    out.update({f"{prefix}/fallbacks/{reason}": float(n) for reason, n in step.fallbacks.items()})
    if clips is not None:
        out[f"{prefix}/clipped_heads"] = float(len(clips))
    if alerts is not None:
        out[f"{prefix}/alerts"] = float(alerts)
    return out
