"""Watch attention health while a model runs: figures for every SDPA call, per layer and head.

    with monitor(model) as mon:
        model(**batch)                # outputs bit-for-bit what they would be without the monitor
    mon.summary()                     # one row per (layer, head): entropy mean/median/min, logit range
    mon.calls                         # one record per call: layer, shapes, dtype, float16 overflow

Calls are found by :func:`attnscale.torch.capture.capture_sdpa` (SDPA calls, and BERT-style eager
attention rebuilt from its projections). For each, :func:`attnscale.torch.attention` recomputes the
row figures from q, k, v — exact, without the L×S matrix on CPU — and the monitor keeps only the
figures: never q, k, v or the weights. The model's own call runs first and untouched; the
recomputation runs under ``torch.no_grad`` on detached tensors.

What is kept: per (layer, head), each row's entropy in the figures' dtype (4 bytes per query row for
a float32 or half model, 8 for float64; so that the median is exact), and running max/min logits and
counts. A "layer" is the innermost module that made the call (see capture): a module that calls
attention twice has both calls aggregated under its name. A fully masked row counts in ``rows_empty``
and in no figure; a row whose logits overflowed to +inf or are NaN (the kernel reports it NaN, not
empty) counts in ``rows_broken`` and in no entropy figure, and an overflowed one in ``overflow_rows``.

Any SDPA layout is taken: q (..., H_q, L, d_k) with any number of leading dimensions (all folded
into the batch), or 3-D (N, L, d_k), which has no head axis and is counted as one head.

Figures describe the softmax before any dropout (a training-mode call's dropout_p is ignored).

float16 safety: a row whose logits leave ±65504 overflows in float16 before the softmax (PyTorch
issue #119131). ``overflow_rows`` counts them per head and each call record says whether it had any,
whatever the dtype the model ran in (a float32 model that would overflow once cast to half is flagged).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from attnscale.errors import InputError, InputTypeError, require
from attnscale.torch.attention import FLOAT16_MAX, attention
from attnscale.torch.capture import MASKED_BELOW, capture_sdpa

__all__ = ["monitor", "Monitor", "CallRecord", "HeadFigures"]


@dataclass(frozen=True)
class CallRecord:
    """One observed attention call (no tensors)."""

    index: int
    layer: str
    shape: tuple               # (B, H_q, L, S, d_k, d_v); B = product of all leading dims (1 head if 3-D)
    dtype: str
    source: str                # "sdpa" or "projections" (see capture)
    backend: str               # which attnscale.torch backend computed the figures
    max_abs_logit: float       # NaN when no row attends anything
    float16_overflow: bool     # some |logit| > 65504


@dataclass(frozen=True)
class HeadFigures:
    """Figures of one head of one layer, over every row of every call seen."""

    layer: str
    head: int
    calls: int
    rows: int                  # rows with at least one attended key
    rows_empty: int            # fully masked rows (no figure)
    entropy_mean: float        # nats
    entropy_median: float
    entropy_min: float
    max_logit: float           # largest logit seen
    min_logit: float           # smallest attended logit seen
    overflow_rows: int         # rows with |logit| > 65504
    rows_broken: int = 0       # rows with a NaN or +inf logit (no entropy figure)


@dataclass
class _Accumulator:
    calls: int = 0
    rows_empty: int = 0
    rows_broken: int = 0
    overflow_rows: int = 0
    max_logit: float = -np.inf
    min_logit: float = np.inf
    entropies: list = field(default_factory=list)

    def figures(self, layer: str, head: int) -> HeadFigures:
        e = np.concatenate(self.entropies) if self.entropies else np.zeros(0, np.float32)
        seen = e.size > 0
        stat = lambda f: float(f(e.astype(np.float64))) if seen else float("nan")  # noqa: E731
        return HeadFigures(layer=layer, head=head, calls=self.calls, rows=int(e.size), rows_empty=self.rows_empty,
                           entropy_mean=stat(np.mean), entropy_median=stat(np.median), entropy_min=stat(np.min),
                           max_logit=self.max_logit if seen else float("nan"),
                           min_logit=self.min_logit if seen else float("nan"), overflow_rows=self.overflow_rows,
                           rows_broken=self.rows_broken)


class Monitor:
    """What :func:`monitor` yields. ``calls``: list of :class:`CallRecord`; :meth:`summary`."""

    def __init__(self, backend: str = "auto"):
        self.calls: list[CallRecord] = []
        self._backend = backend
        self._heads: dict[tuple[str, int], _Accumulator] = {}

    def summary(self) -> list[HeadFigures]:
        """One :class:`HeadFigures` per (layer, head), layers in the order first seen."""
        return [acc.figures(layer, head) for (layer, head), acc in self._heads.items()]

    def as_dict(self) -> dict:
        """Plain data for JSON: {"calls": [...], "heads": [...]}."""
        from attnscale.store import to_jsonable

        return {"calls": to_jsonable(self.calls), "heads": to_jsonable(self.summary())}

    def observe(self, call) -> None:
        """Compute and fold in the figures of one :class:`~attnscale.torch.capture.SDPACall`."""
        torch = require("torch", "torch")
        with torch.no_grad():
            mask, bias = _mask_and_bias(torch, call.attn_mask)
            stats = attention(call.q, call.k, call.v, scale=call.scale, mask=mask, bias=bias,
                              causal="top_left" if call.is_causal else False, max_logit=True,
                              backend=self._backend, check_finite=False)
        entropy, hi, lo = _per_head(stats.entropy), _per_head(stats.max_logit), _per_head(stats.min_logit)
        empty = _per_head(stats.lse) == -np.inf                      # nothing attended (NaN lse: broken)
        reach = np.fmax(np.abs(hi), np.abs(lo))                     # max |logit| per row; NaN if empty
        overflow = reach > FLOAT16_MAX
        for h in range(entropy.shape[0]):
            acc = self._heads.setdefault((call.name, h), _Accumulator())
            full = ~np.isnan(entropy[h])
            acc.calls += 1
            acc.rows_empty += int(empty[h].sum())
            acc.rows_broken += int((~full & ~empty[h]).sum())
            acc.overflow_rows += int(overflow[h].sum())
            if full.any():
                acc.entropies.append(entropy[h][full])
                acc.max_logit = max(acc.max_logit, float(np.max(hi[h][full])))
                acc.min_logit = min(acc.min_logit, float(np.min(lo[h][full])))
        *lead, H_q, L, d_k = call.q.shape if call.q.dim() > 3 else (call.q.shape[0], 1, *call.q.shape[1:])
        B = math.prod(lead)
        biggest = float(np.nanmax(reach)) if not np.isnan(reach).all() else float("nan")
        self.calls.append(CallRecord(
            index=call.index, layer=call.name, shape=(B, H_q, L, call.k.shape[-2], d_k, call.v.shape[-1]),
            dtype=str(call.q.dtype).replace("torch.", ""), source=call.source, backend=stats.backend,
            max_abs_logit=biggest, float16_overflow=bool(overflow.any())))


def _per_head(x) -> np.ndarray:
    """(..., H, L) figures → (H, ·), NumPy on the CPU, in the figures' dtype; (N, L), from 3-D
    inputs without a head axis, → (1, N·L)."""
    if x.dim() == 2:
        return x.reshape(1, -1).cpu().numpy()
    return x.reshape(-1, *x.shape[-2:]).transpose(0, 1).reshape(x.shape[-2], -1).cpu().numpy()


def _mask_and_bias(torch, attn_mask):
    """SDPA's attn_mask as (bool mask, additive bias or None). An additive entry at or below
    capture.MASKED_BELOW masks its key (as capture does); what is left is a bias only if non-zero."""
    if attn_mask is None or attn_mask.dtype == torch.bool:
        return attn_mask, None
    attended = attn_mask > MASKED_BELOW
    rest = attn_mask.masked_fill(~attended, 0.0)
    return attended, (rest if bool(rest.ne(0).any()) else None)


class monitor:
    """Context manager: figures for every attention call of ``model`` (or of any module when None)
    while active. ``backend`` is passed to :func:`attnscale.torch.attention`.

    >>> import torch
    >>> class SelfAttention(torch.nn.Module):
    ...     def forward(self, x):                                   # x: (B, H, L, d)
    ...         return torch.nn.functional.scaled_dot_product_attention(x, x, x, is_causal=True)
    >>> layer = SelfAttention()
    >>> with monitor(layer) as mon:
    ...     _ = layer(torch.randn(1, 2, 5, 8))
    >>> [(f.layer, f.head, f.rows, f.entropy_min) for f in mon.summary()]   # row 0 sees one key
    [('SelfAttention', 0, 5, 0.0), ('SelfAttention', 1, 5, 0.0)]
    """

    def __init__(self, model=None, backend: str = "auto"):
        from attnscale.torch.attention import BACKENDS

        if backend not in BACKENDS:
            raise InputError(f"backend: expected one of {BACKENDS}, got {backend!r}")
        torch = require("torch", "torch")
        if model is not None and not isinstance(model, torch.nn.Module):
            raise InputTypeError(f"model: expected a torch.nn.Module or None, got {type(model).__name__}")
        self._monitor = Monitor(backend)
        self._capture = capture_sdpa(model, store=False, on_call=self._monitor.observe)

    def __enter__(self) -> Monitor:
        self._capture.__enter__()
        return self._monitor

    def __exit__(self, *exc) -> None:
        self._capture.__exit__(*exc)
