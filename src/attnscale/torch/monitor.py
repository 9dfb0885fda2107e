"""Watch attention health while a model runs or trains: figures for every attention call, per layer and head.

    with Monitor(model) as mon:                       # mode="observe": outputs bit-for-bit unchanged
        model(**batch)
    mon.summary()                                     # one HeadFigures per (layer, head)
    mon.calls                                         # one CallRecord per call (history=True)

    with Monitor(model, mode="replace", history=False, sinks=[JSONLSink("attn.jsonl")]) as mon:
        for step, batch in enumerate(batches):        # training: forward, backward, optimiser step
            ...
            figures = mon.step(step)                  # this step's per layer × head figures → sinks

What is seen (:func:`attnscale.torch.capture.capture_sdpa` finds the calls, each once):

- every ``F.scaled_dot_product_attention`` call, however it was imported;
- a Hugging Face model's attention through transformers' attention interface, whatever its
  ``attn_implementation``: ``"sdpa"`` as SDPA calls, ``"eager"`` from the interface's arguments
  (after rotary embedding, QK-norm and the KV cache; grouped-query heads, soft-cap and T5's position
  bias honoured). Flash and flex attention are not read: their calls are counted in ``mon.skipped``;
- PyTorch's ``nn.MultiheadAttention`` (``need_weights`` True or False) and the layers built on it
  (``nn.TransformerEncoderLayer``, ``nn.TransformerDecoderLayer``, ``nn.Transformer``), rebuilt
  from their projections (:mod:`attnscale.torch.nn_modules`). While the monitor is active they take
  PyTorch's standard path, never the fused fast path of eval mode (PyTorch refuses it under any
  torch-function override; nn_modules says why we leave it so): observe mode's outputs are then
  bit-for-bit the standard path's, and within rounding of the fast path's (float32 ≤ 1e-5·max|out|;
  padded positions of nn.TransformerEncoder's nested-tensor path excepted, which it leaves at 0).

Under ``torch.compile`` (the model compiled before or after the monitor is entered; default
backend), an SDPA call inside a compiled graph is seen without a graph break. In observe mode it
stays the model's own — outputs bit-for-bit the compiled model's (gradients to rounding: measured
≤ 1e-9 on the tests' GPT, as the graph holding the monitor's op is fused another way) — and a custom
operator in the graph hands its inputs to the monitor when the graph runs, which computes the
figures as observe mode does (a second pass). In replace mode the graph computes it itself:
:func:`attnscale.torch.attention` is traced in (:func:`compiled_replacement`; on CPU the fused kernel
is one op there, with its fake implementation and its backward), one pass, outputs and gradients
within replace mode's tolerance of the compiled model's own, and a second operator hands the
figures over at run time; calls it cannot judge from shapes and flags alone (a float mask, dropout)
keep the model's SDPA and are observed. No recompilation per step nor per monitor: a graph for each
mode the first time a monitor of that mode is entered on a compiled model (torch's mode stack
changed), reused by later ones, and the steps ``every=N`` leaves alone reuse the model's own.
``torch._dynamo.explain`` counts 0 graph breaks on the project's GPT in both modes (the tests hold it
there). Such calls carry the names the eager model gives them (``blocks.0.attn``, whether the
monitor is given the compiled model or the plain one, the whole model compiled or its blocks):
the graph records each call's module below the compiled one while Dynamo traces, the frames say
which module runs it (:mod:`attnscale.torch.compiled_names`); where that cannot be told (a compiled
function that takes the module as an argument) a call is named by its order in the step,
``compiled[0]``, ``compiled[1]``, ..., with one :class:`~attnscale.torch.capture.UnnamedCompiledCall`
warning saying why. Attention that is not an SDPA call (eager interface functions,
MultiheadAttention's fused path) is not seen there.

A monitor that saw no attention call in a step (:meth:`Monitor.step`) or in its whole context says
so, with a :class:`NoAttentionSeen` warning naming the model, its ``attn_implementation`` and the
attention modules it holds, and any calls seen but not readable; an empty summary is never silent.

Two modes.

- ``"observe"``: the model's own attention runs untouched — outputs bit-for-bit what they would be
  without the monitor (PyTorch's modules: see above) — and :func:`attnscale.torch.attention`
  recomputes the row figures from detached q, k, v under ``torch.no_grad``: the attention is
  computed twice. An eager interface call is checked: our output must equal the model's own within
  :data:`AGREEMENT` (× max |v|; float32 1e-4, bfloat16 0.1) on every row that attends a key, else its
  figures are dropped and the call counted in ``mon.skipped`` ("figures disagree ..."), never
  reported wrong. (With dropout the model's output cannot be compared; the figures then describe
  the softmax before the dropout.)
- ``"replace"``: the model's attention is computed by :func:`attnscale.torch.attention` itself,
  which returns the output and the figures in one pass (a call with the same shapes, dtypes, mask
  layout and flags as one checked before, in any layer, runs the fused kernel straight, with the
  checks that call made: :class:`~attnscale.torch.functional.KeptAttention`, the same bits; the last
  :data:`KEPT_KEYS` of them are kept). The outputs equal the model's own to
  rounding, NOT bit-for-bit (another summation order): in float32, max |Δout| ≤ 1e-5·max|v| per
  call (the tests hold it to that; measured 6e-7 there, and 1.6e-6 on MiniLM's last hidden state
  after 6 layers); a whole model's output moves by rounding carried through its layers: the tests
  hold tiny float32 Llama, Qwen3, GPT-2 and Gemma 2 models (eager and SDPA) and PyTorch's modules to
  1e-5·max|output| (measured 3e-7 to 6e-7 × max|logit| on the decoders, ≤ 2e-7 × max|out| on the modules).
  Replaced eager interface calls return no probabilities (as ``"sdpa"``: ``output_attentions``
  gives None). With gradients enabled and an input that requires grad, the call runs on
  :data:`TRAINING_BACKEND`, a backend that gives gradients through PyTorch's autograd (forward and
  backward follow the model's); otherwise on ``backend`` ("auto": the fused kernel on CPU, compiled FlexAttention on CUDA where it
  works, else the composed path). Calls it
  cannot honour run the model's own attention instead and are counted in ``mon.fallbacks`` (and each
  step's), never dropped silently: ``dropout`` (dropout_p > 0; figures then recomputed as in observe
  mode, describing the softmax before the dropout), ``learned mask`` (an attn_mask or position bias
  that requires grad; recomputed too), ``fully masked row`` (a float mask that masks every key of a
  row with finite numbers, HF's finfo.min: SDPA and eager then average v by the mask's softmax, we
  would give 0; recomputed too), ``attention weights asked`` (``nn.MultiheadAttention`` with
  ``need_weights=True``, whose probabilities the caller gets back; recomputed too), ``unsupported``
  (inputs attnscale.torch.attention refuses; no figures), ``other attention`` (an interface call
  to a function neither SDPA nor the model's own eager one, that returned its probabilities:
  observed). Calls SDPA itself would refuse (is_causal with an attn_mask, head counts that do not
  broadcast without enable_gqa) are left to SDPA, which raises its own error.

What is kept, per (layer, head): running aggregates only (:mod:`attnscale.torch.monitor_aggregates`)
— counts, sums, extremes — as a few NumPy arrays of H numbers, whatever the number of calls
(no q, k, v, weights or per-row arrays), for the current step and for the whole context.
``history=True`` (the default) also keeps each row's entropy (4 bytes per query row, for an exact
median in :meth:`Monitor.summary` and each :meth:`Monitor.step`) and one :class:`CallRecord` per
call, for the first :data:`HISTORY_CALLS` calls of the context (then the context's median is NaN;
each step's stays); ``history=False`` keeps none (``entropy_median`` is then NaN). Memory is
bounded either way, over any number of steps. The cost controls ``every=N`` and ``rows=K``: see
:class:`Monitor`.

A "layer" is the attention module that made the call (see capture): a module that calls attention
twice has both calls aggregated under its name. Calls made while autograd's backward runs are
activation checkpointing's recomputation (``torch.utils.checkpoint``, reentrant or not; a Hugging
Face model's gradient checkpointing) and count once: their forward already counted. Replace mode
still computes them itself, so that the backward differentiates the attention the forward ran;
no figure, fallback or call is counted for them. Rows: see :mod:`attnscale.torch.monitor_aggregates` (empty, broken,
saturated and single-key rows: a causal model's first query attends one key, and is counted
apart in ``rows_single``, out of the entropy and saturation figures).

Padding, KV caches and grouped-query heads: the figures are of the real tokens, each once, per
the model's own heads (docs/monitor-padding.md, with the tests' numbers).

- Query rows that are padding are no rows at all (in no count and no figure). The monitor reads
  which they are from the ``attention_mask`` (B, T) of 1 and 0 that the outermost module of
  ``model`` taking one was called with, by name or in its place (a forward pre-hook on the
  outermost modules whose forward has an ``attention_mask`` parameter: a Hugging Face model, or a
  LightningModule passing its batch on; of a Hugging Face encoder-decoder, whose mask is its
  encoder's, the encoder, which its ``generate`` runs on its own), and applies it, during that
  module's forward, to every call whose q is (B, H, L, d_k) with that B and L (self-attention over
  the batch; in a forward that continues a KV cache of P tokens the mask covers them too, T = P +
  L, and its last L columns are the rows'). The modules inside it get no hook: a hook makes each
  call of its module take PyTorch's slow path (MiniLM's 19 inner ones cost 2% of a forward,
  measured), and they see what it sees. A module inside it called on its own (not through it) has
  every row counted.
- Keys: a key that no real query row of the call may attend (its ``attn_mask`` and causal flag
  say so: padding, a static cache's empty slots) is in no figure — not in ``k_norm_mean`` nor its
  count ``keys`` (it carries no weight in any other). ``first_key_weight`` is each row's weight on
  its sequence's first real key (the first key of its batch row that a real row may attend): key 0
  without left padding, the first real token with it, as the sequence alone has it. Found once per
  mask (the model hands every layer the same); a row's weight on a key other than 0 is one product
  q̂_i·k̂_p per row, O(L·d), and the call's figures are then summed from its rows (one C++ pass), not
  taken from the kernel's head table.
- KV caches: the row figures (entropy, logits, saturation, ``first_key_weight``, ‖q‖) are of the
  query rows a call computes, which a cache does not repeat. The key figures (``k_norm_mean``,
  ``keys``) count each key once per sequence: in a forward handed a KV cache (``cache`` or
  ``past_key_values``, a transformers Cache) that held P tokens, a call counts only its new keys —
  positions P .. P+L−1 when its S keys span the sequence (S ≥ P + L: a dynamic cache, a static
  one's slots), else its last L (a sliding window's) — and a call whose keys are the very tensor the
  layer's previous call read, not written since (same storage, place, layout and version: a
  cross-attention reading its encoder's keys from the cache) counts none. A sliding window's keys
  are the sequence's last S, so its rows weigh the sequence's first real key (the forward's mask's
  first 1) where the window still holds it, and 0 once dropped, as one forward's rows past the
  window do. So prefill then decoding
  give the figures of one forward over the whole sequence (the prompt and the tokens fed back),
  within rounding, cross-attention's keys counted once per sequence as that forward counts them.
  A cache the outermost module's forward is not handed (a model's own, inside) is not read: every
  call then counts all its keys; cross-attention keys recomputed at each step, not read from the
  cache, are counted by position as a self-attention's.
- Grouped-query heads packed by the caller: transformers' SDPA path packs one-token decoding with a
  mask, q (B, H, 1, d) as (B, H/g, g, d) (a KV head's g query heads as rows). A call of a module
  whose ``num_key_value_groups`` g > 1 and whose config has H heads (``num_attention_heads``), with
  q of H/g heads and g rows, is unpacked to (B, H, 1, d) (its mask, if per head, with it) before
  anything is computed, and replace mode packs its output back: the figures are the model's H
  heads, under the layer's own name.

So right and left padding, the prompts one at a time, generation with a cache, batched decoding of
a grouped-query model, a sliding window with a soft-cap and an encoder-decoder's generation give
the figures of the same prompts run alone (tests/test_monitor_real_tokens.py). Not on a compiled model (a hook added to it would
recompile its graph): there padded rows count as the model attends them, and every key of a call.

Any SDPA layout is taken: q (..., H_q, L, d_k) with any number of leading dimensions (all folded
into the batch), or 3-D (N, L, d_k), which has no head axis and is counted as one head.

Beside the entropy and the logits, per head: the mean weight on the first (real) key
(``first_key_weight``, from :func:`attnscale.torch.attention`'s ``first_key=True``: a head at
:data:`~attnscale.torch.monitor_records.SINK_WEIGHT` or above is an attention sink), the mean ‖q‖
of the rows read and the mean ‖k‖ of the call's keys (its real keys, each once: above; L2, as the
model handed them to attention, before any scale or QK-norm; grouped-query: a query head's keys are
its KV head's), each kept as a sum and a count so that steps, calls and ranks combine exactly.
Their cost: the norms, O(L·d) (with padding or a cache, ‖k‖ over the counted keys: one more pass
over k, O(S·d)),
read where the fused kernel sums a call's figures per head as it makes its rows (its head table,
:mod:`attnscale.torch.head_table`; for a call it did not compute, or whose rows were sampled, one
C++ pass over the figures, the kernel library's ``head_sums``; NumPy reductions where it is not
built, or for CUDA and half-precision figures), and the weight on key 0, which the fused kernel
makes in its own pass (other backends: one product of q̂ with k̂_0, O(L·d)).

float16 safety: a row whose logits leave ±65504 overflows in float16 before the softmax (PyTorch
issue #119131). It is counted per head whatever the dtype the model ran in (a float32 model that
would overflow once cast to half is flagged).
"""

