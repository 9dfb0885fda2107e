"""Scale rules: what multiplies q·k before the softmax.

Convention, everywhere in attnscale (as FlashAttention's ``softmax_scale``): a scale *multiplies* the
logits, ``scale=None`` means the default 1/√d_k, and a scale of 0.0 is a legal, deliberate choice
(uniform attention) that is never replaced by the default.

A rule turns queries q: (..., L, d_k) and keys k: (..., S, d_k) into logits in three steps::

    q̂, k̂  = rule.normalize(q), rule.normalize(k)      # identity except QK-norm
    z      = rule.factor(d_k, n) · q̂ k̂ᵀ                 # n: attended keys per row (log-n scaling)
    logits = rule.cap(z)                                # identity except soft-capping

Each rule carries its formula and a one-line citation. Unscaled attention is a named rule
(:class:`Unscaled`), never an accident of a falsy scale.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from attnscale.errors import InputError, InputTypeError
from attnscale.i18n import N_

__all__ = [
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
    "SSMAX_DEFAULT_S",
    "SOFTCAP_DEFAULT",
]

#: Scalable-Softmax's s: the value of Nakanishi 2025's Figure 1 (s is a learned parameter in the paper).
#: Defined here once; the claims, the closed forms and the report take it from here.
SSMAX_DEFAULT_S = 0.43
#: The soft-cap of attention logits in Gemma 2 (Gemma Team 2024).
SOFTCAP_DEFAULT = 50.0


def _finite(name: str, value, positive: bool = False) -> float:
    """A rule parameter as a float, or a clear error naming it."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise InputTypeError(f"{name}: expected a real number, got {type(value).__name__} {value!r}")
    if not math.isfinite(value) or (positive and value <= 0):
        raise InputError(f"{name}: expected a finite number{' > 0' if positive else ''}, got {value!r}")
    return float(value)


