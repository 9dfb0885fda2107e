"""Turn a trained model's attention scale: every layer's scale × α, and what that does.

What this measures, plainly: the *sensitivity* of a model that was trained with scale 1/√d_k to a
different scale at inference, all else fixed. It does not tell what training without the scale
would give (a model trained unscaled would have learned other weights); the training experiments
(``attnscale train``) answer that. α = √d_k removes the scale ("unscaled"): α = 8 at d_k = 64.

* Decoder (SmolLM2): next-token cross-entropy and perplexity on real English text, read from the
  text's start: ``max_tokens`` tokens in consecutive causal windows of ``window`` tokens (each
  window's first token is predicted by nothing); per layer the mean row entropy, normalized entropy
  and max weight (rows with two or more keys); a greedy continuation of a fixed prompt. The α = 1
  loss is checked against the model's own (``labels=`` in transformers).
* Encoder (MiniLM): how far the sentence embeddings (mean of the last hidden states over real
  tokens, the model's own pooling) move: cosine to α = 1 per sentence; the same per-layer figures.
* Encoder-decoder (T5): the decoder's cross-entropy on the text, each window both the encoder's input
  and the labels (``labels=``: the decoder reads it shifted right), and the same figures; its α = 1
  loss checked against the model's own the same way.

α multiplies the scale each layer applies, whatever it is (:func:`attnscale.experiments.pretrained.probe.run.scale_rule`,
recorded per layer): 1/√d_k, T5's 1, Gemma 2's 1/√query_pre_attn_scalar (inside its soft-cap:
cap·tanh(α·scale·q·k / cap)), and after a QK-norm. An additive position bias (T5) is left as it is.

The scale is changed through :mod:`attnscale.experiments.pretrained.hf_attention` (the model's own eager
attention with ``scaling × α``), so nothing else in the model moves. What one α does is measured by
:mod:`.rescale_alphas`.
"""

from __future__ import annotations

import dataclasses
import math
import sys
import time
from collections.abc import Callable

import numpy as np

from attnscale.errors import InputError, check_count, require
from attnscale.experiments.pretrained.rescale_alphas import decoder_alphas, encoder_alphas

__all__ = [
    "ALPHAS",
    "PROMPT",
    "RescaleConfig",
    "check_alphas",
    "default_text",
    "read_text",
    "model_positions",
    "run_rescale",
    "rescale_model",
    "result_kind",
    "WHAT",
]


ALPHAS = (1 / 8, 1 / 4, 1 / 2, 1.0, 2.0, 4.0, 8.0)


PROMPT = "The capital of France is"


# The default text: two topics of the Python documentation shipped with every Python (pydoc_data).
DEFAULT_TOPICS = ("objects", "execmodel")


WHAT = (
    "the sensitivity of a model trained with scale 1/√d_k to a changed scale at inference (every "
    "layer's scale × α); not what training without the scale would give"
)


# The same for a model whose layers do not all apply 1/√d_k (T5, Gemma 2, GPT-2 scaled by layer ...).
WHAT_OWN_SCALE = (
    "the sensitivity of a trained model to a changed attention scale at inference (every layer's own "
    "scale × α, whatever it is); not what training with another scale would give"
)


@dataclasses.dataclass(frozen=True)
class RescaleConfig:
    alphas: tuple[float, ...] = ALPHAS
    max_tokens: int = 512  # decoder: tokens read from the text's start
    window: int = 512  # decoder: tokens per causal window
    prompt: str = PROMPT
    new_tokens: int = 12  # decoder: greedy continuation length
    batch_size: int = 32  # encoder: sentences per padded batch
    include_unscaled: bool = True  # add α = √d_k (no scale at all) when it is not among the alphas

    def __post_init__(self):
        check_alphas(self.alphas)
        for name in ("max_tokens", "window", "new_tokens", "batch_size"):
            check_count(name, getattr(self, name))
        if self.window < 2:
            raise InputError(f"window: expected at least 2 tokens (one pair to predict), got {self.window}")


def check_alphas(alphas) -> tuple[float, ...]:
    """α values: finite and > 0, at least one, and 1 among them (the reference)."""
    values = tuple(alphas)
    if not values:
        raise InputError("alpha: expected at least one value, got none")
    for a in values:
        if isinstance(a, bool) or not isinstance(a, (int, float)) or not math.isfinite(a) or a <= 0:
            raise InputError(f"alpha: expected finite numbers > 0, got {a!r}")
    if 1.0 not in values:
        raise InputError(f"alpha: expected 1 among the values (the model's own scale, the reference), got {values}")
    return values


