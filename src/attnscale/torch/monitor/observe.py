"""Observe mode's figures of one call: the model's attention ran untouched (its output is the
model's), and :func:`attnscale.torch.attention` recomputes the figures from the detached q, k, v —
of the sampled rows alone with ``rows=K`` — checking an eager call's output against ours."""

from __future__ import annotations

import torch

from attnscale.torch.monitor.kernel import attention_figures, scale_rule
from attnscale.torch.monitor.masks import MaskParts
from attnscale.torch.monitor.padding import RealTokens
from attnscale.torch.monitor.rows import sampled_problem, take_rows
from attnscale.torch.monitor.tally import CallFigures
from attnscale.torch.monitor.tokens import with_first_real

__all__ = ["AGREEMENT", "DISAGREE", "observed"]

# How far (× max |v|) an eager call's own output may be from ours on the rows that attend a key
# before its figures are refused: rounding, not another computation. Eager functions take the
# softmax in float32 (Llama's and most others', whatever the model's dtype), so float64 gets
# float32's bound; half types round the logits themselves (bfloat16: 2^-8 relative, so a logit of
# 20 moves by 0.08), and their check only catches gross differences (a doubled scale, a sink).
# Measured on the tests' tiny models: float32 1.6e-7, float64 9.7e-8, float16 9.9e-4, bfloat16 6.6e-3.
AGREEMENT = {"float64": 1e-4, "float32": 1e-4, "float16": 5e-2, "bfloat16": 1e-1}
DISAGREE = (
    "its eager output differs from the rebuilt attention beyond rounding (an eager function "
    "that computes more than softmax(cap(scaling·q·kᵀ) + mask)·v)"
)


def observed(call, picked, *, backend: str, tokens: RealTokens, masks: MaskParts) -> CallFigures | str:
    """The figures of ``call`` (an :class:`~attnscale.torch.capture.SDPACall`, its grouped-query
    heads unpacked), of the rows ``picked`` (int64 (..., K), None: every row); or :data:`DISAGREE`
    when its eager output is not ours within :data:`AGREEMENT`."""
    with torch.no_grad():
        mask, bias, _ = masks.parts(call.attn_mask)
        keys = tokens.call_keys(call.name, call.q, call.k, mask, call.is_causal)
        q, causal = call.q, "top_left" if call.is_causal else False
        compared = call.source == "interface" and call.dropout_p == 0
        # The figures do not depend on v: where the output is not compared (the model's own is
        # the output), v of width 0 spares the CPU kernel its P·V products (measured, (16, 4, 64,
        # 16): its forward 0.72×), the figures the same bits. (Elsewhere d_v = 0 runs chunked.)
        v = call.v if compared or call.q.device.type != "cpu" else call.v[..., :0]
        if picked is not None:  # only the sampled rows: causal becomes their mask
            q, mask, bias = sampled_problem(call.q, call.k, mask, bias, call.is_causal, picked)
            causal = False
        tabled, counted = tokens.table_rows(call.q, picked)
        out, stats = attention_figures(
            q,
            call.k,
            v,
            scale=scale_rule(call.scale, call.softcap),
            mask=mask,
            bias=bias,
            causal=causal,
            backend=backend,
            head_table=tabled,
            counted=counted,
        )
        if compared:
            own = call.output if picked is None else take_rows(call.output, picked, along=-2)
            if not _agrees(out, stats, own, call):
                return DISAGREE
        if keys is not None and keys.first is not None:
            stats = with_first_real(stats, q, call.k, keys.first, call.scale, call.softcap, mask, bias, causal)
    return CallFigures(
        call.name, call.q, call.k, call.v, stats, call.source, call.index, read=q, sampled=picked, keys=keys
    )


def _agrees(out, stats, own, call) -> bool:
    """Our output ``out`` equals the model's own (``own``: ``call.output``, or its sampled rows)
    within :data:`AGREEMENT` × max |v| on every row that attends a key with finite logits (a row we
    call empty, the model averages)."""
    dtype = str(call.q.dtype).replace("torch.", "")
    rows = torch.isfinite(stats.lse)
    if not bool(rows.any()):
        return True
    gap = (out.float() - own.float()).abs().amax(-1)[rows].max()
    reach = float(call.v.abs().max()) if call.v.numel() else 0.0
    return float(gap) <= AGREEMENT.get(dtype, max(AGREEMENT.values())) * max(reach, 1e-30)
