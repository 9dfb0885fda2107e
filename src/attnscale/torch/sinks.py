"""Where :meth:`attnscale.torch.monitor.Monitor.step` sends each step's per layer × head figures.

A sink is any object with ``write(step: Step)``; whoever made it closes it (the monitor never
does; both sinks here are context managers). ``step`` is the
:class:`~attnscale.torch.monitor.records.Step` the monitor closed: ``step``, ``calls``,
``fallbacks`` and ``heads``, one :class:`~attnscale.torch.monitor.records.HeadFigures` per layer ×
head (NaN for a figure that does not exist).

- :class:`JSONLSink`: one strict-JSON line per step, :meth:`Step.to_json` (RFC 8259: no NaN or
  Infinity; null with ``why_null`` instead), flushed at once, so ``jq`` or a crashed run's reader
  gets every finished step.
- :class:`TensorBoardSink`: scalars through ``torch.utils.tensorboard.SummaryWriter``, tagged with
  the keys the trainer callbacks log (one scheme, documented once: :mod:`attnscale.torch.keys`):
  ``attn/<layer>/head<h>/<figure>`` per head, ``attn/<layer>/<figure>`` over a layer's heads,
  ``attn/model/<figure>`` over every head, ``attn/calls``, ``attn/fallbacks/<reason>``, and
  ``attn/alerts`` when the step carries early-warning alerts. Needs ``tensorboard`` (``pip install 'attnscale[tensorboard]'``).

A step that carries ``alerts`` (a monitor made with an early-warning detector, :mod:`attnscale.early_warning`)
has them written too: JSONLSink adds them to the step's line as ``"alerts": [Alert.to_json(), ...]``.
"""

from __future__ import annotations

import json
from pathlib import Path

from attnscale.errors import InputError, InputTypeError, require
from attnscale.torch.keys import FIGURES, step_keys

__all__ = ["JSONLSink", "TensorBoardSink", "FIGURES"]


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
        """step: a :class:`~attnscale.torch.monitor.records.Step`."""
        if self._file.closed:
            raise InputError(
                f"JSONLSink: the sink of {str(self.path)!r} is closed; expected write() before close() "
                "(or inside its with block)"
            )
        record = step.to_json()
        alerts = getattr(step, "alerts", None)  # a monitor with a detector: the step's alerts
        if alerts is not None and "alerts" not in record:
            record["alerts"] = [a.to_json() for a in alerts]
        # allow_nan=False: a NaN that slipped through is a bug to see, not a file jq cannot read.
        self._file.write(json.dumps(record, allow_nan=False, ensure_ascii=False) + "\n")
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

    def __init__(self, log_dir=None, writer=None, prefix: str = "attn"):
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
        """step: a :class:`~attnscale.torch.monitor.records.Step`; a figure that does not exist (NaN) is left out."""
        alerts = getattr(step, "alerts", None)
        keys = step_keys(step, alerts=None if alerts is None else len(alerts), prefix=self._prefix)
        for tag, value in keys.items():
            self.writer.add_scalar(tag, value, step.step)

    def close(self) -> None:
        self.writer.flush()
        if self._owned:
            self.writer.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()
