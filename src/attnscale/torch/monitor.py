"""Watch attention health while a model runs or trains: figures for every SDPA call, per layer and head.

    with monitor(model) as mon:                       # mode="observe": outputs bit-for-bit unchanged
        model(**batch)
    mon.summary()                                     # one HeadFigures per (layer, head)
    mon.calls                                         # one CallRecord per call (history=True)

    with monitor(model, mode="replace", history=False, sinks=[JSONLSink("attn.jsonl")]) as mon:
        for step, batch in enumerate(batches):        # training: forward, backward, optimiser step
            ...
            figures = mon.step(step)                  # this step's per layer × head figures → sinks

Two modes. Calls are found by :func:`attnscale.torch.capture.capture_sdpa` (SDPA calls, and BERT-style
eager attention rebuilt from its projections).

- ``"observe"``: the model's own SDPA call runs untouched — outputs bit-for-bit what they would be
  without the monitor — and :func:`attnscale.torch.attention` recomputes the row figures from
  detached q, k, v under ``torch.no_grad``: the attention is computed twice.
- ``"replace"``: the model's SDPA call is computed by :func:`attnscale.torch.attention` itself, which
  returns the output and the figures in one pass. The outputs equal SDPA's to rounding, NOT
  bit-for-bit (another summation order): in float32, max |Δout| ≤ 1e-5·max|v| (the tests hold
  it to that; measured 6e-7 there, and 1.6e-6 on MiniLM's last hidden state after 6 layers). With gradients enabled and an input that requires grad,
  the call runs on :data:`TRAINING_BACKEND`, a backend that gives gradients through PyTorch's
  autograd (forward and backward follow the model's); otherwise on ``backend`` ("auto": the fused
  kernel on CPU). Calls it cannot honour run on SDPA instead and are counted in ``mon.fallbacks``
  (and each step's), never dropped silently: ``dropout`` (dropout_p > 0; figures then recomputed
  as in observe mode, describing the softmax before the dropout), ``learned mask`` (an attn_mask
  that requires grad; recomputed too), ``fully masked row`` (a float attn_mask that masks every
  key of a row with finite numbers, HF's finfo.min: SDPA then averages v by the mask's softmax, we
  would give 0; recomputed too), ``unsupported`` (inputs attnscale.torch.attention refuses;
  no figures), ``eager attention`` (a module that never called SDPA, rebuilt from its projections
  and observed). Calls SDPA itself would refuse (is_causal with an attn_mask, head counts that do
  not broadcast without enable_gqa) are left to SDPA, which raises its own error.

What is kept, per (layer, head): running aggregates only — counts, Σ entropy, extremes — as a few
NumPy arrays of H numbers, whatever the number of calls (no q, k, v, weights or per-row arrays), for the
current step and for the whole context. ``history=True`` (the default) also keeps each row's entropy
(4 bytes per query row, for an exact median in :meth:`Monitor.summary`) and one :class:`CallRecord`
per call; a training loop passes ``history=False``, which keeps memory bounded over any number of
steps (``entropy_median`` is then NaN).

A "layer" is the innermost module that made the call (see capture): a module that calls attention
twice has both calls aggregated under its name; gradient checkpointing, which reruns the forward,
counts its calls twice. A fully masked row counts in ``rows_empty`` and in no figure; a row whose
logits overflowed to +inf or are NaN counts in ``rows_broken`` and in no entropy figure (an
overflowed +inf does show as the head's max logit), and an overflowed one in the float16 overflow
count. A row is saturated when its largest weight
exceeds :data:`SATURATED_P` (:data:`attnscale.softmax.SATURATED_WEIGHT`): exp(max logit − lse), free from the kernel's figures.

Any SDPA layout is taken: q (..., H_q, L, d_k) with any number of leading dimensions (all folded
into the batch), or 3-D (N, L, d_k), which has no head axis and is counted as one head.

float16 safety: a row whose logits leave ±65504 overflows in float16 before the softmax (PyTorch
issue #119131). It is counted per head whatever the dtype the model ran in (a float32 model that
would overflow once cast to half is flagged).
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass

import numpy as np

from attnscale.errors import InputError, InputTypeError, check_choice, require
from attnscale.softmax import SATURATED_WEIGHT
from attnscale.torch.attention import FLOAT16_MAX, attention
from attnscale.torch.capture import capture_sdpa
from attnscale.torch.sdpa_mask import split_attn_mask

__all__ = ["monitor", "Monitor", "CallRecord", "HeadFigures", "Step", "StepHead", "MODES", "TRAINING_BACKEND",
           "SATURATED_P"]

MODES = ("observe", "replace")
# The backend of replace mode when gradients are needed: "auto", the fused kernel with its own
# flash-style backward (memory O(L·d)) where it builds, else the composed path.
TRAINING_BACKEND = "auto"
SATURATED_P = SATURATED_WEIGHT     # a row is saturated when its largest weight exceeds this
_LOG_SATURATED = math.log(SATURATED_P)


@dataclass(frozen=True)
class CallRecord:
    """One observed attention call (no tensors)."""

    index: int
    layer: str
    shape: tuple               # (B, H_q, L, S, d_k, d_v); B = product of all leading dims (1 head if 3-D)
    dtype: str
    source: str                # "sdpa", "projections" (see capture) or "replaced" (replace mode)
    backend: str               # which attnscale.torch backend computed the figures
    max_abs_logit: float       # NaN when no row attends anything
    float16_overflow: bool     # some |logit| > 65504


@dataclass(frozen=True)
class HeadFigures:
    """Figures of one head of one layer, over every row of every call seen in the context."""

    layer: str
    head: int
    calls: int
    rows: int                  # rows with at least one attended key and finite logits
    rows_empty: int            # fully masked rows (no figure)
    entropy_mean: float        # nats
    entropy_median: float      # NaN with history=False
    entropy_min: float
    max_logit: float           # largest logit seen
    min_logit: float           # smallest attended logit seen
    overflow_rows: int         # rows with |logit| > 65504
    rows_broken: int = 0       # rows with a NaN or +inf logit (no entropy figure)
    saturated_rows: int = 0    # rows whose largest weight exceeds SATURATED_P


@dataclass(frozen=True)
class StepHead:
    """One head's figures over one step's calls (see :meth:`Monitor.step`). NaN where no row counted."""

    layer: str
    head: int
    calls: int
    rows: int
    rows_empty: int
    rows_broken: int
    entropy_mean: float        # nats
    entropy_min: float
    max_logit: float           # largest attended logit (what the logit guard clips)
    max_abs_logit: float       # max |logit|
    saturated_fraction: float  # of ``rows``: largest weight > SATURATED_P
    float16_overflow: int      # rows with |logit| > 65504 (broken rows included)


_STEP_FIGURES = ("entropy_mean", "entropy_min", "max_logit", "max_abs_logit", "saturated_fraction")


@dataclass(frozen=True)
class Step:
    """What :meth:`Monitor.step` closes: the calls since the previous step."""

    step: int
    calls: int                 # attention calls seen (replaced, observed and fallbacks)
    fallbacks: dict            # reason -> calls that ran on SDPA instead (replace mode)
    heads: list                # list[StepHead], layers in the order first seen

    def to_json(self) -> dict:
        """Strict JSON data: a figure that does not exist is null, with ``why_null`` beside it."""
        heads = []
        for h in self.heads:
            entry = {k: (v if not isinstance(v, float) or math.isfinite(v) else None) for k, v in vars(h).items()}
            if any(entry[k] is None for k in _STEP_FIGURES):
                entry["why_null"] = ("no row attended any key" if h.rows + h.rows_broken == 0 else
                                     "every attended row had a NaN or +inf logit" if h.rows == 0 else
                                     "a non-finite figure")
            heads.append(entry)
        return {"step": self.step, "calls": self.calls, "fallbacks": dict(self.fallbacks), "heads": heads}


class _Running:
    """Running aggregates of one layer's H heads, NumPy arrays of H numbers: counts of rows with no
    entropy (empty or broken), empty and saturated rows, float16 overflows; the largest logit; the
    smallest entropy and logit; Σ entropy. Plus the rows seen per head (an int)."""

    def __init__(self, heads: int):
        self.calls = self.total = 0
        self.counts = np.zeros((3, heads), np.int64)        # no entropy, empty, saturated
        self.overflow = np.zeros(heads, np.int64)
        self.max_logit = np.full(heads, -np.inf)
        self.mins = np.full((2, heads), np.inf)              # entropy, logit
        self.entropy_sum = np.zeros(heads)

    @property
    def heads(self) -> int:
        return self.counts.shape[1]

    def add(self, other) -> None:
        self.calls += other.calls
        self.total += other.total
        self.counts += other.counts
        self.overflow += other.overflow
        self.entropy_sum += other.entropy_sum
        np.maximum(self.max_logit, other.max_logit, out=self.max_logit)
        np.minimum(self.mins, other.mins, out=self.mins)

    def plain(self) -> dict:
        """Python numbers per head: {name: list of H}."""
        no_entropy, empty, saturated = self.counts.tolist()
        hi, (ent_min, lo) = self.max_logit.tolist(), self.mins.tolist()
        return {"rows": [self.total - n for n in no_entropy], "rows_empty": empty,
                "rows_broken": [n - e for n, e in zip(no_entropy, empty)], "saturated": saturated,
                "overflow": self.overflow.tolist(), "entropy_sum": self.entropy_sum.tolist(),
                "entropy_min": ent_min, "max_logit": hi, "min_logit": lo,
                # lo ≤ hi in every row, so max |logit| = max(max hi, −min lo): no per-row |·| needed.
                "max_abs_logit": [max(a, -b) for a, b in zip(hi, lo)]}


def _rows_by_head(x) -> np.ndarray:
    """(..., H, L) figures → NumPy (N, H, L) on the host, rows of one head along axes 0 and 2; (N, L),
    from 3-D inputs without a head axis (and rank 1), → (1, 1, N·L): one head."""
    x = x.detach()
    x = x.reshape(1, 1, -1) if x.dim() <= 2 else x.reshape(-1, *x.shape[-2:])
    return x.cpu().numpy()


def _call_figures(stats) -> tuple[_Running, np.ndarray]:
    """One call's figures as a :class:`_Running` of its own — NumPy reductions over all heads at
    once (a few µs each, where a torch call costs tens) — and its per-row entropies (N, H, L).

    An empty row has NaN entropy and logits and lse −inf; a broken one NaN entropy (its logits may be
    +inf): NaN-skipping reductions (fmax, fmin) leave both out of the entropy figures, and an
    overflowed +inf logit stays visible in the head's max logit."""
    ent, hi, lo, lse = (_rows_by_head(x) for x in (stats.entropy, stats.max_logit, stats.min_logit, stats.lse))
    rows = (0, 2)
    run = _Running.__new__(_Running)
    run.calls, run.total = 1, ent.shape[0] * ent.shape[2]
    nan = np.isnan(ent)
    with np.errstate(invalid="ignore"):                                 # inf − inf in a broken row: NaN, not saturated
        saturated = np.count_nonzero(hi - lse > _LOG_SATURATED, axis=rows)
    run.counts = np.stack([np.count_nonzero(nan, axis=rows), np.count_nonzero(lse == -np.inf, axis=rows), saturated])
    run.max_logit = np.fmax.reduce(hi, axis=rows, initial=-np.inf).astype(np.float64)
    run.mins = np.stack([np.fmin.reduce(ent, axis=rows, initial=np.inf),
                         np.fmin.reduce(lo, axis=rows, initial=np.inf)]).astype(np.float64)
    run.entropy_sum = np.where(nan, 0.0, ent).sum(axis=rows, dtype=np.float64)
    # Counting float16 overflows takes four passes; most calls have none, which the extremes show.
    loud = max(run.max_logit.max(), -run.mins[1].min()) > FLOAT16_MAX
    run.overflow = (np.count_nonzero((hi > FLOAT16_MAX) | (lo < -FLOAT16_MAX), axis=rows) if loud
                    else np.zeros(ent.shape[1], np.int64))
    return run, ent


