"""Chapters from experiment results (training, real-model probe, telemetry).

Each module listed in :data:`attnscale.report.chapters.EXPERIMENT_CHAPTERS` names the ``KIND`` of
result it shows; its result is read through :func:`attnscale.results.read_preferred` (the user's own
full run when there is one, else the reference result shipped with attnscale, else the user's quick
run: one result per chapter, never a mix) and handed to its ``render(env)``. Generically, for
every chapter: no result yet → a note with its ``HOW_TO`` command; a malformed result → an error box
with the reader's message (the file and the field); a quick result → a "quick run" label beside the
title; and one line under the title (:func:`source_line`) says which of the three it shows, from which
machine and date, and the command that reproduces it with the time it took. A chapter that fails to
import or render becomes an error box too: one broken chapter never costs the reader the rest.
"""

from __future__ import annotations

import importlib
import traceback
from dataclasses import dataclass

from attnscale import results
from attnscale.provenance import machine_text
from attnscale.i18n import N_, _
from attnscale.report.html import error_box, esc
from attnscale.report.text import pretty

# By a result's origin (results.Envelope.origin): what kind of run it is, and the line under an
# experiment chapter's title that says which result the chapter shows and how to reproduce it.
RUNS = {"reference": N_("reference full run shipped with attnscale"), "quick": N_("quick run"), "full": N_("full run")}
SHOWN = {
    "full": N_("Shown: your own full run ({file}), computed {when} on {machine}. Rerun it with {command} ({took})."),
    "reference": N_(
        "Shown: the reference result shipped with attnscale, a full run computed {when} on {machine}. "
        "Reproduce it on your machine with {command} ({took}); your own full result then replaces it here."
    ),
    "quick": N_(
        "Shown: your own quick run ({file}), computed {when} on {machine}; there is no full or reference result. "
        "The full run: {command}."
    ),
}


@dataclass
class RenderedChapter:
    name: str  # the module name under attnscale.report.chapters
    title: str  # with the quick-run label when the result is a quick one
    html: str  # the chapter's body (without its <h2>)
    status: str  # "rendered", "missing" (no result yet) or "error"
    kind: str = ""  # the kind of result it shows
    envelope: results.Envelope | None = None  # the result read (None when missing or unreadable)
    error: str = ""  # why it is an error box (status "error"): the error's one line, naming the file

    @property
    def seconds(self) -> float:
        """The recorded compute time of the result shown (:func:`attnscale.results.recorded_seconds`),
        0 when none."""
        return (results.recorded_seconds(self.envelope) or 0.0) if self.envelope is not None else 0.0


def title_of(module, name: str) -> str:
    """The title of the chapter module ``module`` (named ``name``) in the bound language: its ``TITLE``, an
    ``N_`` message; a module that could not be imported is named by ``name``."""
    title = getattr(module, "TITLE", None) if module is not None else None
    return pretty(_(title)) if title else name.replace("_", " ")


def quick_title(title: str, env: results.Envelope | None) -> str:
    """``title`` with the quick-run label when ``env`` is a quick result."""
    return f"{title} · {_('quick run')}" if env is not None and env.quick else title


def when_text(created: str) -> str:
    """An envelope's ``created`` (ISO 8601, UTC) for reading: "2026-12-01 08:41:53 UTC"."""
    return created.replace("T", " ").replace("Z", " UTC")


def provenance_text(env: results.Envelope) -> str:
    """Where a result comes from: its file in the results folder, quick or full run, when (UTC), on what
    machine, which attnscale."""
    run = _(RUNS[env.origin])
    file = results.result_path(env.kind, "", env.quick).as_posix()  # relative to the results folder
    return _(
        "From {file}: a {run} computed {when} on {machine} (attnscale {version}).",
        file=file,
        run=run,
        when=when_text(env.created),
        machine=machine_text(env.environment),
        version=env.version,
    )


def provenance_line(env: results.Envelope) -> str:
    return f'<p class="note provenance-line">{esc(provenance_text(env))}</p>'


