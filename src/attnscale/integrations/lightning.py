"""Attention health in Lightning's ``Trainer``: each optimiser step's figures through the module's
``log_dict``, so the Trainer's logger writes them on its own logging steps (``log_every_n_steps``),
to whichever logger the user set (keys: :mod:`attnscale.integrations`)::

    trainer = lightning.pytorch.Trainer(max_steps=1000, log_every_n_steps=10,
                                        callbacks=[AttentionHealthCallback(tau=100.0, mode="replace")])
    trainer.fit(module)        # the monitor watches ``module`` (the LightningModule) and its children

Needs ``pip install 'attnscale[lightning]'``.
"""

from __future__ import annotations

from attnscale.errors import require
from attnscale.integrations._watch import Watch

_lightning = require("lightning.pytorch", "lightning")

__all__ = ["AttentionHealthCallback"]


class AttentionHealthCallback(_lightning.Callback):
    """Monitor the attention of the LightningModule being fitted.

    tau: QK-clip threshold after each optimiser step (None: none); alpha, log_only: as
    :class:`attnscale.torch.guard.LogitGuard`. per_head: log each head's figures besides each
    layer's. process_group: the ranks to combine over (None: the default group). monitor_options:
    :class:`attnscale.torch.Monitor`'s (mode, backend, history, ...).

    Every optimiser step is combined over the ranks (one collective each): which steps the logger
    writes is Lightning's to decide after the callback has logged."""

    def __init__(
        self,
        tau=None,
        alpha: float = 0.5,
        log_only: bool = False,
        per_head: bool = True,
        process_group=None,
        **monitor_options,
    ):
        self.watch = Watch(tau, alpha, log_only, per_head, process_group, **monitor_options)
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
        self.watch.end_step(trainer.global_step)
        pl_module.log_dict(self.watch.log_keys(), on_step=True, on_epoch=False)

    def on_train_end(self, trainer, pl_module):
        self.watch.stop()
