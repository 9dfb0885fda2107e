"""Attention health in Hugging Face's ``Trainer``: figures of each logging step in the Trainer's own
logs, so ``report_to`` sends them wherever the user set (keys: :mod:`attnscale.integrations`)::

    trainer = Trainer(model=model, args=TrainingArguments(..., logging_steps=10), train_dataset=data)
    trainer.add_callback(AttentionHealthCallback(trainer, tau=100.0, mode="replace"))
    trainer.train()          # trainer.state.log_history: {"attn/model.layers.0.self_attn/entropy_mean": ...}

The callback holds the trainer to log through :meth:`transformers.Trainer.log` (as TRL's callbacks
do): a callback's ``on_log`` runs after the reporting callbacks, too late to add to what they send.
The figures are logged at the end of each logging step, as their own entry of that step, just
before the Trainer's own (loss, learning rate).

Needs ``pip install 'attnscale[transformers]'``.
"""

from __future__ import annotations

from attnscale.errors import require
from attnscale.integrations._watch import Watch

_transformers = require("transformers", "transformers")

__all__ = ["AttentionHealthCallback"]


class AttentionHealthCallback(_transformers.TrainerCallback):
    """Monitor the attention of ``trainer``'s model over ``trainer.train()``.

    tau: QK-clip threshold after each optimiser step (None: none); alpha, log_only: as
    :class:`attnscale.torch.guard.LogitGuard`. per_head: log each head's figures besides each
    layer's. process_group: the ranks to combine over (None: the default group). monitor_options:
    :class:`attnscale.torch.Monitor`'s (mode, backend, history, ...)."""

    def __init__(
        self,
        trainer,
        tau=None,
        alpha: float = 0.5,
        log_only: bool = False,
        per_head: bool = True,
        process_group=None,
        **monitor_options,
    ):
        from attnscale.errors import InputTypeError

        if not callable(getattr(trainer, "log", None)):
            raise InputTypeError(f"trainer: expected a transformers.Trainer, got {type(trainer).__name__}")
        self.trainer = trainer
        self.watch = Watch(tau, alpha, log_only, per_head, process_group, **monitor_options)

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        self.watch.start(model)

    def on_step_begin(self, args, state, control, **kwargs):
        self.watch.discard()

    def on_step_end(self, args, state, control, **kwargs):
        # DefaultFlowCallback, first in the list, has just decided whether this step logs.
        self.watch.end_step(state.global_step, combine=control.should_log)
        if control.should_log:
            self.trainer.log(self.watch.log_keys())

    def on_train_end(self, args, state, control, **kwargs):
        self.watch.stop()
