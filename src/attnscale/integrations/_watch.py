"""What both trainer callbacks do, trainer-free: a monitor over the training, one step per
optimiser step, combined over ranks, QK-clip, and the step's figures as flat log keys (the keys
are documented once, in :mod:`attnscale.integrations`)."""

from __future__ import annotations

import math

from attnscale.errors import InputError, InputTypeError

# The per-head figures logged, in the order of the key table: the ones TensorBoardSink charts.
from attnscale.torch.monitor_records import pooled_figures
from attnscale.torch.sinks import FIGURES

__all__ = ["Watch", "log_keys", "FIGURES"]


def log_keys(step, clips=None, per_head: bool = True) -> dict[str, float]:
    """A :class:`~attnscale.torch.monitor_records.Step` (and the step's QK-clip, a list of
    :class:`~attnscale.torch.guard.Clip` or None without a guard) → {key: number}; non-finite
    figures left out (a NaN or an overflowed +inf breaks some loggers' charts)."""
    out: dict[str, float] = {"attn/calls": float(step.calls)}
    for layer, heads in step.by_layer().items():
        groups = [(f"attn/{layer}", pooled_figures(heads))]
        if per_head:
            groups += [(f"attn/{layer}/head{h.head}", {f: getattr(h, f) for f in FIGURES}) for h in heads]
        for prefix, figures in groups:
            out.update({f"{prefix}/{name}": float(v) for name, v in figures.items() if math.isfinite(v)})
    out.update({f"attn/fallbacks/{reason}": float(n) for reason, n in step.fallbacks.items()})
    if clips is not None:
        out["attn/clipped_heads"] = float(len(clips))
    return out


class Watch:
    """A monitor over ``model`` for one training run, stepped by a trainer callback.

    tau: QK-clip threshold (None: no guard); alpha, log_only: :class:`~attnscale.torch.guard.LogitGuard`'s.
    process_group: the ranks to combine over (None: the default group, when one is initialised).
    per_head: log each head's figures too. monitor_options: :class:`~attnscale.torch.Monitor`'s
    (``history`` defaults to False: bounded memory over any number of steps)."""

    def __init__(
        self,
        tau=None,
        alpha: float = 0.5,
        log_only: bool = False,
        per_head: bool = True,
        process_group=None,
        **monitor_options,
    ):
        from attnscale.errors import check_positive
        from attnscale.torch.guard import check_options

        if tau is not None:  # wrong options are refused here, not when training starts
            check_positive("tau", tau)
        alpha, log_only = check_options(alpha, log_only)
        if not isinstance(per_head, bool):
            raise InputTypeError(f"per_head: expected True or False, got {per_head!r}")
        if "every" in monitor_options:  # the Monitor's every=N measures steps 1, N+1, ...: never N, 2N
            raise InputError(
                f"every: not taken by the trainer callbacks (got {monitor_options['every']!r}): they log the "
                "figures of the trainer's logging steps, which every=N leaves unmeasured; "
                "set how often the trainer logs"
            )
        self.tau, self.alpha, self.log_only, self.per_head = tau, alpha, log_only, per_head
        self.process_group = process_group
        self.monitor_options = {"history": False, **monitor_options}
        self.monitor = self.guard = None
        self.last = None  # the last Step closed
        self.combined = False  # whether ``last`` is combined over the ranks yet
        self.clips: list = []  # the last step's clips

    def start(self, model) -> None:
        """Begin watching ``model`` (the module whose attention runs: unwrapped, not its DDP wrapper)."""
        from attnscale.torch import Monitor
        from attnscale.torch.guard import LogitGuard

        self.stop()
        # The guard first: a model it cannot rescale is refused before the monitor hooks anything.
        self.guard = (
            LogitGuard(model, self.tau, alpha=self.alpha, log_only=self.log_only) if self.tau is not None else None
        )
        self.monitor = Monitor(model, **self.monitor_options)
        self.monitor.__enter__()

    def discard(self) -> None:
        """Drop the calls seen since the last step (an evaluation between steps): they are no step's."""
        self.monitor.discard()

    def end_step(self, global_step: int, combine: bool = True):
        """Close the optimiser step ``global_step``: its figures combined over the ranks when ``combine``
        or a guard needs them (see :meth:`combine`), QK-clip applied from them. Returns the Step."""
        self.last, self.combined = self.monitor.step(int(global_step), log=False), False
        if combine or self.guard is not None:
            self.combine()
        self.clips = self.guard.apply(self.last) if self.guard is not None else None
        return self.last

    def combine(self):
        """The last step combined over the ranks, combining it now if it is not yet: a collective, so
        every rank calls it at the same steps. Returns the Step."""
        from attnscale.torch.distributed import combine_step

        if not self.combined:
            self.last, self.combined = combine_step(self.last, self.process_group), True
        return self.last

    def log_keys(self) -> dict[str, float]:
        """The last step's figures as log keys (:func:`log_keys`)."""
        return log_keys(self.last, self.clips, self.per_head)

    def stop(self) -> None:
        if self.monitor is not None:
            self.monitor.__exit__(None, None, None)
            self.monitor = None
