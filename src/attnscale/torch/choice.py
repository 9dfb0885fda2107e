"""Which backend computes a call of :func:`attnscale.torch.attention`, and running it there: the
choice from the device, the dtype, a bias, a soft-cap and the backend asked for (the module docstring
of :mod:`attnscale.torch.functional` says what each backend costs); the dropout only chunked honours;
the zero sizes no backend needs; "auto"'s fall-back from FlexAttention; and the refusal of an output
that lost its gradient."""

from __future__ import annotations

from dataclasses import replace

import torch

from attnscale.errors import InputError
from attnscale.torch import ext
from attnscale.torch.backends import RUNNERS
from attnscale.torch.backends import flex
from attnscale.torch.backends.kernel import run_kernel
from attnscale.torch.backends.problem import Problem, nothing_attended

__all__ = ["BACKENDS", "choose_backend", "with_dropout", "in_float32", "run_backend", "wants_grad", "check_graph"]

BACKENDS = ("auto", "kernel", "composed", "chunked", "flex")


def choose_backend(device, dtype, has_bias: bool, caps: bool, backend: str) -> str:
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
    if device.type == "cuda" and dtype != torch.float64 and flex.cuda_status()["backend"] == "flex":
        return "flex"
    return "composed" if composable else "chunked"


def with_dropout(p: Problem, chosen, backend: str, dropout: float, generator):
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
    return in_float32(p), "chunked"


def in_float32(p: Problem) -> Problem:
    """``p`` with half-precision q, k, v and bias raised to float32 (what every backend but flex computes in)."""
    up = lambda x: x.to(torch.float32) if x is not None and x.element_size() < 4 else x  # noqa: E731
    return replace(p, q=up(p.q), k=up(p.k), v=up(p.v), bias=up(p.bias))


def run_backend(
    p: Problem, chosen: str, backend: str, logit_range: bool, first_key: bool, head_table=False, counted=None
):
    """(out, lse, entropy, max logit, min logit, weight on key 0 or None) of the prepared problem on
    the chosen backend, and the backend that ran it; with ``head_table`` on the kernel, the head
    table of the rows ``counted`` and the counted entropies after them. Chunked for d_k = 0, and for
    d_v = 0 (nothing for a BLAS or a fused kernel to multiply) but in the kernel's forward, which then
    skips its P·V products (the figures without an output, as the monitor's observe mode asks for
    them); no backend at all for no rows (B, H or L = 0) or no keys (S = 0), "auto"'s flex falling
    back where FlexAttention fails."""
    if p.q.shape[-1] == 0 or (p.v.shape[-1] == 0 and (chosen != "kernel" or wants_grad((p.q, p.k, p.v, p.bias)))):
        chosen = "chunked"  # d_k = 0: every logit 0 (SDPA's uniform weights), as plain torch computes it
    if 0 in (p.q.shape[0], p.q.shape[1], p.q.shape[2], p.k.shape[2]):  # no rows, or no keys to attend
        return nothing_attended(p, logit_range), chosen
    if chosen == "flex" and backend == "auto":
        return _flex_or_fall_back(p, logit_range)
    if chosen == "kernel" and head_table:
        return run_kernel(p, logit_range, first_key, head_table, counted), chosen
    return RUNNERS[chosen](p, logit_range, first_key), chosen


def _flex_or_fall_back(p: Problem, logit_range: bool):
    """ "auto"'s flex: where FlexAttention fails on the problem, composed (chunked with a bias or a
    soft-cap), half precision raised to float32 as those backends compute. Returns (figures, backend)."""
    try:
        return RUNNERS["flex"](p, logit_range), "flex"
    except flex.FlexFailure:
        p = in_float32(p)
        fallback = "chunked" if p.bias is not None or p.softcap else "composed"
        return RUNNERS[fallback](p, logit_range), fallback


def wants_grad(inputs) -> bool:
    """Whether autograd is on and one of ``inputs`` (tensors or None) requires grad."""
    return torch.is_grad_enabled() and any(isinstance(x, torch.Tensor) and x.requires_grad for x in inputs)


def check_graph(inputs, out, backend: str) -> None:
    """Refuse an output that lost its gradient: inputs require grad, autograd is on, yet the backend
    recorded no backward (a kernel op without its autograd formula would otherwise return one quietly)."""
    if wants_grad(inputs) and not out.requires_grad:
        raise InputError(
            f"backend: {backend!r} gave no gradient for inputs that require grad; "
            "use backend='chunked' or call under torch.no_grad()"
        )
