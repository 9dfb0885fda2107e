"""Every scale rule of :mod:`attnscale.scales` on torch tensors, and the one attention call a trained
model makes with it.

The rule objects are the core's: their names, formulas, citations and parameters are reused
unchanged; this module only computes the same logits with torch tensors so that they can be trained.
A rule turns q: (B, H, L, d_k) and k: (B, H, S, d_k) into logits as the core does::

    logits = cap(factor(d_k, n) · normalize(q) · normalize(k)ᵀ)     # n: attended keys of each row

:class:`ScaledLogits` is a module (QK-norm's gain is a learnable scalar, initialised at the rule's
gain, as Henry et al. 2020 learn it; no other rule has a parameter) with two uses:

* ``forward(q, k, n)``: the (B, H, L, S) logits themselves, for small models that keep them.
* :meth:`ScaledLogits.attend`: attention through :func:`attnscale.torch.attention`. It returns the
  output (PyTorch's SDPA on the folded inputs), or with ``aux=AuxRequest(...)`` the output and each
  row's figures asked for (log-sum-exp, entropy, logit range...) from ``backend``, so that a model's figures come from its
  own attention and no L×S matrix is kept for them. Each rule takes one path:

  - constant rules (1/√d_k, 1/d_k, unscaled, a constant): the factor is the ``scale`` argument;
  - QK-norm: q and k are normalised here and the factor (learnable gain · 1/√d_k) is folded into the
    normalised queries, exact, ``scale`` 1;
  - log-n: query row i is multiplied by its factor s·ln(n_i)·base(d_k) (the core's own formula, with
    n_i the keys row i attends: i + 1 under the causal mask, S without), exact, ``scale`` 1;
  - soft-cap (not a factor of q·k): the capped logits are handed to the ``chunked`` backend as its
    additive ``bias`` with ``scale`` 0, the only input through which a backend takes arbitrary logits
    and gives their gradient. That (B, H, L, S) tensor is kept by autograd for the backward (as every
    non-fused backward keeps its logits), not for the figures, which come from the backend's pass.
"""

from __future__ import annotations

import math
import numpy as np
import torch
from torch import nn

from attnscale.errors import InputError
from attnscale.scales import QKNorm, ScaleRule, SoftCap
from attnscale.attention_aux import AuxRequest
from attnscale.torch.functional import attention
from attnscale.torch.prepare import qk_normalized

__all__ = ["ScaledLogits", "attended_keys"]


def _peel(rule: ScaleRule) -> tuple[ScaleRule, tuple[float, ...]]:
    """The rule inside any soft-caps, and the caps from the outermost in."""
    caps = []
    while isinstance(rule, SoftCap):
        caps.append(rule.cap_value)
        rule = rule.base
    return rule, tuple(caps)


def attended_keys(L: int, S: int, causal: bool) -> np.ndarray:
    """n: (L, 1), the number of keys each query row attends: i + 1 under the (top-left) causal mask,
    S without it. The core's log-n rule reads this shape."""
    return np.minimum(np.arange(1, L + 1), S)[:, None] if causal else np.full((L, 1), S)


class ScaledLogits(nn.Module):
    """Logits of one rule: ``cap(factor · normalize(q) · normalize(k)ᵀ)``, as :mod:`attnscale.scales`.

    q: (B, H, L, d_k), k: (B, H, S, d_k) -> (B, H, L, S). ``n`` (L, 1), the attended keys per row, is
    needed only by rules that depend on it (log-n; see :func:`attended_keys`).
    """

    def __init__(self, rule: ScaleRule, d_k: int):
        super().__init__()
        inner, caps = _peel(rule)
        if inner.normalizes and not isinstance(inner, QKNorm):
            raise InputError(f"rule: a normalising rule other than qknorm has no torch form here, got {rule.name!r}")
        if inner.caps:
            raise InputError(f"rule: a capping rule other than softcap has no torch form here, got {rule.name!r}")
        self.rule, self.inner, self.caps, self.d_k = rule, inner, caps, d_k
        if isinstance(inner, QKNorm):
            self.gain = nn.Parameter(torch.tensor(float(inner.gain)))

    def _normalize(self, x):
        return qk_normalized(self.inner, x) if isinstance(self.inner, QKNorm) else x

    def _factor(self, n, like):
        """The multiplier of q̂·k̂: a float, QK-norm's 0-d tensor (its gain is learned), or (L, 1)."""
        if isinstance(self.inner, QKNorm):
            return self.gain / math.sqrt(self.d_k) if self.inner.norm == "rms" else self.gain
        if not self.inner.uses_n:
            return float(self.inner.factor(self.d_k))
        if n is None:
            raise InputError(f"n: rule {self.rule.name!r} needs the number of attended keys per row, got None")
        return torch.as_tensor(self.inner.factor(self.d_k, np.asarray(n)), dtype=like.dtype, device=like.device)

    def factor(self) -> float:
        """The multiplier s of q̂·k̂ now (QK-norm's includes its learned gain); rules that depend on
        the number of keys have none."""
        if self.inner.uses_n:
            raise InputError(f"factor: rule {self.rule.name!r} has one factor per row, not one number")
        s = self._factor(None, None)
        return float(s.detach()) if isinstance(s, torch.Tensor) else float(s)  # a reading, not a graph node

    def cap(self, z):
        """The soft-caps, innermost first: cap · tanh(z / cap)."""
        for cap in reversed(self.caps):
            z = cap * torch.tanh(z / cap)
        return z

    def forward(self, q, k, n=None):
        z = self._factor(n, q) * (self._normalize(q) @ self._normalize(k).transpose(-2, -1))
        return self.cap(z)

    def attend(self, q, k, v, *, causal: bool = True, backend: str = "chunked", aux: AuxRequest | None = None):
        """Attention with this rule through :func:`attnscale.torch.attention` (the path each rule
        takes is in the module docstring). q: (B, H, L, d_k), k: (B, H, S, d_k), v: (B, H, S, d_v);
        ``causal`` needs L == S. Returns the output (B, H, L, d_v), from plain
        ``scaled_dot_product_attention`` on the same folded inputs (the peer a benchmark compares
        with); with ``aux``, an :class:`~attnscale.AuxRequest`: ``(out, figures)`` on ``backend``,
        figures the :class:`~attnscale.AuxOutput` it asks for (per row, (B, H, L)); the figures are
        diagnostics, not to be differentiated. NaN or inf inputs are not refused: they come out as NaN (a diverged run)."""
        n = attended_keys(q.shape[-2], k.shape[-2], causal) if self.inner.uses_n else None
        factor = self._factor(n, q)
        qn, kn = self._normalize(q), self._normalize(k)
        backend = backend if aux is not None else "auto"  # "auto" without figures: PyTorch's SDPA
        bias = None
        if self.caps:  # the capped logits as the chunked backend's bias, scale 0
            bias, factor = self.cap(factor * (qn @ kn.transpose(-2, -1))), 0.0
            backend = "chunked" if aux is not None else "auto"
        elif not isinstance(factor, float):  # log-n: each row's factor folded into its query
            qn, factor = factor * qn, 1.0
        return attention(
            qn, kn, v, scale=factor, bias=bias, causal=causal, backend=backend, aux=aux, check_finite=False
        )