from __future__ import annotations

import math
import warnings
from collections import Counter
from dataclasses import replace
from typing import Any

import numpy as np

from attnscale.errors import InputError, InputTypeError, check_choice, check_count, require
from attnscale.scales import Constant, SoftCap
from attnscale.torch.functional import attention, kept_attention
from attnscale.torch.capture import capture_sdpa, compiled, recomputing
from attnscale.torch.monitor_aggregates import Running, call_figures
from attnscale.torch.monitor_records import CallRecord, HeadFigures, Step
from attnscale.torch.monitor_tokens import (
    CallKeys,
    call_keys,
    count_keys,
    first_real_weight,
    grouping,
    keys_of,
    packed_groups,
    real_keys,
    unpack,
)
from attnscale.torch.sdpa_mask import split_attn_mask

__all__ = [
    "Monitor",
    "CallRecord",
    "HeadFigures",
    "Step",
    "MODES",
    "TRAINING_BACKEND",
    "NoAttentionSeen",
    "AGREEMENT",
    "HISTORY_CALLS",
    "ROW_SEED",
    "FALLBACK_REASONS",
]

MODES = ("observe", "replace")
# Every reason replace mode counts a fallback under (``mon.fallbacks``, ``Step.fallbacks``; the
# module docstring says what each means), in a fixed order: what combine_step packs.
FALLBACK_REASONS = (
    "dropout",
    "learned mask",
    "fully masked row",
    "attention weights asked",
    "unsupported",
    "other attention",
)
# The backend of replace mode when gradients are needed: "auto", the fused kernel with its own
# flash-style backward (memory O(L·d)) on CPU where it builds, FlexAttention's own backward on CUDA
# where it compiles, else the composed path.
TRAINING_BACKEND = "auto"
# How far (× max |v|) an eager call's own output may be from ours on the rows that attend a key
# before its figures are refused: rounding, not another computation. Eager functions take the
# softmax in float32 (Llama's and most others', whatever the model's dtype), so float64 gets
# float32's bound; half types round the logits themselves (bfloat16: 2^-8 relative, so a logit of
# 20 moves by 0.08), and their check only catches gross differences (a doubled scale, a sink).
# Measured on the tests' tiny models: float32 1.6e-7, float64 9.7e-8, float16 9.9e-4, bfloat16 6.6e-3.
AGREEMENT = {"float64": 1e-4, "float32": 1e-4, "float16": 5e-2, "bfloat16": 1e-1}
# history=True: per-call records and per-row entropies kept for the context's first this-many calls
# (a 12-layer model's 830 steps), then no more: memory a training loop can leave on.
HISTORY_CALLS = 10_000
# Replace mode's kept calls (Monitor.replace): this many keys at most, each a few shapes and numbers;
# a training set's batches of many lengths make a new one per length, the oldest then goes.
KEPT_KEYS = 64
# The seed of rows=K's choice of query rows, with the step's ordinal and the call's number in it.
ROW_SEED = 20_240_917


