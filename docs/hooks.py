"""The documentation site's generated pages (mkdocs.yml names this file under ``hooks``).

Three kinds of page are made at build time, never typed in, so that they cannot drift from what they show:

- ``cli.md``: the ``--help`` of ``attnscale`` and of each subcommand, from the argparse parsers
  (:func:`cli_page`), at a fixed width of :data:`HELP_COLUMNS` columns;
- ``benchmarks/<cpu>-<date>.md``: one page per committed ``telemetry-bench`` result under
  ``docs/results`` (:func:`benchmark_pages`): the tables ``attnscale telemetry-bench --markdown``
  prints from it, the versions and machine its envelope records, and a plot of its time ratios;
- ``changelog.md``: the repository's CHANGELOG.md, as written.

The benchmark pages are listed in the navigation under "Benchmarks" (:func:`on_config`), after its
hand-written index.
"""

from __future__ import annotations

import io
import os
import re
from pathlib import Path

DOCS = Path(__file__).resolve().parent
REPO = DOCS.parent
RESULTS = DOCS / "results"
HELP_COLUMNS = 100
BENCHMARKS_SECTION = "Benchmarks"


# --- the CLI reference --------------------------------------------------------------------------


def _subparsers(parser) -> dict:
    action = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    return dict(action.choices)


def cli_page() -> str:
    """The CLI reference: the help of ``attnscale`` and of every subcommand, as the terminal shows it
    at :data:`HELP_COLUMNS` columns."""
    before = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = str(HELP_COLUMNS)  # argparse wraps to the terminal's width: fix it
    try:
        from attnscale.cli import build_parser

        parser = build_parser()
        parts = [
            "# CLI reference",
            "",
            "Generated from the command's own parsers when the site is built: each section is what "
            "`attnscale COMMAND --help` prints. Every command also takes `--lang zh`.",
            "",
            "## attnscale",
            "",
            "```text",
            parser.format_help().rstrip(),
            "```",
        ]
        for name, sub in _subparsers(parser).items():
            parts += ["", f"## attnscale {name}", "", "```text", sub.format_help().rstrip(), "```"]
        return "\n".join(parts) + "\n"
    finally:
        if before is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = before


# --- the benchmark pages --------------------------------------------------------------------------


def telemetry_results(root: Path = RESULTS) -> list[Path]:
    """Every committed telemetry-bench result under ``root``, in path order."""
    return sorted(root.glob("**/telemetry/result.json"))


def _slug(text: str) -> str:
    text = re.sub(r"\((?:R|TM)\)|\bProcessor\b", "", text)
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def benchmark_name(env) -> str:
    """``<cpu>-<date>`` of a telemetry result, e.g. ``intel-xeon-2026-12-04``: its page's file name."""
    return f"{_slug(env.data['machine'].get('cpu') or 'unknown-cpu')}-{env.created[:10]}"


def _environment_table(env) -> list[str]:
    e, cpu = env.environment, env.environment.get("cpu") or {}
    rows = [
        ("attnscale", env.version),
        ("Python", e.get("python")),
        ("torch", e.get("torch")),
        ("NumPy", e.get("numpy")),
        ("CPU", f"{cpu.get('model')} ({cpu.get('capability')}, {cpu.get('blas')})"),
        ("cores, threads", f"{env.data['machine'].get('cores')}, {env.data['threads']}"),
        ("platform", e.get("platform")),
        ("run time", f"{env.data['seconds']['benchmark']:.0f} s" if env.data.get("seconds") else "not recorded"),
    ]
    return ["| | this run |", "|---|---|", *(f"| {k} | {v} |" for k, v in rows)]


