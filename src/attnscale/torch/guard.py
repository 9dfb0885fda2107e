"""The logit guard: QK-clip, as MuonClip trains Kimi K2 (Kimi Team 2025, "Kimi K2: Open Agentic
Intelligence", §2.1).

After an optimiser step, every head h whose largest attention logit m_h in that step exceeded τ
has its query and key projection rows rescaled so that its logits shrink by γ_h = τ / m_h:

    W_Q[h] ← γ_h^α · W_Q[h],   W_K[h] ← γ_h^(1−α) · W_K[h]      (biases of those rows too)

with the split exponent α (``alpha``, 0.5 by default, as Kimi K2 and Megatron-Core's
``--qk-clip-alpha``). Logits are bilinear in q and k, so on the step's own batch the head's largest
logit becomes exactly τ whatever α; the next step's update can grow it again, so the guarantee is
max logit ≤ τ × (one step's growth). Heads at or below τ are untouched. With grouped-query
attention one key head serves several query heads: it is scaled by (min γ over its group)^(1−α)
and each query head by γ_h / that, so every head still shrinks by exactly its own γ_h. Rotary
embeddings rotate q and k linearly, so they commute with the rescaling. An additive attention bias
(ALiBi) is not scaled: its part of the logit is left as it was.

``log_only=True`` changes no weight: :meth:`LogitGuard.apply` returns the heads it would clip,
with their factors (to watch a run before trusting it with the clip).

The figures come from :meth:`attnscale.torch.monitor.Monitor.step` (per-head ``max_logit`` of the
step's calls), so the guard adds no forward work::

    guard = LogitGuard(model, tau=100.0)
    with Monitor(model, mode="replace", history=False) as mon:
        for batch in batches:
            loss(model(batch)).backward(); opt.step(); opt.zero_grad()
            guard.apply(mon.step(step))

In a ``torch.distributed`` job, give it the step combined over the ranks
(:func:`attnscale.torch.distributed.combine_step`): every rank then holds the same figures, bit for
bit, and clips the same heads by the same factors, so replicated weights stay identical.

Supported attention modules (found by their children; a head's rows are rows h·d … (h+1)·d − 1 of
the query or key part):

- attnscale's own GPT layer :class:`attnscale.experiments.training.gpt.CausalSelfAttention` (``w_q``, ``w_k``,
  ``d_k``), without QK-layernorm, on its SDPA path (``GPT(..., figures=False)``, which the monitor sees);
- Hugging Face Llama-style attention (``q_proj``, ``k_proj`` and ``head_dim``: Llama, Mistral,
  Qwen2, SmolLM2 ...), with grouped-query attention;
- Hugging Face BERT-style self-attention (``query``, ``key`` and ``attention_head_size``);
- a fused QKV projection whose output is [q | k | v]: ``qkv_proj`` (Phi-3, with ``head_dim`` and
  ``num_key_value_heads``), ``c_attn`` (GPT-2's Conv1D, nanoGPT's nn.Linear) or ``qkv`` (nanoGPT-
  and timm-style), with the head count in ``num_heads``, ``n_head`` or ``n_heads`` (or ``head_dim``).

Refused, with the reason: a LayerNorm or RMSNorm on q or k (QK-norm: rescaling W_Q does nothing
after it), projections without the head size or count they need (the attribute is named),
GPT-2's cross-attention (q in ``q_attn``), or nothing found at all.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from attnscale.errors import InputError, InputTypeError, check_positive, require

__all__ = ["LogitGuard", "Clip", "find_heads", "check_options"]


# Where a fused projection keeps its head count and its key/value head count, first found wins.
_HEAD_COUNTS = ("num_heads", "n_head", "n_heads", "num_attention_heads")
_KV_HEAD_COUNTS = ("num_key_value_heads", "n_kv_head", "n_kv_heads", "num_kv_heads")
_FUSED = ("qkv_proj", "c_attn", "qkv")
_SEPARATE = (("w_q", "w_k", "d_k"), ("q_proj", "k_proj", "head_dim"), ("query", "key", "attention_head_size"))


@dataclass(frozen=True)
class _Rows:
    """Output features offset … of one projection: rows of an nn.Linear's weight (out, in), or
    columns of GPT-2's Conv1D, whose weight is (in, out)."""

    module: Any  # the nn.Linear or Conv1D (torch is optional: no annotation can name them)
    offset: int
    transposed: bool

    def scale_heads(self, factors: list[float], head_dim: int) -> None:
        """Multiply the output features of head i (head_dim of them, from the offset on) by
        ``factors[i]``: one product of the whole weight (and bias) with a vector of per-feature
        factors, 1 outside these heads. Whole tensors, not slices: an in-place product on a slice
        of an FSDP-sharded parameter (a DTensor) would not reach its shards; a factor of 1 leaves an
        entry's bits as they are, so the heads not clipped are untouched."""
        if all(f == 1.0 for f in factors):
            return
        import torch

        weight = self.module.weight
        out = weight.shape[1 if self.transposed else 0]
        # The factors in the precision a Python float scalar would be applied in (float64 for float64).
        dtype = torch.float64 if weight.dtype == torch.float64 else torch.float32
        vector = torch.ones(out, dtype=dtype, device=weight.device)
        vector[self.offset : self.offset + len(factors) * head_dim] = torch.tensor(
            factors, dtype=dtype
        ).repeat_interleave(head_dim)
        shaped = vector if self.transposed else vector[:, None]  # along the output features
        weight.mul_(_like_parameter(shaped, weight))
        if self.module.bias is not None:
            self.module.bias.mul_(_like_parameter(vector, self.module.bias))


