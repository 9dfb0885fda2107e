"""attnscale on PyTorch: fast attention with per-row health figures, and capture/monitoring of the
scaled-dot-product attention calls a model makes.

Needs torch (``pip install 'attnscale[torch]'``). The modules here import torch inside their
functions, so ``import attnscale.torch`` is cheap and works without it; calling them without torch
raises :class:`attnscale.MissingDependency` naming that command.
"""

from attnscale.torch.functional import FLOAT16_MAX, AttentionStats, attention
from attnscale.torch.capture import SDPACall, capture_sdpa
from attnscale.torch.ext import kernel_status
from attnscale.torch.monitor import Monitor

__all__ = ["attention", "AttentionStats", "FLOAT16_MAX", "kernel_status", "Monitor", "capture_sdpa", "SDPACall"]
