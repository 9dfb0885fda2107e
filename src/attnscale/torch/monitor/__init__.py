"""Watch attention health while a model runs or trains: figures for every attention call, per layer and head.

    with Monitor(model) as mon:                       # mode="observe": outputs bit-for-bit unchanged
        model(**batch)
    mon.summary()                                     # one HeadFigures per (layer, head)
    mon.calls                                         # one CallRecord per call (history=True)

    with Monitor(model, mode="replace", history=False, sinks=[JSONLSink("attn.jsonl")]) as mon:
        for step, batch in enumerate(batches):        # training: forward, backward, optimiser step
            ...
            figures = mon.step(step)                  # this step's per layer × head figures → sinks

What is seen (:mod:`attnscale.torch.capture` finds the calls), what each mode guarantees and what
is kept: the user guide, docs/monitor.md. The modules, one idea each: ``lifecycle`` (the
:class:`Monitor`: context, steps, sinks), ``observe`` and ``replace`` (each mode's figures of a
call), ``padding`` (the real tokens of a forward), ``tokens`` (the keys and heads counted),
``rows`` (``rows=K``'s sampling), ``tally`` (what is kept), ``records`` (what is handed out:
:class:`HeadFigures`, :class:`Step`, :class:`CallRecord`), ``masks`` and ``kernel`` (SDPA's mask,
and the call to :func:`attnscale.torch.attention`, as the modes share them).
"""

from attnscale.torch.monitor.lifecycle import MODES, Monitor, NoAttentionSeen, describe_model
from attnscale.torch.monitor.observe import AGREEMENT
from attnscale.torch.monitor.records import SINK_WEIGHT, CallRecord, HeadFigures, Step, pooled_figures
from attnscale.torch.monitor.replace import FALLBACK_REASONS, KEPT_KEYS, TRAINING_BACKEND, compiled_replacement
from attnscale.torch.monitor.rows import ROW_SEED
from attnscale.torch.monitor.tally import HISTORY_CALLS

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
    "KEPT_KEYS",
    "SINK_WEIGHT",
    "describe_model",
    "compiled_replacement",
    "pooled_figures",
]
