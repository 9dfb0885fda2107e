"""The documentation site builds with ``mkdocs build --strict`` and holds what it promises; the README
stays the short front door that links into it.

The build (one per session, about 10 s) fails on a broken link or anchor, a page missing from the
navigation, a navigation entry without its page, and a docstring mkdocstrings cannot read. The
generated pages (docs/hooks.py) are checked as the build made them: the CLI reference has every
subcommand's --help, the API reference the public names, one benchmark page per committed result.
"""

from __future__ import annotations

import ast
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
README = REPO / "README.md"
README_LIMIT = 14_000
# The names issue 48 asks the API reference to list (anchors mkdocstrings gives them).
API_NAMES = (
    "attnscale.attention",
    "attnscale.torch.attention",
    "attnscale.torch.Monitor",
    "attnscale.torch.guard.LogitGuard",
    "attnscale.integrations.transformers.AttentionHealthCallback",
    "attnscale.integrations.lightning.AttentionHealthCallback",
)


def _hooks():
    spec = importlib.util.spec_from_file_location("docs_hooks", DOCS / "hooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    pytest.importorskip("mkdocs")
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return out


@pytest.mark.slow
def test_the_site_builds_strict_and_lists_the_public_api(site):
    api = (site / "api" / "index.html").read_text(encoding="utf-8")
    missing = [name for name in API_NAMES if f'id="{name}"' not in api]
    assert not missing, f"the API reference lacks {missing}"


@pytest.mark.slow
def test_the_cli_reference_has_every_subcommands_help(site):
    from attnscale.cli import build_parser

    page = (site / "cli" / "index.html").read_text(encoding="utf-8")
    names = list(_hooks()._subparsers(build_parser()))
    assert names
    missing = [n for n in names if f"usage: attnscale {n}" not in page]
    assert not missing, missing


@pytest.mark.slow
def test_one_benchmark_page_per_committed_result(site):
    hooks = _hooks()
    found = hooks.telemetry_results()
    assert len(found) >= 2  # the Intel Xeon's and the AMD EPYC's
    from attnscale import results

    for path in found:
        name = hooks.benchmark_name(results.read("telemetry", path=path))
        page = site / "benchmarks" / name / "index.html"
        assert page.exists(), name
        assert (site / "benchmarks" / f"{name}.svg").exists(), name
        assert "target: kernel time forward" in page.read_text(encoding="utf-8"), name


def test_a_benchmark_page_is_named_by_cpu_and_date():
    from types import SimpleNamespace

    env = SimpleNamespace(data={"machine": {"cpu": "Intel(R) Xeon(R) Processor"}}, created="2026-12-04T03:52:22Z")
    assert _hooks().benchmark_name(env) == "intel-xeon-2026-12-04"
    env.data["machine"]["cpu"] = "AMD EPYC 9R14"
    assert _hooks().benchmark_name(env) == "amd-epyc-9r14-2026-12-04"


def test_the_changelog_page_is_the_changelog():
    assert _hooks().generated_pages()["changelog.md"] == (REPO / "CHANGELOG.md").read_text(encoding="utf-8")


def test_the_docs_python_blocks_parse():
    for page in DOCS.rglob("*.md"):
        text = page.read_text(encoding="utf-8")
        for block in re.findall(r"^```python\n(.*?)^```$", text, re.S | re.M):
            ast.parse(block)  # a SyntaxError names the block


def test_the_readme_is_short_undated_and_links_to_pages_that_exist():
    text = README.read_text(encoding="utf-8")
    assert len(text) <= README_LIMIT, f"README: {len(text)} characters, the limit is {README_LIMIT}"
    assert not re.search(r"\b20\d\d-\d\d-\d\d\b", text), "a date in the README: it belongs to the docs"
    assert not re.search(r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)[0-9a-f]{7,40}\b", text), "a commit hash in the README"
    for target in re.findall(r"\]\(((?:docs/)?[^)#\s]+\.(?:md|png))(?:#[^)]*)?\)", text):
        assert (REPO / target).exists(), f"README links to {target}, which does not exist"


def test_the_user_pages_call_the_blog_post_the_post_not_the_seed():
    """'seed' keeps one meaning, a random seed: 'the seed' or 'the seed's' for the blog post is gone from
    the README and the user pages (the verdict's stored name `seed number wrong` is quoted as code)."""
    pages = [README, REPO / "CHANGELOG.md", *DOCS.rglob("*.md")]
    for page in pages:
        text = re.sub(r"`[^`]*`", "", page.read_text(encoding="utf-8"))
        assert not re.search(r"\bthe seed(?:'s)?\b(?! of\b)", text, re.I), page.relative_to(REPO)