def _like_parameter(vector, parameter):
    """``vector`` as ``parameter`` holds its values: a plain tensor, or for a DTensor (FSDP2's
    sharded parameters) the same vector replicated on its device mesh, so that the product with a
    sharded parameter multiplies each shard by its part. No communication: every rank computes the
    same vector from the same combined figures."""
    from torch.distributed.tensor import DTensor, Replicate

    if not isinstance(parameter, DTensor):
        return vector
    mesh = parameter.device_mesh
    return DTensor.from_local(vector, mesh, [Replicate()] * mesh.ndim, run_check=False)


@dataclass(frozen=True)
class _Target:
    """One attention module's query and key rows."""

    name: str  # module path in the model: what the monitor calls the layer
    w_q: _Rows  # H_q · d output features
    w_k: _Rows  # H_kv · d output features
    heads_q: int
    heads_kv: int
    head_dim: int


@dataclass(frozen=True)
class Clip:
    """One head the guard rescaled (or, log-only, would have)."""

    layer: str
    head: int
    max_logit: float  # what the step measured
    factor: float  # γ = τ / max_logit: the head's logits were multiplied by it


def _projection(torch, module, attr):
    """(the layer, its output features, transposed) for an nn.Linear or GPT-2's Conv1D at ``attr``, else None."""
    x = getattr(module, attr, None)
    if isinstance(x, torch.nn.Linear):
        return x, x.out_features, False
    nf = getattr(x, "nf", None)
    if type(x).__name__ == "Conv1D" and isinstance(nf, int):  # transformers.pytorch_utils
        return x, nf, True
    return None


def _count(module, attrs) -> int | None:
    config = getattr(module, "config", None)
    for owner in (module, config):
        for a in attrs:
            n = getattr(owner, a, None)
            if isinstance(n, int) and not isinstance(n, bool) and n >= 1:
                return n
    return None


def _qk_norm(module) -> bool:
    return any(getattr(module, a, None) is not None for a in ("q_norm", "k_norm", "q_layernorm", "k_layernorm"))


