"""Chapters rendered from experiment result files.

Each module here defines:
    TITLE: dict[str, str]          # {"en": ..., "zh": ...}
    RESULT_PATH: str               # the result file, relative to the results folder
    HOW_TO: str                    # the command that produces it, shown when it is missing
    render(result: dict, lang: str) -> str   # an HTML fragment (figures via report.html.figure_svg)

The report (``attnscale.report.experiments.render_experiment``) renders a chapter listed in
EXPERIMENT_CHAPTERS from ``<results>/<RESULT_PATH>`` when that file exists, shows HOW_TO when it does
not, and shows an error box in its place when the module fails to import or ``render`` raises: one
broken chapter never costs the reader the rest of the page. ``render`` receives the JSON as written
and must not recompute what it holds; ``lang`` is "en" or "zh". Sub-headings inside a chapter are <h3>;
tables via report.html.table scroll inside their own box on a phone.
"""

EXPERIMENT_CHAPTERS: tuple[str, ...] = ("probe", "probe_smollm2", "rescale", "rescale_minilm", "training", "training_logits", "telemetry")
