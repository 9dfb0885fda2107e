"""The monitor itself: a context manager watching a model's attention calls (the capture finds them,
:mod:`~attnscale.torch.monitor.observe` or :mod:`~attnscale.torch.monitor.replace` computes their
figures, :mod:`~attnscale.torch.monitor.tally` keeps them), closing steps and handing them to sinks.
The user guide is docs/monitor.md."""

from __future__ import annotations

import dataclasses
import warnings
from collections import Counter

import numpy as np
import torch

from attnscale.early_warning import make_detector
from attnscale.errors import InputTypeError, check_choice, check_count
from attnscale.torch.capture import Fallback, SDPAArguments, SDPACall, capture_sdpa, recomputing
from attnscale.torch.functional import BACKENDS
from attnscale.torch.monitor.masks import MaskParts
from attnscale.torch.monitor.observe import observed
from attnscale.torch.monitor.padding import RealTokens
from attnscale.torch.monitor.records import CallRecord, HeadFigures, Step
from attnscale.torch.monitor.replace import Replaced, Replacer, compiled_replacement
from attnscale.torch.monitor.rows import sampled_rows
from attnscale.torch.monitor.tally import HISTORY_CALLS, CallFigures, Tally
from attnscale.torch.monitor.tokens import PackedHeads, unpack_call

__all__ = ["Monitor", "MODES", "NoAttentionSeen", "describe_model"]

MODES = ("observe", "replace")


class NoAttentionSeen(UserWarning):
    """A monitor's step or context ended without one attention call seen."""


def describe_model(model) -> str:
    """Words naming what a monitor watches: the model's class, its ``attn_implementation`` (Hugging
    Face) and the types of its modules that look like attention, with their counts."""
    if model is None:
        return "no model given: every module watched"
    kinds = Counter(
        type(m).__name__
        for m in model.modules()
        if isinstance(m, torch.nn.MultiheadAttention) or "attention" in type(m).__name__.lower()
    )
    impl = getattr(getattr(model, "config", None), "_attn_implementation", None)
    parts = [f"model {type(model).__name__}"]
    if impl is not None:
        parts.append(f"attn_implementation={impl!r}")
    parts.append(
        "attention modules: " + ", ".join(f"{k} ×{n}" for k, n in kinds.items())
        if kinds
        else "no module named like attention"
    )
    return ", ".join(parts)


