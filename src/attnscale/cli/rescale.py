"""``attnscale rescale``: multiply a trained model's attention scale by α and measure what changes."""

from __future__ import annotations

import math
import sys
from fractions import Fraction

from attnscale import results
from attnscale.cli import output
from attnscale.cli.output import hold_results
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
from attnscale.errors import InputError
from attnscale.i18n import N_, _

EXAMPLES = [
    "attnscale rescale                          SmolLM2-135M: perplexity for α = 1/8 ... 8 on Python's own docs",
    "attnscale rescale --model minilm           all-MiniLM-L6-v2: how far the sentence embeddings move",
    "attnscale rescale --model ./my-checkpoint   your own model (a transformers folder or a .gguf file)",
    "attnscale rescale --text book.txt --max-tokens 2048   your text, in 4 consecutive windows of 512 tokens",
    "attnscale rescale --alphas 1/2,1,2 --json -          three values, strict JSON on stdout",
]
#: --max-tokens's and --window's default (a decoder's or encoder-decoder's).
DEFAULT_TOKENS = 512
AFTER = """This measures how sensitive a model trained with 1/√d_k is to another scale at inference; it does not
say what training without the scale would give (attnscale train does). α = √d_k removes the scale."""


def parse_alphas(text: str) -> tuple[float, ...]:
    """ "1/8,0.5,1,2" → (0.125, 0.5, 1.0, 2.0); each finite and > 0, and 1 among them."""
    values = []
    for part in text.split(","):
        part = part.strip()
        try:
            value = float(Fraction(part)) if "/" in part else float(part)
        except (ValueError, ZeroDivisionError):
            raise InputError(f"--alphas: expected numbers or fractions separated by commas, got {part!r}") from None
        if not math.isfinite(value) or value <= 0:
            raise InputError(f"--alphas: expected finite numbers > 0, got {part!r}")
        values.append(value)
    if 1.0 not in values:
        raise InputError(f"--alphas: expected 1 among the values (the model's own scale, the reference), got {text!r}")
    return tuple(values)


def register(sub) -> None:
    p = add_command(
        sub,
        "rescale",
        help="multiply a trained model's attention scale by α: perplexity, entropy, continuations",
        description="Multiply every attention layer's scale by α (the model's own eager attention, nothing else "
        "changed) and measure next-token cross-entropy and perplexity (a decoder or "
        "encoder-decoder) or how far the sentence embeddings move (an encoder), the mean row entropy and max weight per layer, and a "
        "greedy continuation of a fixed prompt. It measures the sensitivity of a model trained "
        "with 1/√d_k, not training without it.",
        examples=EXAMPLES,
        after=AFTER,
    )
    add_model_option(p, default="smollm2")
    p.add_argument(
        "--alphas",
        default="1/8,1/4,1/2,1,2,4,8",
        metavar="A,B,...",
        help="the factors, 1 among them (default 1/8,1/4,1/2,1,2,4,8)",
    )
    p.add_argument(
        "--text",
        metavar="FILE",
        help="UTF-8 text: a decoder or encoder-decoder reads it whole, an encoder one sentence per "
        "line. Default: a fixed slice of pydoc_data.topics (a decoder or encoder-decoder), the "
        "built-in sentences (an encoder)",
    )
    p.add_argument(
        "--max-tokens",
        type=int,
        default=None,
        metavar="N",
        help=f"a decoder or encoder-decoder only: tokens read from the text's start (default {DEFAULT_TOKENS})",
    )
    p.add_argument(
        "--window",
        type=int,
        default=None,
        metavar="W",
        help=f"a decoder or encoder-decoder only: tokens per consecutive causal window, at most the "
        f"model's positions (default {DEFAULT_TOKENS}, or the model's positions when fewer)",
    )
    output.add_json_option(p)
    output.add_quiet_option(p)
    add_results_option(
        p, "results folder; writes DIR/rescale/MODEL/result.json (your own model: DIR/rescale/user/NAME/result.json)"
    )
    add_name_option(p, "rescale")
    add_lang_option(p, "the table")
    p.set_defaults(run=run_rescale_command)


