"""The pieces every subcommand's parser is built from: the command itself with its examples, and the
options several commands share (results folder, random seed, language, model), each defined once so
that its flag, type, default and the wording of its default agree everywhere."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from attnscale.i18n import LANGS

DEFAULT_PAGE_DIR = "attnscale-report"  # where `report` and `full` write the pages by default

# What the --model help says beyond the model's own name (attnscale.experiments.pretrained.loading.MODELS).
MODEL_REMARKS = {"smollm2": "de-quantised from 4 bits"}


class HelpFormatter(argparse.HelpFormatter):
    """argparse's formatter, but a description or epilog paragraph with an indented line (examples,
    a command to type) is kept as written, while prose paragraphs wrap to the terminal's width."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        paragraphs = []
        for para in text.split("\n\n"):
            lines = para.splitlines(keepends=True)
            if any(line.startswith(" ") for line in lines):
                paragraphs.append("".join(indent + line for line in lines))
            else:
                paragraphs.append(super()._fill_text(para, width, indent))
        return "\n\n".join(paragraphs)


def examples_epilog(examples: Sequence[str], after: str | None = None) -> str:
    """The ``examples:`` block of a --help (one indented command line each), then ``after`` if given."""
    text = "examples:\n" + "\n".join(f"  {line}" for line in examples)
    return f"{text}\n\n{after}" if after else text


def add_command(
    sub, name: str, help: str, description: str | None = None, examples: Sequence[str] = (), after: str | None = None
) -> argparse.ArgumentParser:
    """Add subcommand ``name``: ``help`` in ``attnscale --help``; its own --help shows ``description``
    wrapped to the terminal, then the ``examples`` as written and ``after``."""
    return sub.add_parser(
        name,
        help=help,
        description=description,
        epilog=examples_epilog(examples, after) if examples else None,
        formatter_class=HelpFormatter,
    )


def non_negative_int(text: str) -> int:
    """An argparse ``type``: ``text`` as an integer >= 0 (argparse names the option in its error)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a non-negative integer, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a non-negative integer, got {value}")
    return value


def add_results_option(parser, help: str) -> None:
    """``--results DIR``, the results folder, ``args.results``: None means
    :data:`attnscale.results.DEFAULT_ROOT`, which the help names. ``help`` says what the command reads
    or writes there. The old ``--out`` is refused naming it (:class:`RemovedOut`)."""
    from attnscale.results import DEFAULT_ROOT

    parser.add_argument("--results", default=None, metavar="DIR", help=f"{help} (default: ./{DEFAULT_ROOT})")
    add_removed_out_option(parser)


class RemovedOut(argparse.Action):
    """``--out``, which named the results folder in some commands and the report's pages in others:
    refused in one line (exit 2) naming the two options that replace it."""

    def __init__(self, option_strings, dest, **kwargs):
        super().__init__(option_strings, dest, nargs="?", help=argparse.SUPPRESS)

    def __call__(self, parser, namespace, values, option_string=None):
        parser.exit(
            2,
            f"{parser.prog}: error: --out was removed: the results folder is --results DIR, the "
            "report's pages --page-dir DIR\n",
        )


def add_removed_out_option(parser) -> None:
    """Refuse the old ``--out`` with :class:`RemovedOut` (hidden from --help)."""
    parser.add_argument("--out", action=RemovedOut)


def add_page_dir_option(parser) -> None:
    """``--page-dir DIR``, the report's pages, ``args.page_dir``: None means :data:`DEFAULT_PAGE_DIR`."""
    parser.add_argument(
        "--page-dir",
        default=None,
        metavar="DIR",
        help=f"folder for index.html / index.zh.html (default: ./{DEFAULT_PAGE_DIR})",
    )


def page_dir(args) -> str:
    """The report's page folder the command was given, or the default one."""
    return DEFAULT_PAGE_DIR if args.page_dir is None else args.page_dir


def results_root(args):
    """The results folder the command was given, or the default one. Every command that reads or
    writes results asks here first, so ``$ATTNSCALE_REFERENCE`` (where the reference results are read
    from) is checked here too, before any work (:func:`attnscale.results.reference_root`)."""
    from attnscale.results import DEFAULT_ROOT, reference_root

    reference_root()
    return DEFAULT_ROOT if args.results is None else args.results


def add_seed_option(parser, help: str) -> None:
    """``--seed N``: a non-negative integer, 0 by default; ``help`` says what it seeds."""
    parser.add_argument("--seed", type=non_negative_int, default=0, help=f"{help} (default: 0)")