class Monitor:
    """Context manager: figures for every attention call of ``model`` (or of any module when None)
    while active; it yields itself, with :meth:`summary`, :meth:`step`, ``calls``, ``fallbacks`` and
    ``skipped``. What is seen, and what each mode computes: docs/monitor.md.

    backend: passed to :func:`attnscale.torch.attention` ("auto", "kernel", "flex", "composed", "chunked").
    mode: "observe" (bit-for-bit outputs, figures recomputed) or "replace" (one pass, outputs equal
    SDPA's to rounding). sinks: objects with ``write(step: Step)`` (:mod:`attnscale.torch.sinks`)
    that :meth:`step` hands each step to. The sinks stay their owner's: the monitor writes to them
    and never closes them (whoever opened a sink closes it; :class:`~attnscale.torch.sinks.JSONLSink`
    and ``TensorBoardSink`` are context managers).
    reduce: None, or a function of a :class:`Step` returning the Step to report, applied to each
    measured step before the sinks: ``reduce=combine_step``
    (:func:`attnscale.torch.distributed.combine_step`) combines every rank's figures, and then only
    rank 0 of ``torch.distributed`` (when initialised) writes the sinks; :meth:`step` returns the
    reduced step on every rank (a collective: every rank closes the same steps).
    history: keep per-call records and per-row entropies (the medians) for the context's first
    :data:`HISTORY_CALLS` calls (an int: that many; False: none). Each step's median needs only that
    step's rows and is kept whatever the count; the context's median is NaN once calls went
    unrecorded (``mon.history_full``). Memory stays bounded either way.

    every: figures on one step in N — the first, then every N-th :meth:`step` closes (steps are
    counted by the monitor, not by ``global_step``). Between them the model runs untouched: its
    own attention, bit-for-bit, and no interception at all (the capture is paused; its hooks on the
    model are removed, SDPA's names are SDPA's own); their :meth:`step` returns a :class:`Step` with
    ``measured=False`` and no heads, and is not handed to the sinks. A measured step's figures are
    those it would have without ``every``.

    rows: figures from K query rows per sequence (and per head), drawn at random without
    replacement for each call (seeded by :data:`~attnscale.torch.monitor.rows.ROW_SEED`, the step's
    ordinal and the call's number within the step: the same rows run to run, and in either mode);
    None reads every row. Observe mode then recomputes only those rows (its second pass costs K/L of
    the full one); replace mode computes every row's output and keeps the sampled rows' figures.
    What a sample gives: ``rows`` counts the rows read, ``rows_of`` those of the calls;
    ``entropy_mean`` estimates the mean over all rows with standard error ``entropy_mean_se`` =
    s/√n·√(1 − n/N) (s the sample's spread, n rows read of N: a stratified sample, one stratum per
    sequence, for which this simple-random-sample formula errs on the large side);
    ``saturated_rows`` and ``float16_overflow_rows`` are counts in the sample (scale by ``rows_of`` /
    rows read for an estimate); ``first_key_weight`` and ``q_norm_mean`` are the sample's means,
    ``k_norm_mean`` is every key's (all are read); ``max_logit``, ``max_abs_logit``,
    ``entropy_min`` and ``min_logit`` are the sample's extremes: bounds, never beyond the true
    extremes, not estimates of them. The median is the sample's.

    alerts: an early-warning detector (:mod:`attnscale.early_warning`): True (the default
    :class:`~attnscale.early_warning.DetectorConfig`), a DetectorConfig, or a
    :class:`~attnscale.early_warning.Detector`; each measured step is judged after ``reduce`` and the
    Step returned carries its alerts (``Step.alerts``, a tuple of Alert), which the sinks write.

    :meth:`close` (what leaving the context does) stops the watching: the capture, its hooks and the
    padding hooks leave the model, the monitor drops every tensor of the model's it held; the
    figures stay readable, the sinks open.

    >>> import torch
    >>> class SelfAttention(torch.nn.Module):
    ...     def forward(self, x):                                   # x: (B, H, L, d)
    ...         return torch.nn.functional.scaled_dot_product_attention(x, x, x, is_causal=True)
    >>> layer = SelfAttention()
    >>> with Monitor(layer) as mon:
    ...     _ = layer(torch.randn(1, 2, 5, 8))
    >>> [(f.layer, f.head, f.rows, f.rows_single) for f in mon.summary()]   # row 0 sees one key: apart
    [('SelfAttention', 0, 4, 1), ('SelfAttention', 1, 4, 1)]
    """

    def __init__(
        self,
        model=None,
        backend: str = "auto",
        mode: str = "observe",
        sinks=(),
        history: bool | int = True,
        every: int = 1,
        rows: int | None = None,
        reduce=None,
        alerts=None,
    ):
        sinks = list(sinks)
        _check_arguments(model, backend, mode, sinks, history, every, rows, reduce)
        self._watching = describe_model(model)  # for the no-calls warning
        self._backend, self._mode = backend, mode
        self._sinks, self._reduce = sinks, reduce
        self._detector = make_detector(alerts)  # None, or a Detector (a wrong alerts= is refused in one line)
        self._tally = Tally(HISTORY_CALLS if history is True else int(history))
        self._every, self._rows = int(every), rows
        self._steps_closed = 0  # Monitor.step calls: which steps every=N measures
        self._model = model
        self._masks = MaskParts()
        self._tokens = RealTokens(model)
        self._packing = PackedHeads(model)
        self._replacer = Replacer(backend, self._tokens, self._masks, self._packing) if mode == "replace" else None
        self._active = False
        replacing = self._replacer is not None
        self._capture = capture_sdpa(
            model,
            store=False,
            on_call=self._observe,
            replace=self._replace if replacing else None,
            compiled_replace=compiled_replacement if replacing else None,
            on_figures=self._fold_compiled if replacing else None,
        )

    @property
    def calls(self) -> list[CallRecord]:
        """One :class:`CallRecord` per call read, for the context's first ``history`` calls."""
        return self._tally.calls

    @property
    def fallbacks(self) -> Counter:
        """Replace mode: reason -> calls left to the model's own attention (FALLBACK_REASONS)."""
        return self._tally.fallbacks

    @property
    def history_full(self) -> bool:
        """Whether some calls went unrecorded (history's bound): no context median then."""
        return self._tally.history_full

    @property
    def skipped(self) -> Counter:
        """(layer, reason) -> calls seen without figures (the capture's count, and disagreeing eager calls)."""
        return self._capture.skipped

    def __enter__(self) -> Monitor:
        if self._mode == "replace" and _on_cpu(self._model):
            # Built (or loaded) now, not while Dynamo traces a compiled model's first call: the
            # build's lock is a graph break.
            from attnscale.torch.ext import load_kernel

            load_kernel()
        self._capture.__enter__()
        self._active = True
        self._tokens.find()
        self._tokens.hook()
        if self._steps_closed % self._every:
            self._pause()
        return self

    def __exit__(self, *exc) -> None:
        self.close(warn=exc[0] is None)  # no warning on top of an error

    def close(self, warn: bool = True) -> None:
        """Stop watching (what leaving the context does; again, nothing): the capture and every hook
        leave the model, and the monitor lets go of the model's tensors it held (the last mask, the
        layers' last keys). Warns (unless ``warn=False``) when no attention call was seen at all. The
        figures (:meth:`summary`, ``calls``) stay; the sinks stay open: they are their owner's."""
        if not self._active:
            return
        self._active = False
        self._tokens.unhook()
        self._tokens.forget()
        self._masks.forget()
        self._capture.__exit__(None, None, None)
        if warn and not self._tally.calls_seen:
            self._warn_nothing_seen("while the monitor was active", stacklevel=4)

    def _pause(self) -> None:
        """The steps every=N leaves alone: no capture and no padding hook (nothing runs per call or forward)."""
        self._capture.pause()
        self._tokens.unhook()

    def _resume(self) -> None:
        if not self._tokens.hooked:
            self._tokens.hook()
        self._capture.resume()

    # -- figures out ------------------------------------------------------------------------------

    def summary(self) -> list[HeadFigures]:
        """One :class:`HeadFigures` per (layer, head) over the whole context, layers in the order first seen."""
        return self._tally.summary()

    def as_dict(self) -> dict:
        """Plain data for JSON: {"calls": [...], "heads": [...], "fallbacks": {...}, "skipped": [...]}."""
        from attnscale.store import to_jsonable

        return {
            "calls": to_jsonable(self.calls),
            "heads": to_jsonable(self.summary()),
            "fallbacks": dict(self.fallbacks),
            "skipped": [{"layer": layer, "reason": why, "calls": n} for (layer, why), n in self.skipped.items()],
        }

    def step(self, global_step: int, log: bool = True) -> Step:
        """Close a step: the figures of every call since the previous :meth:`step` (or the start),
        per layer × head, handed to the sinks (unless ``log=False``) and returned."""
        if isinstance(global_step, bool) or not isinstance(global_step, (int, np.integer)):
            raise InputTypeError(f"global_step: expected an int, got {type(global_step).__name__}")
        measured = self._steps_closed % self._every == 0
        self._steps_closed += 1
        if self._active and self._steps_closed % self._every == 0:
            self._resume()
        elif self._active:
            self._pause()
        if not measured:
            return Step(step=int(global_step), calls=0, fallbacks={}, heads=[], measured=False)
        seen = self._tally.step_calls
        result = self._tally.close_step(int(global_step))
        self._new_step()
        if not seen:
            self._warn_nothing_seen(f"in step {int(global_step)}", stacklevel=3)
        if self._reduce is not None:
            result = self._reduce(result)
        if self._detector is not None:  # after reduce: every rank judges the same combined figures
            result = dataclasses.replace(result, alerts=tuple(self._detector.update(result)))
        if log and self._writes():
            for sink in self._sinks:
                sink.write(result)
        return result

    def discard(self) -> None:
        """Drop every call since the previous :meth:`step` (an evaluation between training steps):
        they are in no step and not in :meth:`summary` (nor ``calls``, nor ``fallbacks``), no
        warning is given, and no step is counted (``every=N`` measures the same steps)."""
        self._tally.discard()
        self._new_step()

    def _new_step(self) -> None:
        self._capture.new_step()  # compiled graphs' calls are named by their order in a step
        self._masks.forget()
        self._tokens.forget()

    def _writes(self) -> bool:
        """Whether this process writes the sinks: every process, but with ``reduce`` rank 0 alone."""
        if self._reduce is None:
            return True
        dist = torch.distributed
        return not (dist.is_available() and dist.is_initialized()) or dist.get_rank() == 0

    def _warn_nothing_seen(self, when: str, stacklevel: int) -> None:
        warnings.warn(NoAttentionSeen(nothing_seen(when, self._watching, self.skipped)), stacklevel=stacklevel)

    # -- figures in: the capture's callbacks (capture_sdpa's on_call, replace, on_figures) ----------

    def _observe(self, call: SDPACall) -> None:
        """A call the capture saw run (the model's own attention): its figures folded in."""
        if recomputing():  # a checkpoint's recomputation: counted when the forward ran
            return
        if call.fallback is not None and not call.fallback.figures:  # a fallback with no figures
            self._tally.unread()
            return
        if self._mode == "replace" and call.source != "sdpa" and call.fallback is None:
            self._tally.fallback("other attention")
        call = unpack_call(call, self._packing.groups(call.name, call.q, call.k, call.attn_mask, call.is_causal))
        picked = self._picked(call.q)
        figures = observed(call, picked, backend=self._backend, tokens=self._tokens, masks=self._masks)
        if isinstance(figures, str):
            self.skipped[(call.name, figures)] += 1
            return
        self._fold(figures)

    def _replace(self, name: str, a: SDPAArguments):
        """Replace mode: the call's output, computed with its figures (folded in), or a
        :class:`~attnscale.torch.capture.Fallback` (counted) or None for the model to run it."""
        assert self._replacer is not None  # replace mode
        rerun = recomputing()
        done = self._replacer.compute(name, a, self._picked(a.query), self._tally.next_index(), rerun)
        if isinstance(done, Fallback):
            if not rerun:  # counted when the forward ran
                self._tally.fallback(done.reason)
            return done
        if isinstance(done, Replaced):
            if done.figures is not None:
                self._fold(done.figures)
            return done.output
        return None

    def _fold_compiled(self, name: str, q, k, v, stats) -> None:
        """A compiled graph's own figures of one call (:func:`compiled_replacement`), at run time."""
        self._fold(CallFigures(name, q, k, v, stats, "replaced", self._tally.next_index(), picked=self._picked(q)))

    def _fold(self, figures: CallFigures) -> None:
        self._tally.fold(figures, self._tokens.valid_rows(figures.q))

    def _picked(self, q):
        """rows=K's sampled rows of a call on q (:func:`~attnscale.torch.monitor.rows.sampled_rows`)."""
        return sampled_rows(q, self._rows, self._steps_closed, self._tally.step_calls)


