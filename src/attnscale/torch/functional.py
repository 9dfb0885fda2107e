"""Fast attention on PyTorch that also reports each query row's health, without the L×S matrix.

Same conventions as the NumPy core (:func:`attnscale.attention`)::

    q: (..., H_q, L, d_k)   k: (..., H_kv, S, d_k)   v: (..., H_kv, S, d_v)   ->   out: (..., H_q, L, d_v)

``scale`` multiplies q·k (None = 1/√d_k, 0.0 legal) and may be any rule of :mod:`attnscale.scales`
(QK-norm normalises q and k first, log-n scales each row by s·ln(attended keys), soft-capping caps
the logits; as the NumPy core); ``mask`` is bool, True = attend; ``causal`` is False, "top_left",
"bottom_right" or True (L == S only); H_q a multiple of H_kv (grouped-query).
Per query row i, with logits s_ij = cap(scale·q̂_i·k̂_j) (+ bias) over the attended keys:

    lse_i     = ln Σ_j e^{s_ij}                          (what fused kernels keep for their backward)
    entropy_i = −Σ_j p_ij ln p_ij = lse_i − Σ_j p_ij s_ij  (nats)
    max_logit_i, min_logit_i                             (logit_range=True: float16 overflows past 65504)
    first_key_weight_i = p_i0 = e^{s_i0 − lse_i}         (first_key=True: the weight on key 0, attention sinks)

A row with nothing attended gets output 0, lse −inf, and NaN figures (as :func:`attnscale.row_health`).
A row with a NaN logit, or a +inf one (q·k overflowed: huge finite inputs, or an inf one, which
is let through unless ``check_finite=True``) is not disguised as one with nothing attended: its
output and entropy are NaN, its lse +inf (overflow) or NaN (kernel, composed and chunked backends).
(PyTorch's CPU flash kernel turns such a row of at most 8 keys into a finite one, lse 0: the
composed backend sets it back to NaN.) docs/attention.md says when to choose which backend and
states the numerical limits this module shares with SDPA's CPU flash kernel.

Masked keys: a key that no query row of its KV head attends (a padding mask's, or past a top-left
causal reach) is zeroed in k and v before any backend sees it, so NaN or ±inf there reaches neither
the output nor a gradient (SDPA's math path gives such rows NaN; 0 × NaN in a backward's products
would put NaN in dq), and its dk, dv are 0, as SDPA's. A key attended by some rows and masked for
others is not zeroed: NaN in it makes the attending rows NaN, and the gradient of the rows that mask
it too. A bias isolates nothing: a NaN logit plus −inf stays NaN, as in SDPA.

Zero sizes, as SDPA answers them: a batch, heads (H_q = H_kv = 0) or rows of size 0 give empty
results and gradients; S = 0 keys leave each row nothing to attend (output 0, as SDPA's zeros; lse
−inf, NaN figures); d_k = 0 makes every logit 0, so the weights are uniform over the attended keys
and the output their mean of v (SDPA's answer with its default scale too). The NumPy core refuses
S = 0 and d_k = 0.

Dropout (``dropout_p``, SDPA's): each attention weight kept with probability 1 − p and scaled by
1/(1 − p), all dropped at p = 1, whenever p > 0 (training or not, as SDPA's argument); the figures
describe the softmax before it. "auto" without figures hands it to SDPA (PyTorch's default
generator); with figures or a ``generator``, the chunked backend computes it, the one of ours that
can ("kernel", "composed" and "flex" refuse it: their fused passes have no dropout).

Gradients: ``out`` is differentiable on every backend (with respect to q, k, v and a float bias);
the kernel has its own flash-style backward (probabilities recomputed block by block from the saved
lse, memory O(L·d); one task per (batch, KV head), so dk and dv of a query-head group are summed
without atomics). The kernel, forward and backward, gives the same bits run after run at a given
thread count; another thread count may change the last bits (within 16 eps of the largest entry,
as tested), because the BLAS may pick its GEMM kernels by it (MKL does on Intel Xeon CPUs). A bias that requires grad gets
its gradient from a (B, H_q, L, S) buffer: O(L·S), the size of the bias when it is given in full (a
broadcast one is summed back from it). The figures (lse, entropy, logit range) are diagnostics and
come back **detached**: no gradient flows through them.

Four backends, all with memory O(L·d) except where said; the kernel and chunked ones are exact to
rounding (the entropy a sum of non-negative terms), the composed and flex ones subtract:

- ``"kernel"`` (CPU, float32/float64): the fused C++ kernel of :mod:`attnscale.torch.ext`, a
  flash-style online softmax that accumulates Σ p·(s − max) next to the softmax sum (one extra
  multiply-add per score). The max logit is its running max, free; the min logit is one compare
  and select per score in the same pass (about 2% more time, measured by benchmarks/telemetry.py).
- ``"composed"`` (CPU or CUDA, no bias, no soft-cap): PyTorch's own fused kernel, called once with [V, K] as the
  values — the output's last d_k columns are P·K, so Σ_j p_ij s_ij = scale·q_i·(P K)_i, and the
  entropy lse − scale·q·(PK) is a difference: its absolute error is about eps·|lse| (float32 at
  scale 10 on unit-variance q, k of d_k 64: ~1e-4 nats), clamped at 0 from below. PyTorch's
  fused CPU kernel wants one head size for q, k and v, so q and k are zero-padded to d_v + d_k; a
  mask is handed to it as an additive float (B, H_q, L, S) tensor, the only form it takes; the
  logit range needs its own pass (the chunked logits below).
- ``"chunked"`` (anywhere, bias included, dropout): logits for a block of query rows at a time,
  O(rows·S) memory with rows chosen to keep a block near 16 MiB; its backward is autograd's through
  the blocks (O(L·S) kept for it), exact where the flash-style backward is not (docs/attention.md).
- ``"flex"`` (CUDA compiled, CPU eager; every rule, bias included): PyTorch's FlexAttention, the
  same [V, K] construction in one call with block masks, computing in the inputs' own dtype
  (bfloat16 and float16 too, unlike the others; their figures from a float32 pass), its fused backward on CUDA, none on CPU; soft-cap
  and bias through a score_mod plus a chunked pass for the figures (:mod:`attnscale.torch.backends.flex`,
  which states its costs and its measured precision).

``"auto"`` picks the kernel on CPU when it builds, else composed (chunked when a bias or a soft-cap
is given). On CUDA it picks flex when compiled FlexAttention runs there (tried once per device:
``kernel_status()["cuda"]`` says which and why), else composed through PyTorch's memory-efficient
kernel, which returns the log-sum-exp and whose own backward gives the gradients; float64 on CUDA
takes chunked. The CUDA paths are tested by tests that run only where a GPU is present and by
benchmarks/gpu.py; neither has run on a GPU in this project yet.

This module checks the arguments, prepares the problem and picks the backend; the backends
themselves are in :mod:`attnscale.torch.backends`, one module each.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, replace
from typing import Any

from attnscale.errors import InputError, InputTypeError, check_choice, require
from attnscale.masks import causal_alignment
from attnscale.scales import QKNorm, resolve_scale
from attnscale.shapes import QKVShapes, check_qkv_shapes
from attnscale.softmax_rows import FLOAT16_MAX
from attnscale.torch import ext
from attnscale.torch.backends import RUNNERS
from attnscale.torch.backends.kernel import call_kernel, kernel_arguments, run_kernel
from attnscale.torch.backends.flex import FlexFailure
from attnscale.torch.backends.problem import Problem, allowed_keys, nothing_attended, plain_sdpa, row_chunks

__all__ = ["attention", "AttentionStats", "BACKENDS", "FLOAT16_MAX", "KeptAttention", "kept_attention", "qk_normalized"]

BACKENDS = ("auto", "kernel", "composed", "chunked", "flex")


@dataclass(frozen=True)
class AttentionStats:
    """The figures :func:`attention` returns beside the output with ``return_stats=True``: float32
    (float64 for float64 inputs), detached, shaped like the rows: (..., H_q, L). A row whose logit
    range leaves ±:data:`FLOAT16_MAX` overflows in float16 (the failure behind PyTorch issue #119131)."""

    lse: Any  # log Σ_j exp(logit_ij); −inf for a row with nothing attended
    entropy: Any  # −Σ_j p_ij ln p_ij, nats; NaN for a row with nothing attended
    max_logit: Any  # largest attended logit (None unless logit_range=True); NaN if none
    min_logit: Any  # smallest attended logit (None unless logit_range=True); NaN if none
    backend: str  # "kernel" | "composed" | "chunked" | "flex"
    first_key_weight: Any = None  # p_i0, the weight on key 0 (None unless first_key=True); 0 where key 0
    # is not attended, NaN for a row with nothing attended
    # With head_table=True on the kernel (else None): the monitor's per-head table of these figures,
    # float64 (len(head_table.ROWS), H_q) over the rows ``counted``, and each row's entropy
    # as it counts there, (..., H_q, L), NaN for a row in no entropy figure or not counted.
    head_table: Any = None
    counted_entropy: Any = None


def _check_tensor(torch, name: str, x) -> None:
    if not isinstance(x, torch.Tensor):
        raise InputTypeError(f"{name}: expected a torch.Tensor, got {type(x).__name__}")


@dataclass(frozen=True)
class _Signature:
    """What a call's signature alone decides (q, k and v's shapes, dtypes and devices, the scale,
    causal, whether a bias is given, the backend asked for and whether figures are), checked once
    and kept per signature (:func:`_signature`): a model calls attention with the same few
    signatures, layer after layer and step after step."""

    shapes: QKVShapes
    rule: Any  # the scale's rule (attnscale.scales)
    target: tuple  # (..., H_q, L, S): what a mask or a bias broadcasts to
    batch: int  # the leading dimensions' product: the problem's flat batch
    alignment: str | None
    squeeze: bool  # every input was rank 2 (N, d): the head axis is dropped again
    chosen: str | None  # the backend that computes the call; None: plain SDPA (no figures, "auto")
    compute: Any  # the dtype it computes in
    factor: float | None  # the rule's constant scale; None when _apply_rule applies it per call


def _signature(q_shape, k_shape, v_shape, dtypes, devices, scale, causal, has_bias, backend, stats) -> _Signature:
    """The checked :class:`_Signature` of tensors of these shapes, ``dtypes`` and ``devices`` (each
    q's, k's, v's), or the error naming what is wrong. Rank 2 (N, d) is one head."""
    shapes = []
    for name, shape, dtype in zip("qkv", (q_shape, k_shape, v_shape), dtypes):
        if not dtype.is_floating_point:
            raise InputTypeError(f"{name}: expected a floating-point tensor, got dtype {dtype}")
        if len(shape) < 2:
            raise InputError(
                f"{name}: expected at least 2 dimensions (..., H, N, d) or (N, d), got shape {tuple(shape)}"
            )
        shapes.append(shape if len(shape) > 2 else (1, *shape))
    if not (dtypes[0] == dtypes[1] == dtypes[2]):
        raise InputTypeError(f"q, k, v: expected one dtype, got q {dtypes[0]}, k {dtypes[1]}, v {dtypes[2]}")
    if not (devices[0] == devices[1] == devices[2]):
        raise InputError(f"q, k, v: expected one device, got q {devices[0]}, k {devices[1]}, v {devices[2]}")
    # Zero sizes (B, H, L, S, d_k or d_v = 0) are allowed here, as SDPA allows them (attention()'s docstring).
    sh = check_qkv_shapes.__wrapped__(*shapes, q_shape, k_shape, v_shape, allow_empty=True)  # kept here
    torch = require("torch", "torch")
    rule = resolve_scale(scale)
    alignment = causal_alignment(causal, sh.L, sh.S)
    chosen = None
    if stats or rule.caps or backend != "auto":
        chosen = _choose_backend(torch, devices[0], dtypes[0], has_bias, rule.caps, backend)
    # Half precision is computed in float32, as the NumPy core does for float16; FlexAttention
    # computes in the inputs' own dtype (the model's, as its own SDPA would), and so does plain SDPA
    # (chosen None), which has half kernels of its own: a copy to float32 would be a hidden cost.
    own = chosen in (None, "flex") or dtypes[0] == torch.float64
    compute = dtypes[0] if own else torch.float32
    # A constant scale (SDPA's, every model's) is the problem's own: no second Problem from _apply_rule.
    constant = not (rule.caps or rule.normalizes or rule.uses_n)
    return _Signature(
        shapes=sh,
        rule=rule,
        target=sh.lead + (sh.H_q, sh.L, sh.S),
        batch=math.prod(sh.lead),
        alignment=alignment,
        squeeze=len(q_shape) == len(k_shape) == len(v_shape) == 2,
        chosen=chosen,
        compute=compute,
        factor=(float(rule.factor(sh.d_k)) if sh.d_k else 1.0) if constant else None,  # d_k 0: logits all 0
    )


# Kept where the scale and causal are plain values (a rule made anew, a dataclass with a validating
# __post_init__, cost more than the call's other checks: measured, in a model); typed, so that True
# is not taken for 1. A failed check is not kept: it raises each time.
_kept_signature = functools.lru_cache(maxsize=256, typed=True)(_signature)
_HASHED = (bool, float, int, str, type(None))


def _keepable(torch, scale, causal) -> bool:
    """Whether a call's signature may be kept: plain values for the scale and causal, and not while
    Dynamo traces (traced, a cache is no cache: it traces the function inside, and warns that it does)."""
    return type(scale) in _HASHED and type(causal) in _HASHED and not torch.compiler.is_compiling()


def _signature_of(torch, q, k, v, scale, causal, has_bias: bool, backend: str, stats) -> _Signature:
    """The checked :class:`_Signature` of a call on tensors q, k, v; kept where :func:`_keepable`."""
    return (_kept_signature if _keepable(torch, scale, causal) else _signature)(
        q.shape,
        k.shape,
        v.shape,
        (q.dtype, k.dtype, v.dtype),
        (q.device, k.device, v.device),
        scale,
        causal,
        has_bias,
        backend,
        bool(stats),
    )


def _apply_rule(torch, p: Problem, rule) -> Problem:
    """The rule folded into what every backend takes: q̂, k̂ (QK-norm, in torch, so differentiable),
    a per-row factor multiplied into q̂ when it depends on the attended count (log-n; then scale 1),
    else one constant ``scale``; and the soft-cap value."""
    softcap = 0.0
    if rule.caps:
        if getattr(rule, "base", None) is None or rule.base.caps or not hasattr(rule, "cap_value"):
            raise InputError(
                f"scale: rule {rule.describe()['formula']!r} caps more than once; "
                "attnscale.torch.attention takes one soft-cap (use attnscale.attention, NumPy)"
            )
        softcap = float(rule.cap_value)
    q, k = p.q, p.k
    if q.shape[-1] == 0:  # no dimensions: every logit is 0 (capped 0), whatever the rule
        return replace(p, scale=1.0, softcap=softcap)
    if q.element_size() < 4:  # half precision (flex, SDPA): q̂, k̂ made in float32, rounded once for the call
        q, k = q.float(), k.float()
    if rule.normalizes:
        q, k = _normalized(torch, rule, q), _normalized(torch, rule, k)
    d_k = q.shape[-1]
    if rule.uses_n:
        n = _attended_counts(torch, p).cpu().numpy()[..., None]  # (B, H_q, L, 1)
        factor = torch.as_tensor(rule.factor(d_k, n), dtype=q.dtype, device=q.device)
        return replace(p, q=q * factor, k=k, scale=1.0, softcap=softcap)
    return replace(p, q=q, k=k, scale=float(rule.factor(d_k)), softcap=softcap)


def _normalized(torch, rule, x):
    """QK-norm's normalisation of x: (..., d_k) (:func:`qk_normalized`), the rule found through any caps."""
    while not hasattr(rule, "norm"):
        rule = rule.base
    return qk_normalized(rule, x)


def qk_normalized(rule: QKNorm, x):
    """QK-norm's x / rms(x) (``norm="rms"``) or x / ‖x‖, with its eps, of x: (..., d_k), as
    x · rsqrt(Σ or mean of x² + eps): the one torch form of the rule's normalisation, for the models
    that train with it (:mod:`attnscale.torch.scales`) and for :func:`attention`'s ``scale=QKNorm(...)``."""
    sq = x.pow(2).mean(-1, keepdim=True) if rule.norm == "rms" else x.pow(2).sum(-1, keepdim=True)
    return x * (sq + rule.eps).rsqrt()


def _attended_counts(torch, p: Problem):
    """(B, H_q, L): keys each row attends (mask, causal limit and −inf bias), as log-n scaling counts them."""
    B, H, L = p.q.shape[:3]
    S = p.k.shape[-2]
    parts = []
    for i0, i1 in row_chunks(p):
        allowed = allowed_keys(torch, p, i0, i1)
        if p.bias is not None:
            finite = p.bias[:, :, i0:i1] != -math.inf
            allowed = finite if allowed is None else allowed & finite
        parts.append(torch.full((B, H, i1 - i0), S, device=p.q.device) if allowed is None else allowed.sum(-1))
    return torch.cat(parts, dim=-1) if parts else torch.zeros((B, H, 0), device=p.q.device)


def _prepare(torch, q, k, v, scale, mask, bias, causal, check_finite, backend, stats) -> tuple[Problem, str | None]:
    """The validated problem and the backend that computes it (None: plain SDPA, for an output
    without figures on backend "auto")."""
    for name, x in (("q", q), ("k", k), ("v", v)):
        _check_tensor(torch, name, x)
    sig = _signature_of(torch, q, k, v, scale, causal, bias is not None, backend, stats)
    lead, batch, target, compute = sig.shapes.lead, sig.batch, sig.target, sig.compute

    def flat(x):
        if x.dim() == 2:  # (N, d): one head
            x = x[None]
        if x.dim() != 4 or x.shape[0] != batch:  # a (B, H, N, d) input is already flat: no view nodes
            x = x.expand(lead + tuple(x.shape[-3:])).reshape((batch,) + tuple(x.shape[-3:]))
        return x if x.dtype == compute else x.to(compute)  # a no-op .to costs a call too: per call, measured

    mask4 = None
    if mask is not None:
        if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool:
            got = mask.dtype if isinstance(mask, torch.Tensor) else type(mask).__name__
            raise InputTypeError(f"mask: expected a bool torch.Tensor (True = attend), got {got}")
        mask4 = _broadcast_rows(torch, "mask", mask if mask.device == q.device else mask.to(q.device), target, batch)
    bias4 = None
    if bias is not None:
        if not isinstance(bias, torch.Tensor) or not bias.is_floating_point():
            got = bias.dtype if isinstance(bias, torch.Tensor) else type(bias).__name__
            raise InputTypeError(f"bias: expected a floating-point torch.Tensor, got {got}")
        if check_finite and bias.numel() and not bool(bias.max() < math.inf):  # max is NaN if any is
            raise InputError("bias: contains NaN or +Inf; expected finite values or -inf (masked)")
        bias4 = _broadcast_rows(
            torch, "bias", bias.to(device=q.device, dtype=_bias_dtype(torch, compute, bias)), target, batch
        )
    p = Problem(
        q=flat(q),
        k=flat(k),
        v=flat(v),
        mask=mask4,
        bias=bias4,
        alignment=sig.alignment,
        scale=1.0 if sig.factor is None else sig.factor,
        softcap=0.0,
        lead=lead,
        squeeze_heads=sig.squeeze,
        out_dtype=q.dtype,
    )
    p = _isolate_unattended_keys(torch, p)
    return (p if sig.factor is not None else _apply_rule(torch, p, sig.rule)), sig.chosen


def _bias_dtype(torch, compute, bias):
    """The dtype a bias is computed in: the problem's, except that a float32 (or float64) bias beside
    half-precision inputs stays float32, as PyTorch's SDPA keeps it (a causal ALiBi bias of slope 0.3
    over 1,024 keys rounded to bfloat16 moves logits by up to 1: issue 51)."""
    return compute if compute.itemsize >= 4 or bias.dtype.itemsize < 4 else torch.float32


def _isolate_unattended_keys(torch, p: Problem) -> Problem:
    """``p`` with the non-finite values (NaN, ±inf) of the keys that no query row of their KV head
    attends (a padding mask's, or those past the causal reach) zeroed in k and v: they then reach
    neither the output nor a gradient (0 × NaN in a backward's products would). Finite values are
    kept as they are, so that a head table's Σ ‖k‖ still reads the keys given: 0 × a finite value is
    0, and such keys get zero gradients either way, as SDPA gives masked keys. Finite k and v (the
    usual case) cost one finiteness scan and no copy; a copy only when there are such values."""
    L, S = p.q.shape[-2], p.k.shape[-2]
    if S == 0 or L == 0 or (p.mask is None and not (p.alignment == "top_left" and S > L)):
        return p
    if _all_finite(torch, p.k) and _all_finite(torch, p.v):
        return p
    if p.mask is None:  # top_left with S > L: keys j > L - 1 lie past every row's reach
        unused = (torch.arange(S, device=p.q.device) > L - 1)[None, None, :]
    else:
        B, H_q = p.q.shape[:2]
        H_kv = p.k.shape[1]
        if p.alignment is None and p.mask.stride(2) == 0:  # one row for all (a padding mask): read it once
            used = p.mask[:, :, 0]
        else:  # a block of rows at a time: no (B, H_q, L, S) temporary
            parts = (allowed_keys(torch, p, i0, i1).any(-2) for i0, i1 in row_chunks(p))
            used = functools.reduce(torch.logical_or, parts)
        used = used.reshape(B, H_kv, H_q // H_kv, S).any(-2)
        unused = ~used
        if not bool(unused.any()):
            return p
    fill = unused[..., None]
    return replace(
        p, k=p.k.masked_fill(fill & ~torch.isfinite(p.k), 0.0), v=p.v.masked_fill(fill & ~torch.isfinite(p.v), 0.0)
    )


def _all_finite(torch, x, kernel: bool | None = None) -> bool:
    """Whether ``x`` holds no NaN or ±Inf: with the kernel built (``kernel`` None: whether it is
    loaded), its own vectorised scan (float32/float64 CPU); else two reductions (min and max
    propagate NaN). No full-size temporary either way (isfinite().all() made one: 0.3 ms a MiniLM call)."""
    if x.numel() == 0:
        return True
    if kernel is None:
        kernel = ext.load_kernel() is not None
    if kernel and x.device.type == "cpu" and x.dtype in (torch.float32, torch.float64):
        four = x[(None,) * (4 - x.dim())] if x.dim() <= 4 else x.flatten(0, -4)
        return bool(torch.ops.attnscale_health.all_finite(four))
    lo, hi = torch.aminmax(x)
    return bool(torch.isfinite(lo) & torch.isfinite(hi))


def _check_finite(torch, given: dict, kernel: bool) -> None:
    """Refuse NaN or ±Inf in q, k, v as given, naming the first (:func:`_all_finite`)."""
    for name, x in given.items():
        finite = _all_finite(torch, x, kernel)
        if not finite:
            raise InputError(
                f"{name}: contains NaN or Inf; expected finite values (check_finite=True asked for this check)"
            )


def _broadcast_rows(torch, name: str, x, target: tuple, batch: int):
    """``x`` broadcast to ``target`` (..., H_q, L, S), flattened to (batch, H_q, L, S) (a view)."""
    try:
        x = x.expand(target)
    except RuntimeError:
        raise InputError(f"{name}: shape {tuple(x.shape)} cannot broadcast to (..., H_q, L, S) = {target}") from None
    return x if len(target) == 4 else x.reshape((batch,) + target[-3:])  # (B, H, L, S) is flat already


def attention(
    q,
    k,
    v,
    *,
    scale=None,
    mask=None,
    bias=None,
    causal=False,
    dropout_p: float = 0.0,
    generator=None,
    return_stats: bool = False,
    logit_range: bool = False,
    first_key: bool = False,
    backend: str = "auto",
    check_finite: bool = False,
    head_table: bool = False,
    counted=None,
):
    """Scaled dot-product attention, exact, in memory O(L·d), with its per-row figures on request.

    Args:
        q: (..., H_q, L, d_k). k: (..., H_kv, S, d_k). v: (..., H_kv, S, d_v). torch tensors of one
            floating dtype and device; H_q a multiple of H_kv; leading dimensions broadcast; rank 2
            (N, d) means one head.
        scale: multiplies q·k. None = 1/√d_k; a number (0.0 is legal); a rule or its name
            (:mod:`attnscale.scales`: inverse_sqrt_dk, inverse_dk, unscaled, logn, qknorm, softcap;
            the composed backend cannot soft-cap and says so).
        mask: bool tensor, True = attend, broadcastable to (..., H_q, L, S) (masked keys: module docstring).
        bias: additive float tensor, broadcastable to (..., H_q, L, S); -inf entries are not attended;
            float32 beside half-precision inputs stays float32, as in SDPA.
        causal: False, "top_left" (PyTorch is_causal), "bottom_right" (KV-cache decoding), or True (L == S).
        dropout_p, generator: SDPA's dropout, drawn from ``generator`` (None: PyTorch's default
            one); the figures describe the softmax before it (module docstring).
        return_stats: also return each row's figures, as ``(out, stats)``. Without it, backend "auto"
            hands the call to ``torch.nn.functional.scaled_dot_product_attention`` (but a soft-cap).
        logit_range: the figures include each row's largest and smallest attended logit (its cost:
            module docstring); needs ``return_stats=True``.
        first_key: the figures include each row's weight on key 0 (``first_key_weight``: a head
            that puts most of every row's weight there is an attention sink): the kernel's own
            pass, else one product of q̂ with k̂_0 per head, O(L·d_k). Needs ``return_stats=True``.
        backend: "auto", "kernel", "composed", "chunked" or "flex" (module docstring).
        check_finite: refuse NaN/Inf in q, k, v and NaN/+Inf in bias, naming the first. Off by
            default, as in PyTorch: the scan reads every input once more (on CUDA a host sync per
            call), and a non-finite input still shows, as NaN output and figures.
        head_table: the figures also summed per head as the monitor keeps them (counts, sums,
            extremes: :mod:`attnscale.torch.monitor_aggregates`), made by the kernel with the rows, in
            ``stats.head_table`` and ``stats.counted_entropy``; needs ``logit_range`` and ``first_key``.
            Other backends leave both None (the caller sums the figures: its ``call_figures``).
        counted: with ``head_table``, bool (..., L) (q's leading dimensions, L): the rows it counts; None: all.

    Returns:
        The output tensor (..., H_q, L, d_v), or ``(out, stats)`` with ``return_stats=True``, stats an
        :class:`AttentionStats`. ``out`` carries gradients (``.backward()`` works on every backend);
        the figures are detached diagnostics. A backend that could not record a backward for inputs
        that require grad raises :class:`InputError` rather than return an output without one.

    >>> import torch
    >>> q = torch.tensor([[1.0, 0.0, 1.0, 0.0]]); k = torch.tensor([[0.0, 1.0, 1.0, 1.0], [0.0, 0.0, 0.0, 0.0]])
    >>> out, stats = attention(q, k, torch.ones(2, 3), return_stats=True, logit_range=True)
    >>> [round(float(x), 4) for x in (stats.max_logit[0], stats.lse[0], stats.entropy[0])]   # logits 0.5 and 0
    [0.5, 0.9741, 0.6628]
    """
    torch = require("torch", "torch")
    _check_options(backend, return_stats, logit_range, first_key, head_table)
    dropout = _check_dropout(torch, dropout_p, generator, q)
    p, chosen = _prepare(torch, q, k, v, scale, mask, bias, causal, check_finite, backend, return_stats)
    p, chosen = _with_dropout(torch, p, chosen, backend, dropout, generator) if dropout else (p, chosen)
    if chosen is None:  # PyTorch's SDPA cannot cap: a capped call has a backend
        if check_finite:
            _check_finite(torch, {"q": q, "k": k, "v": v}, kernel=False)
        return p.shaped(plain_sdpa(torch, p)).to(p.out_dtype)
    if check_finite:
        _check_finite(torch, {"q": q, "k": k, "v": v}, kernel=chosen == "kernel")
    rows = _counted_rows(torch, p, q, counted) if head_table else None
    figures, chosen = _run_backend(torch, p, chosen, backend, logit_range, first_key, head_table, rows)
    _check_graph(torch, (q, k, v, bias), figures[0], chosen)
    out = p.shaped(figures[0])
    out = out if out.dtype == p.out_dtype else out.to(p.out_dtype)
    return out if not return_stats else (out, _stats(torch, p, figures, chosen, logit_range, first_key))


@dataclass(frozen=True)
class KeptAttention:
    """:func:`attention` with every figure and the head table (``return_stats``, ``logit_range``,
    ``first_key``, ``head_table``) on the fused kernel, for one signature whose checks were made
    (:func:`kept_attention`): called again with tensors of that signature (the monitor's replace
    mode, layer after layer, step after step), it runs the op and nothing else. Its results are
    attention()'s, bit for bit (tested)."""

    target: tuple  # (B, H_q, L, S): what the mask broadcasts to
    arguments: tuple  # the op's others (backends.kernel.kernel_arguments)
    alignment: str | None = None  # the causal alignment, for the keys no row attends

    def __call__(self, q, k, v, mask, counted):
        """q, k, v (B, H, L, d) of the signature; mask None or bool broadcastable to (B, H_q, L, S);
        counted None or bool (B, L) (:func:`attention`'s): ``(out, stats)`` as attention() returns them."""
        mask = None if mask is None else mask.expand(self.target)
        if mask is not None or (self.alignment == "top_left" and self.target[3] > self.target[2]):
            # as attention() does: the non-finite values of keys no row attends zeroed (_isolate_unattended_keys)
            iso = _isolate_unattended_keys(
                require("torch", "torch"), Problem(q, k, v, mask, None, self.alignment, 1.0, 0.0, (), False, q.dtype)
            )
            k, v = iso.k, iso.v
        out, lse, entropy, hi, lo, first, table, counted_entropy = call_kernel(
            q, k, v, mask, None, counted, self.arguments
        )
        return out, AttentionStats(lse, entropy, hi, lo, "kernel", first, table, counted_entropy)


def kept_attention(q, k, v, *, scale, causal, mask, backend: str = "auto") -> KeptAttention | None:
    """The :class:`KeptAttention` of ``attention(q, k, v, scale=scale, mask=mask, causal=causal,
    backend=backend, return_stats=True, logit_range=True, first_key=True, head_table=True)``, for
    its signature (call it after that call succeeded: its arguments are checked there), when the
    fused kernel computes it on the tensors as given and returns its results as they are: q, k and
    v 4-D of one batch, in the dtype it computes in, a query and a value column at least, a constant
    scale (not QK-norm, log-n or a soft-cap), no mask or a bool one; else None."""
    torch = require("torch", "torch")
    if type(backend) is not str or not _keepable(torch, scale, causal):
        return None
    sig = _signature_of(torch, q, k, v, scale, causal, False, backend, True)
    as_given = q.dim() == k.dim() == v.dim() == 4 and q.shape[0] == k.shape[0] == v.shape[0] == sig.batch
    if not (sig.chosen == "kernel" and sig.factor is not None and as_given and q.dtype == sig.compute):
        return None
    if 0 in (*q.shape, k.shape[-2], v.shape[-1]) or not (mask is None or mask.dtype == torch.bool):
        return None  # a zero size: attention() takes another path (_run_backend)
    p = Problem(q, k, v, None, None, sig.alignment, sig.factor, 0.0, sig.shapes.lead, False, q.dtype)
    return KeptAttention(sig.target, kernel_arguments(p, True, True, True), sig.alignment)


def _stats(torch, p: Problem, figures: tuple, backend: str, logit_range: bool, first_key: bool) -> AttentionStats:
    """The :class:`AttentionStats` of a backend's figures (:func:`_run_backend`), shaped as the rows."""
    _, lse, entropy, hi, lo, first, *table = figures

    def figure(x):  # detached: the kernel's figures are already (non-differentiable outputs)
        return None if x is None else p.shaped(x if not x.requires_grad else x.detach())

    return AttentionStats(
        lse=figure(lse),
        entropy=figure(entropy),
        max_logit=figure(hi) if logit_range else None,
        min_logit=figure(lo) if logit_range else None,
        backend=backend,
        first_key_weight=figure(_first_key_weight(torch, p, lse) if first is None else first) if first_key else None,
        head_table=table[0] if table else None,
        counted_entropy=figure(table[1]) if table else None,
    )


def _counted_rows(torch, p: Problem, q, counted):
    """head_table's rows counted as bool (B, L) of the flat problem, or None for all (``counted``:
    None, or bool (..., L) with q's dimensions before the head axis)."""
    if counted is None:
        return None
    expected = (*q.shape[:-3], q.shape[-2]) if q.dim() > 3 else (q.shape[-2],)
    if not isinstance(counted, torch.Tensor) or counted.dtype != torch.bool or tuple(counted.shape) != expected:
        got = f"{counted.dtype} {tuple(counted.shape)}" if isinstance(counted, torch.Tensor) else type(counted).__name__
        raise InputTypeError(f"counted: expected a bool tensor of shape {expected} (q's rows), got {got}")
    counted = counted if counted.device == p.q.device else counted.to(p.q.device)
    rows = (p.q.shape[0], p.q.shape[2])
    # (B, L) as given: no view; else q's rows broadcast as q is (over k's batch), then flattened.
    return counted if counted.shape == rows else counted.expand(*p.lead, rows[1]).reshape(rows)


def _check_dropout(torch, dropout_p, generator, q) -> float:
    """``dropout_p`` as a float in [0, 1] and ``generator`` None or a torch.Generator of q's device
    type, or the error naming the argument."""
    if isinstance(dropout_p, bool) or not isinstance(dropout_p, (int, float)) or not 0.0 <= dropout_p <= 1.0:
        raise InputError(f"dropout_p: expected a probability in [0, 1], got {dropout_p!r}")
    if generator is not None:
        if not isinstance(generator, torch.Generator):
            raise InputTypeError(f"generator: expected a torch.Generator or None, got {type(generator).__name__}")
        if isinstance(q, torch.Tensor) and generator.device.type != q.device.type:
            raise InputError(f"generator: expected one on q's device type {q.device.type}, got {generator.device}")
    return float(dropout_p)


def _with_dropout(torch, p: Problem, chosen, backend: str, dropout: float, generator):
    """The problem with its dropout and the backend that honours it: PyTorch's SDPA for an output
    without figures on "auto" (its own generator, so only without ``generator``), else chunked, the
    one backend of ours with dropout (half precision raised to float32, as it computes)."""
    if backend in ("kernel", "composed", "flex"):
        raise InputError(
            f"dropout_p: the {backend!r} backend has no dropout ({dropout} asked for); use 'chunked' or 'auto'"
        )
    p = replace(p, dropout_p=dropout, generator=generator)
    if chosen is None and generator is None:
        return p, None
    return _in_float32(torch, p), "chunked"


def _in_float32(torch, p: Problem) -> Problem:
    """``p`` with half-precision q, k, v and bias raised to float32 (what every backend but flex computes in)."""
    up = lambda x: x.to(torch.float32) if x is not None and x.element_size() < 4 else x  # noqa: E731
    return replace(p, q=up(p.q), k=up(p.k), v=up(p.v), bias=up(p.bias))


def _check_options(backend: str, return_stats: bool, logit_range: bool, first_key: bool, head_table: bool) -> None:
    """The backend is one of :data:`BACKENDS`, the figures asked for come with ``return_stats``, and
    the head table with the figures it sums."""
    check_choice("backend", backend, BACKENDS)
    if logit_range and not return_stats:
        raise InputError("logit_range: the logit range is a figure; pass return_stats=True to get it")
    if first_key and not return_stats:
        raise InputError("first_key: the weight on the first key is a figure; pass return_stats=True to get it")
    if head_table and not (logit_range and first_key):
        raise InputError(
            "head_table: the head table sums the logit range and the weight on key 0; "
            "pass logit_range=True and first_key=True"
        )


def _run_backend(
    torch, p: Problem, chosen: str, backend: str, logit_range: bool, first_key: bool, head_table=False, counted=None
):
    """(out, lse, entropy, max logit, min logit, weight on key 0 or None) of the prepared problem on
    the chosen backend, and the backend that ran it; with ``head_table`` on the kernel, the head
    table of the rows ``counted`` and the counted entropies after them. Chunked for d_k = 0, and for
    d_v = 0 (nothing for a BLAS or a fused kernel to multiply) but in the kernel's forward, which then
    skips its P·V products (the figures without an output, as the monitor's observe mode asks for
    them: see monitor.observe); no backend at all for no rows (B, H or L = 0) or no keys (S = 0),
    "auto"'s flex falling back where FlexAttention fails."""
    if p.q.shape[-1] == 0 or (
        p.v.shape[-1] == 0 and (chosen != "kernel" or _wants_grad(torch, (p.q, p.k, p.v, p.bias)))
    ):
        chosen = "chunked"  # d_k = 0: every logit 0 (SDPA's uniform weights), as plain torch computes it
    if 0 in (p.q.shape[0], p.q.shape[1], p.q.shape[2], p.k.shape[2]):  # no rows, or no keys to attend
        return nothing_attended(torch, p, logit_range), chosen
    if chosen == "flex" and backend == "auto":
        return _flex_or_fall_back(torch, p, logit_range)
    if chosen == "kernel" and head_table:
        return run_kernel(torch, p, logit_range, first_key, head_table, counted), chosen
    return RUNNERS[chosen](torch, p, logit_range, first_key), chosen


def _flex_or_fall_back(torch, p: Problem, logit_range: bool):
    """ "auto"'s flex: where FlexAttention fails on the problem, composed (chunked with a bias or a
    soft-cap), half precision raised to float32 as those backends compute. Returns (figures, backend)."""
    try:
        return RUNNERS["flex"](torch, p, logit_range), "flex"
    except FlexFailure:
        p = _in_float32(torch, p)
        fallback = "chunked" if p.bias is not None or p.softcap else "composed"
        return RUNNERS[fallback](torch, p, logit_range), fallback


def _first_key_weight(torch, p: Problem, lse):
    """(B, H_q, L): each row's weight on key 0, p_i0 = exp(s_i0 − lse_i), in lse's dtype, with s_i0
    the row's logit on key 0 as every backend forms it (q̂ and k̂, the scale or log-n's per-row factor
    already in q̂, the soft-cap, then the bias): one product of q̂ with k̂_0 per head, O(L·d_k), so no
    backend needs a figure of its own. 0 where key 0 is not attended (mask, causal limit, bias −inf);
    NaN for a row with nothing attended (lse −inf − (−inf)), as its entropy. Detached."""
    B, H, L = p.q.shape[:3]
    if p.k.shape[-2] == 0:  # no key 0: every row attends nothing
        return torch.full((B, H, L), math.nan, dtype=lse.dtype, device=lse.device)
    with torch.no_grad():
        # q̂ · k̂_0 as a product and a sum over d_k, each query head against its KV head by
        # broadcasting (no repeated keys, no batched matmul: a few small ops, as the monitor calls it
        # on every attention call).
        H_kv, d = p.k.shape[1], p.q.shape[-1]
        q = p.q if p.q.dtype == lse.dtype else p.q.to(lse.dtype)
        k0 = p.k[:, :, 0].to(lse.dtype) * p.scale  # (B, H_kv, d_k), small
        s = (q.reshape(B, H_kv, H // H_kv, L, d) * k0[:, :, None, None]).sum(-1).reshape(B, H, L)
        if p.softcap:
            s = p.softcap * torch.tanh(s / p.softcap)
        if p.bias is not None:
            s = s + p.bias[:, :, :, 0]
        attended = None if p.mask is None else p.mask[:, :, :, 0]
        if p.alignment is not None and p.causal_offset < 0:  # row i attends key 0 when 0 ≤ i + offset
            reach = torch.arange(L, device=s.device) + p.causal_offset >= 0
            attended = reach if attended is None else attended & reach
        if attended is not None:
            s = s.masked_fill(~attended, -math.inf)
        return (s - lse).exp_()


def _wants_grad(torch, inputs) -> bool:
    """Whether autograd is on and one of ``inputs`` (tensors or None) requires grad."""
    return torch.is_grad_enabled() and any(isinstance(x, torch.Tensor) and x.requires_grad for x in inputs)


def _check_graph(torch, inputs, out, backend: str) -> None:
    """Refuse an output that lost its gradient: inputs require grad, autograd is on, yet the backend
    recorded no backward (a kernel op without its autograd formula would otherwise return one quietly)."""
    if _wants_grad(torch, inputs) and not out.requires_grad:
        raise InputError(
            f"backend: {backend!r} gave no gradient for inputs that require grad; "
            "use backend='chunked' or call under torch.no_grad()"
        )


def _choose_backend(torch, device, dtype, has_bias: bool, caps: bool, backend: str) -> str:
    """The backend for inputs on ``device`` of ``dtype``, with or without a bias and a soft-cap."""
    on_cpu = device.type == "cpu"
    if backend == "flex":
        return "flex"  # what FlexAttention cannot do is refused by attnscale.torch.backends.flex
    if backend == "kernel":
        if not on_cpu:
            raise InputError(f"backend: 'kernel' runs on CPU tensors only, got device {device}; use 'composed'")
        if ext.load_kernel() is None:
            raise InputError(
                f"backend: the C++ kernel is not available ({ext.kernel_status()['reason']}); "
                "use 'auto' to fall back to composed PyTorch calls"
            )
        return "kernel"
    if backend == "composed" and has_bias:
        raise InputError(
            "bias: the 'composed' backend cannot weight a bias by the probabilities; "
            "use backend='kernel' (CPU) or 'chunked'"
        )
    if backend == "composed" and caps:
        raise InputError(
            "scale: the 'composed' backend cannot soft-cap the logits (rule 'softcap': PyTorch's "
            "fused kernels take none); use backend='kernel' (CPU) or 'chunked'"
        )
    # PyTorch's fused CUDA kernels have no float64.
    composable = not has_bias and not caps and (on_cpu or dtype != torch.float64)
    if backend == "composed" and not composable:
        raise InputError(
            f"backend: 'composed' has no float64 on {device} (PyTorch's fused CUDA kernels); use 'chunked' or 'auto'"
        )
    if backend != "auto":
        return backend
    if on_cpu and ext.load_kernel() is not None:
        return "kernel"
    if device.type == "cuda" and dtype != torch.float64:
        from attnscale.torch.backends.flex import cuda_status

        if cuda_status(torch)["backend"] == "flex":
            return "flex"
    return "composed" if composable else "chunked"
