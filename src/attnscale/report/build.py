"""Build the report from a results folder: read the verification's result (kind ``verify``) and every
experiment chapter's result through :mod:`attnscale.results`, render them, and write the page
atomically. The report runs nothing: when the verification's result is missing the build fails with
:class:`attnscale.results.ResultMissing`, and the ``attnscale report`` command (attnscale.cli.report)
runs ``attnscale verify`` first and says so.

Reproducible: the page is a function of the result files, the configuration and which other
language's page its folder holds (linked when there, else named with the command that writes it)
only. Its date is the newest ``created`` of the results it shows, its timings are the ones recorded
in them, and no path of this machine is printed, so a results folder copied elsewhere builds the
same bytes.

Both languages linked, whatever order they are built in: writing a page also links it from the other
language's page already in the folder (that page's language switch rewritten, nothing else).

Atomic: the page is written into a temporary folder beside ``out`` and renamed into place
(``os.rename``/``os.replace``, atomic on POSIX), so an interrupted build leaves the previous report
as it was.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from attnscale import results
from attnscale.errors import InputError
from attnscale.i18n import LANGS, _, current_lang, language
from attnscale.report.answer import answer_html
from attnscale.report.config_words import config_sentences
from attnscale.report import chapters
from attnscale.report.experiments import provenance_text, render_experiment, when_text
from attnscale.report.headline import cards as headline_cards, cards_html
from attnscale.report.html import esc
from attnscale.report.own_models import comparison_title, own_chapters
from attnscale.report.page import Section, render_page
from attnscale.report.seed import LANG_NAMES, glance_html, lang_links, seed_sections
from attnscale.report.verdicts import all_claims_table
from attnscale.report.widget_rows import read_real_rows

Progress = Callable[[int, int, str], None]

#: The page of each language, side by side in the output folder (each links to the other).
PAGE_NAMES = {"en": "index.html", "zh": "index.zh.html"}


@dataclass(frozen=True)
class ReportConfig:
    out: Path = Path("attnscale-report")  # the folder that receives index.html / index.zh.html
    results: Path = results.DEFAULT_ROOT  # every result is read from here
    lang: str = "en"  # "en" or "zh"
    quick: bool = False  # show the quick verification result (verify/quick.json)
    seed: int = 0  # the widget's seed

    def __post_init__(self):
        if self.lang not in LANGS:
            raise InputError(f"lang: expected one of {LANGS}, got {self.lang!r}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise InputError(f"seed: expected a non-negative integer, got {self.seed!r}")
        object.__setattr__(self, "out", Path(self.out))
        object.__setattr__(self, "results", Path(self.results))
        if self.out.exists() and not self.out.is_dir():
            raise InputError(
                f"out: expected a folder for {PAGE_NAMES[self.lang]}, got the existing file {str(self.out)!r}"
            )

    @property
    def page_name(self) -> str:
        return PAGE_NAMES[self.lang]


@dataclass
class BuildResult:
    path: Path  # <out>/index.html or <out>/index.zh.html
    seconds: float  # this build's wall time (not on the page: it would differ per build)
    verify: results.Envelope  # the verification result the page shows
    experiment_status: dict[str, str] = field(default_factory=dict)  # module → rendered/missing/error
    # module → why its chapter is an error box (the error's one line, naming the result file and field)
    experiment_errors: dict[str, str] = field(default_factory=dict)


def read_verify(config: ReportConfig) -> results.Envelope:
    """The verification result the page shows (full or quick as configured), validated."""
    return results.read("verify", config.results, quick=config.quick)


def write_site_atomic(out: Path, files: dict[str, bytes]) -> Path:
    """Write ``files`` (name → bytes) into the folder ``out`` so that a reader never sees a half-written
    report: everything is written and synced in a temporary folder beside ``out`` first. A new
    ``out`` is that folder renamed; an existing one receives each file by ``os.replace`` (other files
    in it, such as the other language's page, stay)."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.building-"))
    try:
        for name, data in files.items():
            with open(tmp / name, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
        os.chmod(tmp, 0o755)  # mkdtemp makes it private; a report folder is for reading
        if not out.exists():
            try:
                os.rename(tmp, out)
                return out
            except OSError:
                pass  # someone created ``out`` meanwhile: fall through to per-file replacement
        for name in files:
            os.replace(tmp / name, out / name)
        tmp.rmdir()
        return out
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def build_report(config: ReportConfig, progress: Progress | None = None) -> BuildResult:
    """Build ``config.out/<page>``. ``progress(done, total, label)`` follows the chapters. Raises
    :class:`attnscale.results.ResultMissing` when there is no verification result to show."""
    start = time.perf_counter()
    verify = read_verify(config)
    own = sum(len(results.user_kinds(family, config.results)) for family in ("probe", "rescale"))
    total = len(verify.data["chapters"]) + len(chapters.EXPERIMENT_CHAPTERS) + 1 + (own + 1 if own else 0)
    done = [0]

    def tick(label: str) -> None:
        done[0] += 1
        if progress:
            progress(done[0], total, _("chapter: {title}", title=label))

    errors: dict[str, str] = {}
    page, statuses = render_report(verify, config, tick, errors)
    files = {config.page_name: page.encode("utf-8"), **linked_siblings(config)}
    path = write_site_atomic(config.out, files) / config.page_name
    return BuildResult(
        path=path,
        seconds=time.perf_counter() - start,
        verify=verify,
        experiment_status=statuses,
        experiment_errors=errors,
    )


def pages_present(config: ReportConfig) -> set[str]:
    """The page names in ``config.out`` once this build has written its page."""
    return {config.page_name} | {name for name in PAGE_NAMES.values() if (config.out / name).is_file()}


# A page's language switch (seed.lang_links), the one part a later build of another language rewrites.
LANG_SWITCH = re.compile(r'<p class="lang-switch">.*?</p>', re.S)


def linked_siblings(config: ReportConfig) -> dict[str, bytes]:
    """The other languages' pages in ``config.out`` that do not link this build's page yet, their
    language switch rewritten (in their language) to link it; name → bytes, to be written with it."""
    out = {}
    for lang, name in PAGE_NAMES.items():
        path = config.out / name
        if lang == config.lang or not path.is_file():
            continue
        page = path.read_text(encoding="utf-8")
        if f'data-page="{config.page_name}"' not in page:
            continue
        with language(lang):
            switch = lang_links(PAGE_NAMES, pages_present(config))
        found = LANG_SWITCH.search(page)
        if found:
            out[name] = (page[: found.start()] + switch + page[found.end() :]).encode("utf-8")
    return out


def render_report(
    verify: results.Envelope,
    config: ReportConfig,
    tick: Callable[[str], None] = lambda label: None,
    errors: dict[str, str] | None = None,
) -> tuple[str, dict[str, str]]:
    """The page's HTML from the verification result and the experiment results under
    ``config.results``, and each experiment chapter's status (``errors`` receives why each chapter
    in error is). Computes nothing a result holds. Every word is in ``config.lang``, bound here once
    for the whole page (``tick`` is called inside)."""
    errors = {} if errors is None else errors
    with language(config.lang):
        sections = seed_sections(verify, config.seed, tick, read_real_rows(config.results))
        statuses, shown = {}, [("verify", verify)]
        for name in chapters.EXPERIMENT_CHAPTERS:
            ch = render_experiment(name, config.results)
            statuses[name] = ch.status
            if ch.error:
                errors[name] = ch.error
            if ch.envelope is not None:
                shown.append((ch.kind, ch.envelope))
            sections.append(
                Section(
                    id=f"exp-{name.replace('_', '-')}",
                    title=ch.title,
                    html=ch.html,
                    part="experiments",
                    seconds=ch.seconds,
                )
            )
            tick(ch.title)
        own, compared = own_chapters(config.results)
        for ch in own:  # the user's own models, each titled with its name
            statuses[ch.name] = ch.status
            if ch.error:
                errors[ch.name] = ch.error
            if ch.envelope is not None:
                shown.append((ch.kind, ch.envelope))
            sections.append(Section(id=ch.name, title=ch.title, html=ch.html, part="experiments", seconds=ch.seconds))
            tick(ch.title)
        if compared is not None:
            sections.append(
                Section(id="own-models-compared", title=comparison_title(), html=compared, part="experiments")
            )
            tick(comparison_title())
        claims = verify.data["claims"]
        lead = _("Every claim the verification checked, in one table.")
        sections.append(
            Section(
                id="all-verdicts",
                title=_("All verdicts"),
                part="appendix",
                html=f"<p>{esc(lead)}</p>{all_claims_table(claims)}",
            )
        )
        tick(sections[-1].title)
        timings = {name: sec for name, sec in verify.data["timings"].items() if name != "total"}
        provenance = {
            "environment": verify.environment,
            "seed": verify.seed,
            "config": [_("this page in {lang}", lang=_(LANG_NAMES[current_lang()]))]
            + config_sentences(verify.config or {"quick": verify.quick}, config.seed),
            "built": _built(env for _kind, env in shown),
            "verify": {"cached": True, "seconds_then": verify.data["timings"].get("total", 0.0)},
            "verify_timings": timings,
            "experiment_files": [provenance_text(env) for _kind, env in shown],
            # the table lists the verification's groups and each section's recorded compute time: its
            # total is their sum, so it equals what it lists
            "total_seconds": sum(timings.values()) + sum(s.seconds for s in sections),
        }
        answers = cards_html(headline_cards(config.results))
        glance = (
            glance_html(verify.data["series"])
            + (f'<div class="glance headline">{answers}</div>' if answers else "")
            + lang_links(PAGE_NAMES, pages_present(config))
        )
        answer = answer_html(verify.data["series"], config.results)
        page = render_page(sections, verify.data["counts"], provenance, glance, answer)
    return page, statuses


def _built(envelopes) -> str:
    """The page's date: that of the newest result it shows (a rebuild from the same results, here or
    on another machine, gives the same page)."""
    return when_text(max((env.created for env in envelopes if env.created), default=""))
