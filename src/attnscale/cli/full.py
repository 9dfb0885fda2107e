"""``attnscale full``: rerun every full experiment on this machine, one after the other, then build both
pages of the report from the results made here.

Each step is one of the commands a user runs (those that produced the reference results,
:data:`attnscale.experiments.references.PRODUCERS`), started as its own process with its output in
``DIR/full-logs/<kind>.log``. Resumable: a step whose own full result is already here and current
(not stale against this code, :func:`attnscale.experiments.references.stale_reasons`) is skipped, and a sweep
interrupted half-way resumes from its cell cache. One progress line; its ETA comes from the times
the reference results record (so it is only as right as this machine is like that one): for a sweep,
the own time of each cell that its cache here lacks (:func:`attnscale.results.cell_seconds`), divided
by the workers that will run them; for the other steps, the reference run's time.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from attnscale.cli.options import (
    add_command,
    add_lang_option,
    add_page_dir_option,
    add_results_option,
    page_dir,
    results_root,
)
from attnscale.cli.output import pad
from attnscale.cli.progress import fmt_duration
from attnscale.i18n import N_, _

#: The kinds in the order they run: the verification last, as it judges claims from the others.
ORDER = (
    "train/scale-vs-dk",
    "train/logit-growth",
    "train/lm",
    "train/early-warning",
    "probe/minilm",
    "probe/smollm2",
    "rescale/smollm2",
    "rescale/minilm",
    "telemetry",
    "verify",
)


def register(sub) -> None:
    p = add_command(
        sub,
        "full",
        help="rerun every full experiment here (hours on 2 cores), then the report from them",
        description="Run, one after the other, every command that made the reference results (the training "
        "sweeps, both probes, both rescales, the telemetry benchmark, the verification), each into "
        "the results folder, then build index.html and index.zh.html from the results made here. "
        "Resumable: a result already here and current is kept, an interrupted sweep resumes from "
        "its cells. Each command's output goes to DIR/full-logs/<kind>.log.",
        examples=[
            "attnscale full --dry-run   what it would run here, what it keeps, and the ETA",
            "attnscale full",
            "attnscale full --workers 2",
            "attnscale full --backend ray --address auto",
        ],
    )
    add_results_option(p, "results folder: every result is written here, the report reads them from here")
    add_page_dir_option(p)
    p.add_argument("--workers", type=int, default=None, help="the sweeps' worker processes (default: theirs)")
    p.add_argument("--backend", choices=("local", "ray"), default="local", help="where the sweeps' cells run")
    p.add_argument("--address", default=None, metavar="auto|HOST:PORT", help="with --backend ray: the cluster")
    p.add_argument("--quiet", action="store_true", help="no progress line")
    add_lang_option(p, "its own lines (the pages are built in both languages)")
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="list the steps (kept: current here, or to run, with the time each should take by the reference results: a sweep by its cells not cached here, --workers at a time), run none",
    )
    p.set_defaults(run=run_full_command)


@dataclass(frozen=True)
class Step:
    kind: str  # the result it makes ("" for a report page)
    argv: tuple[str, ...]  # attnscale's arguments
    expected_s: float | None  # seconds it should take here by the reference's times (None: not recorded)
    basis: str = ""  # what expected_s comes from, in words

    @property
    def command(self) -> str:
        return "attnscale " + " ".join(self.argv)


def plan(
    root: Path, pages: Path, workers: int | None = None, backend: str = "local", address: str | None = None
) -> list[Step]:
    """The steps, with the sweeps' options passed through, then the two report pages."""
    import shlex

    from attnscale import results
    from attnscale.experiments import references

    from attnscale.experiments.sweeps.runner import default_workers

    sweep = [
        *(("--workers", str(workers)) if workers is not None else ()),
        *(("--backend", backend) if backend != "local" else ()),
        *(("--address", address) if address else ()),
    ]
    steps = []
    for kind in ORDER:
        argv = shlex.split(references.producer(kind).command)[1:]
        argv += ["--results", str(root), *(sweep if kind.startswith("train/") else ())]
        try:
            reference = results.read_reference(kind)
        except results.ResultError:
            steps.append(Step(kind, tuple(argv), None, _("no reference result")))
            continue
        steps.append(Step(kind, tuple(argv), *expected_seconds(reference, root, workers or default_workers())))
    for lang in ("en", "zh"):
        steps.append(Step("", ("report", "--results", str(root), "--page-dir", str(pages), "--lang", lang), 0.0))
    return steps


