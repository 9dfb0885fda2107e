"""Strict JSON (RFC 8259) for results: NaN and ±inf refused where they are (:func:`strict_jsonable`),
a figure that does not exist written as ``null`` (:func:`finite_or_none`), and the non-finite figures
of a producer's data nulled with their reasons beside them, and put back (:func:`nulled_nonfinite`,
:func:`restored_nonfinite`)."""

from __future__ import annotations

import copy
import math
import re
from typing import Any

from attnscale.store import to_jsonable


def finite_or_none(x: Any) -> float | None:
    """``float(x)`` when finite, else ``None``: write the reason beside it (e.g. ``"diverged"``)."""
    if x is None:
        return None
    x = float(x)
    return x if math.isfinite(x) else None


def nulled_nonfinite(obj: Any, where: str = "data") -> tuple[Any, dict[str, str]]:
    """``obj`` as plain JSON data with every NaN/±inf replaced by ``None``, and the reasons: where each
    was and what it was (``{"data.cells[3].result.loss": "NaN"}``). For producers whose data may hold
    non-finite figures that their own code does not yet name: write the reasons beside the data.

    >>> nulled_nonfinite({"loss": [1.0, float("nan")], "peak": float("inf")})
    ({'loss': [1.0, None], 'peak': None}, {'data.loss[1]': 'NaN', 'data.peak': 'Infinity'})
    """
    reasons: dict[str, str] = {}

    def walk(x, at):
        if isinstance(x, float) and not math.isfinite(x):
            reasons[at] = "NaN" if x != x else ("Infinity" if x > 0 else "-Infinity")
            return None
        if isinstance(x, dict):
            return {k: walk(v, f"{at}.{k}") for k, v in x.items()}
        if isinstance(x, list):
            return [walk(v, f"{at}[{i}]") for i, v in enumerate(x)]
        return x

    return walk(to_jsonable(obj), where), reasons


_PATH_STEP = re.compile(r"\.([^.\[\]]+)|\[(\d+)\]")


def restored_nonfinite(obj: Any, reasons: dict[str, str], where: str = "data") -> Any:
    """The inverse of :func:`nulled_nonfinite`: a copy of ``obj`` with each NaN/±inf that ``reasons``
    names put back in its place (for a reader that needs the figures as they were computed, as the
    cell cache keeps them). A path that does not lead to a ``null`` in ``obj`` is a ValueError naming it.

    >>> data, reasons = nulled_nonfinite({"loss": [1.0, float("nan")]})
    >>> restored_nonfinite(data, reasons)
    {'loss': [1.0, nan]}
    """
    out = copy.deepcopy(obj) if reasons else obj
    for at, what in reasons.items():
        steps = [key if key else int(index) for key, index in _PATH_STEP.findall(at[len(where) :])]
        rebuilt = where + "".join(f"[{s}]" if isinstance(s, int) else f".{s}" for s in steps)
        node = out
        try:
            for step in steps[:-1]:
                node = node[step]
            ok = rebuilt == at and bool(steps) and node[steps[-1]] is None
        except (KeyError, IndexError, TypeError):
            ok = False
        if not ok or what not in ("NaN", "Infinity", "-Infinity"):
            raise ValueError(f"nonfinite: {at!r} ({what!r}) does not name a null figure of {where}")
        node[steps[-1]] = float(what)
    return out


def strict_jsonable(obj: Any, where: str = "data") -> Any:
    """Plain JSON data (see :func:`attnscale.store.to_jsonable`), refusing NaN and ±inf with an
    error that names where they are (``data.cells[3].loss``)."""
    return _check_finite(to_jsonable(obj), where)


def _check_finite(obj: Any, where: str) -> Any:
    if isinstance(obj, float) and not math.isfinite(obj):
        raise ValueError(f"{where}: {obj!r} is not valid JSON; write null and say why beside it")
    if isinstance(obj, dict):
        for k, v in obj.items():
            _check_finite(v, f"{where}.{k}")
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            _check_finite(v, f"{where}[{i}]")
    return obj
