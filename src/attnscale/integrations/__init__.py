"""The attention monitor inside the trainers people use: callbacks that add its figures to the
trainer's own log entries (every key the trainer logs without them stays, at the same steps), so that
the logger the user chose (``report_to`` in Hugging Face's Trainer, the ``logger`` of Lightning's
Trainer: TensorBoard, W&B, MLflow, CSV ...) receives them beside the loss. Neither takes the trainer:
``Trainer(callbacks=[AttentionHealthCallback(tau=...)])``.

- :class:`attnscale.integrations.transformers.AttentionHealthCallback` (``pip install 'attnscale[transformers]'``)
- :class:`attnscale.integrations.lightning.AttentionHealthCallback` (``pip install 'attnscale[lightning]'``)

Both run one :class:`attnscale.torch.Monitor` over the training (its options pass through: ``mode``,
``backend``, ``history`` — False by default, as a training loop needs), close one monitor step per
optimiser step (the micro-batches of gradient accumulation are one step; forward passes between
steps, such as evaluation, are left out), combine the step over the ranks of a ``torch.distributed``
job on the steps they log, and on every step with ``tau``
(:func:`attnscale.torch.distributed.combine_step`, one collective, so every rank logs and clips from
the same figures), optionally apply QK-clip (:class:`attnscale.torch.guard.LogitGuard`, ``tau``,
``alpha``, ``log_only``), and log the step's figures on the trainer's logging steps (the Monitor's
``every`` is refused: it would measure other steps than those).

With ``alerts=True`` (or a :class:`~attnscale.early_warning.DetectorConfig`), an early-warning detector
(:mod:`attnscale.early_warning`) judges every optimiser step's figures, combined over the ranks, so
every rank sees the same alerts; ``attn/alerts`` counts them and ``callback.alerts`` holds them;
``stop_on_alert=True`` stops the training at the first step with one (Hugging Face:
``control.should_training_stop``; Lightning: ``trainer.should_stop``).

The keys logged are those of :mod:`attnscale.torch.keys`, the one key scheme that the trainer
callbacks and :class:`~attnscale.torch.sinks.TensorBoardSink` share (``attn/<layer>/head<h>/<figure>``,
``attn/<layer>/<figure>``, ``attn/model/<figure>``, ``attn/calls`` ...), documented there once.
"""
