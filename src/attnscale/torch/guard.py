"""The logit guard: QK-clip, as MuonClip trains Kimi K2 (Kimi Team 2025, "Kimi K2: Open Agentic
Intelligence", §2.1).

After an optimiser step, every head h whose largest attention logit m_h in that step exceeded τ
has its query and key projection rows rescaled so that its logits shrink by γ_h = τ / m_h:

    W_Q[h] ← √γ_h · W_Q[h],   W_K[h] ← √γ_h · W_K[h]      (biases of those rows too)

Logits are bilinear in q and k, so on the step's own batch the head's largest logit becomes exactly
τ; the next step's update can grow it again, so the guarantee is max logit ≤ τ × (one step's
growth). Heads at or below τ are untouched. With grouped-query attention one key head serves
several query heads: it is scaled by √(min γ over its group) and each query head by γ_h / that,
so every head still shrinks by exactly its own γ_h. Rotary embeddings rotate q and k linearly, so
they commute with the rescaling. An additive attention bias (ALiBi) is not scaled: its part of the
logit is left as it was.

The figures come from :meth:`attnscale.torch.monitor.Monitor.step` (per-head ``max_logit`` of the
step's calls), so the guard adds no forward work::

    guard = LogitGuard(model, tau=100.0)
    with Monitor(model, mode="replace", history=False) as mon:
        for batch in batches:
            loss(model(batch)).backward(); opt.step(); opt.zero_grad()
            guard.apply(mon.step(step))

Supported attention modules (found by their children; a head's rows are rows h·d … (h+1)·d − 1):

- attnscale's own GPT layer :class:`attnscale.experiments.gpt.CausalSelfAttention` (``w_q``, ``w_k``,
  ``d_k``), without QK-layernorm, on its SDPA path (``GPT(..., figures=False)``, which the monitor sees);
- Hugging Face Llama-style attention (``q_proj``, ``k_proj`` and ``head_dim``: Llama, Mistral,
  Qwen2, SmolLM2 ...), with grouped-query attention;
- Hugging Face BERT-style self-attention (``query``, ``key`` and ``attention_head_size``).

Refused, with the reason: a LayerNorm or RMSNorm on q or k (QK-norm: rescaling W_Q does nothing
after it), a fused QKV projection (GPT-2's ``c_attn``), or nothing found at all.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from attnscale.errors import InputError, InputTypeError, check_positive, require

__all__ = ["LogitGuard", "Clip", "find_heads"]


@dataclass(frozen=True)
class _Target:
    """One attention module's projections."""

    name: str                  # module path in the model: what the monitor calls the layer
    w_q: object                # nn.Linear, out_features = H_q · d
    w_k: object                # nn.Linear, out_features = H_kv · d
    heads_q: int
    heads_kv: int
    head_dim: int


@dataclass(frozen=True)
class Clip:
    """One head the guard rescaled."""

    layer: str
    head: int
    max_logit: float           # what the step measured
    factor: float              # γ = τ / max_logit: the head's logits were multiplied by it


def _linear(torch, module, attr):
    x = getattr(module, attr, None)
    return x if isinstance(x, torch.nn.Linear) else None


def _qk_norm(module) -> bool:
    return any(getattr(module, a, None) is not None for a in ("q_norm", "k_norm", "q_layernorm", "k_layernorm"))