def expected_seconds(reference, root: Path, workers: int) -> tuple[float | None, str]:
    """How long remaking the result of the envelope ``reference`` should take here, and what that comes
    from: for a sweep, the reference's own time of each cell that the cache under ``root`` lacks (a
    resumed sweep computes those only), run ``workers`` at a time; for the rest, the reference run's time."""
    from attnscale import results
    from attnscale.experiments.training.registry import cached

    timing = results.cell_seconds(reference)
    if timing is None:
        seconds = results.recorded_seconds(reference)
        return seconds, _("the reference run's time") if seconds is not None else _("the reference records no time")
    here = cached(reference.kind.split("/", 1)[1], [c.get("cell") for c in reference.data["cells"]], root)
    left = [s for s, hit in zip(timing.each, here) if not hit]
    unknown = sum(s is None for s in left)
    counts = dict(left=len(left), cells=timing.cells)
    if unknown:
        return None, _(
            "{left} of its {cells} cells to compute, {unknown} of them without a recorded time in the reference",
            unknown=unknown,
            **counts,
        )
    return sum(s for s in left if s is not None) / workers, _(
        "{left} of its {cells} cells to compute, by their times in the reference, {workers} at a time",
        workers=workers,
        **counts,
    )


def is_current(kind: str, root: Path) -> bool:
    """Whether the own full result of ``kind`` under ``root`` exists and this code would make it as it
    is (the verification also: judged from the results now here)."""
    from attnscale import results
    from attnscale.experiments import references
    from attnscale.cli.report import current_verify

    try:
        env = results.read(kind, root)
    except results.ResultError:
        return False
    if references.stale_reasons(env):
        return False
    return kind != "verify" or current_verify(root, quick=False, seed=0, fresh=False) is None


def run_process(step: Step, log: Path, env: dict) -> int:
    """Run one step as its own process, its output into ``log``; its exit status."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "w", encoding="utf-8") as f:
        proc = subprocess.Popen(
            [sys.executable, "-m", "attnscale", *step.argv], stdout=f, stderr=subprocess.STDOUT, env=env
        )
        try:
            while proc.poll() is None:
                time.sleep(1.0)
                yield None
        except BaseException:
            # Ctrl-C: the command stops as it does alone (keeping its finished cells); it may not
            # have had the signal itself (kill -INT of this process only), so it is passed on.
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            raise
    yield proc.returncode


class Line:
    """One progress line: steps done, time elapsed, the ETA from the reference run's times."""

    def __init__(self, steps: list[Step], stream=None, clock: Callable[[], float] = time.monotonic, quiet=False):
        self.steps, self.stream, self.clock, self.quiet = steps, stream or sys.stderr, clock, quiet
        self.start = clock()
        self.tty = getattr(self.stream, "isatty", lambda: False)()
        self.last = None

    def left(self, index: int, in_step: float) -> float:
        """Seconds left by the reference times: what remains of step ``index``, then the steps after
        (a step without a recorded time counts nothing: :meth:`unknown` says how many there are)."""
        rest = sum(s.expected_s or 0.0 for s in self.steps[index + 1 :])
        return rest + max((self.steps[index].expected_s or 0.0) - in_step, 0.0)

    def unknown(self, index: int) -> int:
        """Steps from ``index`` on whose time no reference records."""
        return sum(s.expected_s is None for s in self.steps[index:])

    def show(self, index: int, in_step: float, note: str = "", force: bool = False) -> None:
        if self.quiet:
            return
        now = self.clock()
        if not (force or self.tty) and self.last is not None and now - self.last < 60:
            return
        self.last = now
        unknown = self.unknown(index)
        left = fmt_duration(self.left(index, in_step))
        text = "attnscale full: " + _(
            LINE[min(unknown, 2)],
            step=index + 1,
            steps=len(self.steps),
            elapsed=fmt_duration(now - self.start),
            left=left,
            unknown=unknown,
            command=self.steps[index].command,
        )
        text += note
        self.stream.write(f"\r{text:<120}" if self.tty else text + "\n")
        self.stream.flush()

    def close(self) -> None:
        if self.tty and not self.quiet:
            self.stream.write("\n")
            self.stream.flush()