class Monitor:
    """What :func:`monitor` yields: :meth:`summary`, :meth:`step`, ``calls``, ``fallbacks``."""

    def __init__(self, backend: str = "auto", mode: str = "observe", sinks=(), history: bool = True):
        self.calls: list[CallRecord] = []
        self.fallbacks: Counter = Counter()
        self._backend = backend
        self._mode = mode
        self._sinks = list(sinks)
        self._history = history
        self._total: dict[str, _Running] = {}
        self._current: dict[str, _Running] = {}
        self._entropies: dict[tuple[str, int], list] = {}
        self._step_fallbacks: Counter = Counter()
        self._step_calls = 0
        self._skip_observe = False
        self._mask_cache = None

    # -- figures out ------------------------------------------------------------------------------

    def summary(self) -> list[HeadFigures]:
        """One :class:`HeadFigures` per (layer, head) over the whole context, layers in the order first seen."""
        out = []
        for layer in self._layers():
            p = self._merged(layer).plain()
            for h in range(len(p["rows"])):
                rows = p["rows"][h]
                seen = rows > 0
                e = self._entropies.get((layer, h))
                median = float(np.median(np.concatenate(e).astype(np.float64))) if seen and e else math.nan
                nan = math.nan
                out.append(HeadFigures(
                    layer=layer, head=h, calls=self._merged(layer).calls, rows=rows, rows_empty=p["rows_empty"][h],
                    entropy_mean=p["entropy_sum"][h] / rows if seen else nan, entropy_median=median,
                    entropy_min=p["entropy_min"][h] if seen else nan,
                    max_logit=p["max_logit"][h] if seen else nan, min_logit=p["min_logit"][h] if seen else nan,
                    overflow_rows=p["overflow"][h], rows_broken=p["rows_broken"][h],
                    saturated_rows=p["saturated"][h]))
        return out

    def as_dict(self) -> dict:
        """Plain data for JSON: {"calls": [...], "heads": [...], "fallbacks": {...}}."""
        from attnscale.store import to_jsonable

        return {"calls": to_jsonable(self.calls), "heads": to_jsonable(self.summary()),
                "fallbacks": dict(self.fallbacks)}

    def step(self, global_step: int, log: bool = True) -> Step:
        """Close a step: the figures of every call since the previous :meth:`step` (or the start),
        per layer × head, handed to the sinks (unless ``log=False``) and returned."""
        if isinstance(global_step, bool) or not isinstance(global_step, (int, np.integer)):
            raise InputTypeError(f"global_step: expected an int, got {type(global_step).__name__}")
        heads = []
        for layer, run in self._current.items():
            p = run.plain()
            for h in range(len(p["rows"])):
                rows = p["rows"][h]
                nan = math.nan
                heads.append(StepHead(
                    layer=layer, head=h, calls=run.calls, rows=rows, rows_empty=p["rows_empty"][h],
                    rows_broken=p["rows_broken"][h],
                    entropy_mean=p["entropy_sum"][h] / rows if rows else nan,
                    entropy_min=p["entropy_min"][h] if rows else nan,
                    max_logit=p["max_logit"][h] if rows else nan, max_abs_logit=p["max_abs_logit"][h] if rows else nan,
                    saturated_fraction=p["saturated"][h] / rows if rows else nan, float16_overflow=p["overflow"][h]))
            self._add(self._total, layer, run)
        result = Step(step=int(global_step), calls=self._step_calls, fallbacks=dict(self._step_fallbacks), heads=heads)
        self._current = {}
        self._mask_cache = None
        self._step_fallbacks = Counter()
        self._step_calls = 0
        if log:
            record = result.to_json()
            for sink in self._sinks:
                sink.write(record)
        return result

    def close(self) -> None:
        """Close the sinks (the monitor's context does it on exit)."""
        for sink in self._sinks:
            sink.close()

    # -- figures in -------------------------------------------------------------------------------

    def _layers(self) -> list[str]:
        return list(dict.fromkeys([*self._total, *self._current]))

    def _merged(self, layer: str) -> _Running:
        parts = [t[layer] for t in (self._total, self._current) if layer in t]
        out = _Running(parts[0].heads)
        for p in parts:
            out.add(p)
        return out

    @staticmethod
    def _add(table: dict, layer: str, run: _Running) -> None:
        if layer not in table:
            table[layer] = _Running(run.heads)
        table[layer].add(run)

    def _layer_key(self, name: str, heads: int) -> str:
        """The layer's name; a module whose calls change head count gets one entry per count."""
        for table in (self._current, self._total):
            if name in table and table[name].heads != heads:
                return f"{name}[{heads} heads]"
        return name

    def _fold(self, name: str, q, k, v, stats, source: str, index: int) -> None:
        run, ent = _call_figures(stats)
        layer = self._layer_key(name, ent.shape[1])
        self._add(self._current, layer, run)
        self._step_calls += 1
        if not self._history:
            return
        for h in range(ent.shape[1]):
            e = ent[:, h].reshape(-1)
            self._entropies.setdefault((layer, h), []).append(e[~np.isnan(e)])
        *lead, H_q, L, d_k = q.shape if q.dim() > 3 else (q.shape[0], 1, *q.shape[1:])
        p = run.plain()
        reach = [r for r, n in zip(p["max_abs_logit"], p["rows"]) if n]
        self.calls.append(CallRecord(
            index=index, layer=layer, shape=(math.prod(lead), H_q, L, k.shape[-2], d_k, v.shape[-1]),
            dtype=str(q.dtype).replace("torch.", ""), source=source, backend=stats.backend,
            max_abs_logit=max(reach) if reach else math.nan, float16_overflow=any(p["overflow"])))

    def _fallback(self, reason: str) -> None:
        self.fallbacks[reason] += 1
        self._step_fallbacks[reason] += 1

    def observe(self, call) -> None:
        """Compute and fold in the figures of one :class:`~attnscale.torch.capture.SDPACall`."""
        if self._skip_observe:                      # a replace-mode fallback with no figures
            self._skip_observe = False
            self._step_calls += 1
            return
        if self._mode == "replace" and call.source == "projections":
            self._fallback("eager attention")
        torch = require("torch", "torch")
        with torch.no_grad():
            mask, bias = split_attn_mask(call.attn_mask)
            stats = attention(call.q, call.k, call.v, scale=call.scale, mask=mask, bias=bias,
                              causal="top_left" if call.is_causal else False, max_logit=True,
                              backend=self._backend, check_finite=False)
        self._fold(call.name, call.q, call.k, call.v, stats, call.source, call.index)

    def _mask_parts(self, torch, m):
        """(mask, bias, averaged) of SDPA's attn_mask ``m``: :func:`split_attn_mask`, and whether a
        row we call fully masked holds finite numbers — SDPA masks nothing, so such a row (HF's
        finfo.min) gets softmax(mask)·v from it where we give 0. Kept for the previous call's mask
        tensor until the step closes: a model hands the same mask to every layer."""
        if m is None:
            return None, None, False
        if self._mask_cache is not None and self._mask_cache[0] is m and self._mask_cache[1] == m._version:
            return self._mask_cache[2]
        mask, bias = split_attn_mask(m)
        averaged = m.dtype != torch.bool and bool((~mask.any(-1) & torch.isfinite(m).any(-1)).any())
        self._mask_cache = (m, m._version, (mask, bias, averaged))
        return mask, bias, averaged

    def replace(self, name: str, a: dict):
        """Compute one intercepted SDPA call (arguments as capture passes them) with its figures;
        None leaves it to SDPA (a fallback, or a call SDPA itself refuses)."""
        torch = require("torch", "torch")
        q, k, v, m = a["query"], a["key"], a["value"], a["attn_mask"]
        if not all(isinstance(t, torch.Tensor) for t in (q, k, v)) or q.dim() < 2:
            return None
        if m is not None and a["is_causal"]:
            return None                               # SDPA refuses both: let it say so
        if (not a["enable_gqa"] and q.dim() >= 3 and k.dim() >= 3 and k.shape[-3] not in (1, q.shape[-3])):
            return None                               # SDPA would not broadcast these heads
        grad = torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v))
        if a["dropout_p"] > 0:
            self._fallback("dropout")
            return None
        if m is not None and m.requires_grad and torch.is_grad_enabled():
            self._fallback("learned mask")
            return None
        try:
            mask, bias, averaged = self._mask_parts(torch, m)
            if averaged:
                self._fallback("fully masked row")
                return None
            stats = attention(q, k, v, scale=a["scale"], mask=mask, bias=bias,
                              causal="top_left" if a["is_causal"] else False, max_logit=True,
                              backend=TRAINING_BACKEND if grad else self._backend, check_finite=False)
        except InputError:
            self._fallback("unsupported")
            self._skip_observe = True
            return None
        self._fold(name, q, k, v, stats, "replaced", -1 if not self._history else len(self.calls))
        return stats.out


