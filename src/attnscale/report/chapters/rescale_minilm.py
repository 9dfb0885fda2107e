"""Report chapter: the encoder all-MiniLM-L6-v2 with its attention scale × α, beside the decoder (see
:mod:`attnscale.report.chapters.rescale`: one renderer for both)."""

from attnscale.report.chapters.rescale import render  # noqa: F401  (the chapter's render(env, lang))

KIND = "rescale/minilm"
TITLE = {"en": "Turning a trained encoder's attention scale: all-MiniLM-L6-v2's sentence embeddings",
         "zh": "调节训练好的编码器的注意力缩放：all-MiniLM-L6-v2 的句向量"}
HOW_TO = "attnscale rescale --model minilm"