def nothing_seen(when: str, watching: str, skipped: Counter) -> str:
    """The words of a :class:`NoAttentionSeen` warning: ``when``, what the monitor watched, and the
    calls seen but not readable (``skipped``: (layer, reason) -> calls), or where attention may hide."""
    reasons: Counter[str] = Counter()
    for (_, why), n in skipped.items():
        reasons[why] += n
    unread = "; ".join(f"{n} call(s) seen but not read: {why}" for why, n in reasons.items())
    return f"monitor: no attention call seen {when} ({watching}); no figures" + (
        f". {unread}"
        if unread
        else ". Its attention may bypass SDPA, transformers' attention interface and nn.MultiheadAttention, "
        "or the model was not run inside the context"
    )


def _check_arguments(model, backend, mode, sinks, history, every, rows, reduce) -> None:
    """Monitor's arguments, each with its one-line error."""
    check_choice("backend", backend, BACKENDS)
    check_choice("mode", mode, MODES)
    check_count("every", every)
    if rows is not None:
        check_count("rows", rows)
    if not isinstance(history, (bool, int, np.integer)) or history < 0:
        raise InputTypeError(f"history: expected True, False or a number of calls >= 0, got {history!r}")
    for s in sinks:
        if not callable(getattr(s, "write", None)):
            raise InputTypeError(f"sinks: expected objects with write(step), got {type(s).__name__}")
    if reduce is not None and not callable(reduce):
        raise InputTypeError(f"reduce: expected a function of a Step (combine_step) or None, got {reduce!r}")
    if model is not None and not isinstance(model, torch.nn.Module):
        raise InputTypeError(f"model: expected a torch.nn.Module or None, got {type(model).__name__}")


def _on_cpu(model) -> bool:
    """Whether ``model`` (None: any) may run attention on the CPU: no model, no parameters, or one on the CPU."""
    params = [] if model is None else list(model.parameters())[:1]
    return not params or params[0].device.type == "cpu"
