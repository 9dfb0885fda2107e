"""Report chapter: the decoder SmolLM2-135M through the same probe as the encoder (see
:mod:`attnscale.report.chapters.probe`: one renderer for both)."""

from attnscale.report import text
from attnscale.report.chapters.probe import render  # noqa: F401  (the chapter's render(env, lang))

KIND = "probe/smollm2"
TITLE = text.entry("probe_smollm2", "title")
HOW_TO = "attnscale probe --model smollm2"
