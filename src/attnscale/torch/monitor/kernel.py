"""The monitor's one way to its figures: :func:`attnscale.torch.functional.attention_figures` with
every figure the monitor folds in (the logit range, the weight on key 0, the per-head table where
the rows allow), and the scale rule of an SDPA call."""

from __future__ import annotations

from attnscale.scales import Constant, SoftCap
from attnscale.torch.functional import attention_figures as _figures

__all__ = ["attention_figures", "scale_rule"]


def attention_figures(q, k, v, *, scale, mask, bias, causal, backend: str, head_table: bool, counted):
    """``(out, AttentionStats)`` of q (..., H_q, L, d_k), k (..., H_kv, S, d_k), v (..., H_kv, S, d_v)
    (``mask`` bool, True = attend; ``bias`` additive; ``causal`` False or an alignment), without the
    finiteness check (the figures count broken rows); ``head_table``/``counted``: the kernel's
    per-head table, of the rows ``counted``."""
    return _figures(
        q,
        k,
        v,
        scale=scale,
        mask=mask,
        bias=bias,
        causal=causal,
        logit_range=True,
        first_key=True,
        backend=backend,
        check_finite=False,
        head_table=head_table,
        counted=counted,
    )


def scale_rule(scale, softcap: float):
    """SDPA's scale (None = 1/√d_k), soft-capped as Gemma 2's eager attention when ``softcap``."""
    if not softcap:
        return scale
    return SoftCap(cap_value=softcap, base=Constant(scale)) if scale is not None else SoftCap(cap_value=softcap)