class NoAttentionSeen(UserWarning):
    """A monitor's step or context ended without one attention call seen."""


def describe_model(model) -> str:
    """Words naming what a monitor watches: the model's class, its ``attn_implementation`` (Hugging
    Face) and the types of its modules that look like attention, with their counts."""
    if model is None:
        return "no model given: every module watched"
    torch = require("torch", "torch")
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
    ``skipped``.

    backend: passed to :func:`attnscale.torch.attention` ("auto", "kernel", "flex", "composed", "chunked").
    mode: "observe" (bit-for-bit outputs, figures recomputed) or "replace" (one pass, outputs equal
    SDPA's to rounding; see the module docstring). sinks: objects with ``write(step: Step)``
    (:mod:`attnscale.torch.sinks`) that :meth:`step` hands each step to. The sinks stay their
    owner's: the monitor writes to them and never closes them (whoever opened a sink closes it;
    :class:`~attnscale.torch.sinks.JSONLSink` and ``TensorBoardSink`` are context managers).
    reduce: None, or a function of a :class:`Step` returning the Step to report, applied to each
    measured step before the sinks: ``reduce=combine_step``
    (:func:`attnscale.torch.distributed.combine_step`) combines every rank's figures, and then only
    rank 0 of ``torch.distributed`` (when initialised) writes the sinks; :meth:`step` returns the
    reduced step on every rank (a collective: every rank closes the same steps). history: keep per-call records and per-row entropies (the medians) for
    the context's first :data:`HISTORY_CALLS` calls (an int: that many; False: none). Each step's
    median needs only that step's rows and is kept whatever the count; the context's median is NaN
    once calls went unrecorded (``mon.history_full``). Memory stays bounded either way.

    every: figures on one step in N — the first, then every N-th :meth:`step` closes (steps are
    counted by the monitor, not by ``global_step``). Between them the model runs untouched: its
    own attention, bit-for-bit, and no interception at all (the capture is paused: a counter and
    a flag per step; the capture's mode and its hooks on the model are removed, SDPA's names are SDPA's own); their :meth:`step` returns a :class:`Step` with ``measured=False`` and no
    heads, and is not handed to the sinks. A measured step's figures are those it would have
    without ``every``.

    rows: figures from K query rows per sequence (and per head), drawn at random without
    replacement for each call (seeded by :data:`ROW_SEED`, the step's ordinal and the call's
    number within the step: the same rows run to run, and in either mode); None reads every row.
    Observe mode then recomputes only those rows (its second pass costs K/L of the full one);
    replace mode computes every row's output and keeps the sampled rows' figures. What a sample
    gives: ``rows`` counts the rows read, ``rows_of`` those of the calls; ``entropy_mean``
    estimates the mean over all rows with standard error ``entropy_mean_se`` = s/√n·√(1 − n/N)
    (s the sample's spread, n rows read of N: a stratified sample, one stratum per sequence, for
    which this simple-random-sample formula errs on the large side); ``saturated_rows`` and
    ``float16_overflow_rows`` are counts in the sample (scale by ``rows_of`` / rows read for an
    estimate); ``first_key_weight`` and ``q_norm_mean`` are the sample's means, ``k_norm_mean``
    is every key's (all are read); ``max_logit``, ``max_abs_logit``, ``entropy_min`` and
    ``min_logit`` are the sample's extremes: bounds, never beyond the true extremes, not estimates
    of them. The median is the sample's.

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
    ):
        from attnscale.torch.functional import BACKENDS

        check_choice("backend", backend, BACKENDS)
        check_choice("mode", mode, MODES)
        check_count("every", every)
        if rows is not None:
            check_count("rows", rows)
        if not isinstance(history, (bool, int, np.integer)) or history < 0:
            raise InputTypeError(f"history: expected True, False or a number of calls >= 0, got {history!r}")
        sinks = list(sinks)
        for s in sinks:
            if not callable(getattr(s, "write", None)):
                raise InputTypeError(f"sinks: expected objects with write(step), got {type(s).__name__}")
        if reduce is not None and not callable(reduce):
            raise InputTypeError(f"reduce: expected a function of a Step (combine_step) or None, got {reduce!r}")
        torch = require("torch", "torch")
        if model is not None and not isinstance(model, torch.nn.Module):
            raise InputTypeError(f"model: expected a torch.nn.Module or None, got {type(model).__name__}")
        self.calls: list[CallRecord] = []
        self.fallbacks: Counter = Counter()
        self._watching = describe_model(model)  # for the no-calls warning
        self._calls_seen = 0  # over the whole context
        self._counted = False  # the call under way already counted a fallback
        self._backend = backend
        self._mode = mode
        self._sinks = sinks
        self._reduce = reduce
        self._history = HISTORY_CALLS if history is True else int(history)  # calls recorded, at most
        self.history_full = False  # some calls went unrecorded: no context median
        self._every, self._rows = int(every), rows
        self._steps_closed = 0  # Monitor.step calls: which steps every=N measures
        self._row_choice: dict = {}
        self._total: dict[str, Running] = {}
        self._current: dict[str, Running] = {}
        # Per layer, each recorded call's row entropies (N, H, L), NaN where a row counts in no
        # entropy figure: the whole context's, and the same arrays of this step.
        self._entropies: dict[str, list] = {}
        self._step_entropies: dict[str, list] = {}
        self._step_fallbacks: Counter = Counter()
        self._step_calls = 0
        self._calls_at_step, self._full_at_step = 0, False  # what discard() goes back to
        self._skip_observe = False
        self._rerun = False  # the call under way is a checkpoint's recomputation
        self._mask_cache: tuple[Any, int, tuple[Any, Any, bool]] | None = None  # see _split_mask
        # _call_key -> KeptAttention, of any layer: a model's layers share a few keys, and a batch of
        # another length is a new key for every layer at once (KEPT_KEYS at most, oldest out first).
        self._kept: dict[tuple, Any] = {}
        self._model = model
        self._query_valid: tuple[Any, int] | None = None  # (B, L) bool: the forward's real tokens, and their count
        self._padding_modules: dict = {}  # the modules whose attention_mask is read -> (position, of queries)
        self._padding_hooks: list = []
        self._past: int | None = None  # tokens the forward's KV cache held before it (None: no cache given)
        self._starts: Any = None  # with a cache: (B,) each sequence's first real token (None: 0), from its mask
        self._padding_stack: list = []  # (query rows, past, starts) of the forwards an inner hooked one ran in
        self._keys_cache: tuple | None = None  # (mask, rows, shape, (real, first, CallKeys)): see _call_keys
        self._last_keys: dict[str, tuple] = {}  # layer -> (weakref to its last call's key storage, layout)
        self._packing: dict[str, Any] = {}  # layer -> its module's (groups, heads) (grouping), None: not grouped
        replacing = mode == "replace"
        self._capture = capture_sdpa(
            model,
            store=False,
            on_call=self.observe,
            replace=self.replace if replacing else None,
            compiled_replace=compiled_replacement if replacing else None,
            on_figures=self._fold_compiled if replacing else None,
        )
        # (layer, reason) -> calls seen without figures: the capture's own count, one for both
        self.skipped: Counter = self._capture._capture.skipped

    def __enter__(self) -> Monitor:
        if self._mode == "replace" and _on_cpu(self._model):
            # Built (or loaded) now, not while Dynamo traces a compiled model's first call: the
            # build's lock is a graph break.
            from attnscale.torch.ext import load_kernel

            load_kernel()
        self._capture.__enter__()
        self._padding_modules = _padding_modules(self._model)
        self._hook_padding()
        if self._steps_closed % self._every:
            self._pause()
        return self

    def __exit__(self, *exc) -> None:
        self._remove_padding_hooks()
        self._mask_cache = self._keys_cache = None  # the model's last mask: the monitor keeps figures, no tensors
        self._last_keys = {}
        self._capture.__exit__(*exc)
        self.close(warn=exc[0] is None)  # no warning on top of an error

    def _pause(self) -> None:
        """The steps every=N leaves alone: no capture and no padding hook (nothing runs per call or forward)."""
        self._capture.pause()
        self._remove_padding_hooks()

    def _resume(self) -> None:
        if not self._padding_hooks:
            self._hook_padding()
        self._capture.resume()

    def _hook_padding(self) -> None:
        self._padding_hooks = []
        for m in self._padding_modules:
            self._padding_hooks.append(m.register_forward_pre_hook(self._read_padding, with_kwargs=True))
            self._padding_hooks.append(m.register_forward_hook(self._forget_padding, always_call=True))

    def _remove_padding_hooks(self) -> None:
        for hook in self._padding_hooks:
            hook.remove()
        self._padding_hooks, self._padding_stack = [], []
        self._query_valid = self._past = self._starts = None

    def _read_padding(self, module, args, kwargs) -> None:
        """A forward pre-hook of an outermost module that takes an ``attention_mask``: the one it
        was given (by name or in its place), (B, T) of 0/1 (or bool), as the real tokens of this
        forward's query rows (its last L columns where the forward continues a KV cache: T = past
        + L, the cache's tokens then its own); and the tokens its KV cache (``cache`` or
        ``past_key_values``) held before it."""
        self._padding_stack.append((self._query_valid, self._past, self._starts))  # an encoder's inside its model's
        (at, queries), torch = self._padding_modules[module], require("torch", "torch")
        mask = kwargs.get("attention_mask")
        if mask is None and at is not None and at < len(args):
            mask = args[at]
        self._past, self._starts = _cache_length(kwargs.get("cache", kwargs.get("past_key_values"))), None
        if not (queries and isinstance(mask, torch.Tensor) and mask.dim() == 2):
            self._query_valid = None
            return
        valid = mask != 0
        if self._past and valid.shape[-1] == self._past + _input_length(torch, args, kwargs):
            self._starts = valid.to(torch.int8).argmax(dim=-1)  # where a sliding window's keys start
            valid = valid[:, self._past :]  # the cache's tokens are no query row of this forward
        real = int(valid.sum())  # one count per forward, not per call
        self._query_valid = None if real == valid.numel() else (valid, real)

    def _forget_padding(self, module, args, output) -> None:
        """Its forward hook: the padding read is that forward's, of no call after it (those of the
        forward it ran in, if any, read that one's again)."""
        self._query_valid, self._past, self._starts = self._padding_stack.pop() if self._padding_stack else (None,) * 3

    def _valid_rows(self, q):
        """(N, L) bool, which query rows of a call on q are real tokens (from the forward's
        attention_mask: its last L columns in a forward continuing a KV cache), and their number;
        None when every row counts (no mask, or one whose batch and length are not the call's:
        another shape)."""
        m = self._query_valid
        if m is None or q.dim() != 4 or tuple(m[0].shape) != (q.shape[0], q.shape[-2]):
            return None
        return m

    def _table_rows(self, q, picked=None):
        """Whether the kernel may make a call's head table as it makes its figures (q 4-D: the
        table's rows are q's), and the rows the table counts: the real tokens (:meth:`_valid_rows`),
        among them ``picked``'s (observe mode's sampled rows, its problem's); None: every row."""
        if q.dim() != 4:
            return False, None
        valid = self._valid_rows(q)
        if valid is None:
            return True, None
        rows = valid[0] if valid[0].device == q.device else valid[0].to(q.device)
        return True, rows if picked is None else rows.gather(-1, picked)

    def _call_keys(self, name: str, q, k, mask, causal: bool) -> CallKeys | None:
        """The keys of a call on q (B, H, L, d), k (B, H_kv, S, d) its figures are of (module
        docstring; :mod:`attnscale.torch.monitor_tokens`): the real ones (``mask``: bool, True =
        attend, or None; top-left ``causal``), of them the ones new to the forward's KV cache, and
        each batch row's first real key. None: every key, key 0 first (no padding, no cache; not
        4-D). The real keys are found once per mask (a model hands every layer the same)."""
        if mask is None and self._past is None and not causal:
            return None  # no padding, no cache: every key, once (the common call, first)
        if q.dim() != 4 or k.dim() != 4 or k.shape[0] != q.shape[0] or (q.shape[0] > 1 and k.stride(0) == 0):
            return None  # keys broadcast over the batch are summed once (call_figures): left so
        B, L, S = q.shape[0], q.shape[-2], k.shape[-2]
        if mask is None and not (causal and S > L):
            real, first, keys = None, None, None  # every key real, key 0 first: nothing to find
        else:
            valid = self._valid_rows(q)
            rows = None if valid is None else valid[0]
            shape = (None if mask is None else mask._version, B, L, S, causal)
            c = self._keys_cache
            if c is None or c[0] is not mask or c[1] is not rows or c[2] != shape:
                real, first = real_keys(require("torch", "torch"), mask, causal, rows, L, S, B)
                c = (mask, rows, shape, (real, first, None if real is None else keys_of(real, first)))
                self._keys_cache = c
            real, first, keys = c[3]
        if self._past is None:  # no KV cache: every real key is the call's
            return keys
        repeat = self._same_keys(name, k)
        if not self._past:  # a cache's first forward: every real key is new
            return keys
        torch = require("torch", "torch")
        return call_keys(torch, real, first, self._past, L, S, B, repeat, k.device, self._starts)

    def _same_keys(self, name: str, k) -> bool:
        """Whether k is the very keys the layer's previous call read (the same storage, place and
        layout, not written since: a cross-attention's keys, read again from the cache); records k's."""
        import weakref

        storage = k.untyped_storage()
        layout = (k.storage_offset(), tuple(k.shape), k.stride(), k._version)
        before = self._last_keys.get(name)
        self._last_keys[name] = (weakref.ref(storage), layout)
        return before is not None and before[0]() is storage and before[1] == layout

    def _groups(self, name: str, q, k, m, causal: bool) -> int:
        """g when a call of layer ``name`` packs its module's grouped-query heads, g single query
        rows to a KV head (:func:`~attnscale.torch.monitor_tokens.packed_groups`), with a mask (``m``)
        shared by heads and rows or packed as q; else 0. The module is looked up once per layer."""
        if name not in self._packing:
            try:
                self._packing[name] = None if self._model is None else grouping(self._model.get_submodule(name))
            except AttributeError:  # a name that is no module path (no model: a class name)
                self._packing[name] = None
        grouped = self._packing[name]
        if grouped is None or causal:
            return 0
        groups = packed_groups(grouped, q, k)
        shared = m is None or (m.dim() == 4 and tuple(m.shape[1:3]) in ((1, 1), tuple(q.shape[1:3])))
        return groups if shared else 0

    def _unpacked_call(self, call):
        """An :class:`~attnscale.torch.capture.SDPACall` with its grouped-query heads unpacked
        (:meth:`_groups`): q (B, H, 1, d), its mask and output as q; else the call as it is."""
        groups = self._groups(call.name, call.q, call.k, call.attn_mask, call.is_causal)
        if not groups:
            return call
        return replace(
            call,
            q=unpack(call.q, groups),
            attn_mask=unpack(call.attn_mask, groups),
            output=unpack(call.output, groups),
            enable_gqa=True,
        )

    # -- figures out ------------------------------------------------------------------------------

    def summary(self) -> list[HeadFigures]:
        """One :class:`HeadFigures` per (layer, head) over the whole context, layers in the order first seen."""
        entropies = {} if self.history_full else self._entropies
        return [figure for layer in self._layers() for figure in _head_figures(layer, self._merged(layer), entropies)]

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
        if self._steps_closed % self._every == 0:
            self._resume()
        else:
            self._pause()
        if not measured:
            return Step(step=int(global_step), calls=0, fallbacks={}, heads=[], measured=False)
        heads = []
        for layer, run in self._current.items():
            heads += _head_figures(layer, run, self._step_entropies)
            self._add(self._total, layer, run)
        result = Step(step=int(global_step), calls=self._step_calls, fallbacks=dict(self._step_fallbacks), heads=heads)
        if not self._step_calls:
            self._warn_nothing_seen(f"in step {int(global_step)}", stacklevel=3)
        self._new_step()
        if self._reduce is not None:
            result = self._reduce(result)
        if log and self._writes():
            for sink in self._sinks:
                sink.write(result)
        return result

    def discard(self) -> None:
        """Drop every call since the previous :meth:`step` (an evaluation between training steps):
        they are in no step and not in :meth:`summary` (nor ``calls``, nor ``fallbacks``), no
        warning is given, and no step is counted (``every=N`` measures the same steps)."""
        self.fallbacks.subtract(self._step_fallbacks)
        self.fallbacks = +self.fallbacks  # drop the zeros
        for record in self.calls[self._calls_at_step :]:  # the context's medians lose their rows
            self._entropies[record.layer].pop()
        del self.calls[self._calls_at_step :]
        self.history_full = self._full_at_step
        self._new_step()

    def _new_step(self) -> None:
        """Forget the calls of the step under way (folded into the context's totals or discarded)."""
        self._current = {}
        self._capture._capture._compiled = 0  # compiled graphs' calls are named by their order in a step
        self._step_entropies = {}
        self._mask_cache = self._keys_cache = None
        self._step_fallbacks = Counter()
        self._step_calls = 0
        self._calls_at_step, self._full_at_step = len(self.calls), self.history_full

    def _writes(self) -> bool:
        """Whether this process writes the sinks: every process, but with ``reduce`` rank 0 alone."""
        if self._reduce is None:
            return True
        dist = require("torch", "torch").distributed
        return not (dist.is_available() and dist.is_initialized()) or dist.get_rank() == 0

    def close(self, warn: bool = True) -> None:
        """Warn (unless ``warn=False``) when no attention call was seen at all; the monitor's context
        does it on exit. The sinks are left open: they are their owner's."""
        if warn and not self._calls_seen:
            self._warn_nothing_seen("while the monitor was active", stacklevel=4)

    def _warn_nothing_seen(self, when: str, stacklevel: int) -> None:
        skipped: Counter[str] = Counter()
        for (_, why), n in self.skipped.items():
            skipped[why] += n
        unread = "; ".join(f"{n} call(s) seen but not read: {why}" for why, n in skipped.items())
        warnings.warn(
            NoAttentionSeen(
                f"monitor: no attention call seen {when} ({self._watching}); no figures"
                + (
                    f". {unread}"
                    if unread
                    else ". Its attention may bypass SDPA, transformers' attention interface and nn.MultiheadAttention, "
                    "or the model was not run inside the context"
                )
            ),
            stacklevel=stacklevel,
        )

    # -- figures in -------------------------------------------------------------------------------

    def _layers(self) -> list[str]:
        return list(dict.fromkeys([*self._total, *self._current]))

    def _merged(self, layer: str) -> Running:
        parts = [t[layer] for t in (self._total, self._current) if layer in t]
        out = Running(parts[0].heads)
        for p in parts:
            out.add(p)
        return out

    @staticmethod
    def _add(table: dict, layer: str, run: Running) -> None:
        """Add ``run`` into ``table``'s layer; a layer's first takes ``run`` itself (its owner then:
        a call's, or a closed step's)."""
        if layer in table:
            table[layer].add(run)
        else:
            table[layer] = run

    def _layer_key(self, name: str, heads: int) -> str:
        """The layer's name; a module whose calls change head count gets one entry per count."""
        for table in (self._current, self._total):
            if name in table and table[name].heads != heads:
                return f"{name}[{heads} heads]"
        return name

    def _rows_of(self, q):
        """rows=K's sampled query rows of a call on q (..., [H,] L, d): int64 (..., K), the same for
        every head (lead: q's dimensions before the head axis; (N,) for 3-D q, () for 2-D), sorted;
        None when every row is read."""
        if self._rows is None or self._rows >= q.shape[-2]:
            return None
        torch = require("torch", "torch")
        L = q.shape[-2]
        lead = q.shape[:-3] if q.dim() > 3 else q.shape[:-2]
        g = torch.Generator().manual_seed(ROW_SEED + 1_000_003 * self._steps_closed + self._step_calls)
        keys = torch.rand((*lead, L), generator=g)
        return keys.topk(self._rows, dim=-1).indices.sort(dim=-1).values.to(q.device)

    def _fold(
        self, name: str, q, k, v, stats, source: str, index: int, picked=None, read=None, sampled=None, keys=None
    ) -> None:
        """Fold one call's figures in; ``picked``: :meth:`_rows_of`'s rows when ``stats`` holds every
        row (replace mode), to keep only theirs; ``read``: the query rows ``stats`` is of when they
        are not q's (observe mode's sampled rows, ``sampled`` their indices), for their norms. Query
        rows that are padding (:meth:`_valid_rows`) are no figure and no row; ``keys``
        (:meth:`_call_keys`): the keys Σ ‖k‖ counts, None: every key."""
        shape = q.shape
        heads = shape[-3] if len(shape) > 3 else 1
        population = math.prod(shape[:-1]) // heads if shape[-1] else 0  # rows per head
        valid = self._valid_rows(q)
        if valid is not None:
            valid, population = valid
            if stats.head_table is None:  # a table was made of the real tokens' rows already
                valid = valid.to(q.device)
                if picked is not None or sampled is not None:
                    valid = valid.gather(-1, picked if picked is not None else sampled)
        # ‖q‖ and ‖k‖ as given, before any scale or QK-norm, of the rows read (call_figures).
        rows = q if read is None else read
        if picked is not None:
            stats, rows = _take_rows(stats, picked), _take_rows(q, picked, along=-2)
        run, ent = call_figures(stats, rows, k, population, valid, entropies=bool(self._history))
        if keys is not None and keys.index is not None:
            count_keys(run, k, keys)
        layer = self._layer_key(name, run.heads)
        self._add(self._current, layer, run)
        self._step_calls += 1
        self._calls_seen += 1
        if not self._history:
            return
        keep = len(self.calls) < self._history
        self.history_full |= not keep
        if keep:
            self._entropies.setdefault(layer, []).append(ent)
        self._step_entropies.setdefault(layer, []).append(ent)
        if not keep:
            return
        *lead, H_q, L, d_k = q.shape if q.dim() > 3 else (q.shape[0], 1, *q.shape[1:])
        # The largest |logit| of the call, as _head_figures takes a head's.
        reach = float(np.maximum(run.max_logit, -run.mins[1]).max()) if run.heads else -math.inf
        self.calls.append(
            CallRecord(
                index=index,
                layer=layer,
                shape=(math.prod(lead), H_q, L, k.shape[-2], d_k, v.shape[-1]),
                dtype=str(q.dtype).replace("torch.", ""),
                source=source,
                backend=stats.backend,
                max_abs_logit=reach if reach > -math.inf else math.nan,  # −inf: no head saw a logit
                float16_overflow_rows=int(run.overflow.sum()),
            )
        )

    def _fold_compiled(self, name: str, q, k, v, stats) -> None:
        """A compiled graph's own figures of one call (:func:`compiled_replacement`), at run time."""
        self._fold(name, q, k, v, stats, "replaced", len(self.calls) if self._history else -1, picked=self._rows_of(q))

    def _fallback(self, reason: str) -> None:
        if self._rerun:  # counted when the forward ran
            return
        self.fallbacks[reason] += 1
        self._step_fallbacks[reason] += 1
        self._counted = True

    def observe(self, call) -> None:
        """Compute and fold in the figures of one :class:`~attnscale.torch.capture.SDPACall`."""
        counted, self._counted = self._counted, False
        torch = require("torch", "torch")
        if recomputing():  # counted when the forward ran
            self._skip_observe = False
            return
        if self._skip_observe:  # a replace-mode fallback with no figures
            self._skip_observe = False
            self._step_calls += 1
            self._calls_seen += 1
            return
        if self._mode == "replace" and call.source != "sdpa" and not counted:
            self._fallback("other attention")
            self._counted = False
        with torch.no_grad():
            call = self._unpacked_call(call)
            mask, bias, _ = self._mask_parts(torch, call.attn_mask)
            keys = self._call_keys(call.name, call.q, call.k, mask, call.is_causal)
            q, causal, picked = call.q, "top_left" if call.is_causal else False, self._rows_of(call.q)
            compared = call.source == "interface" and call.dropout_p == 0
            # The figures do not depend on v: where the output is not compared (the model's own is
            # the output), v of width 0 spares the CPU kernel its P·V products (measured, (16, 4, 64,
            # 16): its forward 0.72×), the figures the same bits. (Elsewhere d_v = 0 runs chunked.)
            v = call.v if compared or call.q.device.type != "cpu" else call.v[..., :0]
            if picked is not None:  # only the sampled rows: causal becomes their mask
                q, mask, bias = _sampled_problem(torch, call.q, call.k, mask, bias, call.is_causal, picked)
                causal = False
            tabled, counted = self._table_rows(call.q, picked)
            out, stats = attention(
                q,
                call.k,
                v,
                scale=_scale_rule(call.scale, call.softcap),
                mask=mask,
                bias=bias,
                causal=causal,
                return_stats=True,
                logit_range=True,
                first_key=True,
                backend=self._backend,
                check_finite=False,
                head_table=tabled,
                counted=counted,
            )
            if compared:
                own = call.output if picked is None else _take_rows(call.output, picked, along=-2)
                if not _agrees(torch, out, stats, own, call):
                    self.skipped[(call.name, _DISAGREE)] += 1
                    return
            if keys is not None and keys.first is not None:
                stats = _first_real(torch, stats, q, call.k, keys.first, call.scale, call.softcap, mask, bias, causal)
        self._fold(call.name, call.q, call.k, call.v, stats, call.source, call.index, read=q, sampled=picked, keys=keys)

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
        """Compute one intercepted call (SDPA's arguments, as capture passes them) with its figures;
        None leaves it to the model's own attention (a fallback, or a call SDPA itself refuses). A
        call that packs its module's grouped-query heads is computed unpacked, its output packed back."""
        torch = require("torch", "torch")
        if _left_to_sdpa(torch, a):
            return None
        q = a["query"]
        groups = self._groups(name, q, a["key"], a["attn_mask"], a["is_causal"])
        if not groups:
            return self._replace(torch, name, a)
        unpacked = {**a, "query": unpack(q, groups), "attn_mask": unpack(a["attn_mask"], groups), "enable_gqa": True}
        out = self._replace(torch, name, unpacked)
        return None if out is None else out.reshape(*q.shape[:-1], out.shape[-1])

    def _replace(self, torch, name: str, a: dict):
        """What :meth:`replace` does with a call SDPA would take (``a``: its arguments)."""
        q, k, v, m = a["query"], a["key"], a["value"], a["attn_mask"]
        grad = torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad)
        self._rerun = recomputing()
        index = len(self.calls) if self._history else -1
        key = _call_key(torch, a, grad)
        kept = self._kept.get(key)
        if kept is not None and not self._rerun:
            # A call of a key seen before (whose call passed the checks below, and was kept): the
            # kernel, with the checks that call made. What the key cannot say is checked here.
            mask, bias, averaged = self._mask_parts(torch, m)
            if bias is None and not averaged:
                keys = self._call_keys(name, q, k, mask, a["is_causal"])
                out, stats = kept(q, k, v, mask, self._table_rows(q)[1])
                if keys is not None and keys.first is not None:
                    stats = _first_real(torch, stats, q, k, keys.first, a["scale"], 0.0, mask, None, a["is_causal"])
                self._fold(name, q, k, v, stats, "replaced", index, keys=keys)
                return out
        if a.get("need_weights"):
            self._fallback("attention weights asked")
            return None
        if a["dropout_p"] > 0:
            self._fallback("dropout")
            return None
        if m is not None and m.requires_grad and torch.is_grad_enabled():
            self._fallback("learned mask")
            return None
        picked = self._rows_of(q)
        # A table of every row (of the real tokens); none for a sample (summed after, from its rows)
        # nor for a checkpoint's recomputation (not folded in).
        tabled, counted = self._table_rows(q) if picked is None and not self._rerun else (False, None)
        scale, causal = _scale_rule(a["scale"], a.get("softcap", 0.0)), "top_left" if a["is_causal"] else False
        backend = TRAINING_BACKEND if grad else self._backend
        try:
            mask, bias, averaged = self._mask_parts(torch, m)
            if averaged:
                self._fallback("fully masked row")
                return None
            out, stats = attention(
                q,
                k,
                v,
                scale=scale,
                mask=mask,
                bias=bias,
                causal=causal,
                return_stats=True,
                logit_range=True,
                first_key=True,
                backend=backend,
                check_finite=False,
                head_table=tabled,
                counted=counted,
            )
        except InputError:
            self._fallback("unsupported")
            self._skip_observe = True
            return None
        if not self._rerun:
            keys = self._call_keys(name, q, k, mask, a["is_causal"])
            if keys is not None and keys.first is not None:
                softcap = a.get("softcap", 0.0)
                stats = _first_real(torch, stats, q, k, keys.first, a["scale"], softcap, mask, bias, a["is_causal"])
            self._fold(name, q, k, v, stats, "replaced", index, picked=picked, keys=keys)
            # Kept for the next call of the same key: every row's table, no bias, no learned mask.
            if tabled and picked is None and bias is None and (m is None or not m.requires_grad):
                made = kept_attention(q, k, v, scale=scale, causal=causal, mask=mask, backend=backend)
                if made is not None:
                    if len(self._kept) >= KEPT_KEYS:
                        del self._kept[next(iter(self._kept))]
                    self._kept[key] = made
        return out


