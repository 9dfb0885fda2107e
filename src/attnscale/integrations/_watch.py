"""What both trainer callbacks do, trainer-free: a monitor over the training, one step per
optimiser step, combined over ranks, QK-clip, early-warning alerts, and the step's figures as flat log
keys (the keys are documented once, in :mod:`attnscale.torch.keys`)."""

from __future__ import annotations

from attnscale.errors import InputError, InputTypeError
from attnscale.torch.keys import FIGURES
from attnscale.torch.keys import step_keys as log_keys

__all__ = ["Watch", "log_keys", "stopping_words", "FIGURES"]


def stopping_words(alerts: list) -> str:
    """Why a callback stops the training: the step's first alert in its sentence (and how many more)."""
    more = f" (and {len(alerts) - 1} more alerts in this step)" if len(alerts) > 1 else ""
    return f"attnscale: stopping the training at an early-warning alert: {alerts[0].sentence()}{more}"


class Watch:
    """A monitor over ``model`` for one training run, stepped by a trainer callback.

    tau: QK-clip threshold (None: no guard); alpha, log_only: :class:`~attnscale.torch.guard.LogitGuard`'s.
    process_group: the ranks to combine over (None: the default group, when one is initialised).
    per_head: log each head's figures too. alerts: an early-warning detector judging every step
    (:func:`attnscale.early_warning.make_detector`: True, a DetectorConfig or a Detector; None: none);
    its alerts are :attr:`alerts`, counted in ``attn/alerts``. stop_on_alert: ask the trainer to stop
    at the first step with an alert (implies ``alerts=True`` when alerts is None).
    monitor_options: :class:`~attnscale.torch.Monitor`'s (``history`` defaults to False: bounded
    memory over any number of steps)."""

    def __init__(
        self,
        tau=None,
        alpha: float = 0.5,
        log_only: bool = False,
        per_head: bool = True,
        process_group=None,
        alerts=None,
        stop_on_alert: bool = False,
        **monitor_options,
    ):
        from attnscale.early_warning import make_detector
        from attnscale.errors import check_positive
        from attnscale.torch.guard import check_options

        if tau is not None:  # wrong options are refused here, not when training starts
            check_positive("tau", tau)
        alpha, log_only = check_options(alpha, log_only)
        if not isinstance(per_head, bool):
            raise InputTypeError(f"per_head: expected True or False, got {per_head!r}")
        if not isinstance(stop_on_alert, bool):
            raise InputTypeError(f"stop_on_alert: expected True or False, got {stop_on_alert!r}")
        make_detector(alerts)  # a wrong alerts= is refused here, not when training starts
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
        self.alerts_option = True if alerts is None and stop_on_alert else alerts
        self.stop_on_alert = stop_on_alert
        self.detector = None
        self.alerts: list = []  # every alert of the run, in order (Alert)
        self.new_alerts: list = []  # the last step's
        self._unlogged = 0  # alerts raised since the last log_keys()

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
        from attnscale.early_warning import make_detector

        # A new run starts a new detector (a Detector passed in is the user's own: it goes on).
        self.detector = make_detector(self.alerts_option)
        self.alerts, self.new_alerts, self._unlogged = [], [], 0

    def discard(self) -> None:
        """Drop the calls seen since the last step (an evaluation between steps): they are no step's."""
        self.monitor.discard()

    def end_step(self, global_step: int, combine: bool = True):
        """Close the optimiser step ``global_step``: its figures combined over the ranks when ``combine``
        or a guard or a detector needs them (see :meth:`combine`: every rank then judges the same
        figures, so every rank stops at the same step), QK-clip applied from them, the detector
        updated. Returns the Step."""
        self.last, self.combined = self.monitor.step(int(global_step), log=False), False
        if combine or self.guard is not None or self.detector is not None:
            self.combine()
        self.clips = self.guard.apply(self.last) if self.guard is not None else None
        if self.detector is not None:
            self.new_alerts = self.detector.update(self.last)
            self.alerts += self.new_alerts
            self._unlogged += len(self.new_alerts)
        return self.last

    @property
    def should_stop(self) -> bool:
        """Whether the trainer should stop now: ``stop_on_alert`` and the last step raised an alert."""
        return self.stop_on_alert and bool(self.new_alerts)

    def combine(self):
        """The last step combined over the ranks, combining it now if it is not yet: a collective, so
        every rank calls it at the same steps. Returns the Step."""
        from attnscale.torch.distributed import combine_step

        if not self.combined:
            self.last, self.combined = combine_step(self.last, self.process_group), True
        return self.last

    def log_keys(self) -> dict[str, float]:
        """The last step's figures as log keys (:func:`attnscale.torch.keys.step_keys`), with the
        alerts raised since the previous call (the detector judges every step, the trainer logs some)."""
        unlogged, self._unlogged = self._unlogged, 0
        return log_keys(self.last, self.clips, self.per_head, alerts=None if self.detector is None else unlogged)

    def stop(self) -> None:
        if self.monitor is not None:
            self.monitor.__exit__(None, None, None)
            self.monitor = None
