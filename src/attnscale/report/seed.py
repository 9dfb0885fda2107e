"""The chapters that retell the blog post (and go beyond it), from the verification's result.

In identifiers, "seed" names the blog post the verification checks (:data:`attnscale.report.seed_words.SEED_POST`);
the chapters follow the outline the result lists (``data["chapters"]``: id and part, in order). Each
chapter = its prose (report.seed_words) + its figures (report.figures, drawn from the ``series`` blocks
the verification already computed) + the verdict cards of its claims. A figure that cannot be drawn,
or prose that lacks a value from the result, becomes a visible error box inside its chapter; the rest
of the page is unaffected.
"""

from __future__ import annotations

from collections.abc import Callable

from attnscale.i18n import N_, TextError, _, current_lang
from attnscale.report import figures, figures_beyond, figures_qk, seed_words
from attnscale.report.experiments import provenance_line, quick_title
from attnscale.report.html import error_box, esc
from attnscale.report.numbers import number
from attnscale.report.page import Section
from attnscale.report.plotting import responsive_figure
from attnscale.report.seed_words import SEED_POST, caption, facts
from attnscale.report.verdicts import claim_list
from attnscale.report.widget import widget_html
from attnscale.report.widget_rows import RealRows

# chapter → the figures drawn in it, in order: (data block, the block's keys to draw or None for all).
# Each block's name is its figure function's name (figure_function).
CHAPTER_FIGURES: dict[str, tuple[tuple[str, tuple[str, ...] | None], ...]] = {
    "formula": (),
    "without_scaling": (("saturation", None), ("jacobian", None)),
    "why_grows": (("dot_histograms", None),),
    "variance": (("variance_vs_dk", None),),
    "proof": (),
    "softmax_large": (("seed_softmax_examples", ("[50, 10, 5]", "[5, 1, 0.5]")),),
    "why_sqrt": (),
    "real_numbers": (("seed_softmax_examples", ("[14, 10, 12]",)),),
    "faq": (("error_vs_samples", None),),
    "beyond": (),
}
# The beyond chapter's subsections (seed_words.BEYOND), each with its figure.
BEYOND_PARTS: tuple[tuple[str, str], ...] = (
    ("broken", "broken_assumptions"),
    ("phase", "phase"),
    ("ssmax", "ssmax"),
    ("give", "give_away"),
)
# The subsections on QK-norm and the output's scale (seed_words.BEYOND_QK): (key, figure or None, the
# data block they need), drawn only when the verification holds it (a result from before them has not).
BEYOND_QK: tuple[tuple[str, str | None, str], ...] = (
    ("qk_norm", "qk_norm", "qk_norm"),
    ("output", None, "output_std"),
)


def figure_function(block: str) -> Callable:
    """The function that draws the data block ``block``: the one of that name in report.figures (the
    post's chapters), report.figures_beyond or report.figures_qk (the beyond chapter's)."""
    return getattr(figures, block, None) or getattr(figures_beyond, block, None) or getattr(figures_qk, block)


def figure_html(block: str, data: dict, keys: tuple[str, ...] | None = None, values: dict | None = None) -> str:
    """The figure for ``data[block]`` (only its entries ``keys`` when given) as inline SVG, a note
    when the block is absent, or an error box when it cannot be drawn. ``values`` fill the
    caption's placeholders (default: :func:`attnscale.report.seed_words.facts` of ``data``)."""
    alt, cap = caption(block, values if values is not None else facts(data))
    block_data = data.get(block)
    if block_data is not None and keys is not None:
        block_data = {k: block_data[k] for k in keys if k in block_data} or None
    if block_data is None:
        return f'<p class="note">{esc(_("The verification produced no data for this figure."))} <code>{esc(block)}</code></p>'
    draw = figure_function(block)
    try:
        # Drawn for the column and for a phone; a narrow figure is not blown up to the column's
        # width: at most 130 CSS px per inch drawn.
        return responsive_figure(lambda: draw(block_data), alt, cap, px_per_inch=130)
    except Exception as err:  # a data block of an unexpected shape: say so, keep the page
        return error_box(_("This figure could not be drawn:"), block, err)


def _paras(paras: list[str]) -> str:
    return "".join(f'<p class="lead">{esc(p)}</p>' if i == 0 else f"<p>{esc(p)}</p>" for i, p in enumerate(paras))


def seed_post_html() -> str:
    """The blog post this page checks: title, author, where it was published, linked."""
    post = SEED_POST
    copy = _(
        "This page checks the Chinese translation kept with attnscale; “the blog post” below always means it, and “random seed” the generator's seed."
    )
    return (
        f'<p class="note seed-post">{esc(_("The blog post checked here:"))} '
        f'<a href="{esc(post["url"])}">{esc(_(post["title"]))}</a>, '
        f"{esc(post['author'])}, {esc(_(post['published']))}. "
        f"{esc(copy)}</p>"
    )


def chapter_body(
    chapter: str, claims: list[dict], data: dict, seed: int, values: dict | None = None, real: RealRows | None = None
) -> str:
    values = values if values is not None else facts(data)
    body = [_paras(seed_words.paragraphs(chapter, values))]
    if chapter == "formula":
        body.append(seed_post_html())
    if chapter == "without_scaling":
        body.append(widget_html(seed, real))
    for block, keys in CHAPTER_FIGURES.get(chapter, ()):
        body.append(figure_html(block, data, keys, values))
    if chapter == "beyond":
        parts = [*BEYOND_PARTS, *((key, block) for key, block, needs in BEYOND_QK if needs in data)]
        for key, block in parts:
            heading, para = seed_words.subsection(key, values)
            drawn = figure_html(block, data, None, values) if block else ""
            body.append(f"<h3>{esc(heading)}</h3><p>{esc(para)}</p>{drawn}")
        body.append(f"<h3>{esc(_('verdict').capitalize())}</h3>")
    body.append(claim_list(claims))
    return "".join(body)