def duration_text(seconds: float) -> str:
    """A run time for reading: "42 s", "16 min 12 s", "1 h 05 min"."""
    s = int(round(max(seconds, 0.0)))
    if s == 0 and seconds > 0:  # "0 s" would read as "not measured" or "free"
        return _("under 1 s")
    if s < 60:
        return _("{s} s", s=s)
    if s < 3600:
        return _("{m} min {s} s", m=s // 60, s=s % 60)
    return _("{h} h {m} min", h=s // 3600, m=f"{s % 3600 // 60:02d}")


def command_of(env: results.Envelope, how_to: str) -> str:
    """The command that reproduces ``env``: for a reference result, the one that made it (with its
    options: its kind's ``reference_command`` in :data:`attnscale.results.KINDS`); else the chapter's ``HOW_TO``."""
    made_by = results.KINDS[env.kind].reference_command if env.kind in results.KINDS else None
    if env.origin == "reference" and made_by:
        return made_by
    return how_to or results.KINDS[env.kind].description


def source_line(env: results.Envelope, command: str) -> str:
    """The line under an experiment chapter's title: which result it shows (the user's own full run,
    the reference result or the user's quick run), from which machine and date, and ``command``, which
    reproduces it, with the time the run took as the result records it."""
    seconds = results.recorded_seconds(env)
    timing = results.cell_seconds(env)
    cached = env.data.get("cells_cached") if isinstance(env.data, dict) else None
    cells = len(env.data.get("cells") or []) if isinstance(env.data, dict) else 0
    if timing is not None and cells and timing.timed == cells:
        took = cells_took(timing, env.origin == "reference")
    elif seconds is None:
        took = _("its time is not recorded in the result")
    elif cached and cached >= cells:
        # Every cell came from the cache: the recorded seconds are the re-analysis's (a fraction of a
        # second to a few), not the experiment's, so they are not given as its time.
        took = (
            _(
                "its run time is not recorded in the result: its last run read all {cells} cells from the cache of an earlier run; the README gives the whole run's time",
                cells=cells,
            )
            if env.origin == "reference"
            else _(
                "its run time is not recorded in the result: its last run read all {cells} cells from the cache of an earlier run",
                cells=cells,
            )
        )
    elif cached:  # a resumed or re-analysed sweep: its last run's time is not what the cells cost
        took = _(
            "its last run took {time}, reading {cached} of its {cells} cells from the cache of an earlier run; the README gives the whole run's time",
            time=duration_text(seconds),
            cached=cached,
            cells=cells,
        )
    else:
        took = (
            _("it took {time} there", time=duration_text(seconds))
            if env.origin == "reference"
            else _("it took {time}", time=duration_text(seconds))
        )
    text = _(
        SHOWN[env.origin],
        file=results.result_path(env.kind, "", env.quick).as_posix(),
        when=when_text(env.created),
        machine=machine_text(env.environment),
        took=took,
        command="\x00",
    )
    before, after = esc(text).split("\x00")
    return f'<p class="note provenance-line source-{env.origin}">{before}<code>{esc(command)}</code>{after}</p>'


def cells_took(timing: results.CellSeconds, there: bool) -> str:
    """What a sweep's cells took, each its own computation's time wherever it was read from (a cache,
    an earlier result): their wall-clock seconds summed, and how many ran at once when known."""
    time, n, workers = duration_text(timing.wall_s), timing.cells, timing.workers
    if there:
        return (
            _("its {cells} cells took {time} of computing there", cells=n, time=time)
            if workers is None
            else _(
                "its {cells} cells took {time} of computing there, {workers} at a time",
                cells=n,
                time=time,
                workers=workers,
            )
        )
    return (
        _("its {cells} cells took {time} of computing", cells=n, time=time)
        if workers is None
        else _("its {cells} cells took {time} of computing, {workers} at a time", cells=n, time=time, workers=workers)
    )


def missing_note(how_to: str) -> str:
    return (
        f'<div class="note"><p>{esc(_("This chapter has no result yet. Produce it with:"))}</p>'
        f"<pre><code>{esc(how_to)}</code></pre><p>{esc(_('then build the report again.'))}</p></div>"
    )


def render_experiment(name: str, root) -> RenderedChapter:
    """One experiment chapter: rendered, a how-to note, or an error box. Never raises (except
    KeyboardInterrupt/SystemExit, which must still stop the build)."""
    module, kind, env = None, "", None
    try:
        module = importlib.import_module(f"attnscale.report.chapters.{name}")
        kind = module.KIND
        try:
            env = results.read_preferred(kind, root)
        except results.ResultMissing:
            return RenderedChapter(
                name, title_of(module, name), missing_note(getattr(module, "HOW_TO", "")), "missing", kind
            )
        html = source_line(env, command_of(env, getattr(module, "HOW_TO", ""))) + module.render(env)
        return RenderedChapter(name, quick_title(title_of(module, name), env), html, "rendered", kind, env)
    except Exception as err:  # a malformed result (ResultError names file and field), a chapter's bug
        return RenderedChapter(
            name,
            quick_title(title_of(module, name), env),
            error_box(_("This chapter could not be rendered; the rest of the report is unaffected."), err=err),
            "error",
            kind,
            env,
            traceback.format_exception_only(type(err), err)[-1].strip(),
        )
