"""The errors attnscale raises for bad user input.

Both subclass the built-in error a caller would expect (ValueError, TypeError), so plain
``except ValueError`` works, and share :class:`AttnScaleError`, so the CLI can turn exactly these
into one clear line and exit code 2 without hiding real bugs.
"""


class AttnScaleError(Exception):
    """Base class of every error attnscale raises for bad input."""


class InputError(AttnScaleError, ValueError):
    """An argument has the wrong shape or value. The message names the argument, what it got and
    what was expected."""


class InputTypeError(AttnScaleError, TypeError):
    """An argument has the wrong type or dtype. The message names the argument, what it got and
    what was expected."""


class MissingDependency(AttnScaleError, ImportError):
    """An optional dependency is not installed. The message names the install command."""


def require(module: str, extra: str):
    """Import an optional dependency, or raise :class:`MissingDependency` naming how to install it."""
    import importlib
    import sys

    # Already imported: a dict lookup, which torch.compile traces (import_module is a graph break,
    # and a per-call cost besides).
    found = sys.modules.get(module)
    if found is not None:
        return found
    try:
        return importlib.import_module(module)
    except ImportError:
        raise MissingDependency(
            f"{module} is not installed; install it with: pip install 'attnscale[{extra}]'"
        ) from None


def check_count(name: str, value, minimum: int = 1) -> int:
    """``value`` as a whole number >= ``minimum`` (steps, seeds, workers, sizes), or an
    :class:`InputError` naming ``name``. Booleans are refused: ``True`` is not a count."""
    import numbers

    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        raise InputError(f"{name}: expected an integer >= {minimum}, got {value!r}")
    return int(value)


def check_positive(name: str, value) -> float:
    """``value`` as a finite real number > 0 (a learning rate, a threshold), or an
    :class:`InputError` naming ``name``."""
    import math
    import numbers

    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not (value > 0 and math.isfinite(value)):
        raise InputError(f"{name}: expected a finite number > 0, got {value!r}")
    return float(value)


def check_choice(name: str, value, choices) -> None:
    """An :class:`InputError` naming ``name`` unless ``value`` is one of ``choices`` (names listed
    sorted when ``choices`` is a mapping or set, in their own order otherwise)."""
    if value not in choices:
        listed = sorted(choices) if isinstance(choices, (dict, set, frozenset)) else tuple(choices)
        raise InputError(f"{name}: expected one of {listed}, got {value!r}")
