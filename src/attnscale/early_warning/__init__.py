"""Early warning: alerts on the first links of the post's causal chain — attention logits grow, the
softmax saturates, its gradient vanishes, learning stalls or breaks — per layer and head, at each step,
before the loss shows them. Pure Python and NumPy: it reads the monitor's per-head figures, either the
:class:`~attnscale.torch.monitor.records.Step` itself or its JSON line as
:class:`~attnscale.torch.sinks.JSONLSink` wrote it.

- :mod:`attnscale.early_warning.detector`: :class:`DetectorConfig`, :class:`Detector`, :class:`Alert`,
  :func:`replay` (a whole log), :func:`read_log` (a JSONL file).
- :mod:`attnscale.early_warning.words`: each alert's one sentence, English or Chinese.
- :mod:`attnscale.early_warning.dashboard`: the self-contained HTML page of ``attnscale watch --html``.

Where users get it: ``attnscale watch LOG.jsonl``, and the trainer callbacks' ``alerts=True``
(:mod:`attnscale.integrations`). The method and its defaults: ``docs/early-warning.md``.
"""

from attnscale.early_warning.detector import (
    CHANGE_RULES,
    FIXED_RULES,
    Alert,
    Detector,
    DetectorConfig,
    make_detector,
    read_log,
    replay,
)
from attnscale.early_warning.words import sentence

__all__ = [
    "Alert",
    "CHANGE_RULES",
    "Detector",
    "DetectorConfig",
    "FIXED_RULES",
    "make_detector",
    "read_log",
    "replay",
    "sentence",
]
