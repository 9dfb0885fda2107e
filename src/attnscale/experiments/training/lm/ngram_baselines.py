"""lm's n-gram baselines: :func:`baselines` computes them on the sweep's text and split
(:mod:`~attnscale.experiments.training.ngram`), :func:`beaten` says which one a validation loss is below."""

from __future__ import annotations

from attnscale.experiments.training.lm.config import LMCell, LMRun
from attnscale.experiments.training.text_data import ByteText

__all__ = ["BASELINE_NAMES", "baselines", "beaten"]

BASELINE_NAMES = {1: "unigram", 2: "bigram", 3: "trigram", 4: "4-gram"}


def baselines(config: LMRun) -> dict:
    """The n-gram baselines (:mod:`~attnscale.experiments.training.ngram`) of the sweep's text and split: on
    the very bytes the model's validation loss scores (``bpb``) and on the whole validation part
    (``bpb_whole``), with each order's add-k constant chosen on the training part."""
    from attnscale.experiments.training import ngram

    text = ByteText.from_source(config.text, LMCell.valid_fraction, config.context)
    starts = text.validation_starts(config.context, config.eval_windows)
    scored = sorted({s + 1 + i for s in starts for i in range(config.context)})
    on_scored = ngram.baselines(text.train, text.valid, tuple(BASELINE_NAMES), scored)
    whole = ngram.baselines(text.train, text.valid, tuple(BASELINE_NAMES))
    rows = [
        {
            "order": a["order"],
            "name": BASELINE_NAMES[a["order"]],
            "bpb": a["bpb"],
            "bpb_whole": b["bpb"],
            "k": a["k"],
            "k_at_edge": a["k_at_edge"],
        }
        for a, b in zip(on_scored, whole)
    ]
    return {
        "smoothing": "add-k, k chosen on the last tenth of the training part",
        "scored_bytes": len(scored),
        "rows": rows,
    }


def beaten(bpb: float | None, rows: list[dict]) -> str | None:
    """The name of the highest-order baseline that ``bpb`` is below (None: not even the unigram)."""
    below = [r for r in rows if bpb is not None and bpb < r["bpb"]]
    return max(below, key=lambda r: r["order"])["name"] if below else None
