"""Where :meth:`attnscale.torch.monitor.Monitor.step` sends each step's per layer × head figures.

A sink is any object with ``write(step: Step)``; whoever made it closes it (the monitor never
does; both sinks here are context managers). ``step`` is the
:class:`~attnscale.torch.monitor_records.Step` the monitor closed: ``step``, ``calls``,
``fallbacks`` and ``heads``, one :class:`~attnscale.torch.monitor_records.HeadFigures` per layer ×
head (NaN for a figure that does not exist).

- :class:`JSONLSink`: one strict-JSON line per step, :meth:`Step.to_json` (RFC 8259: no NaN or
  Infinity; null with ``why_null`` instead), flushed at once, so ``jq`` or a crashed run's reader
  gets every finished step.
- :class:`TensorBoardSink`: scalars through ``torch.utils.tensorboard.SummaryWriter``, tagged
  ``attention/<figure>/<layer>/head<h>`` per head, ``attention/<figure>/<layer>/layer`` over a
  layer's heads and ``attention/<figure>/model`` over every head
  (:func:`~attnscale.torch.monitor_records.pooled_figures`: row-weighted means, extremes, the share
  of sink heads), ``attention/calls`` and ``attention/fallbacks/<reason>``. Needs ``tensorboard`` (``pip install 'attnscale[tensorboard]'``).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from attnscale.errors import InputError, InputTypeError, require
from attnscale.torch.monitor_records import pooled_figures

__all__ = ["JSONLSink", "TensorBoardSink", "FIGURES"]

# The per-head figures TensorBoardSink charts: fields (or properties) of HeadFigures.
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


class JSONLSink:
    """Append one JSON line per step to ``path`` (``append=False`` truncates an existing file first).

    ``path``'s folder must exist: like ``--json FILE``, the sink creates the file only, never a
    folder the user did not ask for (a typo in a path is an :class:`~attnscale.errors.InputError`
    naming it, not a new folder tree). Writing to a closed sink is an ``InputError`` too."""

    def __init__(self, path, append: bool = False):
        from attnscale.results import check_writable

        self.path = Path(path)
        if self.path.is_dir():
            raise InputError(f"path: {str(self.path)!r} is a folder, expected a file to write JSON lines to")
        if not self.path.parent.exists():
            raise InputError(
                f"path: the folder {str(self.path.parent)!r} (where {self.path.name!r} would be written) "
                "does not exist; expected a file in an existing folder"
            )
        check_writable(self.path.parent, "path")
        self._file = open(self.path, "a" if append else "w", encoding="utf-8")

    def write(self, step) -> None:
        """step: a :class:`~attnscale.torch.monitor_records.Step`."""
        if self._file.closed:
            raise InputError(
                f"JSONLSink: the sink of {str(self.path)!r} is closed; expected write() before close() "
                "(or inside its with block)"
            )
        # allow_nan=False: a NaN that slipped through is a bug to see, not a file jq cannot read.
        self._file.write(json.dumps(step.to_json(), allow_nan=False, ensure_ascii=False) + "\n")
        self._file.flush()

    def close(self) -> None:
        if not self._file.closed:
            self._file.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class TensorBoardSink:
    """Scalars to TensorBoard. ``log_dir``: a folder for a new SummaryWriter (closed by
    :meth:`close`), or ``writer``: the training loop's own SummaryWriter (flushed, left open)."""

    def __init__(self, log_dir=None, writer=None, prefix: str = "attention"):
        if (log_dir is None) == (writer is None):
            raise InputTypeError("TensorBoardSink: expected exactly one of log_dir or writer")
        if writer is None:
            require("tensorboard", "tensorboard")
            from torch.utils.tensorboard import SummaryWriter

            writer = SummaryWriter(log_dir=str(Path(log_dir)))
            self._owned = True
        else:
            self._owned = False
        self.writer = writer
        self._prefix = prefix

    def write(self, step) -> None:
        """step: a :class:`~attnscale.torch.monitor_records.Step`; a figure that does not exist (NaN) is left out."""
        for h in step.heads:
            for name in FIGURES:
                self._scalar(f"{name}/{h.layer}/head{h.head}", getattr(h, name), step.step)
        pooled = [(f"{layer}/layer", pooled_figures(heads)) for layer, heads in step.by_layer().items()]
        if step.heads:
            pooled.append(("model", pooled_figures(step.heads)))
        for where, figures in pooled:
            for name, value in figures.items():
                self._scalar(f"{name}/{where}", value, step.step)
        self.writer.add_scalar(f"{self._prefix}/calls", step.calls, step.step)
        for reason, count in step.fallbacks.items():
            self.writer.add_scalar(f"{self._prefix}/fallbacks/{reason}", count, step.step)

    def _scalar(self, tag: str, value: float, step: int) -> None:
        if math.isfinite(value):
            self.writer.add_scalar(f"{self._prefix}/{tag}", value, step)

    def close(self) -> None:
        self.writer.flush()
        if self._owned:
            self.writer.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()