def seed_sections(
    verify, seed: int, tick: Callable[[str], None] = lambda label: None, real: RealRows | None = None
) -> list[Section]:
    """One Section per chapter of the outline in the verification result ``verify`` (an
    :class:`attnscale.results.Envelope` of kind ``verify``), in its order; a quick result is labelled
    beside each title, and the first chapter of each part says where and when it was computed. ``real``:
    the widget's real rows (:func:`attnscale.report.widget_rows.read_real_rows`)."""
    claims, data, outline = verify.data["claims"], verify.data["series"], verify.data["chapters"]
    values = facts(data, verify.config, outline)
    sections, part = [], None
    for entry in outline:
        chapter = entry["id"]
        mine = [c for c in claims if c.get("chapter") == chapter]
        try:
            html = chapter_body(chapter, mine, data, seed, values, real)
        except TextError as err:  # the result lacks a value the chapter's prose names
            html = error_box(_("This chapter could not be rendered; the rest of the report is unaffected."), err=err)
        if entry["part"] != part:
            part = entry["part"]
            html = provenance_line(verify) + html
        sections.append(
            Section(
                id=chapter.replace("_", "-"),
                title=quick_title(seed_words.title(chapter), verify),
                html=html,
                part=part,
                verdicts=[c.get("verdict", "") for c in mine],
            )
        )
        tick(sections[-1].title)
    return sections


# Each language's page, named in the links between them.
LANG_NAMES = {"en": N_("English"), "zh": N_("中文版")}

# The glance cards of the blog post's two unscaled figures, by the data block they read.
GLANCE_CARDS = {
    "saturation": N_("largest weight, unscaled, d_k = {d}, n = {n} (median row)"),
    "jacobian": N_("softmax gradient ‖J‖, unscaled, d_k = {d}, n = {n} (median row)"),
}


def lang_links(pages: dict[str, str], present: set[str]) -> str:
    """Links to this page in the other languages: ``pages`` (language → page name) whose page is
    in ``present`` (the page names in its folder once this one is written). Another language's page
    not built yet is named with the command that writes it beside this one, never linked dead;
    :func:`attnscale.report.build.build_report` links it when it writes that page."""
    parts = []
    for other, name in pages.items():
        if other == current_lang():
            continue
        label = _(LANG_NAMES[other])
        if name in present:
            parts.append(f'<a href="{esc(name)}" hreflang="{esc(other)}">{esc(label)}</a>')
        else:
            how = _(
                "{page}: not built yet (attnscale report --lang {lang}, with this page's --page-dir, writes it beside this one)",
                page=label,
                lang=other,
            )
            parts.append(f'<span class="lang-later" data-page="{esc(name)}">{esc(how)}</span>')
    return f'<p class="lang-switch">{"".join(parts)}</p>' if parts else ""


def glance_html(data: dict) -> str:
    """Three measured numbers for the top of the page, looked up in the verification's data (never
    computed here); a card whose data is missing is left out."""
    cards = []
    try:
        g = next(iter(data["variance_vs_dk"].values()))
        i = len(g["d_k"]) - 1
        d_k = int(g["d_k"][i])  # a dimension: "d_k = 4096", as every other d_k on the page (not 4,096)
        said = _("the blog post says d_k = {d}", d=d_k)
        cards.append(
            (
                _("Var(q·k) at d_k = {d}, measured", d=d_k),
                number(g["estimate"][i], digits=4),
                f"{_('CI')} [{number(g['ci_low'][i], digits=4)}, {number(g['ci_high'][i], digits=4)}] · {said}",
            )
        )
    except (KeyError, IndexError, StopIteration, TypeError):
        pass
    for block, figure, card in (
        ("saturation", "max_weight", GLANCE_CARDS["saturation"]),
        ("jacobian", "jacobian_frobenius", GLANCE_CARDS["jacobian"]),
    ):
        try:
            rows = data[block]
            n = next(iter(rows["by_n"]))
            d_ks = rows["d_k"]
            i = d_ks.index(64) if block == "saturation" and 64 in d_ks else len(d_ks) - 1
            per = rows["by_n"][n]
            sub = _("with ÷√d_k: {value}", value=number(per["scaled"][figure]["median"][i], digits=2))
            cross = (rows.get("crossover") or {}).get(n) or {}
            if cross.get("d_k") is not None:  # the curve is not monotone: say from where it is below
                sub += " · " + _("unscaled is below it only from d_k = {d} on", d=cross["d_k"])
            cards.append((_(card, d=d_ks[i], n=n), number(per["unscaled"][figure]["median"][i], digits=2), sub))
        except (KeyError, IndexError, StopIteration, TypeError, ValueError):
            pass
    if not cards:
        return ""
    html = "".join(
        f'<div class="glance-card"><span class="glance-label">{esc(label)}</span>'
        f'<span class="glance-value">{esc(value)}</span><span class="glance-sub">{esc(sub)}</span></div>'
        for label, value, sub in cards
    )
    return f'<div class="glance">{html}</div>'
