"""The logit guard: QK-clip, as MuonClip trains Kimi K2 (Kimi Team 2025, "Kimi K2: Open Agentic
Intelligence", §2.1).

After an optimiser step, every head h whose largest attention logit m_h in that step exceeded τ
has its query and key projection rows rescaled so that its logits shrink by γ_h = τ / m_h:

    W_Q[h] ← γ_h^α · W_Q[h],   W_K[h] ← γ_h^(1−α) · W_K[h]      (biases of those rows too)

with the split exponent α (``alpha``, 0.5 by default, as Kimi K2 and Megatron-Core's
``--qk-clip-alpha``). Heads at or below τ are untouched. What holds exactly: logits are bilinear in
q and k, so the head's logits are multiplied by γ_h exactly (to rounding), whatever α. What that
makes of the max logit depends on when the figures were taken. m_h is the forward's, before the
optimiser step; in the loop below the clip comes after ``opt.step()``, so on that step's batch a
clipped head of the first attention layer ends at τ · m'_h / m_h, where m'_h is its max logit after
the update, before the clip (τ times what the update did to it; the tests hold it to 1e-5), not at
τ; a deeper layer's inputs also move with the clips of the layers before it. Measured in the tests
(a 3-layer GPT, Adam at lr 0.01, τ = 4, a fresh batch a step): 0.50–1.07 × τ in the first layer,
0.57–1.30 × τ deeper, recomputed on the batch right after the clip. Exactly τ holds only where the
weights have not moved since the figures' forward: :meth:`LogitGuard.apply` on a step's figures
before ``opt.step()`` leaves a head of the first layer at τ on that batch (and the update then moves
it). docs/qk-clip.md says more. With grouped-query
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

Supported attention modules (found by the attributes below, on the module or its ``config``; a
head's rows are rows h·d … (h+1)·d − 1 of the query or key part; projections are ``nn.Linear`` or
GPT-2's ``Conv1D``):

- attnscale's own GPT layer :class:`attnscale.experiments.training.gpt.CausalSelfAttention` (``w_q``, ``w_k``,
  ``d_k``), without QK-layernorm, on its SDPA path (``GPT(..., figures=False)``, which the monitor sees);
- Hugging Face Llama-style attention (``q_proj``, ``k_proj`` and ``head_dim``: Llama, Mistral,
  Qwen2, SmolLM2 ...), with grouped-query attention;
- Hugging Face BERT-style self-attention (``query``, ``key`` and ``attention_head_size``);
- a fused QKV projection whose output is [q | k | v]: ``qkv_proj`` (Phi-3, with ``head_dim`` and
  ``num_key_value_heads``), ``c_attn`` (GPT-2's Conv1D, nanoGPT's nn.Linear) or ``qkv`` (nanoGPT-
  and timm-style), with the head count in ``num_heads``, ``n_head``, ``n_heads`` or
  ``num_attention_heads`` (or the size in ``head_dim``), key heads in ``num_key_value_heads``,
  ``n_kv_head``, ``n_kv_heads`` or ``num_kv_heads`` (else as many as query heads).

A module without the head size (``head_dim``, ``d_k``, ``attention_head_size``) or count is sized by
the number of query heads the monitor reports for it (the shapes of its calls) at the first step
:meth:`LogitGuard.apply` gets: d = query features / query heads, key heads = key features / d (a
fused projection without a key-head count: as many as query heads). A step whose head count does
not fit the projections raises, naming both.

Names: module paths in ``model``, as :class:`attnscale.torch.Monitor` names its layers, the same
whether or not the model is compiled (``torch.compile``'s ``_orig_mod`` left out:
:mod:`attnscale.torch.capture.paths`), so monitor and guard may each be given the compiled model or
the plain one. The guard changes the parameters in place, which a compiled graph reads as inputs:
no recompilation (the tests hold it on a compiled nanoGPT-style model).

Refused, with the reason: a LayerNorm or RMSNorm on q or k (QK-norm: rescaling W_Q does nothing
after it), projections whose sizes are not whole heads, GPT-2's cross-attention (q in ``q_attn``),
or nothing found at all; :meth:`LogitGuard.apply` refuses, naming what is missing, a step that is no
:class:`~attnscale.torch.monitor.records.Step` and a layer the guard does not know (a refused
module's, with its reason; a compiled call the monitor could not name; another model's).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from attnscale.errors import InputError, InputTypeError, check_positive
from attnscale.torch.capture.paths import module_paths, root_class
from attnscale.torch.monitor.records import Step

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
class _Pending:
    """An attention module whose head size or count is in no attribute: found from the number of
    query heads the monitor reports for it (the shapes of its calls), at its first step."""

    name: str
    missing: str  # what the module lacks, for an error when no step can tell
    sized: Callable[[int], _Target | str]  # query heads → the target, or why those do not fit


@dataclass(frozen=True)
class Clip:
    """One head the guard rescaled (or, log-only, would have)."""

    layer: str
    head: int
    max_logit: float  # what the step measured
    factor: float  # γ = τ / max_logit: the head's logits were multiplied by it


def _projection(module, attr):
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


def _separate(name, module, q_attr, k_attr, dim_attr) -> _Target | _Pending | str | None:
    q, k = _projection(module, q_attr), _projection(module, k_attr)
    if q is None or k is None:
        return None
    d = _count(module, (dim_attr,))
    if d is None:  # the head size from the step's head count: d = q features / query heads
        got = getattr(module, dim_attr, None)
        missing = f"{name}: has {q_attr} and {k_attr} but no int attribute {dim_attr} (got {got!r})"
        return _Pending(
            name, missing, lambda heads: _separate_sized(name, q, k, q[1] // heads if q[1] % heads == 0 else 0)
        )
    return _separate_sized(name, q, k, d)


def _separate_sized(name, q, k, d: int) -> _Target | str:
    if d < 1:
        return f"{name}: {q[1]} query features are not whole heads"
    return _whole_heads(name, q[1], k[1], d) or _Target(
        name, _Rows(q[0], 0, q[2]), _Rows(k[0], 0, k[2]), q[1] // d, k[1] // d, d
    )


def _fused(name, module, attr) -> _Target | _Pending | str | None:
    """A [q | k | v] projection: its sizes from the head size and counts the module holds (or the
    query head count of the step, then with as many key heads unless the module says how many)."""
    found = _projection(module, attr)
    if found is None:
        return None
    if getattr(module, "is_cross_attention", False):
        return f"{name}: cross-attention (q in q_attn, k and v in {attr}) is not supported"
    d, h_q, h_kv = (_count(module, ("head_dim",)), _count(module, _HEAD_COUNTS), _count(module, _KV_HEAD_COUNTS))
    if h_q is None and d is None:
        missing = (
            f"{name}: a fused QKV projection {attr} without its head count in an int attribute "
            f"{', '.join(_HEAD_COUNTS)} or head_dim"
        )
        return _Pending(name, missing, lambda heads: _fused_sized(name, attr, found, None, heads, h_kv))
    return _fused_sized(name, attr, found, d, h_q, h_kv)


def _fused_sized(name, attr, found, d, h_q, h_kv) -> _Target | str:
    layer, out, transposed = found
    if h_q is None:
        h_q = out // d - 2 * h_kv if h_kv else out // (3 * d)
    h_kv = h_kv or h_q
    if d is None:
        d = out // (h_q + 2 * h_kv)
    if h_q < 1 or out != (h_q + 2 * h_kv) * d:
        return f"{name}: {attr} has {out} output features, not q, k, v of {h_q}, {h_kv}, {h_kv} heads of size {d}"
    return _whole_heads(name, h_q * d, h_kv * d, d) or _Target(
        name, _Rows(layer, 0, transposed), _Rows(layer, h_q * d, transposed), h_q, h_kv, d
    )


def _target(name: str, module) -> _Target | _Pending | str | None:
    """The module's projections, a reason it is refused, or None when it is no attention module."""
    for found in [
        *(_separate(name, module, *attrs) for attrs in _SEPARATE),
        *(_fused(name, module, attr) for attr in _FUSED),
    ]:
        if found is None:
            continue
        if not isinstance(found, str) and _qk_norm(module):
            return f"{name}: q and k are normalised after the projections (QK-norm); rescaling W_Q, W_K does nothing"
        return found
    return None


