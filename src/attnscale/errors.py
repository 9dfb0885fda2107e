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

    try:
        return importlib.import_module(module)
    except ImportError:
        raise MissingDependency(
            f"{module} is not installed; install it with: pip install 'attnscale[{extra}]'") from None