def _left_to_sdpa(torch, a: dict) -> bool:
    """Whether an intercepted call (SDPA's arguments ``a``) is SDPA's own to take or refuse, in both
    of replace mode's paths: not tensors, rank below 2, an attn_mask with is_causal (SDPA refuses
    both: let it say so), heads it would not broadcast without enable_gqa."""
    q, k, m = a["query"], a["key"], a["attn_mask"]
    tensor = torch.Tensor
    if not (isinstance(q, tensor) and isinstance(k, tensor) and isinstance(a["value"], tensor)) or q.dim() < 2:
        return True
    if m is not None and a["is_causal"]:
        return True
    return not a["enable_gqa"] and q.dim() >= 3 and k.dim() >= 3 and k.shape[-3] not in (1, q.shape[-3])


def _call_key(torch, a: dict, grad: bool) -> tuple:
    """What replace mode's handling of an intercepted call (SDPA's arguments ``a``, q, k and v
    tensors) decides from, but the mask's values and the forward's padding: two calls of one key
    take the same path to the same computation, in any layer (Monitor.replace keeps them, by key)."""
    q, k, v, m = a["query"], a["key"], a["value"], a["attn_mask"]
    mask = (m.shape, m.dtype, m.device, m.requires_grad) if isinstance(m, torch.Tensor) else m
    flags = (a["dropout_p"], a["is_causal"], a["scale"], a["enable_gqa"], a.get("need_weights"), a.get("softcap", 0.0))
    return (q.shape, k.shape, v.shape, q.dtype, k.dtype, v.dtype, q.device, k.device, v.device, mask, flags, grad)


