"""The ``"kernel"`` backend: the fused C++ kernel of :mod:`attnscale.torch.ext` (CPU, float32/float64),
forward and its flash-style backward, in tiles of :func:`query_block` query rows × KV_BLOCK keys."""

from __future__ import annotations


from attnscale.torch import ext
from attnscale.torch.backends.problem import Problem
from attnscale.torch.head_table import THRESHOLDS

__all__ = ["run_kernel", "kernel_arguments", "call_kernel", "query_block", "Q_BLOCK", "KV_BLOCK"]

Q_BLOCK, KV_BLOCK = 256, 512  # the kernel's tile: as PyTorch's fused CPU kernel for long sequences


def query_block(L: int) -> int:
    """The query rows of a tile for L of them: :data:`Q_BLOCK` from 768 rows, else 64 from 192, else
    32 (at most Q_BLOCK), PyTorch's own rule for its fused CPU kernel. A short sequence in one
    256-row block keeps its scores (256 × S numbers) out of the L2 cache: measured on the project's
    AMD EPYC, one thread, causal, forward with the figures ÷ SDPA: (4, 8, 256, 64) 0.97× → 0.64×,
    (2, 8, 512, 64) 0.76× → 0.60×, (16, 4, 64, 16) 1.10× → 0.98×."""
    return Q_BLOCK if L >= 768 else min(Q_BLOCK, 64 if L >= 192 else 32)


def kernel_arguments(p: Problem, logit_range: bool, first_key: bool, head_table: bool) -> tuple:
    """The op's arguments for ``p`` other than its tensors, as :func:`call_kernel` takes them: (those
    between the tensors and ``counted``: causal, its offset, scale, softcap and the figures asked
    for; those after ``counted``: the head table's thresholds, the tiles and the build). They depend
    on the problem's signature alone, so a caller may keep them (functional.KeptAttention)."""
    middle = (p.alignment is not None, p.causal_offset, p.scale, p.softcap, logit_range, first_key, head_table)
    tail = (
        *THRESHOLDS,
        query_block(p.q.shape[-2]),
        KV_BLOCK,
        ext.BACKWARD_Q_BLOCK,
        ext.BACKWARD_KV_BLOCK,
        ext.kernel_build(),
    )
    return middle, tail


def call_kernel(q, k, v, mask, bias, counted, arguments: tuple):
    """The op on q, k, v (B, H, L, d), mask and bias (B, H_q, L, S) or None, counted (B, L) or None,
    with :func:`kernel_arguments`' ``arguments``: its eight results as it returns them."""
    middle, tail = arguments
    return ext.load_kernel()(_blas_ready(q), _blas_ready(k), _blas_ready(v), mask, bias, *middle, counted, *tail)


def _blas_ready(x):
    """Rows of unit-stride numbers, one after another (a transposed (B, L, H, d) view is fine; a
    broadcast row, stride 0, is not a valid BLAS leading dimension)."""
    return x if x.stride(-1) == 1 and x.stride(-2) >= max(1, x.shape[-1]) else x.contiguous()


def run_kernel(p: Problem, logit_range: bool, first_key: bool = False, head_table: bool = False, counted=None):
    """The six figures of ``p`` (see :mod:`attnscale.torch.backends`), the weight on key 0 from the
    kernel itself on request (the logit it already made, no pass of its own). ``head_table``: two
    more results, the monitor's head table of the rows ``counted`` (bool (B, L); None: all), made
    with the figures (``head_tally.h``; needs ``logit_range`` and ``first_key``), float64
    (len(ROWS), H_q), and each row's entropy as it counts (B, H_q, L), NaN where not."""
    arguments = kernel_arguments(p, logit_range, first_key, head_table)
    out, lse, entropy, hi, lo, first, *tally = call_kernel(p.q, p.k, p.v, p.mask, p.bias, counted, arguments)
    return (out, lse, entropy, hi, lo, first if first_key else None, *(tally if head_table else ()))