def _window_option(args, loaded, quiet: bool) -> int:
    """The window: ``--window`` as typed (refused past the model's positions), else the default,
    clipped to the model's positions with a note."""
    from attnscale.experiments.pretrained.rescale import model_positions

    positions = model_positions(loaded.model.config)
    if args.window is not None:
        if positions is not None and args.window > positions:
            raise InputError(
                f"--window {args.window}: expected at most {positions}, the positions {loaded.name} has "
                "(a window past them is scored where the model never saw a position)"
            )
        return args.window
    if positions is not None and positions < DEFAULT_TOKENS:
        if not quiet:
            print(
                f"attnscale rescale: note: --window {positions}, the positions {loaded.name} has (the default "
                f"{DEFAULT_TOKENS} would run past them)",
                file=sys.stderr,
            )
        return positions
    return DEFAULT_TOKENS


def run_rescale_command(args) -> int:
    from attnscale.cli.progress import Progress
    from attnscale.errors import check_count
    from attnscale.experiments.pretrained import loading as pretrained
    from attnscale.experiments.pretrained.probe.run import builtin_sentences, read_texts
    from attnscale.stored_words import BUILTIN_SOURCE
    from attnscale.experiments.pretrained.rescale import (
        RescaleConfig,
        default_text,
        read_text,
        result_kind,
        run_rescale,
    )

    for option, value in (("--max-tokens", args.max_tokens), ("--window", args.window)):
        if value is not None:
            check_count(option, value, minimum=2)  # one token pair to predict, at least
    alphas = parse_alphas(args.alphas)
    with options_named(MODEL_OPTIONS):
        RescaleConfig(alphas=alphas)  # --alphas checked before anything loads
    output.check_json_target(args)
    root = results.check_writable(results_root(args), "--results")
    name = user_result_name(args, root)
    if args.text and not read_text(args.text).strip():  # refused before the model is loaded
        raise InputError(f"--text: {args.text!r} holds no text, expected at least two tokens")
    with options_named(MODEL_OPTIONS):
        loaded = pretrained.load_model(args.model, name)
    if loaded.family == "encoder":
        typed = [f"{o} {v}" for o, v in (("--max-tokens", args.max_tokens), ("--window", args.window)) if v is not None]
        if typed:  # said even with --quiet: it is about what was typed
            print(
                f"attnscale rescale: note: {', '.join(typed)} ignored: only a decoder or encoder-decoder reads "
                f"one text in causal windows; {loaded.name} is an encoder (it reads one sentence per line)",
                file=sys.stderr,
            )
        config = RescaleConfig(alphas=alphas)
    else:
        config = RescaleConfig(
            alphas=alphas,
            window=_window_option(args, loaded, args.quiet),
            max_tokens=DEFAULT_TOKENS if args.max_tokens is None else args.max_tokens,
        )
    text = texts = None
    if loaded.family != "encoder":  # a decoder or encoder-decoder reads one whole text
        text, source = (read_text(args.text), args.text) if args.text else default_text()
    else:
        texts, source = (read_texts(args.text), args.text) if args.text else (builtin_sentences(), BUILTIN_SOURCE)
    with hold_results(result_kind(loaded), root), Progress(quiet=args.quiet) as progress, options_named(MODEL_OPTIONS):
        data = run_rescale(loaded, config, text=text, texts=texts, source=source, progress=progress)
        env = results.write(data["kind"], data, config=data["config"], seed=None, root=root)
    output.emit_json(args, env)
    if not output.json_to_stdout(args):
        print(summary_table(data))
        print(_("result: {path}", path=env.path))
    return 0 if data["check"]["passed"] else 1


def _num(x, digits: int = 4) -> str:
    return "—" if x is None else f"{x:.{digits}g}"


