"""What one α does to a model (:mod:`.rescale` runs it at every α): a decoder's or encoder-decoder's
cross-entropy over causal windows of the text and its greedy continuation of the prompt, an encoder's
sentence embeddings (mean of the last hidden states over real tokens), and per layer the mean row
entropy, normalized entropy and max weight of the model's own weights (rows with two or more keys);
with the α = 1 check against the model's own loss or embeddings."""

from __future__ import annotations

import hashlib
import math
import sys

import numpy as np

from attnscale.errors import InputError

__all__ = ["decoder_alphas", "encoder_alphas", "row_figures"]

LOSS_TOLERANCE = 1e-4  # relative: our α = 1 cross-entropy against the model's own loss
EMBEDDING_TOLERANCE = 1e-5  # absolute: our α = 1 embeddings against the model's own


def row_figures(call, query_valid=None) -> tuple[np.ndarray, int]:
    """Sums over real query rows with two or more attended keys of (entropy, normalized entropy, max
    weight), and the row count. ``call.weights``: (B, H, L, S); query_valid: bool (B, L) or None.

    The figures of :func:`attnscale.softmax_rows.row_health` (the reference, which the tests hold this
    to), taken from the model's own weights in torch: row_health rebuilds each row from its logits in
    NumPy, six times the cost here (0.6 s against 0.09 s a call of 9 heads × 512² keys, one thread),
    which SmolLM2's 30 layers × 8 α would pay 240 times."""
    torch = sys.modules["torch"]
    p = call.weights.double()
    n = call.attended().sum(-1).expand(p.shape[:-1])  # keys per row, from the mask: a weight
    keep = n >= 2  # that underflowed to 0 still counts
    if query_valid is not None:
        keep = keep & query_valid.bool()[:, None, :]
    entropy = torch.special.entr(p).sum(-1)
    normalized = entropy / torch.log(n.clamp(min=2).double())
    top = p.amax(-1)
    sums = np.array([float(entropy[keep].sum()), float(normalized[keep].sum()), float(top[keep].sum())])
    return sums, int(keep.sum())


class _LayerStats:
    """Per-layer sums of the row figures over the calls of one α (on_call of attention_calls)."""

    def __init__(self):
        self.sums: dict[str, np.ndarray] = {}
        self.rows: dict[str, int] = {}
        self.order: list[str] = []
        self.query_valid = None  # bool (B, L) of the batch running now; None: every query

    def __call__(self, call) -> None:
        sums, rows = row_figures(call, self.query_valid)
        if call.name not in self.sums:
            self.order.append(call.name)
            self.sums[call.name], self.rows[call.name] = np.zeros(3), 0
        self.sums[call.name] += sums
        self.rows[call.name] += rows

    def means(self) -> dict[str, list]:
        out = {"entropy_per_layer": [], "normalized_entropy_per_layer": [], "max_weight_per_layer": []}
        for name in self.order:
            mean = self.sums[name] / self.rows[name] if self.rows[name] else np.full(3, np.nan)
            for key, value in zip(out, mean):
                out[key].append(float(value) if np.isfinite(value) else None)
        return out


def _windows(ids: list[int], max_tokens: int, window: int) -> list[list[int]]:
    ids = ids[:max_tokens]
    chunks = [ids[i : i + window] for i in range(0, len(ids), window)]
    return [c for c in chunks if len(c) >= 2]  # a lone last token predicts nothing


def _cross_entropy_sum(logits, ids, shift: bool = True) -> tuple[float, int]:
    """Σ −log p(token) in float64 over one window. logits: (1, T, V); ids: (1, T). ``shift``: position
    t predicts token t + 1 (a decoder); else token t (an encoder-decoder's decoder, which reads the
    labels shifted right)."""
    torch = sys.modules["torch"]
    logp = torch.log_softmax((logits[0, :-1] if shift else logits[0]).double(), dim=-1)
    picked = logp.gather(-1, (ids[0, 1:] if shift else ids[0])[:, None])[:, 0]
    return float(-picked.sum()), int(picked.numel())


def _logits(loaded, x):
    """The language model's logits (1, T, V) on the window ``x`` (1, T): a decoder reads it; an
    encoder-decoder encodes it and decodes it shifted right (what ``labels=x`` makes it do)."""
    if loaded.family == "decoder":
        return loaded.model(input_ids=x).logits
    from attnscale.experiments.pretrained.model_run import shifted_right

    ones = x.new_ones(x.shape)
    return loaded.model(input_ids=x, decoder_input_ids=shifted_right(loaded.model.config, x, ones)).logits