def compiled_replacement(a: dict):
    """Replace mode inside a graph Dynamo compiles (traced, with an SDPA call's arguments ``a``):
    ``(output, AttentionStats)`` of :func:`attnscale.torch.attention` for the calls it can judge
    from their shapes and flags alone — no dropout, no attn_mask or a bool one, heads SDPA would
    broadcast — on :data:`TRAINING_BACKEND` (the fused kernel, one op in the graph), on the CPU (the
    only device this path is tested on); None for the others, whose own SDPA then stays in the graph
    (observed). A float mask is left alone: whether it masks a whole row with finite numbers (a
    fallback in eager replace) depends on its values, which a graph cannot branch on."""
    torch = require("torch", "torch")
    if _left_to_sdpa(torch, a) or a["dropout_p"] > 0:
        return None
    q, k, v, m = a["query"], a["key"], a["value"], a["attn_mask"]
    if q.device.type != "cpu":
        return None  # traced and tested on CPU only; on CUDA the compiled model's SDPA stays, observed
    if m is not None and m.dtype != torch.bool:
        return None
    return attention(
        q,
        k,
        v,
        scale=a["scale"],
        mask=m,
        causal="top_left" if a["is_causal"] else False,
        return_stats=True,
        logit_range=True,
        first_key=True,
        backend=TRAINING_BACKEND,
        check_finite=False,
        head_table=q.dim() == 4,  # every row: a compiled model's padding is not read (module docstring)
    )


