"""Report chapter: the decoder SmolLM2-135M through the same probe as the encoder (see
:mod:`attnscale.report.chapters.probe`: one renderer for both)."""

from attnscale.report.chapters.probe import render  # noqa: F401  (the chapter's render(env, lang))

KIND = "probe/smollm2"
TITLE = {"en": "A real decoder LLM: SmolLM2-135M's queries and keys (causal, rotary, grouped-query heads)",
         "zh": "真实的解码器大模型：SmolLM2-135M 的 q 与 k（因果、旋转位置编码、分组查询头）"}
HOW_TO = "attnscale probe --model smollm2"