class monitor:
    """Context manager: figures for every attention call of ``model`` (or of any module when None)
    while active.

    backend: passed to :func:`attnscale.torch.attention` ("auto", "kernel", "composed", "chunked").
    mode: "observe" (bit-for-bit outputs, figures recomputed) or "replace" (one pass, outputs equal
    SDPA's to rounding; see the module docstring). sinks: objects with ``write(record: dict)`` and
    ``close()`` (:mod:`attnscale.torch.sinks`) that :meth:`Monitor.step` hands each step to; closed
    when the context exits. history: keep per-row entropies and per-call records (False for
    training loops: memory bounded whatever the number of calls).

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

    def __init__(self, model=None, backend: str = "auto", mode: str = "observe", sinks=(), history: bool = True):
        from attnscale.torch.attention import BACKENDS

        check_choice("backend", backend, BACKENDS)
        check_choice("mode", mode, MODES)
        sinks = list(sinks)
        for s in sinks:
            if not (callable(getattr(s, "write", None)) and callable(getattr(s, "close", None))):
                raise InputTypeError(f"sinks: expected objects with write(record) and close(), got {type(s).__name__}")
        torch = require("torch", "torch")
        if model is not None and not isinstance(model, torch.nn.Module):
            raise InputTypeError(f"model: expected a torch.nn.Module or None, got {type(model).__name__}")
        self._monitor = Monitor(backend, mode, sinks, bool(history))
        self._capture = capture_sdpa(model, store=False, on_call=self._monitor.observe,
                                     replace=self._monitor.replace if mode == "replace" else None)

    def __enter__(self) -> Monitor:
        self._capture.__enter__()
        return self._monitor

    def __exit__(self, *exc) -> None:
        self._capture.__exit__(*exc)
        self._monitor.close()
