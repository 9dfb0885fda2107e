"""Report chapter: the encoder all-MiniLM-L6-v2 with its attention scale × α, beside the decoder (see
:mod:`attnscale.report.chapters.rescale`: one renderer for both)."""

from attnscale.i18n import N_
from attnscale.report.chapters.rescale import render  # noqa: F401  (the chapter's render(env))

KIND = "rescale/minilm"
TITLE = N_("Turning a trained encoder's attention scale: all-MiniLM-L6-v2's sentence embeddings")
HOW_TO = "attnscale rescale --model minilm"