def default_text() -> tuple[str, str]:
    """(text, source): the fixed slice of real English the intervention reads by default."""
    from pydoc_data import topics

    text = "\n\n".join(topics.topics[key] for key in DEFAULT_TOPICS)
    names = " + ".join(f"pydoc_data.topics[{key!r}]" for key in DEFAULT_TOPICS)
    return text, f"{names} (Python {sys.version.split()[0]})"


def read_text(path) -> str:
    """A whole UTF-8 file as one text."""
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except (OSError, UnicodeDecodeError) as err:
        raise InputError(f"text: cannot read {str(path)!r} as UTF-8 text: {err}") from None


def _model_facts(loaded) -> dict:
    """The model's layout and the scale each layer applies, read from one α = 1 pass over the prompt."""
    import torch

    from attnscale.experiments.pretrained.hf_attention import UnsupportedAttention, attention_calls
    from attnscale.experiments.pretrained.model_run import forward, model_inputs
    from attnscale.experiments.pretrained.probe.run import scale_rule

    calls = []
    enc = model_inputs(loaded.model.config, loaded.tokenizer(PROMPT, return_tensors="pt"))
    with torch.no_grad(), attention_calls(loaded.model, on_call=calls.append):
        forward(loaded, enc)
    if not calls:
        raise UnsupportedAttention(
            f"model: {loaded.model.config.model_type} is not supported: no attention call "
            "went through transformers' attention interface"
        )
    first = calls[0]
    d_k = int(first.q.shape[-1])
    rules = [scale_rule(c.scale, int(c.q.shape[-1]), softcap=c.softcap, qk_norm=c.qk_norm) for c in calls]
    return {
        "name": loaded.name,
        "architecture": type(loaded.model).__name__,
        "model_type": getattr(loaded.model.config, "model_type", None),
        "family": loaded.family,
        "user": loaded.user,
        "package_version": loaded.version,
        "weights_sha256": loaded.sha256,
        "weights_note": loaded.weights_note or None,
        "d_k": d_k,
        "n_layers": len(calls),
        "n_heads_q": int(first.q.shape[1]),
        "n_heads_kv": int(first.k.shape[1]),
        "causal": loaded.causal,
        "scale": first.scale,
        "scales": [c.scale for c in calls],
        "scale_rules": rules,
    }


def result_kind(loaded) -> str:
    """``rescale/<name>`` for a bundled model (smollm2, minilm), ``rescale/user/<slug>`` for the user's."""
    from attnscale import results
    from attnscale.experiments.pretrained.loading import MODELS, model_slug

    if not loaded.user:
        return "rescale/" + next(short for short, full in MODELS.items() if full == loaded.name)
    return results.user_kind("rescale", loaded.key or model_slug(loaded.name))


def rescale_model(
    model,
    tokenizer,
    config: RescaleConfig | None = None,
    *,
    text: str | None = None,
    texts: list[str] | None = None,
    name: str | None = None,
) -> dict:
    """The intervention on an already-loaded transformers model and its tokenizer (a notebook's): the
    same data as ``attnscale rescale --model PATH`` writes. A decoder or encoder-decoder reads
    ``text`` (default: :func:`default_text`), an encoder ``texts`` (default: the built-in sentences)."""
    from attnscale.experiments.pretrained.loading import wrap
    from attnscale.experiments.pretrained.texts import builtin_sentences

    loaded = wrap(model, tokenizer, name)
    source = "given text"
    if loaded.family == "encoder" and texts is None:
        texts, source = builtin_sentences(), "built-in sentences"
    elif loaded.family != "encoder" and text is None:
        text, source = default_text()
    return run_rescale(loaded, config or RescaleConfig(), text=text, texts=texts, source=source)


