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

The keys logged (each a number; a figure that does not exist in a step — no row counted — is left
out rather than logged as NaN). ``<layer>`` is the attention module's path in the model
(``model.layers.0.self_attn``), ``<h>`` the head index:

==========================================  =================================================================
``attn/<layer>/entropy_mean``               mean row entropy over the layer's heads and rows (nats)
``attn/<layer>/entropy_min``                smallest row entropy of the layer (nats)
``attn/<layer>/max_logit``                  largest attended logit of the layer (what QK-clip bounds)
``attn/<layer>/max_abs_logit``              largest |logit| of the layer
``attn/<layer>/saturated_fraction``         share of rows whose largest weight exceeds SATURATED_WEIGHT
``attn/<layer>/float16_overflow_rows``      rows with a |logit| > 65504 (they overflow in float16)
``attn/<layer>/first_key_weight``           mean weight on the first key over the layer's heads and rows
                                            (attention sinks)
``attn/<layer>/q_norm_mean``                mean ‖q‖ of the query rows (L2, as given to attention, before
                                            any scale), over the layer's heads and rows
``attn/<layer>/k_norm_mean``                mean ‖k‖ of the keys (each head's: its KV head's), row-weighted
                                            over the layer's heads
``attn/<layer>/sink_heads_share``           share of the layer's heads (with rows) whose mean weight on the
                                            first key is ≥ SINK_WEIGHT = 0.3 (Gu et al., ICLR 2025)
``attn/<layer>/head<h>/<figure>``           the same nine figures for one head, all but sink_heads_share
                                            (``per_head=True``)
``attn/calls``                              attention calls seen in the step (all ranks)
``attn/clipped_heads``                      heads QK-clip rescaled in the step (would have, ``log_only``);
                                            only with ``tau``
``attn/fallbacks/<reason>``                 replace-mode calls that ran on the model's own attention
==========================================  =================================================================

A row that attends a single key (a causal model's first query) is in none of the means: its one
key is the first, weight 1 whatever the model learnt. Means are row-weighted over the heads; each
combines exactly over the ranks (sums and counts are gathered, not means).
"""