def ratio_plot_svg(env) -> str:
    """An SVG of the result's time ratios to SDPA: one panel per pass, a group of bars per case, one
    bar per variant; the dashed line at 1 is SDPA."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    data = env.data
    passes = list(data["variants"])
    fig, axes = plt.subplots(1, len(passes), figsize=(4.2 * len(passes), 3.0), squeeze=False)
    for ax, pass_ in zip(axes[0], passes):
        rows = [r for r in data["rows"] if r["pass"] == pass_]
        variants = [v for v in data["variants"][pass_] if v not in ("sdpa", "naive")]
        width = 0.8 / max(len(variants), 1)
        for i, v in enumerate(variants):
            ys = [r["ratio_to_sdpa"].get(v, float("nan")) for r in rows]
            ax.bar([j + i * width for j in range(len(rows))], ys, width, label=v)
        ax.axhline(1.0, color="black", linestyle="--", linewidth=0.8)
        ax.set_xticks([j + width * (len(variants) - 1) / 2 for j in range(len(rows))])
        ax.set_xticklabels(
            [f"{tuple(r['shape'])}{' causal' if r['causal'] else ''}" for r in rows], rotation=20, fontsize=6
        )
        ax.set_title(f"{pass_}: time ÷ SDPA", fontsize=9)
        ax.tick_params(axis="y", labelsize=7)
        ax.legend(fontsize=6)
    fig.tight_layout()
    out = io.StringIO()
    fig.savefig(out, format="svg", metadata={"Date": None})
    plt.close(fig)
    return out.getvalue()


def benchmark_page(env, svg_name: str) -> str:
    """One benchmark page: where and when, what it ran with, the plot, then the tables."""
    from attnscale.cli.telemetry import format_markdown

    relative = env.path.relative_to(REPO) if env.path.is_absolute() else env.path
    title = f"{env.data['machine'].get('cpu')}, {env.created[:10]}"
    return "\n".join(
        [
            f"# Telemetry: {title}",
            "",
            f"`attnscale telemetry-bench --repeats {env.data['repeats']} --results {relative.parent.parent}` "
            "on this machine; the page is generated from its committed result when the site is built.",
            "",
            *_environment_table(env),
            "",
            f"![Time ÷ SDPA per case and variant]({svg_name})",
            "",
            format_markdown(_with_path(env, relative)),
            "",
        ]
    )


def _with_path(env, path: Path):
    import dataclasses

    return dataclasses.replace(env, path=path)


def benchmark_pages(root: Path = RESULTS) -> dict[str, str]:
    """``{path under docs: content}`` of every benchmark page and its plot."""
    from attnscale import results

    pages = {}
    for path in telemetry_results(root):
        env = results.read("telemetry", path=path)
        name = benchmark_name(env)
        pages[f"benchmarks/{name}.md"] = benchmark_page(env, f"{name}.svg")
        pages[f"benchmarks/{name}.svg"] = ratio_plot_svg(env)
    return pages


def generated_pages() -> dict[str, str]:
    """Every generated page of the site, ``{path under docs: content}``."""
    return {
        "cli.md": cli_page(),
        "changelog.md": (REPO / "CHANGELOG.md").read_text(encoding="utf-8"),
        **benchmark_pages(),
    }


# --- mkdocs' hooks --------------------------------------------------------------------------------

_PAGES: dict[str, str] = {}


def on_config(config):
    """Make the pages once per build, and list the benchmark pages under "Benchmarks" in the nav."""
    _PAGES.clear()
    _PAGES.update(generated_pages())
    listed = [p for p in sorted(_PAGES) if _is_benchmark(p)]
    for i, entry in enumerate(config["nav"]):
        if isinstance(entry, dict) and BENCHMARKS_SECTION in entry:
            first = entry[BENCHMARKS_SECTION]
            config["nav"][i] = {BENCHMARKS_SECTION: [*(first if isinstance(first, list) else [first]), *listed]}
    return config


def _is_benchmark(path: str) -> bool:
    return path.startswith("benchmarks/") and path.endswith(".md") and path != "benchmarks/index.md"


def on_files(files, config):
    from mkdocs.structure.files import File

    for path, content in _PAGES.items():
        files.append(File.generated(config, path, content=content))
    return files
