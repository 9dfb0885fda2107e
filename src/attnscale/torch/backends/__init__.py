"""The backends of :func:`attnscale.torch.attention`, one module each (:mod:`attnscale.torch.functional`
says what each costs and how exact it is): ``"kernel"``, ``"composed"``, ``"chunked"``,
``"flex"``; and the problem every one reads (:mod:`.problem`). Each runner is a function
``(p: Problem, logit_range, first_key=False) -> (out, lse, entropy, max_logit, min_logit,
first_key_weight)``, (B, H_q, L[, d_v]); ``first_key_weight`` is None unless the backend makes it
itself (the kernel, on request): :func:`attnscale.torch.stats.first_key_weight` then forms it from
the prepared problem. The chooser is :mod:`attnscale.torch.choice`.
"""

from attnscale.torch.backends.chunked import run_chunked
from attnscale.torch.backends.composed import run_composed
from attnscale.torch.backends.flex import run_flex
from attnscale.torch.backends.kernel import run_kernel

__all__ = ["RUNNERS"]

RUNNERS = {"kernel": run_kernel, "composed": run_composed, "chunked": run_chunked, "flex": run_flex}
