"""The rule two runs of a kernel on different thread counts are held to."""

from __future__ import annotations


def close_across_threads(one, other, ulps: int = 16) -> str | None:
    """None when ``other`` (run on N threads) equals ``one`` (1 thread) within ``ulps`` × eps ×
    max|one| and has its NaNs in the same places; else what differs. Both: torch tensors."""
    import torch

    if not torch.equal(one.isnan(), other.isnan()):
        return "NaN in other places"
    finite = one.isfinite()
    bound = ulps * torch.finfo(one.dtype).eps * (one[finite].abs().max().item() if finite.any() else 0.0)
    err = (other[finite] - one[finite]).abs().max().item() if finite.any() else 0.0
    return (
        None
        if err <= bound and torch.equal(one[~finite & ~one.isnan()], other[~finite & ~one.isnan()])
        else f"max |difference| {err:.3e} > {bound:.3e}"
    )
