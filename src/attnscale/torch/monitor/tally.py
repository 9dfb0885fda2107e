"""What a monitor keeps of the calls it read: per layer the running aggregates of the step under way
and of the whole context (:class:`~attnscale.torch.head_summary.Running`), the fallbacks counted,
and with history each call's record and row entropies — bounded, whatever the number of steps."""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from typing import Any

import numpy as np

from attnscale.torch.head_summary import Running, call_figures
from attnscale.torch.monitor.records import CallRecord, HeadFigures, Step, head_figures
from attnscale.torch.monitor.rows import take_rows
from attnscale.torch.monitor.tokens import CallKeys, count_keys

__all__ = ["HISTORY_CALLS", "CallFigures", "Tally"]

# history=True: per-call records and per-row entropies kept for the context's first this-many calls
# (a 12-layer model's 830 steps), then no more: memory a training loop can leave on.
HISTORY_CALLS = 10_000


@dataclass(frozen=True)
class CallFigures:
    """One call's figures as an observe or a replace made them, to fold in. ``stats``: an
    AttentionStats; ``picked``: sampled rows (int64 (..., K)) to keep of ``stats`` when it holds
    every row (replace mode); ``read``: the query rows ``stats`` is of when they are not q's
    (observe mode's sampled rows, ``sampled`` their indices); ``keys``: the keys Σ ‖k‖ counts
    (None: every key)."""

    name: str
    q: Any
    k: Any
    v: Any
    stats: Any
    source: str
    index: int
    picked: Any = None
    read: Any = None
    sampled: Any = None
    keys: CallKeys | None = None


