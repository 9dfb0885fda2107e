"""attnscale on PyTorch: fast attention with per-row health figures, and capture/monitoring of the
scaled-dot-product attention calls a model makes.

Needs torch (``pip install 'attnscale[torch]'``): the modules here import it at the top, and
``import attnscale.torch`` without it raises :class:`attnscale.MissingDependency` naming that
command (``import attnscale``, the NumPy core, never imports torch).
"""

from attnscale.errors import require

require("torch", "torch")  # before any module here imports it: the install command, not a bare ImportError

from attnscale.attention_aux import AuxOutput, AuxRequest  # noqa: E402
from attnscale.torch.functional import FLOAT16_MAX, attention  # noqa: E402
from attnscale.torch.capture import SDPACall, capture_sdpa  # noqa: E402
from attnscale.torch.ext import kernel_status  # noqa: E402
from attnscale.torch.monitor import Monitor  # noqa: E402

__all__ = [
    "attention",
    "AuxRequest",
    "AuxOutput",
    "FLOAT16_MAX",
    "kernel_status",
    "Monitor",
    "capture_sdpa",
    "SDPACall",
]
