"""Report chapter: the encoder all-MiniLM-L6-v2 with its attention scale × α, beside the decoder (see
:mod:`attnscale.report.chapters.rescale`: one renderer for both)."""

from attnscale.report import text
from attnscale.report.chapters.rescale import render  # noqa: F401  (the chapter's render(env, lang))

KIND = "rescale/minilm"
TITLE = text.entry("rescale_minilm", "title")
HOW_TO = "attnscale rescale --model minilm"
