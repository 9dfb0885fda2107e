"""The flex backend's precision, measured: its entropy and lse against float64 over rows from uniform
to frozen (the sweep behind :data:`attnscale.torch.backends.flex.ENTROPY_ERROR_BOUND`, which its
tests hold and ``benchmarks/gpu.py`` measures on a GPU). Above the chooser: it runs
:func:`attnscale.torch.attention` with ``backend="flex"`` and ``"chunked"``."""

from __future__ import annotations

import math

import torch

from attnscale.attention_aux import AuxRequest
from attnscale.torch.functional import attention

__all__ = ["entropy_errors"]


def entropy_errors(
    dtype,
    device="cpu",
    *,
    logit_range: bool = False,
    rows: int = 200,
    keys: int = 256,
    d_k: int = 64,
    seed: int = 1,
) -> dict:
    """The flex backend's entropy and lse against float64 (the chunked backend on the same rounded
    inputs) over rows from uniform to frozen: row r's query is one random direction of norm √d_k
    times α_r, α = 0 then 10⁻² … 10³ (log-spaced); k, v: (1, 1, keys, d_k) standard normal.
    ``logit_range``: ask for the logit range too, which brackets the entropy (see Precision).

    Returns {"alpha", "entropy", "lse" (float64 references), "entropy_error", "lse_error"} as lists of
    ``rows`` floats, and "worst": the largest |Δentropy| / (1 + |lse|), the c of the Precision bound.
    """
    g = torch.Generator().manual_seed(seed)
    u = torch.randn(rows, d_k, generator=g, dtype=torch.float64)
    u = u / u.norm(dim=-1, keepdim=True) * math.sqrt(d_k)
    alpha = torch.cat([torch.zeros(1, dtype=torch.float64), torch.logspace(-2, 3, rows - 1, dtype=torch.float64)])
    q = (u * alpha[:, None])[None, None]  # (1, 1, rows, d_k)
    k, v = (torch.randn(1, 1, keys, d_k, generator=g, dtype=torch.float64) for _ in range(2))
    q, k, v = (x.to(device=device, dtype=dtype) for x in (q, k, v))
    with torch.no_grad():
        asked = AuxRequest(lse=True, entropy=True, logit_range=logit_range)
        _, ours = attention(q, k, v, backend="flex", aux=asked, check_finite=False)
        _, exact = attention(q.double(), k.double(), v.double(), backend="chunked", aux=asked, check_finite=False)
    ref_h, ref_lse = exact.entropy.reshape(-1).cpu(), exact.lse.reshape(-1).cpu()
    dh = (ours.entropy.reshape(-1).cpu().double() - ref_h).abs()
    dlse = (ours.lse.reshape(-1).cpu().double() - ref_lse).abs()
    return {
        "alpha": alpha.tolist(),
        "entropy": ref_h.tolist(),
        "lse": ref_lse.tolist(),
        "entropy_error": dh.tolist(),
        "lse_error": dlse.tolist(),
        "worst": float((dh / (1 + ref_lse.abs())).max()),
    }