_DISAGREE = (
    "its eager output differs from the rebuilt attention beyond rounding (an eager function "
    "that computes more than softmax(cap(scaling·q·kᵀ) + mask)·v)"
)


def _on_cpu(model) -> bool:
    """Whether ``model`` (None: any) may run attention on the CPU: no model, no parameters, or one on the CPU."""
    params = [] if model is None else list(model.parameters())[:1]
    return not params or params[0].device.type == "cpu"


def _padding_modules(model) -> dict:
    """The outermost modules of ``model`` whose forward takes an ``attention_mask`` (a Hugging Face
    model, a LightningModule wrapping one ...; none inside another such), each with ``(place,
    queries)``: the mask's place among its forward's positional arguments (None: by name only), and
    whether the mask is of the forward's query rows: where the monitor reads which query rows are
    padding, and the forward's KV cache. A Hugging Face encoder-decoder's mask is its encoder's:
    the encoder is hooked too (its ``generate`` runs it on its own) and reads it, the model only its
    cache. None on a compiled model (a hook added to it would recompile its graph) or without a model."""
    import inspect

    if model is None or compiled(require("torch", "torch"), model):
        return {}
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)

    def mask_place(module) -> tuple[bool, int | None]:
        """Whether the forward takes an attention_mask, and its place (None: by name only)."""
        try:
            parameters = list(inspect.signature(module.forward).parameters.values())
        except (TypeError, ValueError):
            return False, None
        names = [p.name for p in parameters]
        if "attention_mask" not in names:
            return False, None
        before = parameters[: names.index("attention_mask") + 1]
        return True, (len(before) - 1 if all(p.kind in positional for p in before) else None)

    def outermost(module) -> dict:
        takes, place = mask_place(module)
        if takes:
            encoder = _encoder(module)
            reads, at = (False, None) if encoder is None else mask_place(encoder)
            return {module: (place, False), encoder: (at, True)} if reads else {module: (place, True)}
        return {m: at for child in module.children() for m, at in outermost(child).items()}

    return outermost(model)  # a module shared by two parents, once


