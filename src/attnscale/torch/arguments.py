"""The checks of :func:`attnscale.torch.attention`'s arguments: what a call's signature alone
decides (shapes, dtypes, devices, the scale, causal, the backend), checked once and kept per
signature; the dropout, the monitor's options and its rows counted. Each failure is one line
naming the argument, what it got and what was expected."""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any

import torch

from attnscale.errors import InputError, InputTypeError, check_choice
from attnscale.masks import causal_alignment
from attnscale.scales import resolve_scale
from attnscale.shapes import QKVShapes, check_qkv_shapes
from attnscale.torch.backends.problem import Problem
from attnscale.torch.choice import BACKENDS, choose_backend

__all__ = ["Signature", "signature_of", "keepable", "check_tensor", "check_dropout", "check_options", "counted_rows"]


def check_tensor(name: str, x) -> None:
    if not isinstance(x, torch.Tensor):
        raise InputTypeError(f"{name}: expected a torch.Tensor, got {type(x).__name__}")


@dataclass(frozen=True)
class Signature:
    """What a call's signature alone decides (q, k and v's shapes, dtypes and devices, the scale,
    causal, whether a bias is given, the backend asked for and whether figures are), checked once
    and kept per signature (:func:`signature_of`): a model calls attention with the same few
    signatures, layer after layer and step after step."""

    shapes: QKVShapes
    rule: Any  # the scale's rule (attnscale.scales)
    target: tuple  # (..., H_q, L, S): what a mask or a bias broadcasts to
    batch: int  # the leading dimensions' product: the problem's flat batch
    alignment: str | None
    squeeze: bool  # every input was rank 2 (N, d): the head axis is dropped again
    chosen: str | None  # the backend that computes the call; None: plain SDPA (no figures, "auto")
    compute: Any  # the dtype it computes in
    factor: float | None  # the rule's constant scale; None when prepare.apply_rule applies it per call


def _check_rows(names_shapes_dtypes) -> list:
    """The shapes of q, k and v as (..., H, N, d), rank 2 (N, d) taken as one head, each checked to be
    floating point and at least 2-D."""
    shapes = []
    for name, shape, dtype in names_shapes_dtypes:
        if not dtype.is_floating_point:
            raise InputTypeError(f"{name}: expected a floating-point tensor, got dtype {dtype}")
        if len(shape) < 2:
            raise InputError(
                f"{name}: expected at least 2 dimensions (..., H, N, d) or (N, d), got shape {tuple(shape)}"
            )
        shapes.append(shape if len(shape) > 2 else (1, *shape))
    return shapes


def _signature(q_shape, k_shape, v_shape, dtypes, devices, scale, causal, has_bias, backend, stats) -> Signature:
    """The checked :class:`Signature` of tensors of these shapes, ``dtypes`` and ``devices`` (each
    q's, k's, v's), or the error naming what is wrong. Rank 2 (N, d) is one head."""
    shapes = _check_rows(zip("qkv", (q_shape, k_shape, v_shape), dtypes))
    if not (dtypes[0] == dtypes[1] == dtypes[2]):
        raise InputTypeError(f"q, k, v: expected one dtype, got q {dtypes[0]}, k {dtypes[1]}, v {dtypes[2]}")
    if not (devices[0] == devices[1] == devices[2]):
        raise InputError(f"q, k, v: expected one device, got q {devices[0]}, k {devices[1]}, v {devices[2]}")
    # Zero sizes (B, H, L, S, d_k or d_v = 0) are allowed here, as SDPA allows them (attention()'s docstring).
    sh = check_qkv_shapes.__wrapped__(*shapes, q_shape, k_shape, v_shape, allow_empty=True)  # kept here
    rule = resolve_scale(scale)
    alignment = causal_alignment(causal, sh.L, sh.S)
    chosen = None
    if stats or rule.caps or backend != "auto":
        chosen = choose_backend(devices[0], dtypes[0], has_bias, rule.caps, backend)
    # Half precision is computed in float32, as the NumPy core does for float16; FlexAttention
    # computes in the inputs' own dtype (the model's, as its own SDPA would), and so does plain SDPA
    # (chosen None), which has half kernels of its own: a copy to float32 would be a hidden cost.
    own = chosen in (None, "flex") or dtypes[0] == torch.float64
    # A constant scale (SDPA's, every model's) is the problem's own: no second Problem from apply_rule.
    constant = not (rule.caps or rule.normalizes or rule.uses_n)
    return Signature(
        shapes=sh,
        rule=rule,
        target=sh.lead + (sh.H_q, sh.L, sh.S),
        batch=math.prod(sh.lead),
        alignment=alignment,
        squeeze=len(q_shape) == len(k_shape) == len(v_shape) == 2,
        chosen=chosen,
        compute=dtypes[0] if own else torch.float32,
        factor=(float(rule.factor(sh.d_k)) if sh.d_k else 1.0) if constant else None,  # d_k 0: logits all 0
    )


# Kept where the scale and causal are plain values (a rule made anew, a dataclass with a validating
# __post_init__, cost more than the call's other checks: measured, in a model); typed, so that True
# is not taken for 1. A failed check is not kept: it raises each time.
_kept_signature = functools.lru_cache(maxsize=256, typed=True)(_signature)
_HASHED = (bool, float, int, str, type(None))


def keepable(scale, causal) -> bool:
    """Whether a call's signature may be kept: plain values for the scale and causal, and not while
    Dynamo traces (traced, a cache is no cache: it traces the function inside, and warns that it does)."""
    return type(scale) in _HASHED and type(causal) in _HASHED and not torch.compiler.is_compiling()


def signature_of(q, k, v, scale, causal, has_bias: bool, backend: str, stats) -> Signature:
    """The checked :class:`Signature` of a call on tensors q, k, v; kept where :func:`keepable`."""
    return (_kept_signature if keepable(scale, causal) else _signature)(
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


def check_dropout(dropout_p, generator, q) -> float:
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


def check_options(backend: str, logit_range: bool, first_key: bool, head_table: bool) -> None:
    """The backend is one of :data:`~attnscale.torch.choice.BACKENDS`, and the head table comes with
    the figures it sums."""
    check_choice("backend", backend, BACKENDS)
    if head_table and not (logit_range and first_key):
        raise InputError(
            "head_table: the head table sums the logit range and the weight on key 0; "
            "pass logit_range=True and first_key=True"
        )


def counted_rows(p: Problem, q, counted):
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