def summary_table(data: dict) -> str:
    """Per α: cross-entropy and perplexity (a language model) or the embeddings' cosines (an encoder), the
    mean entropy and max weight; in the bound language (the page's words where the page says the same)."""
    from attnscale.report.model_words import NO_REMOVAL, is_lm, measured_sentence, weights_sentence  # the page's words

    model = data["model"]
    decoder = is_lm(data)  # reads one text
    removes = (
        _(NO_REMOVAL[data["unscaled_alpha_none"]])
        if data["unscaled_alpha"] is None
        else _("α = {a} removes it", a=f"{data['unscaled_alpha']:g}")
    )
    lines = [
        _(
            "{name}: every attention scale × α (d_k = {d_k}, own scale {scale}; {removes})",
            name=model["name"],
            d_k=model["d_k"],
            scale=f"{model['scale']:.4g}",
            removes=removes,
        )
    ]
    if model.get("weights_note"):
        lines.append(weights_sentence(model))
    lines.append(measured_sentence(data))
    lines += _lm_lines(data) if decoder else _encoder_lines(data)
    analysis = data["analysis"]
    for row in data["alphas"]:
        key = f"{row['alpha']:g}"
        entropy, top = analysis["mean_normalized_entropy"][key], analysis["mean_max_weight"][key]
        if decoder:
            lines.append(
                f"{key:>7} {row['cross_entropy']:>8.4f} {_num(row['perplexity'], 5):>10} "
                f"{_num(entropy, 3):>6} {_num(top, 3):>6}  {row['continuation']!r}"
            )
        else:
            lines.append(
                f"{key:>7} {row['cosine_mean']:>9.4f} {row['cosine_min']:>9.4f} {_num(entropy, 3):>6} {_num(top, 3):>6}"
            )
    lines.append(
        _(
            "CE: next-token cross-entropy (nats); ppl = exp(CE); H/lnn, maxw: mean over layers, heads and rows of entropy/ln n and max weight"
        )
        if decoder
        else _(
            "cos: cosine of each sentence's embedding to its α = 1 embedding; H/lnn, maxw: means over layers, heads and rows"
        )
    )
    return "\n".join(lines)


# Whether the check passed, as its line ends.
PASSED = {True: N_("passed"), False: N_("FAILED")}


def _lm_lines(data: dict) -> list[str]:
    """A language model's text, check and table header."""
    from attnscale.report.model_words import text_source

    text, check = data["text"], data["check"]
    return [
        _(
            "text: {source}: {tokens} tokens in {windows} window(s) of up to {window}, {predicted} predicted",
            source=text_source(text["source"]),
            tokens=text["n_tokens"],
            windows=text["windows"],
            window=text["window"],
            predicted=text["tokens_predicted"],
        ),
        _(
            "check: α = 1 cross-entropy {ours:.6f} vs the model's own loss {own:.6f} (relative {rel:.1e}, tolerance {tolerance:g}) — {passed}",
            ours=check["our_loss"],
            own=check["own_loss"],
            rel=check["relative_difference"],
            tolerance=check["tolerance"],
            passed=_(PASSED[bool(check["passed"])]),
        ),
        "",
        f"{'α':>7} {'CE':>8} {'ppl':>10} {'H/lnn':>6} {'maxw':>6}  "
        + _("continuation of {prompt}", prompt=repr(data["prompt"])),
    ]


def _encoder_lines(data: dict) -> list[str]:
    """An encoder's sentences, check and table header."""
    from attnscale.report.model_words import text_source

    text, check = data["text"], data["check"]
    return [
        _(
            "text: {source}: {n} sentences, {tokens} tokens",
            source=text_source(text["source"]),
            n=text["n_sequences"],
            tokens=text["n_tokens"],
        ),
        _(
            "check: α = 1 embeddings vs the model's own: max |difference| {diff:.1e} (tolerance {tolerance:g}) — {passed}",
            diff=check["max_abs_difference"],
            tolerance=check["tolerance"],
            passed=_(PASSED[bool(check["passed"])]),
        ),
        "",
        f"{'α':>7} {'cos mean':>9} {'cos min':>9} {'H/lnn':>6} {'maxw':>6}",
    ]