def _whole_heads(name, q_out, k_out, d) -> str | None:
    if q_out % d or k_out % d or (q_out // d) % (k_out // d):
        return (
            f"{name}: projection sizes {q_out}, {k_out} are not whole heads of size {d} with key heads "
            "dividing query heads"
        )
    return None


def _separate(torch, name, module, q_attr, k_attr, dim_attr) -> _Target | str | None:
    q, k = _projection(torch, module, q_attr), _projection(torch, module, k_attr)
    if q is None or k is None:
        return None
    d = getattr(module, dim_attr, None)
    if not isinstance(d, int) or isinstance(d, bool) or d < 1:
        return (
            f"{name}: has {q_attr} and {k_attr} but no head size in an int attribute {dim_attr} (got {dim_attr}={d!r})"
        )
    return _whole_heads(name, q[1], k[1], d) or _Target(
        name, _Rows(q[0], 0, q[2]), _Rows(k[0], 0, k[2]), q[1] // d, k[1] // d, d
    )


def _fused(torch, name, module, attr) -> _Target | str | None:
    """A [q | k | v] projection: its sizes from the head size and counts the module holds."""
    found = _projection(torch, module, attr)
    if found is None:
        return None
    layer, out, transposed = found
    if getattr(module, "is_cross_attention", False):
        return f"{name}: cross-attention (q in q_attn, k and v in {attr}) is not supported"
    d, h_q, h_kv = (_count(module, ("head_dim",)), _count(module, _HEAD_COUNTS), _count(module, _KV_HEAD_COUNTS))
    if h_q is None:
        if d is None:
            return (
                f"{name}: a fused QKV projection {attr} without its head count: expected an int attribute "
                f"{', '.join(_HEAD_COUNTS)} or head_dim"
            )
        h_q = out // d - 2 * h_kv if h_kv else out // (3 * d)
    h_kv = h_kv or h_q
    if d is None:
        d = out // (h_q + 2 * h_kv)
    if h_q < 1 or out != (h_q + 2 * h_kv) * d:
        return f"{name}: {attr} has {out} output features, not q, k, v of {h_q}, {h_kv}, {h_kv} heads of size {d}"
    return _whole_heads(name, h_q * d, h_kv * d, d) or _Target(
        name, _Rows(layer, 0, transposed), _Rows(layer, h_q * d, transposed), h_q, h_kv, d
    )


def _target(torch, name: str, module) -> _Target | str | None:
    """The module's projections, a reason it is refused, or None when it is no attention module."""
    for found in [
        *(_separate(torch, name, module, *attrs) for attrs in _SEPARATE),
        *(_fused(torch, name, module, attr) for attr in _FUSED),
    ]:
        if found is None:
            continue
        if isinstance(found, _Target) and _qk_norm(module):
            return f"{name}: q and k are normalised after the projections (QK-norm); rescaling W_Q, W_K does nothing"
        return found
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


def check_options(alpha, log_only) -> tuple[float, bool]:
    """(alpha, log_only) of :class:`LogitGuard` checked, or the error naming the one that is wrong."""
    import numbers

    if isinstance(alpha, bool) or not isinstance(alpha, numbers.Real) or not 0 <= float(alpha) <= 1:
        raise InputError(f"alpha: expected a number in [0, 1] (the share of the clip on q), got {alpha!r}")
    if not isinstance(log_only, bool):
        raise InputTypeError(f"log_only: expected True or False, got {log_only!r}")
    return float(alpha), log_only


class LogitGuard:
    """QK-clip at threshold ``tau`` on every supported attention module of ``model``; q takes γ^α of
    each head's factor, k γ^(1−α) (``alpha`` in [0, 1]); ``log_only``: report, change nothing.

    Layer names are module paths in ``model``, as :class:`attnscale.torch.Monitor` names them when
    given the same model. Raises :class:`InputError` when no module can be guarded, naming why.
    """

    def __init__(self, model, tau: float, alpha: float = 0.5, log_only: bool = False):
        torch = require("torch", "torch")
        if not isinstance(model, torch.nn.Module):
            raise InputTypeError(f"model: expected a torch.nn.Module, got {type(model).__name__}")
        self.tau = check_positive("tau", tau)
        self.alpha, self.log_only = check_options(alpha, log_only)
        self.targets, self.refused = find_heads(model)
        if not self.targets:
            why = "; ".join(self.refused) or (
                "no module has w_q/w_k, q_proj/k_proj or query/key projections, or a fused qkv_proj, c_attn or qkv"
            )
            raise InputError(f"model: no attention projections the logit guard can rescale ({why})")
        self.clips = 0  # heads rescaled so far (log_only: that would have been), over all steps
        self.overflowed = 0  # heads left alone because their max logit was +inf (no factor exists)

    def apply(self, step) -> list[Clip]:
        """Rescale every head of ``step`` (a :class:`attnscale.torch.monitor.Step`) whose max logit
        exceeded τ (``log_only``: none); returns the heads clipped (or that would be). Layers the guard
        does not know (another model's, or a refused module's) raise, so a mis-wired monitor is not
        mistaken for a calm one."""
        torch = require("torch", "torch")
        by_layer: dict[str, dict[int, float]] = {}
        for h in step.heads:
            if h.layer not in self.targets:
                raise InputError(
                    f"step: layer {h.layer!r} is not one the guard can rescale "
                    f"(it knows {sorted(self.targets)}); give monitor and guard the same model"
                )
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
        clips = [Clip(t.name, h, peaks[h], gamma[h]) for h in sorted(peaks)]
        if self.log_only:
            return clips
        group = t.heads_q // t.heads_kv
        key_scales = [min(gamma[g * group : (g + 1) * group]) ** (1.0 - self.alpha) for g in range(t.heads_kv)]
        t.w_k.scale_heads(key_scales, t.head_dim)
        t.w_q.scale_heads([gamma[h] / key_scales[h // group] for h in range(t.heads_q)], t.head_dim)
        return clips