def run_rescale(
    loaded,
    config: RescaleConfig,
    *,
    text: str | None = None,
    texts: list[str] | None = None,
    source: str = "",
    progress: Callable[[int, int, str], None] | None = None,
) -> dict:
    """The intervention on ``loaded``: a decoder reads ``text`` (one string), an encoder ``texts``
    (one sentence each). Returns the result's data (strict-JSON-ready)."""
    require("torch", "probe")
    started = time.perf_counter()
    model = _model_facts(loaded)
    unscaled, why_not = _unscaled_alpha(model["scales"])
    if (
        config.include_unscaled
        and unscaled is not None
        and not any(math.isclose(a, unscaled, rel_tol=1e-9) for a in config.alphas)
    ):
        config = dataclasses.replace(config, alphas=tuple(sorted(config.alphas + (unscaled,))))
    if loaded.family != "encoder":
        if text is None:
            raise InputError(f"text: a {loaded.family} reads one text, got none")
        positions = model_positions(loaded.model.config)
        if positions is not None and config.window > positions:
            raise InputError(
                f"window: expected at most {positions}, the positions {loaded.name} has, got {config.window}"
            )
        data = decoder_alphas(loaded, config, text, source, model["scale"], progress)
    else:
        if not texts:
            raise InputError("texts: an encoder reads one sentence per line, got none")
        data = encoder_alphas(loaded, config, texts, source, model["scale"], progress)
    standard = all(rule["rule"] == "1/sqrt(d_k)" for rule in model["scale_rules"])
    data.update(
        kind=result_kind(loaded),
        model=model,
        what=WHAT if standard else WHAT_OWN_SCALE,
        unscaled_alpha=unscaled,
        unscaled_alpha_none=why_not,
        config={
            "model": loaded.name,
            "model_version": loaded.version,
            "alphas": list(config.alphas),
            "max_tokens": config.max_tokens,
            "window": config.window,
            "prompt": config.prompt,
            "new_tokens": config.new_tokens,
            "batch_size": config.batch_size,
            "text": source,
            **({"model_path": loaded.path} if loaded.user else {}),
        },
    )
    data["analysis"] = _analysis(data)
    data["seconds"] = {"load": loaded.seconds, "rescale": time.perf_counter() - started}
    return data


# Why no α removes the scale (the result's unscaled_alpha_none), and what that means.
NO_UNSCALED_ALPHA = {
    "layers_differ": "the layers apply different scales, so no one α removes them all",
    "not_positive": "the model's scale is not positive: no α > 0 removes it",
    "no_scale": "the model applies no scale (1): there is none to remove",
}


def _unscaled_alpha(scales: list[float]) -> tuple[float | None, str | None]:
    """(the α that removes every layer's scale, None) or (None, why there is none: a key of
    :data:`NO_UNSCALED_ALPHA`)."""
    if any(not math.isclose(s, scales[0], rel_tol=1e-9) for s in scales):
        return None, "layers_differ"
    if scales[0] <= 0:
        return None, "not_positive"
    if math.isclose(scales[0], 1.0, rel_tol=1e-9):
        return None, "no_scale"
    return 1.0 / scales[0], None


def model_positions(config) -> int | None:
    """The positions a model was built for (``max_position_embeddings``; GPT-2's ``n_positions``),
    None for one without a limit of its own (T5's relative position bias)."""
    for name in ("max_position_embeddings", "n_positions"):
        value = getattr(config, name, None)
        if isinstance(value, int) and value > 0:
            return value
    return None


def _analysis(data: dict) -> dict:
    """The figures the chapter's sentences are chosen by (the chapter computes nothing)."""
    rows = data["alphas"]
    base = next(r for r in rows if r["alpha"] == 1.0)
    removing = data["unscaled_alpha"]
    unscaled = (
        None if removing is None else next((r for r in rows if math.isclose(r["alpha"], removing, rel_tol=1e-9)), None)
    )
    out = {"reference_alpha": 1.0, "has_unscaled": unscaled is not None}
    if "cross_entropy" in base:
        best = min(rows, key=lambda r: r["cross_entropy"])
        out.update(
            best_alpha=best["alpha"],
            best_cross_entropy=best["cross_entropy"],
            best_perplexity=best["perplexity"],
            cross_entropy_alpha1=base["cross_entropy"],
            perplexity_alpha1=base["perplexity"],
            perplexity_ratio={_key(r["alpha"]): _ratio(r["perplexity"], base["perplexity"]) for r in rows},
            alphas_same_continuation=[
                r["alpha"] for r in rows if r["alpha"] != 1.0 and r["continuation"] == base["continuation"]
            ],
            alphas_changed_continuation=[r["alpha"] for r in rows if r["continuation"] != base["continuation"]],
            perplexity_unscaled=None if unscaled is None else unscaled["perplexity"],
        )
    else:
        worst = min(rows, key=lambda r: r["cosine_min"])
        out.update(
            worst_alpha=worst["alpha"],
            worst_cosine_min=worst["cosine_min"],
            cosine_min_unscaled=None if unscaled is None else unscaled["cosine_min"],
        )
    out["mean_max_weight"] = {_key(r["alpha"]): _mean(r["max_weight_per_layer"]) for r in rows}
    out["mean_normalized_entropy"] = {_key(r["alpha"]): _mean(r["normalized_entropy_per_layer"]) for r in rows}
    return out


def _key(alpha: float) -> str:
    return f"{alpha:g}"


def _ratio(a, b):
    return None if a is None or b is None or b == 0 else a / b


def _mean(values) -> float | None:
    finite = [v for v in values if v is not None]
    return float(np.mean(finite)) if finite else None
