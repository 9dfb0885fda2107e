"""Whether a QK-norm design saturates: the logit spread predicted from the checkpoint, against text.

A layer that RMS-normalises q and k per head (Qwen3, Gemma 3 and 4: ``q_norm``, ``k_norm`` over
head_dim) fixes their norms, so its weights alone predict the logit's standard deviation:
scale·√(Σᵢ g_q,i² g_k,i²) (:func:`attnscale.theory.qk_norm_logit_std`), with g the norms' effective
per-channel gains (Qwen3's weight, Gemma's 1 + weight: read by running the norm on a vector of ones)
and scale the factor the layer multiplies q·k by. The prediction assumes q and k of independent,
isotropic directions; a rotary rotation between channels of unequal gains and RMSNorm's ε are left out.

Beside it, measured on the text: the logit std over attended pairs and the rows' entropy. Each is set
against the frozen boundary √(2 ln n) of softmax over n keys (the random-energy model, see
:func:`attnscale.theory.phase_boundary`), n the mean number of keys per row on the text: the verdict
(:func:`saturation_verdict`) says whether the layer is saturated by design (the prediction past the
boundary), on text (the rows' measured saturation index std/√(2 ln n) ≥ 1), both, or neither.
"""

from __future__ import annotations

import math

import numpy as np

from attnscale.i18n import N_, _
from attnscale.theory import phase_boundary, qk_norm_logit_std

__all__ = ["norm_gains", "design", "saturation_verdict", "design_text", "VERDICT_WORDS"]

# The verdict's key by (saturated by design, saturated on text), and its words.
VERDICTS = {
    (True, True): "design_and_text",
    (True, False): "design_only",
    (False, True): "text_only",
    (False, False): "neither",
}
VERDICT_WORDS = {
    "design_and_text": N_("saturated by design and on text"),
    "design_only": N_("saturated by design, not on text"),
    "text_only": N_("saturated on text, not by design"),
    "neither": N_("not saturated"),
}


def norm_gains(model, call) -> tuple[np.ndarray, np.ndarray] | None:
    """The effective per-channel gains (g_q, g_k), each (d_k,), of the q/k-norms of the attention module
    of ``call`` (an :class:`~attnscale.experiments.pretrained.hf_attention.AttentionCall` of ``model``);
    None when the module has no per-head QK-norm (OLMo 2's spans all heads: its per-head norm is not fixed)."""
    import torch

    if not call.qk_norm:
        return None
    module = model.get_submodule(call.name)
    d = int(call.q.shape[-1])
    gains = []
    for norm in (module.q_norm, module.k_norm):
        weight = getattr(norm, "weight", None)
        if weight is not None and tuple(weight.shape) != (d,):
            return None
        dtype = weight.dtype if weight is not None else torch.float32
        with torch.no_grad():  # RMSNorm of ones is 1/√(1 + ε) ≈ 1: what comes out is the gain
            gains.append(norm(torch.ones(d, dtype=dtype)).double().cpu().numpy())
    return gains[0], gains[1]


def saturation_verdict(design_index: float, text_index: float | None) -> str:
    """The verdict's key: saturated by design when the predicted logit std reaches the frozen boundary
    (``design_index`` = prediction/√(2 ln n) ≥ 1), on text when the rows' mean saturation index does
    (``text_index`` ≥ 1; None: no row had one)."""
    return VERDICTS[design_index >= 1.0, text_index is not None and text_index >= 1.0]


def design(layers: list[dict], gains: list, sums: list[dict], per_layer: dict) -> list[dict] | None:
    """Per layer with a per-head QK-norm: the prediction from the checkpoint beside what the text gave.
    layers: the probe's layer facts (``scale``); gains: :func:`norm_gains` per layer; sums: the probe's
    per-layer sums (``pairs``, ``entropy_n``: (H,)); per_layer: head-averaged figures (``qk_var``,
    ``entropy``, ``saturation_index``). None when no layer has one."""
    out = []
    for i, (layer, g) in enumerate(zip(layers, gains)):
        if g is None:
            continue
        rows = float(np.sum(sums[i]["entropy_n"]))
        # rows: those with two or more keys, so n ≥ 2 when there is one; none: nothing can saturate
        n = float(np.sum(sums[i]["pairs"])) / rows if rows else None
        boundary = phase_boundary(n) if n is not None else None
        predicted = qk_norm_logit_std(layer["scale"], g[0], g[1])
        var, entropy, text_index = (
            per_layer.get(f, [None] * len(layers))[i] for f in ("qk_var", "entropy", "saturation_index")
        )
        out.append(
            {
                "layer": i,
                "scale": layer["scale"],
                "predicted_logit_std": predicted,
                "measured_logit_std": None if var is None else abs(layer["scale"]) * math.sqrt(var),
                "entropy_bits": None if entropy is None else entropy / math.log(2),
                "mean_keys": n,
                "boundary": boundary,
                "saturation_index": text_index,
                "verdict": saturation_verdict(0.0 if boundary is None else predicted / boundary, text_index),
            }
        )
    return out or None


def design_text(data: dict, labels: list[str]) -> list[str]:
    """The probe's lines on a QK-norm design, in the bound language: one per layer (``labels``: the
    layers' names as the table prints them); none for a model without per-head QK-norm."""
    rows = data.get("qk_design")
    if not rows:
        return []
    lines = [
        _(
            "QK-norm: the logit std predicted from the checkpoint (scale × √(Σ g_q² g_k²) of its q/k-norm gains) and measured on the text:"
        )
    ]
    for row in rows:
        measured = "—" if row["measured_logit_std"] is None else f"{row['measured_logit_std']:.3g}"
        entropy = "—" if row["entropy_bits"] is None else f"{row['entropy_bits']:.2f}"
        if row["boundary"] is None:  # no row of the text had two keys
            continue
        lines.append(
            "  "
            + _(
                "{layer}: predicted {predicted:.3g}, measured {measured}, entropy {entropy} bits; frozen beyond √(2 ln n) = {boundary:.2f} at n ≈ {n:.1f} keys: {verdict}",
                layer=labels[row["layer"]],
                predicted=row["predicted_logit_std"],
                measured=measured,
                entropy=entropy,
                boundary=row["boundary"],
                n=row["mean_keys"],
                verdict=_(VERDICT_WORDS[row["verdict"]]),
            )
        )
    return lines
