"""The ``"kernel"`` backend: the fused C++ kernel of :mod:`attnscale.torch.ext` (CPU, float32/float64),
forward and its flash-style backward, in tiles of Q_BLOCK query rows × KV_BLOCK keys."""

from __future__ import annotations

from attnscale.torch.backends.problem import Problem

__all__ = ["run_kernel", "Q_BLOCK", "KV_BLOCK"]

Q_BLOCK, KV_BLOCK = 256, 512  # the kernel's tile: as PyTorch's fused CPU kernel for long sequences


def run_kernel(torch, p: Problem, logit_range: bool, first_key: bool = False):
    """The six figures of ``p`` (see :mod:`attnscale.torch.backends`), the weight on key 0 from the
    kernel itself on request (the logit it already made, no pass of its own)."""
    from attnscale.torch.ext import BACKWARD_KV_BLOCK, BACKWARD_Q_BLOCK, load_kernel

    def blas_ready(x):
        """Rows of unit-stride numbers, one after another (a transposed (B, L, H, d) view is fine;
        a broadcast row, stride 0, is not a valid BLAS leading dimension)."""
        return x if x.stride(-1) == 1 and x.stride(-2) >= max(1, x.shape[-1]) else x.contiguous()

    out, lse, entropy, hi, lo, first = load_kernel()(
        blas_ready(p.q),
        blas_ready(p.k),
        blas_ready(p.v),
        p.mask,
        p.bias,
        p.alignment is not None,
        p.causal_offset,
        p.scale,
        p.softcap,
        logit_range,
        first_key,
        Q_BLOCK,
        KV_BLOCK,
        BACKWARD_Q_BLOCK,
        BACKWARD_KV_BLOCK,
    )
    return out, lse, entropy, hi, lo, first if first_key else None
