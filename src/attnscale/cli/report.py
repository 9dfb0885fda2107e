"""``attnscale report``: build the self-contained HTML report from the results folder and print its path.

The report only reads results. When the verification's result is missing or stale (written by another
attnscale version, for another quick/random-seed configuration than asked, judged from a training or
probe result that has since been replaced, or ``--fresh``), this
command runs ``attnscale verify`` first, writes its result into the results folder, and says so.
"""

from __future__ import annotations

import sys

from attnscale.cli.options import (
    add_command,
    add_lang_option,
    add_page_dir_option,
    add_results_option,
    add_seed_option,
    options_named,
    page_dir,
    results_root,
)
from attnscale.cli.output import (
    add_json_option,
    add_quiet_option,
    check_json_target,
    check_out_folder,
    emit_json,
    json_to_stdout,
)
from attnscale.i18n import N_, _


def register(sub) -> None:
    p = add_command(
        sub,
        "report",
        help="build the HTML report: the blog post's story, every number measured here, as figures",
        description="Build DIR/index.html (or DIR/index.zh.html with --lang zh, beside the English page): one "
        "self-contained page (no network) with the post's chapters, the verification's verdicts, "
        "figures, an interactive attention row, and the chapters of the experiments: each from your own "
        "full result, else the reference result shipped with attnscale (its package data), else "
        "your quick one, and says which. Runs the verification first when its result is missing or "
        "stale. Prints the page's path.",
        examples=[
            "attnscale report",
            "attnscale report --lang zh     (writes index.zh.html beside index.html)",
            "attnscale report --quick            (seconds; wider confidence intervals)",
            "attnscale report --open             (and open it in the browser)",
            "attnscale report --results runs --page-dir site   (results read from ./runs, the page written to ./site)",
        ],
    )
    add_page_dir_option(p)
    add_lang_option(p, "the page")
    p.add_argument("--quick", action="store_true", help="show the quick verification: seconds, wider intervals")
    p.add_argument("--fresh", action="store_true", help="rerun the verification even when its result is current")
    add_results_option(p, "every result is read from here; the verification is written here when it runs")
    add_seed_option(p, "random seed of the verification and the widget")
    p.add_argument("--open", action="store_true", help="open the page in the web browser when it is built")
    add_json_option(p, "what was built (page, language, each chapter's status, the verification shown)")
    add_quiet_option(p)
    p.set_defaults(run=run_report)


# A run as the reasons below name it.
RUN_KIND = {True: N_("quick", "run"), False: N_("full", "run")}


def stale_reason(env, quick: bool, seed: int) -> str | None:
    """Why the verification result ``env`` cannot be shown for this request, or None when it can."""
    from attnscale import __version__

    if env.version != __version__:
        return _("it was written by attnscale {then}, this is {now}", then=env.version or "?", now=__version__)
    if env.quick != quick:
        return _("it is a {then} run, a {now} one was asked", then=_(RUN_KIND[bool(env.quick)]), now=_(RUN_KIND[quick]))
    if env.seed != seed:
        return _("its random seed is {then}, {now} was asked", then=env.seed, now=seed)
    return None


def changed_source(env, root) -> str | None:
    """Why the verification is stale because a result its claims were judged from (a claim's
    ``sources``: kind, quick, created) has changed or gone since, or None."""
    from attnscale import results

    for claim in env.data.get("claims", []):
        for src in claim.get("sources") or []:
            try:
                now = results.read_preferred(src["kind"], root)
            except results.ResultError:
                return _(
                    "claim {id} was judged from a {kind} result that is no longer there",
                    id=claim.get("id"),
                    kind=src["kind"],
                )
            if (now.created, now.quick) != (src.get("created"), src.get("quick")):
                return _(
                    "claim {id} was judged from the {kind} result of {then}, which has since been replaced (now {now})",
                    id=claim.get("id"),
                    kind=src["kind"],
                    then=src.get("created"),
                    now=now.created,
                )
    return None


