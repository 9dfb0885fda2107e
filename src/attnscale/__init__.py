"""attnscale: see, measure and trust what the 1/√d_k in softmax(Q·Kᵀ/√d_k)·V does.

The public surface, declared in one place. Heavy optional parts live in subpackages that import
their dependencies when used: ``attnscale.torch`` (PyTorch), the experiments and the report.
"""

__version__ = "0.1.0"

from attnscale.attention_aux import AuxOutput, AuxRequest
from attnscale.functional import AttentionGrads, attention, attention_backward
from attnscale.errors import AttnScaleError, InputError, InputTypeError, MissingDependency
from attnscale.masks import causal_mask
from attnscale.scales import (
    RULES,
    Constant,
    InverseDk,
    InverseSqrtDk,
    LogN,
    QKNorm,
    ScaleRule,
    SoftCap,
    Unscaled,
    resolve_scale,
)
from attnscale.softmax_rows import RowHealth, jacobian_norms, logsumexp, row_health, softmax, softmax_jacobian

__all__ = [
    "__version__",
    "attention",
    "attention_backward",
    "AuxRequest",
    "AuxOutput",
    "AttentionGrads",
    "causal_mask",
    "ScaleRule",
    "InverseSqrtDk",
    "InverseDk",
    "Unscaled",
    "Constant",
    "LogN",
    "QKNorm",
    "SoftCap",
    "RULES",
    "resolve_scale",
    "softmax",
    "logsumexp",
    "row_health",
    "RowHealth",
    "softmax_jacobian",
    "jacobian_norms",
    "AttnScaleError",
    "InputError",
    "InputTypeError",
    "MissingDependency",
]