def find_heads(model) -> tuple[dict, dict[str, str]]:
    """({layer: _Target, or _Pending until a step gives its head count}, {layer: why refused}) over
    the modules of ``model``, named by their paths in the uncompiled model, as the monitor names
    them (:func:`attnscale.torch.capture.paths.module_paths`; the model itself by its class)."""
    found, refused = {}, {}
    paths = module_paths(model)
    for module in dict(model.named_modules()).values():
        name = paths[id(module)] or root_class(model).__name__
        t = _target(name, module)
        if isinstance(t, str):
            refused[name] = t
        elif t is not None:
            found[name] = t
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

    Layer names are module paths in ``model``, as :class:`attnscale.torch.Monitor` names them, compiled
    or not (the module docstring lists the attributes read). Raises :class:`InputError` when no module
    can be guarded, naming why. ``targets``: {layer: its projections}; ``refused``: {layer: why}.
    """

    def __init__(self, model, tau: float, alpha: float = 0.5, log_only: bool = False):
        if not isinstance(model, torch.nn.Module):
            raise InputTypeError(f"model: expected a torch.nn.Module, got {type(model).__name__}")
        self.tau = check_positive("tau", tau)
        self.alpha, self.log_only = check_options(alpha, log_only)
        self.targets, self.refused = find_heads(model)
        if not self.targets:
            why = "; ".join(self.refused.values()) or (
                "no module has w_q/w_k, q_proj/k_proj or query/key projections, or a fused qkv_proj, c_attn or qkv"
            )
            raise InputError(f"model: no attention projections the logit guard can rescale ({why})")
        self.clips = 0  # heads rescaled so far (log_only: that would have been), over all steps
        self.overflowed = 0  # heads left alone because their max logit was +inf (no factor exists)

    def apply(self, step: Step) -> list[Clip]:
        """Rescale every head of ``step`` (a :class:`attnscale.torch.monitor.Step`) whose max logit
        exceeded τ (``log_only``: none); returns the heads clipped (or that would be). Layers the guard
        does not know (another model's, a refused module's, a compiled call the monitor could not
        name) raise, naming what is missing, so a mis-wired monitor is not mistaken for a calm one."""
        if not isinstance(step, Step):
            raise InputTypeError(
                f"step: expected a Step (what Monitor.step returns, or combine_step), got {type(step).__name__}"
            )
        by_layer: dict[str, dict[int, float]] = {}
        for layer, heads in step.by_layer().items():
            self._check_layer(layer, heads)
        for h in step.heads:
            if math.isfinite(h.max_logit) and h.max_logit > self.tau:
                by_layer.setdefault(h.layer, {})[h.head] = h.max_logit
            elif h.max_logit == math.inf:
                self.overflowed += 1
        done = []
        with torch.no_grad():
            for layer, peaks in by_layer.items():
                t = self.targets[layer]
                assert isinstance(t, _Target)  # sized by _check_layer
                done += self._clip(t, peaks)
        self.clips += len(done)
        return done

    def _check_layer(self, layer: str, heads: list) -> None:
        """The step's ``heads`` of ``layer`` fit a module the guard rescales (a pending one is sized
        by their count here), else an :class:`InputError` naming what is missing."""
        t = self.targets.get(layer)
        count = max(h.head for h in heads) + 1
        if t is None:
            if layer in self.refused:
                why = f"the guard refused that module: {self.refused[layer]}"
            elif layer.startswith("compiled["):
                why = (
                    "it is an attention call in a compiled graph that the monitor could not name after its "
                    "module (its UnnamedCompiledCall warning says why)"
                )
            else:
                why = f"the guard knows {sorted(self.targets)}; give monitor and guard the same model"
            raise InputError(f"step: layer {layer!r} is not one the guard can rescale: {why}")
        if isinstance(t, _Pending):
            sized = t.sized(count)
            if isinstance(sized, str):
                raise InputError(
                    f"step: layer {layer!r} has {count} query heads, which do not fit: {sized} ({t.missing})"
                )
            self.targets[layer] = t = sized
        if count > t.heads_q:
            raise InputError(
                f"step: layer {layer!r} has {count} query heads, its projections {t.heads_q} of size {t.head_dim}"
            )

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
