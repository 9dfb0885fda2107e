"""One convention for every command's machine-readable output: ``--json FILE`` writes the result as
strict JSON to FILE, ``--json -`` prints it on stdout *instead of* the table; ``--quiet`` silences
progress. The target is checked before any work, so a bad path fails in a second, not after an hour.
"""

from __future__ import annotations

import sys
import unicodedata
from pathlib import Path
from typing import Any

from attnscale import results
from attnscale.errors import InputError
from attnscale.store import write_bytes_atomic


def add_json_option(parser, what: str = "the result") -> None:
    parser.add_argument(
        "--json",
        metavar="FILE",
        default=None,
        help=f"also write {what} as strict JSON to FILE; '-' prints it on stdout instead of the table",
    )


def add_quiet_option(parser) -> None:
    parser.add_argument("--quiet", action="store_true", help="no progress on stderr")


def check_json_target(args) -> None:
    """Refuse an unwritable ``--json FILE`` before the work starts (its folder must exist: a typo in a
    path creates nothing)."""
    target = getattr(args, "json", None)
    if target in (None, "-"):
        return
    path = Path(target)
    if path.is_dir():
        raise InputError(f"--json: {target!r} is a folder, expected a file name")
    if not path.parent.is_dir():
        raise InputError(f"--json: the folder {str(path.parent)!r} does not exist")
    results.check_writable(path.parent, "--json")


def check_out_folder(folder, what: str, named: bool = True) -> Path:
    """Refuse, before any work, an output folder that cannot be made or written (``what``: its option).

    The command may create ``D`` and anything inside it, never folders above it: a ``named`` folder
    (one the user typed) must have an existing parent, so a typo (``/nonexistent-dir/x``) creates
    nothing and fails at once. A default folder (``named=False``, e.g. ``./attnscale-results/train``)
    may create its missing parents under the current folder. Either way the nearest existing folder
    on the way must be writable (:func:`attnscale.results.check_writable`). Creates nothing."""
    path = Path(folder)
    if path.exists() and not path.is_dir():
        raise InputError(f"{what}: {str(path)!r} is a file, expected a folder")
    if named and not path.exists() and not path.parent.is_dir():
        raise InputError(f"{what}: the folder {str(path.parent)!r} (where {path.name!r} would be made) does not exist")
    return results.check_writable(path, what)


def json_to_stdout(args) -> bool:
    """True when ``--json -``: the command prints JSON and no table."""
    return getattr(args, "json", None) == "-"


def emit_json(args, obj: Any) -> None:
    """Write ``obj`` (an :class:`attnscale.results.Envelope` or plain data) where ``--json`` says."""
    target = getattr(args, "json", None)
    if target is None:
        return
    text = results.dumps(obj)
    if target == "-":
        sys.stdout.write(text + "\n")
    else:
        write_bytes_atomic(target, (text + "\n").encode("utf-8"))


def columns(text: str) -> int:
    """Columns ``text`` takes on a terminal: CJK characters take two."""
    return sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in text)


def pad(text: str, width: int, right: bool = False) -> str:
    """``text`` padded with spaces to ``width`` terminal columns (on the left when ``right``)."""
    fill = " " * max(0, width - columns(text))
    return fill + text if right else text + fill


def hold_results(kind: str, root):
    """The lock of the results folder ``<root>/<kind>/`` (:func:`attnscale.results_lock.locked`), held
    within the ``with`` block; while another run holds it, one line on stderr names that run (said even
    with ``--quiet``: a run that sits still must say why)."""
    from attnscale.i18n import _
    from attnscale.results_lock import locked

    def waiting(holder) -> None:
        folder = results.result_path(kind, root).parent
        line = (
            _(
                "waiting for {folder}: another attnscale run is writing it; this one goes on when it is done "
                "(Ctrl-C stops waiting)",
                folder=folder,
            )
            if holder is None
            else _(
                "waiting for {folder}: process {pid} on {host} is writing it ({command}, since {since}); this "
                "run goes on when it is done (Ctrl-C stops waiting)",
                folder=folder,
                pid=holder.pid,
                host=holder.host,
                command=holder.command,
                since=holder.since,
            )
        )
        print(f"attnscale: {line}", file=sys.stderr, flush=True)

    return locked(kind, root, waiting)
