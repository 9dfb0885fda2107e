"""The capture's one piece of process-wide state: :data:`REGISTRY`, owned by
:class:`~attnscale.torch.capture.context.capture_sdpa` (which enters and leaves captures in it) and
read by what a compiled graph or a rebound name calls, which cannot be handed a capture: a graph
reads neither from the mode itself (Dynamo 2.13 cannot guard on what it reaches through the mode
stack), and a name rebound to SDPA is one function for every capture."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Registry", "REGISTRY"]


@dataclass
class Registry:
    """``live``: the captures entered, innermost last (a compiled graph's ops report to the
    innermost). ``by_names``: the capture watching SDPA at its names (at most one: a capture entered
    while it watches finds calls with its mode). ``route``: ``{"names": bool}``, whether that
    capture's model is running while it watches by the names alone — a plain dict, which a compiled
    graph guards on by value: a graph traced while the model runs (the model compiled after the
    capture was entered) computes the figures, one traced elsewhere does not. ``at_name``: per
    thread, ``inside`` the capture handling an SDPA call at a name (the calls its handling makes pass
    straight on) and ``named`` (capture, module name) while its interface handler runs a module's
    attention function (the name of the SDPA call it makes). ``ops``: the custom ops by name, the one
    ``library`` defining them (kept: it unregisters when freed) and the ``token`` tensor they mutate.
    ``sites``: compiled graphs' attention call sites (:mod:`attnscale.torch.capture.paths`), appended
    while Dynamo traces, read by index when a graph runs; ``site_index`` their places."""

    live: list = field(default_factory=list)
    by_names: list = field(default_factory=list)
    route: dict = field(default_factory=lambda: {"names": False})
    at_name: threading.local = field(default_factory=threading.local)
    ops: dict = field(default_factory=dict)
    library: list = field(default_factory=list)
    token: list = field(default_factory=list)
    sites: list[tuple[str, Any, str]] = field(default_factory=list)
    site_index: dict[tuple[str, Any, str], int] = field(default_factory=dict)

    def innermost(self):
        """The innermost capture alive, or None."""
        return self.live[-1] if self.live else None


REGISTRY = Registry()