def _encoder(module):
    """A Hugging Face encoder-decoder's encoder (its ``get_encoder()``, not itself); else None."""
    get = getattr(module, "get_encoder", None)
    if not (callable(get) and getattr(getattr(module, "config", None), "is_encoder_decoder", False)):
        return None
    encoder = get()
    return encoder if isinstance(encoder, require("torch", "torch").nn.Module) and encoder is not module else None


def _cache_length(cache) -> int | None:
    """The tokens a forward's KV cache (``cache`` / ``past_key_values``: a transformers Cache) held
    before the forward; None without a cache (0 for one that cannot say)."""
    if cache is None:
        return None
    length = getattr(cache, "get_seq_length", None)
    return int(length()) if callable(length) else 0


def _input_length(torch, args, kwargs) -> int:
    """The tokens a forward is given (``input_ids`` or ``inputs_embeds``, by name or first; their
    dimension 1), −1 when none is."""
    given = (kwargs.get("input_ids"), kwargs.get("inputs_embeds"), args[0] if args else None)
    x = next((x for x in given if isinstance(x, torch.Tensor) and x.dim() >= 2), None)
    return -1 if x is None else x.shape[1]


def _first_real(torch, stats, q, k, first, scale, softcap: float, mask, bias, causal):
    """``stats`` with each row's weight on its batch row's first real key (``first`` (B,), not key 0:
    :func:`~attnscale.torch.monitor_tokens.first_real_weight`, with the call's ``scale``, ``softcap``,
    ``mask``, ``bias`` and ``causal`` as its figures were made) and no head table: the call's
    figures are then summed from its rows (:func:`call_figures`)."""
    weight = first_real_weight(torch, q, k, stats.lse, first, scale, softcap, mask, bias, bool(causal))
    return replace(stats, first_key_weight=weight, head_table=None, counted_entropy=None)


