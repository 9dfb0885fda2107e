"""Report chapter: the decoder SmolLM2-135M through the same probe as the encoder (see
:mod:`attnscale.report.chapters.probe`: one renderer for both)."""

from attnscale.i18n import N_
from attnscale.report.chapters.probe import render  # noqa: F401  (the chapter's render(env))

KIND = "probe/smollm2"
TITLE = N_("A real decoder LLM: SmolLM2-135M's queries and keys (causal, rotary, grouped-query heads)")
HOW_TO = "attnscale probe --model smollm2"