def _target(torch, name: str, module) -> _Target | str | None:
    """The module's projections, a reason it is refused, or None when it is no attention module."""
    for q_attr, k_attr, dim_of in (("w_q", "w_k", lambda m: getattr(m, "d_k", None)),
                                   ("q_proj", "k_proj", lambda m: getattr(m, "head_dim", None)),
                                   ("query", "key", lambda m: getattr(m, "attention_head_size", None))):
        w_q, w_k = _linear(torch, module, q_attr), _linear(torch, module, k_attr)
        d = dim_of(module)
        if w_q is None or w_k is None or not isinstance(d, int) or d < 1:
            continue
        if _qk_norm(module):
            return f"{name}: q and k are normalised after the projections (QK-norm); rescaling W_Q, W_K does nothing"
        if w_q.out_features % d or w_k.out_features % d or (w_q.out_features // d) % (w_k.out_features // d):
            return (f"{name}: projection sizes {w_q.out_features}, {w_k.out_features} are not whole heads of "
                    f"size {d} with key heads dividing query heads")
        return _Target(name, w_q, w_k, w_q.out_features // d, w_k.out_features // d, d)
    if hasattr(module, "c_attn") and hasattr(module, "c_proj"):
        return f"{name}: a fused QKV projection (c_attn) is not supported"
    return None


def find_heads(model) -> tuple[dict, list[str]]:
    """({module path: _Target}, [reasons for refused attention modules]) for every module of ``model``."""
    torch = require("torch", "torch")
    found, refused = {}, []
    for name, module in model.named_modules():
        t = _target(torch, name or type(module).__name__, module)
        if isinstance(t, _Target):
            found[t.name] = t
        elif isinstance(t, str):
            refused.append(t)
    return found, refused


class LogitGuard:
    """QK-clip at threshold ``tau`` on every supported attention module of ``model``.

    Layer names are module paths in ``model``, as :class:`attnscale.torch.Monitor` names them when
    given the same model. Raises :class:`InputError` when no module can be guarded, naming why.
    """

    def __init__(self, model, tau: float):
        torch = require("torch", "torch")
        if not isinstance(model, torch.nn.Module):
            raise InputTypeError(f"model: expected a torch.nn.Module, got {type(model).__name__}")
        self.tau = check_positive("tau", tau)
        self.targets, self.refused = find_heads(model)
        if not self.targets:
            why = "; ".join(self.refused) or "no module has w_q/w_k, q_proj/k_proj or query/key projections"
            raise InputError(f"model: no attention projections the logit guard can rescale ({why})")
        self.clips = 0             # heads rescaled so far, over all steps
        self.overflowed = 0        # heads left alone because their max logit was +inf (no factor exists)

    def apply(self, step) -> list[Clip]:
        """Rescale every head of ``step`` (a :class:`attnscale.torch.monitor.Step`) whose max logit
        exceeded τ; returns what was done. Layers the guard does not know (another model's, or a
        refused module's) raise, so a mis-wired monitor is not mistaken for a calm one."""
        torch = require("torch", "torch")
        by_layer: dict[str, dict[int, float]] = {}
        for h in step.heads:
            if h.layer not in self.targets:
                raise InputError(f"step: layer {h.layer!r} is not one the guard can rescale "
                                 f"(it knows {sorted(self.targets)}); give monitor and guard the same model")
            if math.isfinite(h.max_logit) and h.max_logit > self.tau:
                by_layer.setdefault(h.layer, {})[h.head] = h.max_logit
            elif h.max_logit == math.inf:
                self.overflowed += 1
        done = []
        with torch.no_grad():
            for layer, peaks in by_layer.items():
                done += self._clip(self.targets[layer], peaks)
        self.clips += len(done)
        return done

    def _clip(self, t: _Target, peaks: dict[int, float]) -> list[Clip]:
        gamma = [min(1.0, self.tau / peaks[h]) if h in peaks else 1.0 for h in range(t.heads_q)]
        group = t.heads_q // t.heads_kv
        d = t.head_dim
        for g in range(t.heads_kv):
            key_scale = math.sqrt(min(gamma[g * group:(g + 1) * group]))
            _scale_rows(t.w_k, g * d, (g + 1) * d, key_scale)
            for h in range(g * group, (g + 1) * group):
                _scale_rows(t.w_q, h * d, (h + 1) * d, gamma[h] / key_scale)
        return [Clip(t.name, h, peaks[h], gamma[h]) for h in sorted(peaks)]


def _scale_rows(linear, r0: int, r1: int, factor: float) -> None:
    if factor == 1.0:
        return
    linear.weight[r0:r1].mul_(factor)
    if linear.bias is not None:
        linear.bias[r0:r1].mul_(factor)
