"""Numbers from result files as text for reading: the one place the report formats a figure."""

from __future__ import annotations

import math


def number(x, spec: str = ".3g", *, digits: int | None = None) -> str:
    """A figure from a result file as text; a missing or non-finite value (None, NaN, ±inf) is "—".

    ``spec`` is a format spec; with ``digits`` the figure is set for reading instead: integers with
    thousands separators, floats to ``digits`` significant digits, scientific below 10⁻³ and from 10⁶.
    A value that is not a number (a label) is shown as it is.

    >>> number(0.12345), number(None), number(float("nan")), number(4050.2, digits=4), number(12345678)
    ('0.123', '—', '—', '4,050', '1.23e+07')
    >>> number(1387386, digits=4), number(2.5e-5, digits=3), number(0.8, digits=2)
    ('1,387,386', '2.50e-05', '0.8')
    """
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "—"
    if digits is None:
        return format(x, spec)
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return str(x)
    if isinstance(x, int):
        return f"{x:,}"
    if x != 0 and (abs(x) < 1e-3 or abs(x) >= 1e6):
        return f"{x:.{digits - 1}e}"
    if abs(x) >= 1000:
        return f"{x:,.0f}"  # 4,050 rather than 4050 or 4.05e+03
    return f"{x:.{digits}g}"


def percent(fraction: float) -> str:
    """A level or a share as a percentage, as many digits as it has: 0.99 → "99%", 0.995 → "99.5%"."""
    return f"{fraction * 100:.6g}%"


def seconds(s: float) -> str:
    """A compute time in seconds as the page's footer shows it: "0.42 s", "12.3 s"."""
    return f"{s:.2f} s" if s < 10 else f"{s:.1f} s"
