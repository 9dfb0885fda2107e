"""The ``"flex"`` backend of :func:`attnscale.torch.attention`: PyTorch's FlexAttention, compiled on
CUDA (eager, FlexAttention's reference path, on CPU), with each row's figures from the same call.

    q: (B, H_q, L, d_k)   k: (B, H_kv, S, d_k)   v: (B, H_kv, S, d_v)   (H_kv divides H_q: enable_gqa)

For logits linear in q·k (every rule that is a factor of q̂·k̂: 1/√d_k, unscaled, 1/d_k, a constant,
QK-norm, log-n; masks only), Σ_j p_ij s_ij = scale · q_i · (Σ_j p_ij k_j), so one call with the value
[V, K] (concatenated on the last axis) returns the output and P·K together, and

    lse_i     from ``return_aux=AuxRequest(lse=True)``            (float32; float64 for float64)
    entropy_i = lse_i − scale · q_i · (P K)_i, clamped at 0        (a difference: see Precision)
    max_logit_i from ``AuxRequest(max_scores=True)`` (CUDA); min_logit_i = −max of a second call on −q

Masks are block masks (``create_block_mask``): a boolean mask, the causal limit in either
alignment (top_left: j ≤ i; bottom_right: j ≤ i + S − L), or both. A causal-only block mask is kept
for the next call of the same (L, S, alignment, device), as a training loop makes. A row with nothing
attended gets FlexAttention's output 0 and lse −inf; its entropy and logit range are NaN (as every
backend of :mod:`attnscale.torch.functional`).

Costs: the extra d_k columns of the value make the P·V product (d_v + d_k)/d_v as wide, about 1.5×
the FLOPs of plain attention at d_k = d_v, forward; in the backward they get a zero gradient (K
enters the value detached, so no gradient flows through it twice). The logit range on CUDA: the
max is free (FlexAttention's running max); the min is one more forward call on (−q, k, v) without
gradient (about 2/3 of the first call again). On CPU FlexAttention returns no max_scores (PyTorch
2.13), so the range comes from the chunked logits pass of the composed backend.

Soft-cap, an additive bias (scores not linear in q·k) and half-precision inputs take a second pass:
the output, with its gradient through FlexAttention's fused backward, from one call (whose
``score_mod`` caps the score and adds the bias, cap first, as every backend here; a float32 bias
beside half-precision inputs stays float32, as SDPA keeps it); the figures (lse, entropy, logit
range) from the chunked backend in float32 under ``torch.no_grad``, a block of rows at a time
(O(rows·S) memory, freed as it goes, nothing kept for the backward). That pass costs about one
unfused attention forward, several times the fused call; what it saves against the chunked backend
alone is the backward's memory (the chunked backend keeps every block's logits for autograd, O(L·S)).
In half precision the one-call construction below would return P·K rounded to the inputs' dtype
(8 bits of mantissa in bfloat16), and the entropy, a difference of two numbers of size |lse|, with
it: on FlashAttention's ``bwd_overflow`` inputs (q × 5, k × 3, d 16) that read up to
0.028·(1 + |lse|) in bfloat16 (issue 51), so half precision takes the float32 pass instead.

If FlexAttention itself fails on a problem (a shape its compiled kernel does not take, say),
:class:`FlexFailure` (an InputError) says so; "auto" then runs the problem on the composed backend
(chunked with a bias or soft-cap) in float32, and its figures say which backend made them.

Refused, with the reason: gradients on CPU (FlexAttention has no CPU backward in PyTorch 2.13: call
under ``torch.no_grad()`` or use "kernel"/"chunked"); a device other than CPU or CUDA; a PyTorch
without ``torch.nn.attention.flex_attention.AuxRequest``.

Precision: lse and the output are as good as FlexAttention's own; the entropy is a difference, so
its absolute error grows with |lse|. :func:`attnscale.torch.flex_precision.entropy_errors` measures it against float64 of the same
(rounded) inputs over rows from uniform weights to frozen ones (d_k 64, 256 keys, one query
direction per row scaled by 0 to 10³: entropy ln 256 down to ~10⁻¹⁰⁷, |lse| up to ~3·10³), and the
bound :data:`ENTROPY_ERROR_BOUND` is what tests/torch/test_flex_attention.py holds it to:

    |Δentropy| ≤ c · (1 + |lse|),   c = 32 float32 eps = 3.8·10⁻⁶ in every dtype

float32 inputs take the one-call construction; half precision the float32 figures pass (above).
Measured on CPU (eager, torch 2.13, 2026-12-05), the largest |Δentropy| / (1 + |lse|) over the
sweep: float32 4.3·10⁻⁷, float16 1.5·10⁻⁷, bfloat16 1.0·10⁻⁷ (2026-12-01, before half precision
took the float32 pass: 3.6·10⁻⁴ and 3.0·10⁻³). c is set in units of float32's eps, not from one
CPU's reading: with the logit range the bracket subtracts two float32 figures of size |lse| made
by different GEMMs (FlexAttention's lse, the max logit), and the same sweep read 1.2·10⁻⁶ (10 eps)
with MKL's CPU-independent GEMMs (``MKL_CBWR=COMPATIBLE``, as on another CPU type) against
4.0·10⁻⁷ with the default ones, on one AMD EPYC (2026-12-02). With the logit range (always on CUDA,
where the max is free; on CPU with ``logit_range=True``) the float32 entropy is also held between
−ln p_max and Fano's bound (:func:`_bracketed`), so a frozen row reads ≤ 2·10⁻⁴ nats (measured; the
rounding of lse − max in float32). The lse itself stays within 5·10⁻⁷·(1 + |lse|) in every dtype
(FlexAttention keeps it in float32; the chunked pass computes it in float32). benchmarks/gpu.py
measures the same sweep on a GPU.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import math
from dataclasses import replace

import torch

from attnscale.errors import InputError
from attnscale.torch.backends.chunked import run_chunked
from attnscale.torch.backends.problem import Problem, chunked_logit_range

__all__ = ["run_flex", "refusal", "cuda_status", "eager", "ENTROPY_ERROR_BOUND", "FlexFailure"]

# c of the Precision bound: float32 figures in every dtype (half precision through the float32 pass)
ENTROPY_ERROR_BOUND = {"float32": 32 * 2.0**-23, "float16": 32 * 2.0**-23, "bfloat16": 32 * 2.0**-23}
_PROBE_SHAPE = (1, 1, 128, 64)  # the compiled call tried once per CUDA device before "auto" picks flex
_eager = contextvars.ContextVar("attnscale_flex_eager", default=False)


@contextlib.contextmanager
def eager():
    """Run the flex backend through FlexAttention's eager reference path on any device (what CPU
    always uses), e.g. to check the compiled CUDA kernel against it."""
    token = _eager.set(True)
    try:
        yield
    finally:
        _eager.reset(token)


def _flex_module():
    try:
        from torch.nn.attention import flex_attention as module
    except ImportError:
        return None
    return module if hasattr(module, "AuxRequest") else None


def refusal(p: Problem) -> str | None:
    """Why the flex backend cannot compute ``p`` here, or None."""
    if _flex_module() is None:
        return (
            f"backend: 'flex' needs torch.nn.attention.flex_attention with AuxRequest, which torch "
            f"{torch.__version__} lacks; use 'auto'"
        )
    device = p.q.device.type
    if device not in ("cpu", "cuda"):
        return f"backend: 'flex' runs on CPU (eager) or CUDA (compiled), got device {p.q.device}; use 'chunked'"
    wants_grad = torch.is_grad_enabled() and any(
        isinstance(x, torch.Tensor) and x.requires_grad for x in (p.q, p.k, p.v, p.bias)
    )
    if device == "cpu" and wants_grad:
        return (
            "backend: 'flex' has no backward on CPU (FlexAttention, PyTorch 2.13); call under "
            "torch.no_grad() or use backend='kernel' or 'chunked'"
        )
    return None


@functools.cache
def _compiled():
    """FlexAttention compiled once per process (torch.compile caches a kernel per shape and mask)."""
    return torch.compile(_flex_module().flex_attention)


class FlexFailure(InputError):
    """FlexAttention itself failed on a problem (a compile or kernel error), not one of the refusals:
    "auto" then computes it on the composed (or chunked) backend instead."""


def _call(device):
    """FlexAttention, compiled or eager, its failures raised as :class:`FlexFailure`."""
    fn = _flex_module().flex_attention if device.type == "cpu" or _eager.get() else _compiled()

    def call(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except Exception as err:  # noqa: BLE001 - whatever FlexAttention raises, said in one line
            first = (str(err).strip().splitlines() or [""])[0][:300]
            raise FlexFailure(
                f"backend: 'flex': FlexAttention failed on this problem ({type(err).__name__}: {first}); "
                "use 'composed' or 'chunked'"
            ) from err

    return call


@functools.lru_cache(maxsize=16)
def _causal_block_mask(L: int, S: int, offset: int, device: str):
    """The causal limit j ≤ i + offset as a block mask, shared by every batch and head."""
    return _flex_module().create_block_mask(lambda b, h, i, j: j <= i + offset, None, None, L, S, device=device)


def _block_mask(p: Problem):
    """The block mask of ``p`` (boolean mask and causal limit), or None when every key is attended."""
    L, S = p.q.shape[-2], p.k.shape[-2]
    causal = p.alignment is not None
    if p.mask is None:
        return _causal_block_mask(L, S, p.causal_offset, str(p.q.device)) if causal else None
    mask, offset = p.mask, p.causal_offset  # (B, H_q, L, S), a view that may broadcast
    # A block mask broadcast over batch or heads (stride 0) is built once for them all.
    sizes = [None if mask.stride(d) == 0 or mask.shape[d] == 1 else mask.shape[d] for d in (0, 1)]

    def mask_mod(b, h, i, j):
        keep = mask[b, h, i, j]
        return keep & (j <= i + offset) if causal else keep

    return _flex_module().create_block_mask(mask_mod, sizes[0], sizes[1], L, S, device=p.q.device)


def _score_mod(p: Problem):
    """cap(s) + bias, for the problems whose scores are not linear in q·k; None for the others."""
    if not p.softcap and p.bias is None:
        return None
    cap, bias = p.softcap, p.bias  # bias: (B, H_q, L, S), a view that may broadcast

    def score_mod(score, b, h, i, j):
        if cap:
            score = cap * torch.tanh(score / cap)
        if bias is not None:
            score = score + bias[b, h, i, j]
        return score

    return score_mod


def _in_float32(p: Problem) -> Problem:
    """``p`` detached, half precision raised to float32: the chunked figures passes compute in it."""

    def up(x):
        return None if x is None else x.detach().to(torch.float32) if x.element_size() < 4 else x.detach()

    return replace(p, q=up(p.q), k=up(p.k), v=up(p.v), bias=up(p.bias))


def run_flex(p: Problem, logit_range: bool, first_key: bool = False):
    """(out, lse, entropy, max_logit, min_logit, None) of ``p`` on FlexAttention (module docstring)."""
    reason = refusal(p)
    if reason:
        raise InputError(reason)
    if not torch.is_grad_enabled():  # FlexAttention refuses CPU tensors that require grad, even then
        p = replace(p, q=p.q.detach(), k=p.k.detach(), v=p.v.detach())
    module = _flex_module()
    call = _call(p.q.device)
    block_mask = _block_mask(p)
    gqa = p.q.shape[1] != p.k.shape[1]
    on_cuda = p.q.device.type == "cuda"
    score_mod = _score_mod(p)
    common = dict(block_mask=block_mask, scale=p.scale, enable_gqa=gqa)
    # A rule's q̂, k̂ (QK-norm, log-n) come in float32 beside half-precision v: rounded once for the call.
    call_q, call_k = (x if x.dtype == p.v.dtype else x.to(p.v.dtype) for x in (p.q, p.k))
    # Half precision: P·K would come back rounded to the inputs' dtype, and the entropy, a
    # difference of two numbers of size |lse|, with it (Precision); the figures come from float32.
    if score_mod is not None or p.v.element_size() < 4:
        out = call(call_q, call_k, p.v, score_mod=score_mod, **common)
        with torch.no_grad():
            _, lse, entropy, hi, lo, _ = run_chunked(_in_float32(p), logit_range)
        return out, lse, entropy, hi, lo, None

    d_v = p.v.shape[-1]
    values = torch.cat([p.v, p.k.detach()], dim=-1)  # (B, H_kv, S, d_v + d_k)
    # The max score is free on CUDA (FlexAttention's running max), so it is always asked for there.
    both, aux = call(p.q, p.k, values, return_aux=module.AuxRequest(lse=True, max_scores=on_cuda), **common)
    out, pk = both[..., :d_v], both[..., d_v:]  # P V and P K
    lse = aux.lse
    figures = lse.dtype
    with torch.no_grad():
        # A difference of two numbers of size |lse|: rounding can push a near-0 entropy below 0.
        entropy = lse - p.scale * (p.q.detach().to(figures) * pk.detach().to(figures)).sum(-1)
        empty = lse == -math.inf
        hi = lo = None
        if on_cuda:
            hi = aux.max_scores.to(figures).masked_fill(empty, math.nan)
        elif logit_range:
            hi, lo = chunked_logit_range(_in_float32(p))
        if logit_range and on_cuda:
            _, neg = call(
                -p.q.detach(), p.k.detach(), p.v.detach(), return_aux=module.AuxRequest(max_scores=True), **common
            )
            lo = (-neg.max_scores.to(figures)).masked_fill(empty, math.nan)
        entropy = entropy.clamp_min(0.0) if hi is None else _bracketed(entropy, lse, hi, p.k.shape[-2])
        entropy = entropy.masked_fill(empty, math.nan)
    return out, lse, entropy, hi if logit_range else None, lo, None


def _bracketed(entropy, lse, top, S: int):
    """The entropy held inside two bounds made of exact-to-rounding figures, with p_max = e^{top − lse}:
    H ≥ −ln p_max = lse − top, and Fano's H ≤ h(p_max) + (1 − p_max)·ln(S − 1) (h the binary
    entropy; S ≥ the attended count). A frozen row (p_max = 1) comes out 0, whatever P·K's rounding."""
    p_max = torch.exp(top - lse).clamp(0.0, 1.0)
    rest = 1.0 - p_max
    upper = -torch.xlogy(p_max, p_max) - torch.xlogy(rest, rest) + rest * math.log(max(S - 1, 1))
    lower = (lse - top).clamp_min(0.0)
    return torch.maximum(torch.minimum(entropy, upper), lower)


