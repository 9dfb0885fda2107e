"""The user's own models on the page: a chapter for every probe and rescale result of a model of
theirs in the results folder (kinds ``probe/user/<name>``, ``rescale/user/<name>``), rendered by the
bundled models' chapters (:mod:`attnscale.report.chapters.probe`, :mod:`~attnscale.report.chapters.rescale`)
and titled with the model's name and architecture; then, beside the bundled models, one table that
compares them all. Everything shown is read from the results; nothing is computed here.
"""

from __future__ import annotations

import traceback

from attnscale import results
from attnscale.i18n import N_, _
from attnscale.report.chapters import probe as probe_chapter
from attnscale.report.chapters import rescale as rescale_chapter
from attnscale.report.experiments import RenderedChapter, quick_title, source_line
from attnscale.report.html import error_box, para, table
from attnscale.report.model_words import scale_text
from attnscale.report.numbers import number

#: Each family's chapter: the module that renders it and its title (the model's name and architecture).
FAMILIES = {
    "probe": (
        probe_chapter,
        N_("Your model {name} ({architecture}): do its queries and keys obey the blog post's assumptions?"),
    ),
    "rescale": (rescale_chapter, N_("Your model {name} ({architecture}): its attention scale × α")),
}
#: The bundled models, in the comparison table's first rows: (probe kind, rescale kind).
BUNDLED = (("probe/minilm", "rescale/minilm"), ("probe/smollm2", "rescale/smollm2"))
#: Whose model a row of the comparison is.
WHOSE = {True: N_("yours"), False: N_("bundled")}
#: The α of the comparison's perplexity column.
COMPARED_ALPHA = 8


def user_names(root) -> list[str]:
    """The names of the user's models that have a probe or a rescale result (full or quick) under ``root``."""
    return sorted({kind.rsplit("/", 1)[1] for family in FAMILIES for kind in results.user_kinds(family, root)})


def how_to(family: str, name: str) -> str:
    return f"attnscale {family} --model PATH --name {name}"


def render_own(family: str, name: str, root) -> RenderedChapter | None:
    """The chapter of the user's model ``name`` in ``family``: None when it has no such result; an
    error box when the result cannot be read or rendered (the rest of the page is unaffected)."""
    module, title = FAMILIES[family]
    kind = results.user_kind(family, name)
    env = None
    try:
        env = results.read_preferred(kind, root)
        model = env.data["model"]
        heading = quick_title(_(title, name=model["name"], architecture=model["architecture"]), env)
        html = source_line(env, how_to(family, name)) + module.render(env)
        return RenderedChapter(f"own-{family}-{name}", heading, html, "rendered", kind, env)
    except results.ResultMissing:
        return None
    except Exception as err:  # noqa: BLE001  (a malformed result or a renderer's bug: one box, not the page)
        heading = _(title, name=name, architecture="?")
        return RenderedChapter(
            f"own-{family}-{name}",
            heading,
            error_box(_("This chapter could not be rendered; the rest of the report is unaffected."), err=err),
            "error",
            kind,
            env,
            traceback.format_exception_only(type(err), err)[-1].strip(),
        )


def _read(kind: str, root) -> results.Envelope | None:
    try:
        return results.read_preferred(kind, root)
    except results.ResultError:
        return None


def _scale_cell(model: dict) -> str:
    rules = model.get("scale_rules") or []
    texts = list(dict.fromkeys(scale_text(rule) for rule in rules))
    if not texts:
        return number(model.get("scale"), ".4g")
    if len(texts) == 1:
        return texts[0]
    return _("{first} … {last} (differs per layer)", first=texts[0], last=texts[-1])


def _margin(factor) -> str:
    return "—" if factor is None else f"×{number(factor)}"


def comparison_row(probe: results.Envelope | None, rescale: results.Envelope | None) -> list[str]:
    """One model's row: name, whose, architecture, parameters, scale, median Var(q·k) ratio, heads with
    more than half their weight on the first token, float16 headroom (model's scale, scale removed),
    perplexity at α = COMPARED_ALPHA over α = 1 (a language model that was rescaled with that α)."""
    model = (probe or rescale).data["model"]
    a = probe.data.get("analysis") if probe is not None else None
    f16 = probe.data.get("float16") if probe is not None else None
    ratio = (rescale.data.get("analysis", {}).get("perplexity_ratio") or {}) if rescale is not None else {}
    return [
        model["name"],
        _(WHOSE[bool(model.get("user"))]),
        model.get("architecture", "—"),
        number(model.get("n_parameters"), digits=3) if model.get("n_parameters") is not None else "—",
        _scale_cell(model),
        number(a["ratio_pair"]["median"]) if a else "—",
        f"{a['sink_first']['over_half']} / {a['n_heads']}" if a else "—",
        f"{_margin(f16['margin'])}, {_margin(f16['margin_unscaled'])}" if f16 else "—",
        number(ratio.get(f"{COMPARED_ALPHA:g}"), ".3g") if ratio.get(f"{COMPARED_ALPHA:g}") is not None else "—",
    ]


def comparison(names: list[str], root) -> str:
    """The table of every model with a result (the bundled ones first, then the user's), and its lead."""
    pairs = [(_read(p, root), _read(r, root)) for p, r in BUNDLED]
    pairs += [(_read(results.user_kind("probe", n), root), _read(results.user_kind("rescale", n), root)) for n in names]
    rows = [comparison_row(p, r) for p, r in pairs if p is not None or r is not None]
    header = [
        _("model"),
        _("whose"),
        _("architecture"),
        _("parameters"),
        _("scale"),
        _("median Var(q·k) ratio (pairs)"),
        _("heads with > ½ weight on the first token"),
        _("float16 headroom (model's scale, scale removed)"),
        _("perplexity at α = {alpha} / at α = 1", alpha=COMPARED_ALPHA),
    ]
    lead = _(
        "Every model with a probe or rescale result here, the bundled ones first, each read from its own result (its chapter says which run). A dash: the result does not hold that figure (no probe, no rescale with α = {alpha}, or an encoder, which has no perplexity).",
        alpha=COMPARED_ALPHA,
    )
    return para(lead) + table(header, rows, cls="numeric")


def own_chapters(root) -> tuple[list[RenderedChapter], str | None]:
    """The chapters of the user's models under ``root`` (each model's probe, then its rescale) and
    the comparison table's HTML (None when the user has no model here)."""
    names = user_names(root)
    chapters = [ch for name in names for family in FAMILIES if (ch := render_own(family, name, root)) is not None]
    return chapters, (comparison(names, root) if names else None)


def comparison_title() -> str:
    return _("Your models beside the bundled ones")


__all__ = ["own_chapters", "comparison", "comparison_row", "comparison_title", "user_names", "render_own"]
