"""Build the report: get the verification's results (from the cache when their configuration and code
are unchanged), render every chapter, and write ``<out>/index.html`` atomically.

Atomic: the page is written into a temporary folder beside ``out`` and renamed into place
(``os.rename``/``os.replace``, atomic on POSIX), so an interrupted build leaves the previous report
as it was.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from importlib import resources
from pathlib import Path
from typing import Callable

from attnscale.errors import InputError
from attnscale.report.text import LANGS

Progress = Callable[[int, int, str], None]


@dataclass(frozen=True)
class ReportConfig:
    out: Path = Path("attnscale-report")        # the folder that receives index.html
    results: Path = Path("attnscale-results")   # experiment result files are read from here
    lang: str = "en"                            # "en" or "zh"
    quick: bool = False                         # the verification's quick mode (seconds, wider CIs)
    fresh: bool = False                         # recompute the verification even if cached
    seed: int = 0                               # the verification's and the widget's seed
    cache: Path | None = None                   # where verification results are cached; None: <results>/cache

    def __post_init__(self):
        if self.lang not in LANGS:
            raise InputError(f"lang: expected one of {LANGS}, got {self.lang!r}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise InputError(f"seed: expected a non-negative integer, got {self.seed!r}")
        object.__setattr__(self, "out", Path(self.out))
        object.__setattr__(self, "results", Path(self.results))
        if self.cache is not None:
            object.__setattr__(self, "cache", Path(self.cache))
        if self.out.exists() and not self.out.is_dir():
            raise InputError(f"out: expected a folder for index.html, got the existing file {str(self.out)!r}")

    @property
    def cache_dir(self) -> Path:
        return self.cache if self.cache is not None else self.results / "cache"


@dataclass
class BuildResult:
    path: Path                       # <out>/index.html
    seconds: float
    verify_cached: bool
    sections: dict[str, float] = field(default_factory=dict)   # title → seconds
    experiment_status: dict[str, str] = field(default_factory=dict)  # module → rendered/missing/error


def code_fingerprint() -> str:
    """A hash of the sources that decide the verification's numbers: a cached result computed by
    other code is not reused."""
    h = hashlib.sha256()
    pkg = resources.files("attnscale")
    # masks.py decides S1.35's attention; store.py how the results serialise to JSON
    paths = [pkg.joinpath(name) for name in ("attention.py", "scales.py", "softmax.py", "masks.py", "store.py",
                                             "montecarlo.py", "theory.py", "__init__.py")]
    claims = pkg.joinpath("claims")
    if claims.is_dir():
        paths += sorted((p for p in claims.iterdir() if p.name.endswith(".py")), key=lambda p: p.name)
    for p in paths:
        if p.is_file():
            h.update(p.name.encode())
            h.update(p.read_bytes())
    return h.hexdigest()[:16]


def verify_cache_key(config: ReportConfig) -> dict:
    from attnscale import __version__
    from attnscale.claims import VerifyConfig
    from attnscale.store import to_jsonable

    return {"verify": to_jsonable(VerifyConfig(seed=config.seed, quick=config.quick)),
            "attnscale": __version__, "code": code_fingerprint()}


def load_verify(config: ReportConfig, progress: Progress | None = None) -> tuple[dict, dict]:
    """The verification report as plain data, and how it was obtained ({"cached", "seconds", ...}).
    Read from the cache unless ``config.fresh``; computed and cached otherwise."""
    from attnscale.claims import VerifyConfig, run_claims
    from attnscale.store import ResultCache

    cache = ResultCache(config.cache_dir)
    key = verify_cache_key(config)
    if not config.fresh:
        hit = cache.get("verify", key)
        if hit is not None:
            return hit["report"], {"cached": True, "seconds_then": hit["seconds"], "path": str(cache.path("verify", key))}
    t0 = time.perf_counter()
    report = run_claims(VerifyConfig(seed=config.seed, quick=config.quick), progress).to_dict()
    seconds = time.perf_counter() - t0
    path = cache.put("verify", key, {"report": report, "seconds": seconds})
    return report, {"cached": False, "seconds": seconds, "path": str(path)}


def write_site_atomic(out: Path, files: dict[str, bytes]) -> Path:
    """Write ``files`` (name → bytes) into the folder ``out`` so that a reader never sees a half-written
    report: everything is written and synced in a temporary folder beside ``out`` first. A new
    ``out`` is that folder renamed; an existing one receives each file by ``os.replace``."""
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


def _config_text(config: ReportConfig, verify: dict) -> str:
    vc = verify.get("config", {})
    parts = [f"lang={config.lang}", f"quick={config.quick}", f"fresh={config.fresh}",
             f"results={config.results}"]
    parts += [f"verify.{k}={v}" for k, v in vc.items() if k != "seed"]
    return ", ".join(parts)


def build_report(config: ReportConfig, progress: Progress | None = None) -> BuildResult:
    """Build ``config.out/index.html``. ``progress(done, total, label)`` follows the verification
    (when it runs) and then each chapter."""
    from attnscale.report.chapters import EXPERIMENT_CHAPTERS
    from attnscale.report.text import BEYOND_CHAPTERS, SEED_CHAPTERS

    start = time.perf_counter()
    n_chapters = len(SEED_CHAPTERS) + len(BEYOND_CHAPTERS) + len(EXPERIMENT_CHAPTERS) + 1
    verify_total = [0]

    def verify_progress(done: int, total: int, label: str) -> None:
        verify_total[0] = total
        if progress:
            progress(done, total + n_chapters, f"verify: {label}")

    verify, how = load_verify(config, verify_progress)
    done = [verify_total[0]]

    def tick(label: str) -> None:
        done[0] += 1
        if progress:
            progress(done[0], verify_total[0] + n_chapters, f"chapter: {label}")

    page, sections, statuses = render_report(verify, how, config, tick, start)
    path = write_site_atomic(config.out, {"index.html": page.encode("utf-8")}) / "index.html"
    return BuildResult(path=path, seconds=time.perf_counter() - start, verify_cached=bool(how.get("cached")),
                       sections=sections, experiment_status=statuses)


def render_report(verify: dict, how: dict, config: ReportConfig,
                  tick: Callable[[str], None] = lambda label: None,
                  start: float | None = None) -> tuple[str, dict[str, float], dict[str, str]]:
    """The page's HTML from a verification report (``VerifyReport.to_dict()``) and the experiment
    result files under ``config.results``; also the seconds per section and each experiment
    chapter's status. Computes nothing that a result already holds."""
    from attnscale.provenance import environment
    from attnscale.report.chapters import EXPERIMENT_CHAPTERS
    from attnscale.report.experiments import render_experiment
    from attnscale.report.html import esc
    from attnscale.report.page import Section, render_page
    from attnscale.report.seed import glance_html, seed_sections
    from attnscale.report.text import t
    from attnscale.report.verdicts import all_claims_table

    start = time.perf_counter() if start is None else start
    sections = seed_sections(verify, config.lang, config.seed, tick)
    statuses, files = {}, []
    for name in EXPERIMENT_CHAPTERS:
        t0 = time.perf_counter()
        ch = render_experiment(name, config.results, config.lang)
        statuses[name] = ch.status
        if ch.status == "rendered":
            files.append(ch.source)
        sections.append(Section(id=f"exp-{name.replace('_', '-')}", title=ch.title, html=ch.html,
                                part="experiments", seconds=time.perf_counter() - t0))
        tick(name)
    t0 = time.perf_counter()
    claims = verify.get("claims", [])
    sections.append(Section(id="all-verdicts", title=t("all_verdicts", config.lang), part="appendix",
                            html=f'<p>{esc(t("all_verdicts_lead", config.lang))}</p>'
                                 f'{all_claims_table(claims, config.lang)}',
                            seconds=time.perf_counter() - t0))
    tick("all verdicts")
    provenance = {
        "environment": verify.get("environment") or environment(),
        "seed": config.seed,
        "config_text": _config_text(config, verify),
        "built": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC"),
        "verify": how,
        "verify_timings": verify.get("timings", {}),
        "experiment_files": files,
        "total_seconds": time.perf_counter() - start,
    }
    page = render_page(sections, claims, provenance, config.lang, glance_html(verify.get("data", {}), config.lang))
    return page, {s.title: s.seconds for s in sections}, statuses