def current_verify(root, quick: bool, seed: int, fresh: bool) -> str | None:
    """None when the verification result under ``root`` can be shown, else why it must run first."""
    from attnscale import results

    path = results.result_path("verify", root, quick)
    if fresh:
        return _("--fresh asks for it")
    try:
        env = results.read("verify", root, quick=quick)
    except results.ResultMissing:
        return _("there is no verification result at {path} yet", path=path)
    except results.ResultError as err:
        return _("the verification result cannot be read ({err})", err=err)
    return stale_reason(env, quick, seed) or changed_source(env, root)


def chapter_kind(chapter: str) -> str | None:
    """The kind of result the page's chapter ``chapter`` (a name of the build's ``experiment_status``)
    shows: an experiment chapter's module's ``KIND``, or ``<family>/user/<name>`` for the chapter
    ``own-<family>-<name>`` of a model of the user's; None when it cannot be told."""
    import importlib

    from attnscale import results
    from attnscale.errors import InputError

    if chapter.startswith("own-"):
        family, _sep, name = chapter.removeprefix("own-").partition("-")
        try:
            return results.user_kind(family, name)
        except InputError:
            return None
    try:
        return importlib.import_module(f"attnscale.report.chapters.{chapter}").KIND
    except (ImportError, AttributeError):
        return None


def unrendered_lines(statuses: dict[str, str], root) -> list[str]:
    """One line per chapter the page could not render (status "error"): the result file and what is
    wrong with it when it cannot be read (:class:`attnscale.results.ResultError` names both), else
    that the chapter failed on a result that reads well (the page's box says how)."""
    from attnscale import results

    lines = []
    for chapter, status in statuses.items():
        if status != "error":
            continue
        kind = chapter_kind(chapter)
        try:
            env = None if kind is None else results.read_preferred(kind, root)
        except results.ResultError as err:
            lines.append(_("the chapter {chapter} is not on the page: {err}", chapter=chapter, err=err))
            continue
        lines.append(
            _("the chapter {chapter} is not on the page; the page's box says why", chapter=chapter)
            if env is None
            else _(
                "the chapter {chapter} is not on the page: it failed on {path}, which reads well; the page's box says why",
                chapter=chapter,
                path=env.path,
            )
        )
    return lines


def open_in_browser(path) -> bool:
    """Open the page in the default browser; False (and no error) where there is none."""
    import webbrowser

    try:
        return bool(webbrowser.open(path.resolve().as_uri()))
    except webbrowser.Error:
        return False


def run_report(args) -> int:
    from attnscale.cli.progress import Progress
    from attnscale.cli.verify import run_and_save, verify_config
    from attnscale.report.build import ReportConfig, build_report

    check_json_target(args)
    root = results_root(args)
    with options_named({"out": "--page-dir", "seed": "--seed", "lang": "--lang"}):
        config = ReportConfig(out=page_dir(args), results=root, lang=args.lang, quick=args.quick, seed=args.seed)
    check_out_folder(config.out, "--page-dir", named=args.page_dir is not None)
    note = (lambda text: None) if args.quiet else (lambda text: print(f"attnscale report: {text}", file=sys.stderr))
    with Progress(quiet=args.quiet) as progress:
        reason = current_verify(root, args.quick, args.seed, args.fresh)
        if reason is not None:
            check_out_folder(root, "--results", named=args.results is not None)
            command = f"attnscale verify{' --quick' if args.quick else ''} --seed {args.seed}"
            note(_("running the verification first ({command}): {reason}", command=command, reason=reason))
            _report, env = run_and_save(verify_config(args.quick, args.seed, results_root=root), root, progress)
            progress.close()
            note(_("wrote {path}", path=env.path))
        result = build_report(config, progress)
    emit_json(
        args,
        {
            "page": str(result.path.resolve()),
            "lang": config.lang,
            "chapters": result.experiment_status,
            "verify": {
                "path": str(result.verify.path),
                "quick": result.verify.quick,
                "created": result.verify.created,
                "version": result.verify.version,
            },
        },
    )
    if not json_to_stdout(args):
        print(result.path.resolve())
    for line in unrendered_lines(result.experiment_status, root):  # said even with --quiet: the page is not whole
        print(f"attnscale report: {line}", file=sys.stderr)
    if args.open and not open_in_browser(result.path):
        note(_("no web browser to open it with here; open the path above"))
    return 0
