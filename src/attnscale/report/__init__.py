"""The report: one self-contained HTML page, built from result data (never recomputing it).

    build.py        orchestration: cached verification, chapters, timings, atomic write
    seed.py         the blog post's chapters (and beyond): prose + figures + verdicts
    seed_words.py   their words: titles, paragraphs, captions (N_ messages) and the values that fill them
    experiments.py  chapters from experiment result files (see chapters/__init__.py)
    figures.py      the blog post's figures: data → matplotlib figures (they draw, never estimate)
    plotting.py     the one figure style, figures as inline SVG (for the column and a phone)
    narrow.py       a phone's figure layout (the pyplot that stacks panels)
    verdicts.py     claim results → badges, cards, the table of all verdicts
    widget.py/.js   the interactive attention row (plain JavaScript, inline)
    page.py         head, hero, contents, chapters a reader opens, footer; style.css and reading.js inlined
    reading.js      the reading path: a link opens the chapter it leads to; open or close them all
    answer.py       the page's answer, its first sentences, chosen from the results
    headline.py     the answer cards at the top of the page
    config_words.py the configuration in words, for "How this page was made"
    html.py         shared building blocks: esc, para, note, table
    numbers.py      numbers from results as text
    text.py         prose helpers: pretty, rule_label, listed

``attnscale report`` (attnscale.cli.report) calls ``build.build_report(ReportConfig(...), progress)``.
"""
