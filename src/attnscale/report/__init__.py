"""The report: one self-contained HTML page, built from result data (never recomputing it).

    build.py        orchestration: cached verification, chapters, timings, atomic write
    seed.py         the seed's chapters (and beyond): prose + figures + verdicts
    experiments.py  chapters from experiment result files (see chapters/__init__.py)
    figures.py      data → matplotlib figures (they draw, never estimate)
    verdicts.py     claim results → badges, cards, the table of all verdicts
    widget.py/.js   the interactive attention row (plain JavaScript, inline)
    page.py         head, hero, contents, footer; style.css inlined
    text.py         every word in English and Chinese
    html.py         shared building blocks: figure_svg, table, esc

``attnscale report`` (attnscale.cli.report) calls ``build.build_report(ReportConfig(...), progress)``.
"""