@dataclass(frozen=True)
class ScaleRule:
    """Base rule: a plain multiplier with no normalisation and no cap."""

    name: str = field(init=False, default="rule")
    formula: str = field(init=False, default="")
    citation: str = field(init=False, default="")

    def factor(self, d_k: int, n: np.ndarray | int | None = None) -> float | np.ndarray:
        """The multiplier of q̂·k̂. ``n`` (number of attended keys per row, shape (..., L, 1)) is
        only read by rules that depend on it."""
        raise NotImplementedError

    @property
    def uses_n(self) -> bool:
        """Whether :meth:`factor` depends on the number of attended keys."""
        return False

    @property
    def normalizes(self) -> bool:
        return False

    @property
    def caps(self) -> bool:
        return False

    def normalize(self, x: np.ndarray) -> np.ndarray:
        """Per-vector transform of q or k, x: (..., d_k). Identity unless QK-norm."""
        return x

    def normalize_backward(self, x: np.ndarray, dy: np.ndarray) -> np.ndarray:
        """Vector–Jacobian product of :meth:`normalize` at x."""
        return dy

    def cap(self, z: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        """Elementwise transform of the scaled logits. Identity unless soft-capping, which writes
        into ``out`` when given (``out=z`` caps in place)."""
        return z

    def cap_derivative(self, z: np.ndarray) -> np.ndarray:
        """d cap(z) / dz, elementwise."""
        return np.ones_like(z)

    def describe(self) -> dict[str, str]:
        return {"name": self.name, "formula": self.formula, "citation": self.citation}


@dataclass(frozen=True)
class InverseSqrtDk(ScaleRule):
    name: str = field(init=False, default="inverse_sqrt_dk")
    formula: str = field(init=False, default="1/√d_k")
    citation: str = field(
        init=False, default=N_("Vaswani et al. 2017, Attention Is All You Need, §3.2.1 and footnote 4")
    )

    def factor(self, d_k, n=None):
        return 1.0 / math.sqrt(d_k)


@dataclass(frozen=True)
class InverseDk(ScaleRule):
    name: str = field(init=False, default="inverse_dk")
    formula: str = field(init=False, default="1/d_k")
    citation: str = field(
        init=False, default=N_("Yang et al. 2022, Tensor Programs V (µP): attention logits scaled by 1/d_k")
    )

    def factor(self, d_k, n=None):
        return 1.0 / d_k


@dataclass(frozen=True)
class Unscaled(ScaleRule):
    name: str = field(init=False, default="unscaled")
    formula: str = field(init=False, default="1")
    citation: str = field(
        init=False, default=N_("no scaling: the case the blog post and Vaswani et al. 2017 argue against")
    )

    def factor(self, d_k, n=None):
        return 1.0


@dataclass(frozen=True)
class Constant(ScaleRule):
    """A fixed multiplier. 0.0 is legal (uniform attention over attended keys)."""

    value: float = 1.0
    name: str = field(init=False, default="constant")
    formula: str = field(init=False, default="c")
    citation: str = field(init=False, default=N_("a constant chosen by the user"))

    def __post_init__(self):
        object.__setattr__(self, "formula", f"{_finite('scale', self.value):g}")

    def factor(self, d_k, n=None):
        return float(self.value)


@dataclass(frozen=True)
class LogN(ScaleRule):
    """Scalable-Softmax: multiply the base rule's logits by s·ln(n), n = attended keys of the row,
    so that the largest weight does not fade as the context grows."""

    s: float = SSMAX_DEFAULT_S
    base: ScaleRule = field(default_factory=InverseSqrtDk)
    name: str = field(init=False, default="logn")
    formula: str = field(init=False, default="s·ln(n) × base")
    citation: str = field(init=False, default=N_("Nakanishi 2025, Scalable-Softmax Is Superior for Attention (SSMax)"))

    def __post_init__(self):
        _finite("LogN s", self.s)
        object.__setattr__(self, "formula", f"{self.s:g}·ln(n) × {self.base.formula}")

    @property
    def uses_n(self):
        return True

    def factor(self, d_k, n=None):
        if n is None:
            raise InputError("LogN.factor: n (number of attended keys per row) is required")
        # n = 0 (fully masked row) gives ln 0 = -inf; the row has no weights anyway, so use 0.
        log_n = np.log(np.maximum(n, 1))
        return self.s * log_n * self.base.factor(d_k, n)


@dataclass(frozen=True)
class QKNorm(ScaleRule):
    """Normalise each query and key vector before the dot product, then multiply by a gain.

    ``norm="rms"``: x / rms(x), then gain/√d_k (LayerNorm-style QK-norm, Dehghani et al. 2023):
    logits have variance ≈ gain² for random directions whatever the size of q and k.
    ``norm="l2"``: x / ‖x‖, then gain (Henry et al. 2020): logits = gain · cos(q, k) ∈ [-gain, gain].
    """

    gain: float = 1.0
    norm: str = "rms"
    eps: float = 1e-6  # keeps zero vectors finite, as RMSNorm/LayerNorm do
    name: str = field(init=False, default="qknorm")
    formula: str = field(init=False, default="")
    citation: str = field(
        init=False,
        default=N_(
            "Henry et al. 2020, Query-Key Normalization for Transformers; "
            "Dehghani et al. 2023, Scaling Vision Transformers to 22B Parameters"
        ),
    )

    def __post_init__(self):
        if self.norm not in ("rms", "l2"):
            raise InputError(f"QKNorm norm: expected 'rms' or 'l2', got {self.norm!r}")
        _finite("QKNorm gain", self.gain)
        if _finite("QKNorm eps", self.eps) < 0:
            raise InputError(f"QKNorm eps: expected a number >= 0, got {self.eps!r}")
        formula = (
            f"{self.gain:g}/√d_k on q/rms(q), k/rms(k)" if self.norm == "rms" else f"{self.gain:g} on q/‖q‖, k/‖k‖"
        )
        object.__setattr__(self, "formula", formula)

    @property
    def normalizes(self):
        return True

    def _radius(self, x):
        sq = np.mean(x * x, axis=-1, keepdims=True) if self.norm == "rms" else np.sum(x * x, axis=-1, keepdims=True)
        return np.sqrt(sq + self.eps)

    def normalize(self, x):
        return x / self._radius(x)

    def normalize_backward(self, x, dy):
        r = self._radius(x)
        y = x / r
        inner = (
            np.mean(dy * y, axis=-1, keepdims=True) if self.norm == "rms" else np.sum(dy * y, axis=-1, keepdims=True)
        )
        return (dy - y * inner) / r

    def factor(self, d_k, n=None):
        return self.gain / math.sqrt(d_k) if self.norm == "rms" else self.gain


@dataclass(frozen=True)
class SoftCap(ScaleRule):
    """tanh soft-capping on top of any rule: logits = cap · tanh(base_logits / cap), so |logits| < cap.
    Its name is ``softcap`` over the default 1/√d_k, else ``softcap_<base>`` (``softcap_unscaled``)."""

    cap_value: float = SOFTCAP_DEFAULT
    base: ScaleRule = field(default_factory=InverseSqrtDk)
    name: str = field(init=False, default="softcap")
    formula: str = field(init=False, default="")
    citation: str = field(init=False, default=N_("Gemma Team 2024, Gemma 2 (attention logit soft-capping at 50)"))

    def __post_init__(self):
        _finite("SoftCap cap_value", self.cap_value, positive=True)
        if self.base.name != "inverse_sqrt_dk":
            object.__setattr__(self, "name", f"softcap_{self.base.name}")
        object.__setattr__(self, "formula", f"{self.cap_value:g}·tanh(({self.base.formula})·q·k / {self.cap_value:g})")

    @property
    def uses_n(self):
        return self.base.uses_n

    @property
    def normalizes(self):
        return self.base.normalizes

    @property
    def caps(self):
        return True

    def normalize(self, x):
        return self.base.normalize(x)

    def normalize_backward(self, x, dy):
        return self.base.normalize_backward(x, dy)

    def factor(self, d_k, n=None):
        return self.base.factor(d_k, n)

    def cap(self, z, out=None):
        capped = np.divide(self.base.cap(z, out=out), self.cap_value, out=out)  # one array, then in place
        np.tanh(capped, out=capped)
        capped *= self.cap_value
        return capped

    def cap_derivative(self, z):
        inner = self.base.cap(z)
        return (1.0 - np.tanh(inner / self.cap_value) ** 2) * self.base.cap_derivative(z)


#: Named rules, by canonical name. Aliases map to these in :func:`resolve_scale`.
RULES: dict[str, ScaleRule] = {
    "inverse_sqrt_dk": InverseSqrtDk(),
    "inverse_dk": InverseDk(),
    "unscaled": Unscaled(),
    "logn": LogN(),
    "qknorm": QKNorm(),
    "softcap": SoftCap(),
    # Soft-capping without any scaling: the control that asks whether a cap alone rescues unscaled
    # attention (the training experiment's rule, the widget's option).
    "softcap_unscaled": SoftCap(base=Unscaled()),
}

_ALIASES = {
    "1/sqrt(d_k)": "inverse_sqrt_dk",
    "sqrt": "inverse_sqrt_dk",
    "default": "inverse_sqrt_dk",
    "vaswani": "inverse_sqrt_dk",
    "1/d_k": "inverse_dk",
    "mup": "inverse_dk",
    "µp": "inverse_dk",
    "1": "unscaled",
    "ssmax": "logn",
    "log-n": "logn",
    "qk-norm": "qknorm",
    "soft-cap": "softcap",
    "soft-cap-unscaled": "softcap_unscaled",
}

ScaleLike = None | float | int | str | ScaleRule


def resolve_scale(scale: ScaleLike) -> ScaleRule:
    """Turn the ``scale`` argument into a rule. ``None`` is 1/√d_k; a number is a :class:`Constant`
    (0.0 included); a string names a rule (see :data:`RULES`); a :class:`ScaleRule` is itself.

    >>> resolve_scale(None).formula
    '1/√d_k'
    >>> resolve_scale(0.0).factor(64)
    0.0
    >>> resolve_scale("mup").name
    'inverse_dk'
    """
    if scale is None:
        return RULES["inverse_sqrt_dk"]
    if isinstance(scale, ScaleRule):
        return scale
    if isinstance(scale, str):
        key = scale.strip().lower()
        key = _ALIASES.get(key, key)
        if key not in RULES:
            names = ", ".join(sorted(RULES) + sorted(_ALIASES))
            raise InputError(f"scale: unknown scale rule {scale!r}; expected one of: {names}, a number, or None")
        return RULES[key]
    if isinstance(scale, (bool, np.bool_)):
        raise InputTypeError(f"scale: expected a number, a rule name, a ScaleRule or None, got bool {scale!r}")
    if isinstance(scale, (int, float, np.integer, np.floating)):
        return Constant(float(scale))
    raise InputTypeError(f"scale: expected a number, a rule name, a ScaleRule or None, got {type(scale).__name__}")