def decoder_alphas(loaded, config, text: str, source: str, scale: float, progress) -> dict:
    """A decoder or an encoder-decoder on one text, at each α of ``config`` (a
    :class:`~attnscale.experiments.pretrained.rescale.RescaleConfig`): cross-entropy, row figures, a continuation."""
    import torch

    from attnscale.experiments.pretrained.hf_attention import attention_calls
    from attnscale.experiments.pretrained.model_run import model_inputs

    model, tokenizer = loaded.model, loaded.tokenizer
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    windows = _windows(ids, config.max_tokens, config.window)
    if not windows:
        raise InputError(f"text: expected at least 2 tokens (one token pair to predict), got {len(ids)}")
    prompt = model_inputs(model.config, tokenizer(config.prompt, return_tensors="pt"))
    steps, done = len(config.alphas) * (len(windows) + 1), 0
    rows, own = [], None
    for alpha in config.alphas:
        stats, total, count, first_window = _LayerStats(), 0.0, 0, None
        for w in windows:
            x = torch.tensor([w])
            with torch.no_grad(), attention_calls(model, alpha=alpha, on_call=stats):
                logits = _logits(loaded, x)
            ce, n = _cross_entropy_sum(logits, x, shift=loaded.family == "decoder")
            total, count = total + ce, count + n
            first_window = ce / n if first_window is None else first_window
            done += 1
            if progress is not None:
                progress(done, steps, f"α = {alpha:g}")
        with torch.no_grad(), attention_calls(model, alpha=alpha):
            out = model.generate(
                **prompt,
                max_new_tokens=config.new_tokens,
                do_sample=False,
                pad_token_id=tokenizer.pad_token_id if tokenizer.eos_token_id is None else tokenizer.eos_token_id,
            )
        done += 1
        # A decoder's output repeats the prompt; an encoder-decoder's starts with the decoder's start token.
        new = out[0, prompt["input_ids"].shape[1] :] if loaded.family == "decoder" else out[0]
        continuation = tokenizer.decode(new, skip_special_tokens=True)
        ce = total / count
        rows.append(
            {
                "alpha": alpha,
                "scale": alpha * scale,
                "cross_entropy": ce,
                "perplexity": _finite(math.exp(ce) if ce < 700 else math.inf),
                "cross_entropy_first_window": first_window,
                "continuation": continuation,
                **stats.means(),
            }
        )
        if alpha == 1.0:
            x = torch.tensor([windows[0]])
            with torch.no_grad():
                own = float(model(input_ids=x, labels=x).loss)
            ours = first_window
    check = {
        "what": "α = 1: our float64 cross-entropy of the first window against the model's own loss "
        "(labels=, its own attention implementation)",
        "own_loss": own,
        "our_loss": ours,
        "relative_difference": abs(ours - own) / abs(own),
        "tolerance": LOSS_TOLERANCE,
    }
    check["passed"] = check["relative_difference"] <= LOSS_TOLERANCE
    return {
        "alphas": rows,
        "check": check,
        "prompt": config.prompt,
        "text": {
            "source": source,
            "sha256": hashlib.sha256(text.encode("utf-8")).hexdigest(),
            "n_tokens": sum(len(w) for w in windows),
            "windows": len(windows),
            "window": config.window,
            "tokens_predicted": sum(len(w) - 1 for w in windows),
            "tokens_in_text": len(ids),
        },
    }


def _finite(x: float) -> float | None:
    return x if math.isfinite(x) else None


def _embeddings(model, enc):
    """Mean of the last hidden states over real tokens, per sentence: (B, hidden) float64."""
    hidden = model(**enc).last_hidden_state.double()
    mask = enc["attention_mask"][..., None].double()
    return (hidden * mask).sum(1) / mask.sum(1)


def encoder_alphas(loaded, config, texts: list[str], source: str, scale: float, progress) -> dict:
    """An encoder on its sentences, at each α of ``config`` (a
    :class:`~attnscale.experiments.pretrained.rescale.RescaleConfig`): how far each embedding moves
    from α = 1, row figures."""
    import torch

    from attnscale.experiments.pretrained.hf_attention import attention_calls
    from attnscale.experiments.pretrained.model_run import model_inputs

    model, tokenizer = loaded.model, loaded.tokenizer
    batches = [texts[i : i + config.batch_size] for i in range(0, len(texts), config.batch_size)]
    encoded = [
        model_inputs(model.config, tokenizer(b, padding=True, truncation=True, return_tensors="pt")) for b in batches
    ]
    steps, done = len(config.alphas) * len(encoded), 0
    embeddings, rows = {}, []
    for alpha in config.alphas:
        stats, parts = _LayerStats(), []
        for enc in encoded:
            stats.query_valid = enc["attention_mask"]
            with torch.no_grad(), attention_calls(model, alpha=alpha, on_call=stats):
                parts.append(_embeddings(model, enc))
            done += 1
            if progress is not None:
                progress(done, steps, f"α = {alpha:g}")
        embeddings[alpha] = torch.cat(parts)
        rows.append({"alpha": alpha, "scale": alpha * scale, **stats.means()})
    with torch.no_grad():
        own = torch.cat([_embeddings(model, enc) for enc in encoded])
    reference = embeddings[1.0]
    for row in rows:
        cos = torch.nn.functional.cosine_similarity(embeddings[row["alpha"]], reference, dim=-1)
        row.update(cosine_mean=float(cos.mean()), cosine_min=float(cos.min()))
    diff = float((reference - own).abs().max())
    check = {
        "what": "α = 1: our sentence embeddings against the model's own (its own attention implementation)",
        "max_abs_difference": diff,
        "tolerance": EMBEDDING_TOLERANCE,
        "passed": diff <= EMBEDDING_TOLERANCE,
    }
    n_tokens = int(sum(int(enc["attention_mask"].sum()) for enc in encoded))
    return {"alphas": rows, "check": check, "text": {"source": source, "n_sequences": len(texts), "n_tokens": n_tokens}}