def add_lang_option(parser, what: str) -> None:
    """``--lang en|zh``: the language of ``what`` (the languages of the CLI's catalog)."""
    parser.add_argument("--lang", choices=LANGS, default="en", help=f"language of {what} (default: en)")


def add_model_option(parser, default: str) -> None:
    """``--model``: one of the pinned pretrained models, ``default`` first in the help, or a PATH to the
    user's own (a checkpoint folder or a .gguf file: checked when it is loaded)."""
    from attnscale.experiments.pretrained.loading import MODELS

    names = [default, *(m for m in MODELS if m != default)]
    described = [
        f"{m}: {MODELS[m]}"
        + (f", {MODEL_REMARKS[m]}" if m in MODEL_REMARKS else "")
        + (" (default)" if m == default else "")
        for m in names
    ]
    described.append(
        "or PATH: your own model, a folder with a transformers checkpoint (config.json, weights, "
        "tokenizer files) or a .gguf file, read offline"
    )
    parser.add_argument("--model", default=default, metavar="|".join(names) + "|PATH", help="; ".join(described))


def add_name_option(parser, family: str) -> None:
    """``--name NAME``: the results name of the user's own model (``DIR/<family>/user/NAME``)."""
    parser.add_argument(
        "--name",
        default=None,
        metavar="NAME",
        help=f"your own model only: keep its results as DIR/{family}/user/NAME (1 to 64 of a-z, 0-9, "
        "'.', '_', '-'; default: the folder's name and a short hash of its absolute path, "
        "so that two checkpoints with the same folder name never share one)",
    )


def user_result_name(args, root) -> str | None:
    """The results name of ``args.model`` when it is the user's own (``--name``, else the default one
    of :func:`attnscale.experiments.pretrained.loading.result_name`), None for a bundled model. Refuses,
    before any work, a ``--name`` given with a bundled model, one that cannot be a folder's name, and
    one under which another model's result is kept (probe or rescale, full or quick run)."""
    from pathlib import Path

    from attnscale import results
    from attnscale.errors import InputError
    from attnscale.experiments.pretrained.loading import MODELS, result_name

    if args.model in MODELS:
        if args.name is not None:
            raise InputError(
                f"--name: names the results of your own model (--model PATH), got --name {args.name!r} "
                f"with --model {args.model}, whose result is always {args.command}/{args.model}"
            )
        return None
    try:
        name = result_name(args.model, args.name)
    except InputError:
        raise InputError(
            f"--name: expected 1 to 64 of a-z, 0-9, '.', '_', '-' (starting with a letter or digit), got {args.name!r}"
        ) from None
    here = str(Path(args.model).resolve())
    for family in results.USER_FAMILIES:
        for quick in (False, True):
            try:
                env = results.read(results.user_kind(family.split("/")[0], name), root, quick=quick)
            except results.ResultError:  # none there yet, or unreadable: nothing of value to keep
                continue
            owner = (env.config or {}).get("model_path")
            if owner != here:
                held = (
                    f"the model at {owner!r}"
                    if owner
                    else f"{(env.config or {}).get('model')!r} (its path is not recorded)"
                )
                raise InputError(
                    f"--name {name!r}: {env.path} already holds the result of another model, {held}; "
                    f"expected a name not taken by another model: choose another --name, or delete "
                    f"{env.path.parent} to replace it"
                )
    return name


class options_named:
    """Within it, an attnscale error that names a library argument (``"max_tokens: expected …"``)
    names the option typed for it instead (``"--max-tokens: expected …"``): ``names`` maps one to
    the other. The message is otherwise unchanged (it quotes what was given)."""

    def __init__(self, names: dict[str, str]):
        self.names = names

    def __enter__(self):
        return self

    def __exit__(self, kind, err, tb):
        from attnscale.errors import AttnScaleError

        if err is None or not isinstance(err, AttnScaleError):
            return False
        head, sep, rest = str(err).partition(": ")
        if sep and head in self.names:
            raise type(err)(f"{self.names[head]}: {rest}") from None
        return False


#: The library's argument names as the probe's and rescale's options are typed.
MODEL_OPTIONS = {
    "model": "--model",
    "texts": "--text",
    "text": "--text",
    "max_tokens": "--max-tokens",
    "window": "--window",
    "alpha": "--alphas",
    "batch_size": "--batch-size",
    "slug": "--name",
}
