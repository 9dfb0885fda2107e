"""The words about a pretrained model's result that the page's chapters (probe, rescale) and the
terminal (``attnscale probe``, ``attnscale rescale``) share: each layer's scale and name, where the
weights came from, what the rescale intervention measures, and the text it read. Each is a small
pure function of the result's data, in the bound language."""

from __future__ import annotations

import math

from attnscale.i18n import N_, _
from attnscale.report.numbers import number
from attnscale.stored_words import BUILTIN_SOURCE, SMOLLM2_WEIGHTS_NOTE

#: Why no α removes the model's scale, by the result's ``unscaled_alpha_none``.
NO_REMOVAL = {
    "layers_differ": N_("no one α removes every layer's scale, since they differ"),
    "no_scale": N_("it applies no scale (1), so there is none to remove"),
    "not_positive": N_("its scale is not positive, so no α > 0 removes it"),
}

#: An encoder-decoder's layer, by its side (see layer_sides): each side numbered from 0.
LAYER_LABELS = {
    "encoder": N_("encoder layer {i}"),
    "decoder": N_("decoder layer {i}"),
    "cross": N_("cross-attention layer {i}"),
}


def scale_number_text(scale: float, d_k: int) -> str:
    """The recorded scale, named 1/√d_k only when it is that number (a result written before each
    layer's scale rule was recorded)."""
    if d_k > 0 and math.isclose(scale, 1.0 / math.sqrt(d_k), rel_tol=1e-6):
        return f"{scale:.4g} = 1/√{d_k}"
    return f"{scale:.4g}"


def scale_text(rule: dict) -> str:
    """One layer's recorded scale in words (``rule``: pretrained.probe.run.scale_rule's dict): its value, what it
    is in terms of d_k, and a QK-norm or a soft-cap when the layer has one."""
    value = f"{rule['value']:.4g}"
    words = {
        "1/sqrt(d_k)": lambda: _("{value} = 1/√{d_k}", value=value, d_k=rule["d_k"]),
        "1": lambda: _("1 (no scale: the logits are q·k itself)"),
        "1/sqrt(c)": lambda: _("{value} = 1/√{c}, not 1/√d_k = 1/√{d_k}", value=value, c=rule["c"], d_k=rule["d_k"]),
        "constant": lambda: _(
            "{value} = {times} × 1/√{d_k}", value=value, times=number(rule["times_sqrt_d_k"]), d_k=rule["d_k"]
        ),
    }[rule["rule"]]()
    if rule.get("qk_norm"):
        words = _("{scale}, after q and k are normalised (QK-norm)", scale=words)
    if rule.get("softcap") is not None:
        words = _("{scale}, soft-capped: {cap}·tanh(logit/{cap})", scale=words, cap=number(rule["softcap"]))
    return words


def model_scale_text(model: dict) -> str:
    """The model's scale in words: its first layer's rule, or the bare number for an older result."""
    rules = model.get("scale_rules")
    return scale_text(rules[0]) if rules else scale_number_text(model["scale"], model["d_k"])


def layer_sides(model: dict) -> list[str] | None:
    """Each attention layer's side in an encoder-decoder ("encoder", "decoder": its causal
    self-attention, "cross": the decoder reading the encoder), from the recorded ``cross_layers``
    and ``causal_layers``; None for a model of one side (its layers are numbered plainly)."""
    cross, causal = model.get("cross_layers"), model.get("causal_layers")
    if model.get("family") != "encoder-decoder" or not cross or not causal or len(cross) != len(causal):
        return None
    return ["cross" if x else "decoder" if c else "encoder" for x, c in zip(cross, causal)]


def layer_labels(model: dict) -> list[str]:
    """The name of each attention layer: "0", "1", … or, in an encoder-decoder, "encoder layer 0", …,
    "decoder layer 0", "cross-attention layer 0", … (:func:`layer_sides`)."""
    n = len(model.get("scale_rules") or []) or model["n_layers"]
    sides = layer_sides(model)
    if sides is None:
        return [str(i) for i in range(n)]
    seen: dict[str, int] = {}
    labels = []
    for side in sides:
        labels.append(_(LAYER_LABELS[side], i=seen.get(side, 0)))
        seen[side] = seen.get(side, 0) + 1
    return labels


def scales_sentence(model: dict) -> str | None:
    """Which scale each layer applies: one sentence when all agree, else each layer's. None for a
    result without the rules."""
    rules = model.get("scale_rules")
    if not rules:
        return None
    texts = [scale_text(rule) for rule in rules]
    if len(set(texts)) == 1:
        return _(
            "All {n} attention layers multiply q·k by the same scale, {scale} (as recorded from each call).",
            n=len(texts),
            scale=texts[0],
        )
    sided = layer_sides(model) is not None  # "encoder layer 0: …", else "layer 0: …"
    listed = _("; ", msgctxt="clauses").join(
        _("{layer}: {scale}", layer=label, scale=s) if sided else _("layer {layer}: {scale}", layer=label, scale=s)
        for label, s in zip(layer_labels(model), texts)
    )
    return _(
        "The attention layers multiply q·k by different scales (as recorded from each call): {scales}.", scales=listed
    )


def weights_sentence(model: dict) -> str:
    """Where the model's weights came from, as a note ("Note: …."; a result stores it in English)."""
    text = model["weights_note"]
    return _("Note: {note}.", note=_(text) if text == SMOLLM2_WEIGHTS_NOTE else text)


def is_lm(data: dict) -> bool:
    """A language model's result (a decoder, or an encoder-decoder's decoder): cross-entropy per α
    (a result without ``family`` was written when only decoders were causal)."""
    model = data["model"]
    return model.get("family", "decoder" if model["causal"] else "encoder") != "encoder"


def measured_sentence(data: dict) -> str:
    """What the intervention measures: the bundled words for a model scaled by 1/√d_k in every layer,
    else the scales it applies, named (and why no α removes them, when none does)."""
    model = data["model"]
    rules = model.get("scale_rules") or []
    if all(rule["rule"] == "1/sqrt(d_k)" for rule in rules) and data["unscaled_alpha"] is not None:
        return _(
            "What this measures: {model} was trained with the scale 1/√d_k = {scale}; here every attention layer's scale is multiplied by α at inference, nothing else changed, and α = {unscaled} removes the scale altogether. "
            "It shows how sensitive a model trained with 1/√d_k is to its scale — not what training without the scale would give (the training chapters answer that).",
            model=model["name"],
            scale=number(model["scale"], ".4g"),
            unscaled=f"{data['unscaled_alpha']:g}",
        )
    removal = (
        _("α = {a} removes the scale altogether", a=f"{data['unscaled_alpha']:g}")
        if data["unscaled_alpha"] is not None
        else _(NO_REMOVAL[data["unscaled_alpha_none"]])
    )
    return _(
        "What this measures: {scales} Here every attention layer's own scale is multiplied by α at inference (inside a soft-cap, where there is one), nothing else changed (a position bias stays as it is); {removal}. "
        "It shows how sensitive {model}, as trained, is to its scale — not what training with another scale would give (the training chapters answer that).",
        model=model["name"],
        scales=scales_sentence(model),
        removal=removal,
    )


def text_source(source: str) -> str:
    """The text's source as a result stores it: a file's path, or the built-in sentences (worded)."""
    return _(BUILTIN_SOURCE) if source == BUILTIN_SOURCE else source
