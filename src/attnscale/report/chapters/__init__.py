"""Chapters rendered from experiment results.

Each module here defines:
    TITLE: str                     # N_("English title"): report.experiments.title_of translates it
    KIND: str                      # the kind of result it shows (a key of attnscale.results.KINDS)
    HOW_TO: str                    # the command that produces it, shown when it is missing
    render(env) -> str             # an HTML fragment from env.data (figures via report.plotting.figure_svg)

The report (``attnscale.report.experiments.render_experiment``) reads a listed chapter's result with
``results.read_preferred(KIND)`` (full, else quick: then a "quick run" label stands beside the title),
shows HOW_TO when there is none, the reader's error (file and field) when it is malformed, and an
error box when the module fails to import or ``render`` raises: one broken chapter never costs the
reader the rest of the page. ``env`` is the :class:`attnscale.results.Envelope` (``env.data``,
``env.config``, ``env.quick``, ``env.created``, ``env.environment``); ``render`` formats and places what
``env.data`` holds and computes nothing. Its words are written in English, through
:mod:`attnscale.i18n` (``_("…", name=…)``, in the language the page build binds; their Chinese is in
``i18n/zh.po``);
where the data chooses among sentences, a module-level table of ``N_`` messages stands beside the
small pure function of the result that picks the key.
Sub-headings inside a chapter are <h3>; tables via report.html.table scroll inside their own box on
a phone; paragraphs, notes, lists and error boxes come from report.html too.
"""

EXPERIMENT_CHAPTERS: tuple[str, ...] = (
    "probe",
    "probe_smollm2",
    "rescale",
    "rescale_minilm",
    "training",
    "training_logits",
    "early_warning",
    "lm",
    "telemetry",
)
