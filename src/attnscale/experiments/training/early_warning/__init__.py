"""Experiment ``early-warning``: how early do the attention figures warn that a run is going wrong,
against the loss-spike detectors that trainers ship?

Runs built to diverge and runs built to stay healthy, several seeds each, of the logit-growth proxy
(a 2-layer character GPT, width 64, 4 heads, context 64, fan-in initialisation, an untied head; see
:mod:`attnscale.experiments.training.logit_growth`) on the grammar corpus, trained with AdamW
(β₁ 0.9, β₂ 0.95, no weight decay, no gradient clipping) while the learning rate rises linearly from
0 to the arm's peak over the run (an LR range test: each run meets the rate where it breaks at its
own step). The arms (:data:`ARMS`): ``plain`` (1/√d_k, peak 0.3) and ``unscaled`` (no 1/√d_k, peak
0.15), built to diverge; ``qk_layernorm`` (QK-layernorm, peak 0.3) and ``low_lr`` (plain, peak 0.03),
built to stay healthy. Whether a run diverged is judged from its loss alone
(:func:`.rules.divergence_step`), whatever its arm was built for.

Every step records the training loss, the gradient norm and the monitor's per-head figures
(:class:`attnscale.torch.monitor.Monitor` in replace mode), reduced per layer to the head nearest
each alarm (:data:`.train.LAYER_FIGURES`), plus the alerts of the per-head attention detector
(:class:`attnscale.early_warning.Detector`, its defaults) as it ran. The analysis replays the
detectors on the recorded series, so changing a detector's settings needs no retraining: the
attention detector (:mod:`attnscale.early_warning`), OLMo-core's ``StabilityMonitorCallback`` and
Lightning's ``SpikeDetection`` (each rule's exact definition: :mod:`.rules`).

The package, by job: :mod:`.config` (arms, one run, the sweep), :mod:`.rules` (divergence, the peer
detectors, the lead time), :mod:`.train` (one run) and :mod:`.analysis` (lead times, false alarms,
the settings the measurement supports).
"""

from attnscale.experiments.training.early_warning.analysis import analyse
from attnscale.experiments.training.early_warning.config import ARMS, KIND, Arm, EarlyWarningConfig, WarnCell, WarnRun
from attnscale.experiments.training.early_warning.train import MONITOR_MODE, train_cell

__all__ = ["ARMS", "KIND", "Arm", "EarlyWarningConfig", "WarnCell", "WarnRun", "MONITOR_MODE", "train_cell", "analyse"]
