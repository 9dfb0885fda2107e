"""Attention health in Lightning's ``Trainer``: the figures of each step the Trainer's logger writes
(``log_every_n_steps``) through the module's ``log_dict``, so they are in that step's row of the logged
metrics, beside the module's own (which stay as they are), in ``trainer.logged_metrics`` and
``trainer.callback_metrics``, and go to whichever logger the user set (keys: :mod:`attnscale.integrations`)::

    trainer = lightning.pytorch.Trainer(max_steps=1000, log_every_n_steps=10,
                                        callbacks=[AttentionHealthCallback(tau=100.0, mode="replace")])
    trainer.fit(module)        # the monitor watches ``module`` (the LightningModule) and its children

Needs ``pip install 'attnscale[lightning]'``.
"""

from __future__ import annotations

import warnings

from attnscale.errors import require
from attnscale.integrations._watch import Watch, stopping_words

_lightning = require("lightning.pytorch", "lightning")

__all__ = ["AttentionHealthCallback"]


class AttentionHealthCallback(_lightning.Callback):
    """Monitor the attention of the LightningModule being fitted.

    tau: QK-clip threshold after each optimiser step (None: none); alpha, log_only: as
    :class:`attnscale.torch.guard.LogitGuard`. per_head: log each head's figures besides each
    layer's. process_group: the ranks to combine over (None: the default group). alerts: the
    early-warning detector (True, a :class:`~attnscale.early_warning.DetectorConfig` or a
    :class:`~attnscale.early_warning.Detector`), judging every optimiser step; ``attn/alerts`` counts its
    alerts and :attr:`alerts` holds them. stop_on_alert: set ``trainer.should_stop`` at the first step
    with an alert (with a warning that says it in one sentence). monitor_options:
    :class:`attnscale.torch.Monitor`'s (mode, backend, history, ...).

    The figures are logged, and combined over the ranks (one collective), on the optimiser steps
    the logger writes (and every step is combined with ``tau``, to clip)."""

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
        self.watch = Watch(
            tau, alpha, log_only, per_head, process_group, alerts=alerts, stop_on_alert=stop_on_alert, **monitor_options
        )
        self._stepped = 0  # optimiser steps closed so far
        self._open = False  # a step's micro-batches are under way

    def on_train_start(self, trainer, pl_module):
        self.watch.start(pl_module)
        self._stepped, self._open = trainer.global_step, False

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        if not self._open:  # the first micro-batch of a step: drop what ran between steps
            self.watch.discard()
            self._open = True

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if trainer.global_step == self._stepped:
            return  # gradient accumulation: the optimiser has not stepped yet
        self._stepped, self._open = trainer.global_step, False
        # Only the steps the logger writes log: LightningModule.log costs about a millisecond a key, too
        # much on every step for a model's hundreds of keys. The connector decides it just after this
        # hook from the same state (Lightning's LearningRateMonitor asks it so); it must agree, as a key
        # once logged is written again in every later row: a written step without figures would show stale ones.
        writes = getattr(trainer._logger_connector, "should_update_logs", True) or bool(trainer.fast_dev_run)
        self.watch.end_step(trainer.global_step, combine=writes)
        if self.watch.should_stop:  # every rank judged the same combined figures: all stop together
            trainer.should_stop = True
            warnings.warn(stopping_words(self.watch.new_alerts), stacklevel=2)
        if writes:
            pl_module.log_dict(self.watch.log_keys(), on_step=True, on_epoch=False)

    def on_train_end(self, trainer, pl_module):
        self.watch.stop()

    @property
    def alerts(self) -> list:
        """The run's early-warning alerts so far (:class:`~attnscale.early_warning.Alert`), in order."""
        return self.watch.alerts