def run_full(
    steps: list[Step],
    root: Path,
    line: Line,
    runner=run_process,
    current=is_current,
    clock: Callable[[], float] = time.monotonic,
) -> list[tuple[Step, str]]:
    """Run the steps not yet current, in order; stop at the first that fails. Returns (step, "kept",
    "ran" or "failed (exit N)") for each step reached."""
    from attnscale import results

    done = []
    for i, step in enumerate(steps):
        if step.kind and current(step.kind, root):
            done.append((step, "kept"))
            line.show(i, step.expected_s or 0.0, " " + _("(kept: current)"), force=True)
            continue
        env = dict(os.environ)
        if not step.kind:
            env[results.REFERENCE_ENV] = ""  # the pages from the results made here only
        log = root / "full-logs" / f"{(step.kind or 'report-' + step.argv[-1]).replace('/', '-')}.log"
        started = clock()
        line.show(i, 0.0, force=True)
        code = None
        for code in runner(step, log, env):
            if code is None:
                line.show(i, clock() - started)
        if code != 0:
            done.append((step, f"failed (exit {code})"))
            return done
        done.append((step, "ran"))
    return done


def dry_run(steps: list[Step], root: Path, current=is_current) -> list[tuple[str, Step]]:
    """What :func:`run_full` would do with each step, running none: "kept" (current here) or "to run"."""
    return [("kept" if step.kind and current(step.kind, root) else "to run", step) for step in steps]


def print_dry_run(planned: list[tuple[str, Step]]) -> None:
    """The dry run's plan: each step, what it would do and, for one to run, its time and what from; then the total."""
    for what, step in planned:
        time = (
            ""
            if what == "kept" or not step.kind
            else f"  ({'?' if step.expected_s is None else '~' + fmt_duration(step.expected_s)}: {step.basis})"
        )
        print(f"{pad(_(OUTCOME[what]), 16)} {step.command}{time}")
    to_run = [step for what, step in planned if what != "kept"]
    left = fmt_duration(sum(step.expected_s or 0.0 for step in to_run))
    unknown = ", ".join(step.kind for step in to_run if step.expected_s is None)
    print("attnscale full: " + _(DRY_RUN_TOTAL[bool(unknown)], left=left, unknown=unknown))


# The progress line, by how many steps ahead have no recorded time (0, 1, 2 or more).
LINE = {
    0: N_("[{step}/{steps}] {elapsed} elapsed · ~{left} left · {command}"),
    1: N_("[{step}/{steps}] {elapsed} elapsed · ~{left} + {unknown} step of unrecorded time left · {command}"),
    2: N_("[{step}/{steps}] {elapsed} elapsed · ~{left} + {unknown} steps of unrecorded time left · {command}"),
}
# What became of a step (run_full's and dry_run's words), as the lists say it.
OUTCOME = {"kept": N_("kept"), "ran": N_("ran"), "to run": N_("to run")}
# The dry run's last line, by whether some steps to run have no recorded time.
DRY_RUN_TOTAL = {
    False: N_(
        "about {left}, by the times the reference results record (a sweep's: its cells' own, those not cached here only); nothing was run"
    ),
    True: N_(
        "about {left}, plus {unknown}, of no recorded time, by the times the reference results record (a sweep's: its cells' own, those not cached here only); nothing was run"
    ),
}


def run_full_command(args) -> int:
    from attnscale.cli.output import check_out_folder
    from attnscale.errors import check_count

    if args.workers is not None:
        check_count("--workers", args.workers)
    if args.address is not None and args.backend != "ray":
        from attnscale.errors import InputError

        raise InputError(f"--address: only with --backend ray, got --address {args.address!r} with --backend local")
    root = check_out_folder(results_root(args), "--results", named=args.results is not None)
    steps = plan(Path(root), Path(page_dir(args)), args.workers, args.backend, args.address)
    if args.dry_run:
        print_dry_run(dry_run(steps, Path(root)))
        return 0
    line = Line(steps, quiet=args.quiet)
    try:
        outcome = run_full(steps, Path(root), line)
    finally:
        line.close()
    for step, what in outcome:
        shown = _(OUTCOME[what]) if what in OUTCOME else _("failed (exit {code})", code=what.rpartition(" ")[2][:-1])
        print(f"{pad(shown, 16)} {step.command}")
    if outcome and outcome[-1][1].startswith("failed"):
        step = outcome[-1][0]
        log = Path(root) / "full-logs"
        said = _(
            "{command} failed; its output is in {log}/ . Run attnscale full again to go on from there.",
            command=step.command,
            log=log,
        )
        print(f"attnscale full: {said}", file=sys.stderr)
        return 1
    print(Path(page_dir(args), "index.html").resolve())
    return 0