class Tally:
    """The figures of a monitor's calls. ``history``: calls whose records and row entropies are kept
    (0: none)."""

    def __init__(self, history: int):
        self.calls: list[CallRecord] = []
        self.fallbacks: Counter = Counter()
        self.history_full = False  # some calls went unrecorded: no context median
        self.calls_seen = 0  # over the whole context
        self.step_calls = 0
        self._history = history
        self._total: dict[str, Running] = {}
        self._current: dict[str, Running] = {}
        # Per layer, each recorded call's row entropies (N, H, L), NaN where a row counts in no
        # entropy figure: the whole context's, and the same arrays of this step.
        self._entropies: dict[str, list] = {}
        self._step_entropies: dict[str, list] = {}
        self._step_fallbacks: Counter = Counter()
        self._calls_at_step, self._full_at_step = 0, False  # what discard() goes back to

    def next_index(self) -> int:
        """The index of the next call's record (-1 with no history)."""
        return len(self.calls) if self._history else -1

    def fallback(self, reason: str) -> None:
        self.fallbacks[reason] += 1
        self._step_fallbacks[reason] += 1

    def unread(self) -> None:
        """A call seen, with no figures (a fallback SDPA ran that attention cannot take)."""
        self.step_calls += 1
        self.calls_seen += 1

    def fold(self, f: CallFigures, valid) -> None:
        """Fold one call's figures in. ``valid``: (rows (N, L) bool, their count), the query rows
        that are real tokens (padding out of every figure and row), or None: every row."""
        shape = f.q.shape
        heads = shape[-3] if len(shape) > 3 else 1
        population = math.prod(shape[:-1]) // heads if shape[-1] else 0  # rows per head
        stats, rows = f.stats, (f.q if f.read is None else f.read)
        if valid is not None:
            valid, population = valid
            if stats.head_table is None:  # a table was made of the real tokens' rows already
                valid = valid.to(f.q.device)
                if f.picked is not None or f.sampled is not None:
                    valid = valid.gather(-1, f.picked if f.picked is not None else f.sampled)
        # ‖q‖ and ‖k‖ as given, before any scale or QK-norm, of the rows read (call_figures).
        if f.picked is not None:
            stats, rows = take_rows(stats, f.picked), take_rows(f.q, f.picked, along=-2)
        run, ent = call_figures(stats, rows, f.k, population, valid, entropies=bool(self._history))
        if f.keys is not None and f.keys.index is not None:
            count_keys(run, f.k, f.keys)
        layer = self._layer_key(f.name, run.heads)
        _add(self._current, layer, run)
        self.step_calls += 1
        self.calls_seen += 1
        if self._history:
            self._keep(f, layer, run, ent)

    def _keep(self, f: CallFigures, layer: str, run: Running, ent) -> None:
        """History: the call's row entropies for the step's medians, and for the context's its record
        and entropies while fewer than ``history`` calls are kept."""
        keep = len(self.calls) < self._history
        self.history_full |= not keep
        self._step_entropies.setdefault(layer, []).append(ent)
        if not keep:
            return
        self._entropies.setdefault(layer, []).append(ent)
        q = f.q
        *lead, H_q, L, d_k = q.shape if q.dim() > 3 else (q.shape[0], 1, *q.shape[1:])
        # The largest |logit| of the call, as head_figures takes a head's.
        reach = float(np.maximum(run.max_logit, -run.mins[1]).max()) if run.heads else -math.inf
        self.calls.append(
            CallRecord(
                index=f.index,
                layer=layer,
                shape=(math.prod(lead), H_q, L, f.k.shape[-2], d_k, f.v.shape[-1]),
                dtype=str(q.dtype).replace("torch.", ""),
                source=f.source,
                backend=f.stats.backend,
                max_abs_logit=reach if reach > -math.inf else math.nan,  # −inf: no head saw a logit
                float16_overflow_rows=int(run.overflow.sum()),
            )
        )

    def _layer_key(self, name: str, heads: int) -> str:
        """The layer's name; a module whose calls change head count gets one entry per count."""
        for table in (self._current, self._total):
            if name in table and table[name].heads != heads:
                return f"{name}[{heads} heads]"
        return name

    def summary(self) -> list[HeadFigures]:
        """One :class:`HeadFigures` per (layer, head) over the whole context, layers in the order first seen."""
        entropies = {} if self.history_full else self._entropies
        layers = dict.fromkeys([*self._total, *self._current])
        return [figure for layer in layers for figure in head_figures(layer, self._merged(layer), entropies)]

    def _merged(self, layer: str) -> Running:
        parts = [t[layer] for t in (self._total, self._current) if layer in t]
        out = Running(parts[0].heads)
        for p in parts:
            out.add(p)
        return out

    def close_step(self, global_step: int) -> Step:
        """The step under way as a :class:`Step`, its figures added to the context's; a new step begins."""
        heads = []
        for layer, run in self._current.items():
            heads += head_figures(layer, run, self._step_entropies)
            _add(self._total, layer, run)
        step = Step(step=global_step, calls=self.step_calls, fallbacks=dict(self._step_fallbacks), heads=heads)
        self.new_step()
        return step

    def discard(self) -> None:
        """Drop every call of the step under way: in no step, nor in the context's figures, calls and fallbacks."""
        self.fallbacks.subtract(self._step_fallbacks)
        self.fallbacks = +self.fallbacks  # drop the zeros
        for record in self.calls[self._calls_at_step :]:  # the context's medians lose their rows
            self._entropies[record.layer].pop()
        del self.calls[self._calls_at_step :]
        self.history_full = self._full_at_step
        self.new_step()

    def new_step(self) -> None:
        """Forget the calls of the step under way (folded into the context's totals or discarded)."""
        self._current = {}
        self._step_entropies = {}
        self._step_fallbacks = Counter()
        self.step_calls = 0
        self._calls_at_step, self._full_at_step = len(self.calls), self.history_full


def _add(table: dict, layer: str, run: Running) -> None:
    """Add ``run`` into ``table``'s layer; a layer's first takes ``run`` itself (its owner then:
    a call's, or a closed step's)."""
    if layer in table:
        table[layer].add(run)
    else:
        table[layer] = run
