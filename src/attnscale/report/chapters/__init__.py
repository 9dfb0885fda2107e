"""Chapters rendered from experiment result files.

Each module here defines:
    TITLE: dict[str, str]          # {"en": ..., "zh": ...}
    RESULT_PATH: str               # the result file, relative to the results folder
    HOW_TO: str                    # the command that produces it, shown when it is missing
    render(result: dict, lang: str) -> str   # an HTML fragment (figures via report.html.figure_svg)
"""

EXPERIMENT_CHAPTERS: tuple[str, ...] = ()