def _scale_rule(scale, softcap: float):
    """SDPA's scale (None = 1/√d_k), soft-capped as Gemma 2's eager attention when ``softcap``."""
    if not softcap:
        return scale
    return SoftCap(cap_value=softcap, base=Constant(scale)) if scale is not None else SoftCap(cap_value=softcap)


def _take_rows(x, picked, along: int = -1):
    """The rows ``picked`` (..., K) of ``x``: an :class:`AttentionStats` (figures (..., [H,] L),
    ``along=-1``) or a tensor (..., [H,] L, d) (``along=-2``), the same rows in every head."""
    if not hasattr(x, "dim"):  # a head table is of every row: the rows taken are summed anew
        return replace(
            x,
            head_table=None,
            counted_entropy=None,
            **{
                f: _take_rows(getattr(x, f), picked)
                for f in ("lse", "entropy", "max_logit", "min_logit", "first_key_weight")
            },
        )
    heads = x.dim() - picked.dim() - (0 if along == -1 else 1)  # a head axis (1) or none (0)
    index = picked.reshape(picked.shape[:-1] + (1,) * heads + picked.shape[-1:] + (1,) * (-1 - along))
    return x.gather(
        along, index.expand(x.shape[: along % x.dim()] + (picked.shape[-1],) + x.shape[along % x.dim() + 1 :])
    )


def _sampled_problem(torch, q, k, mask, bias, is_causal: bool, picked):
    """q's sampled rows (..., [H,] K, d), with the mask and bias rows they read; a top-left causal
    limit (row i attends keys j ≤ i) becomes part of the mask, since the rows are no longer 0..L−1."""
    S, L = k.shape[-2], q.shape[-2]
    rows = q.shape[:-1] + (S,)  # (..., [H,] L, S)
    take = lambda m: None if m is None else _take_rows(m.expand(rows) if m.dim() <= len(rows) else m, picked, along=-2)  # noqa: E731
    mask, bias = take(mask), take(bias)
    if is_causal:
        limit = (
            torch.arange(S, device=q.device)
            <= _take_rows(torch.arange(L, device=q.device).expand(q.shape[:-1]), picked)[..., None]
        )
        mask = limit if mask is None else mask & limit
    return _take_rows(q, picked, along=-2), mask, bias


def _agrees(torch, out, stats, own, call) -> bool:
    """Our output ``out`` equals the model's own (``own``: ``call.output``, or its sampled rows)
    within :data:`AGREEMENT` × max |v| on every row that attends a key with finite logits (a row we
    call empty, the model averages)."""
    dtype = str(call.q.dtype).replace("torch.", "")
    rows = torch.isfinite(stats.lse)
    if not bool(rows.any()):
        return True
    gap = (out.float() - own.float()).abs().amax(-1)[rows].max()
    reach = float(call.v.abs().max()) if call.v.numel() else 0.0
    return float(gap) <= AGREEMENT.get(dtype, max(AGREEMENT.values())) * max(reach, 1e-30)


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


def _head_figures(layer: str, run: Running, entropies: dict) -> list[HeadFigures]:
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
        # Positional, in HeadFigures' order of fields (a step makes one per head). The logits of
        # single-key and broken rows count: −inf/+inf here are the reductions' identities, no logit
        # seen (an overflowed +inf max is a logit, and stays).
        out.append(
            HeadFigures(
                layer,
                h,
                calls,
                int(rows),
                int(empty),
                int(broken),
                int(saturated),
                int(overflow),
                mean,
                medians[h],
                ent_min if rows else nan,
                hi if hi > -inf else nan,
                lo if lo < inf else nan,
                top if top > -inf else nan,
                population,
                se,
                int(single),
                ent_sum,
                first / rows if rows else nan,
                q_norm / rows if rows else nan,
                k_norm / keys if keys else nan,
                keys,
                first,
                q_norm,
                k_norm,
            )
        )
    return out
