"""What the CLI says about the fused CPU kernel (:mod:`attnscale.torch.ext`), which the library
builds silently on first use: one line before a first build, so that its seconds do not look like a
hang, and one line when it cannot be had, naming the backend that runs instead and why. Never a
build log."""

from __future__ import annotations

import sys

from attnscale.i18n import N_, _

# The build measured about 7 s on the project's two cores; the line rounds up, as a promise.
BUILDING = N_("building the fused kernel, once: ~10 s")
# What backend="auto" runs on CPU without the kernel (attnscale.torch.choice.choose_backend).
FALLBACK = N_("no fused kernel ({reason}): attention runs on composed PyTorch calls (backend 'composed')")


def prepare_kernel(quiet: bool = False, stream=None) -> bool:
    """Load (building if needed) the kernel before the work starts; whether it is there. With
    ``quiet``, the build goes unannounced; the fallback is said regardless (it changes what runs)."""
    from attnscale.torch import ext

    stream = stream or sys.stderr
    if ext.build_needed() and not quiet:
        print(_(BUILDING), file=stream, flush=True)
    status = ext.kernel_status()
    if not status["available"]:
        print(_(FALLBACK, reason=status["reason"]), file=stream, flush=True)
    return bool(status["available"])