def cuda_status() -> dict:
    """{"backend": what "auto" uses on CUDA ("flex" or "composed"; None without CUDA), "reason": why}.
    The first call on a CUDA machine compiles and runs one small FlexAttention call (seconds)."""
    if not torch.cuda.is_available():
        return {"backend": None, "reason": "no CUDA device"}
    return dict(zip(("backend", "reason"), _cuda_probe(torch.cuda.current_device())))


@functools.cache
def _cuda_probe(device_index: int) -> tuple[str, str]:
    module = _flex_module()
    if module is None:
        return "composed", f"torch {torch.__version__} has no FlexAttention with AuxRequest"
    try:
        q = torch.randn(_PROBE_SHAPE, device=f"cuda:{device_index}")
        out, aux = _compiled()(q, q, q, return_aux=module.AuxRequest(lse=True, max_scores=True))
        ok = bool(torch.isfinite(out).all() and torch.isfinite(aux.lse).all())
    except Exception as err:  # noqa: BLE001 - any failure to compile or run means: use composed
        return "composed", f"compiled FlexAttention failed: {type(err).__name__}: {str(err).splitlines()[0][:200]}"
    if not ok:
        return "composed", "compiled FlexAttention returned non-finite numbers on its probe"
    return "flex", f"compiled FlexAttention (torch {torch.__version__}, {torch.cuda.get_device_name(device_index)})"
