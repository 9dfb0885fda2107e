"""Attention health in Hugging Face's ``Trainer``: the figures of each logging step added to the
Trainer's own log entry of that step (loss, grad_norm, learning_rate ... kept as they are), so
``report_to`` sends them wherever the user set (keys: :mod:`attnscale.integrations`)::

    trainer = Trainer(model=model, args=TrainingArguments(..., logging_steps=10), train_dataset=data,
                      callbacks=[AttentionHealthCallback(tau=100.0, mode="replace")])
    trainer.train()          # log_history: {"loss": ..., "attn/model.layers.0.self_attn/entropy_mean": ...}

``trainer.add_callback(AttentionHealthCallback(...))`` after construction works the same.

How the figures reach the reporters: the Trainer builds the step's ``logs`` dict, appends a copy to
``state.log_history`` and hands the dict to each callback's ``on_log`` in the handler's order:
DefaultFlowCallback, the ``report_to`` integrations, then the user's callbacks. A second
``Trainer.log()`` would end the step's logging (``on_log`` clears ``control.should_log``, and the
Trainer then skips its own entry), and a user callback's ``on_log`` runs after the reporters. So
the callback moves itself right after DefaultFlowCallback when training begins, adds the figures to
``logs`` in its ``on_log`` (every reporter after it sends them with the Trainer's keys) and to that
``log_history`` entry.

Needs ``pip install 'attnscale[transformers]'``.
"""

from __future__ import annotations

import sys
import warnings

from attnscale.errors import InputTypeError, require
from attnscale.integrations._watch import Watch, stopping_words

_transformers = require("transformers", "transformers")

__all__ = ["AttentionHealthCallback"]


def _calling_handler(callback):
    """The CallbackHandler whose event is running ``callback``'s hook now, found in the caller's frames
    (the Trainer hands a callback no reference to its handler), or None."""
    frame = sys._getframe(1)
    for _ in range(8):  # call_event is the hook's caller; a few frames leave room for wrappers
        if frame is None:
            return None
        owner = frame.f_locals.get("self")
        if isinstance(owner, _transformers.trainer_callback.CallbackHandler) and any(
            cb is callback for cb in owner.callbacks
        ):
            return owner
        frame = frame.f_back
    return None


def _ahead_of_reporters(callbacks: list, callback) -> list:
    """``callbacks`` with ``callback`` moved right after the last DefaultFlowCallback (which decides
    whether a step logs, so it must run first), ahead of every reporter; the rest keep their order."""
    others = [cb for cb in callbacks if cb is not callback]
    flows = [i for i, cb in enumerate(others) if isinstance(cb, _transformers.DefaultFlowCallback)]
    at = flows[-1] + 1 if flows else 0
    return [*others[:at], callback, *others[at:]]


class AttentionHealthCallback(_transformers.TrainerCallback):
    """Monitor the attention of the Trainer's model over ``trainer.train()``; the model comes from the
    hooks' arguments, as with Hugging Face's own callbacks.

    tau: QK-clip threshold after each optimiser step (None: none); alpha, log_only: as
    :class:`attnscale.torch.guard.LogitGuard`. per_head: log each head's figures besides each
    layer's. process_group: the ranks to combine over (None: the default group). alerts: the
    early-warning detector (True, a :class:`~attnscale.early_warning.DetectorConfig` or a
    :class:`~attnscale.early_warning.Detector`), judging every optimiser step; ``attn/alerts`` counts its
    alerts and :attr:`alerts` holds them. stop_on_alert: set ``control.should_training_stop`` at the
    first step with an alert, and log that step (with a warning that says the alert in one sentence). monitor_options:
    :class:`attnscale.torch.Monitor`'s (mode, backend, history, ...).

    The figures are those of the optimiser step the Trainer logs (its ``logging_steps``,
    ``logging_first_step``, or ``logging_strategy="epoch"``), as DefaultFlowCallback decides; they are
    combined over the ranks on those steps only (and on every step with ``tau``, to clip)."""

    def __init__(
        self,
        *args,
        tau=None,
        alpha: float = 0.5,
        log_only: bool = False,
        per_head: bool = True,
        process_group=None,
        alerts=None,
        stop_on_alert: bool = False,
        **monitor_options,
    ):
        if args:
            # The first version took the Trainer first, only to call its log(): refused with the fix
            # rather than accepted and ignored, so that the call sites say what the callback needs.
            raise InputTypeError(
                f"AttentionHealthCallback takes options by name and no trainer (got a {type(args[0]).__name__}; "
                "the Trainer hands it the model): pass AttentionHealthCallback(tau=...) in "
                "Trainer(callbacks=[...]) or to trainer.add_callback"
            )
        self.watch = Watch(
            tau, alpha, log_only, per_head, process_group, alerts=alerts, stop_on_alert=stop_on_alert, **monitor_options
        )
        self._figures: tuple[int, dict] | None = None  # (step, keys) waiting for that step's log
        self._logged = -1  # the last step whose figures were logged

    def _go_first(self) -> bool:
        handler = _calling_handler(self)
        if handler is not None:  # a new list: the handler is iterating the one it has
            handler.callbacks = _ahead_of_reporters(handler.callbacks, self)
        return handler is not None

    def on_init_end(self, args, state, control, **kwargs):
        self._go_first()  # Trainer(callbacks=[...]): the order is right from construction on

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        if not self._go_first():
            warnings.warn(
                "AttentionHealthCallback: the Trainer's callback handler was not found, so the reporting "
                "callbacks listed before this one will not send the attn/ figures (log_history has them)",
                stacklevel=2,
            )
        self.watch.start(model)
        self._figures, self._logged = None, -1

    def on_step_begin(self, args, state, control, **kwargs):
        self.watch.discard()
        self._figures = None

    def on_step_end(self, args, state, control, **kwargs):
        # DefaultFlowCallback, just before this one, has decided whether this step logs.
        self.watch.end_step(state.global_step, combine=control.should_log)
        if self.watch.should_stop:
            # The stopping step logs (the Trainer's loss and the figures, attn/alerts among them) even
            # between logging steps: the run's last entry says why it ended.
            control.should_training_stop = control.should_log = True
            warnings.warn(stopping_words(self.watch.new_alerts), stacklevel=2)
        if control.should_log:
            self._figures = (state.global_step, self.watch.log_keys())

    def on_epoch_end(self, args, state, control, **kwargs):
        # logging_strategy="epoch": the Trainer logs after this hook, for the last step (every rank).
        self._figures = None
        if control.should_log and self._logged != state.global_step and self.watch.last is not None:
            self.watch.combine()
            self._figures = (state.global_step, self.watch.log_keys())

    def on_log(self, args, state, control, logs=None, **kwargs):
        if self._figures is None or self._figures[0] != state.global_step or logs is None:
            return
        figures, self._figures, self._logged = self._figures[1], None, state.global_step
        entry = state.log_history[-1] if state.log_history else {}
        # Trainer.log appended {**logs, "step": ...} just before calling on_log: the same values.
        if entry.get("step") == state.global_step and all(entry.get(k) is v for k, v in logs.items()):
            entry.update(figures)
        logs.update(figures)

    def on_train_end(self, args, state, control, **kwargs):
        self.watch.stop()

    @property
    def alerts(self) -> list:
        """The run's early-warning alerts so far (:class:`~attnscale.early_warning.Alert`), in order."""
        return self.watch.alerts
