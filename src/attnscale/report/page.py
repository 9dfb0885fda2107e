"""The page around the chapters: head with the inlined stylesheet, hero (the answer first, then the
cards), contents, sections and the provenance footer. One self-contained HTML document: no external
URL is ever loaded.

The reading path: each chapter's body is a ``<details>`` that starts closed, under its numbered
title; the contents (a sticky sidebar on a wide screen) link to the chapters, and ``reading.js``
opens a chapter when a link leads into it, opens or closes them all from the contents' button, and
opens them all for printing."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from importlib import resources

from attnscale.i18n import N_, _, current_lang
from attnscale.provenance import machine_text
from attnscale.report import fonts
from attnscale.report.html import esc
from attnscale.report.numbers import seconds
from attnscale.report.verdicts import BADGE_CLASS, tally_badges


@dataclass
class Section:
    id: str  # the anchor, unique in the page
    title: str
    html: str  # the body, without its heading
    part: str  # "seed", "beyond", "experiments" or "appendix"
    verdicts: list[str] = field(default_factory=list)  # the verdicts of the chapter's claims
    seconds: float = 0.0  # how long rendering it took


# The page's four parts, by Section.part, named in the contents and above their first section.
PARTS = {
    "seed": N_("The blog post, checked"),
    "beyond": N_("Beyond the blog post"),
    "experiments": N_("Experiments"),
    "appendix": N_("Appendix"),
}


def stylesheet() -> str:
    return resources.files("attnscale.report").joinpath("style.css").read_text(encoding="utf-8")


def reading_script() -> str:
    return resources.files("attnscale.report").joinpath("reading.js").read_text(encoding="utf-8")


def _dots(verdicts: list[str]) -> str:
    """A dot per claim that does not hold, so problems are visible from the contents and the titles."""
    dots = "".join(f'<span class="dot {BADGE_CLASS[v]}"></span>' for v in verdicts if v in BADGE_CLASS and v != "holds")
    return f'<span class="dots">{dots}</span>' if dots else ""


def _toc(sections: list[Section]) -> str:
    items, part = [], None
    for s in sections:
        if s.part != part:
            part = s.part
            items.append(f'<li class="part" aria-hidden="true">{esc(_(PARTS[part]))}</li>')
        items.append(f'<li><a href="#{esc(s.id)}">{esc(s.title)}{_dots(s.verdicts)}</a></li>')
    # hidden until reading.js runs: without the script it could not open anything
    button = (
        f'<button type="button" id="open-all" class="open-all" hidden data-open="{esc(_("Open every chapter"))}" '
        f'data-close="{esc(_("Close every chapter"))}">{esc(_("Open every chapter"))}</button>'
    )
    return (
        f'<nav class="toc" aria-label="{esc(_("Contents"))}"><h2>{esc(_("Contents"))}</h2>{button}'
        f"<ol>{''.join(items)}</ol></nav>"
    )


def _sections(sections: list[Section]) -> str:
    out, part, number = [], None, 0
    for s in sections:
        if s.part != part:
            part = s.part
            out.append(f'<p class="part-title">{esc(_(PARTS[part]))}</p>')
        number += 1
        out.append(
            f'<section class="chapter" id="{esc(s.id)}"><details class="chapter-body"><summary>'
            f'<h2><span class="num">{number}</span>{esc(s.title)}</h2>{_dots(s.verdicts)}</summary>'
            f"{s.html}</details></section>"
        )
    return "".join(out)


def group_name(timing: str) -> str:
    """A verification timing's key (``group 1: seed_numbers``, as the verification (run_claims) writes
    it) as the group's number and title in the bound language; a key of another form, as stored."""
    from attnscale.stored_words import GROUP_TITLE

    found = re.fullmatch(r"group (\d+): (\w+)", timing)
    if not found or found[2] not in GROUP_TITLE:
        return timing
    return _("group {g}: {title}", g=found[1], title=_(GROUP_TITLE[found[2]]))


def footer(provenance: dict, sections: list[Section]) -> str:
    """Versions, seed, configuration, machine and the time each section took."""
    env = provenance.get("environment", {})
    verify = provenance.get("verify", {})
    if verify.get("cached"):
        verify_text = _(
            "read from its result file (the verification took {s} when it ran)",
            s=seconds(float(verify.get("seconds_then", 0.0))),
        )
    else:
        verify_text = _("computed now in {s}", s=seconds(float(verify.get("seconds", 0.0))))
    rows = [
        (_("attnscale", msgctxt="provenance"), env.get("attnscale")),
        (_("random seed"), provenance.get("seed")),
        ("Python", env.get("python")),
        ("NumPy", env.get("numpy")),
        ("torch", env.get("torch") or _("not installed")),
        ("matplotlib", env.get("matplotlib")),
        (_("machine"), machine_text(env)),
        (_("built"), provenance.get("built")),
        (_("verification"), verify_text),
    ]
    dl = "".join(f"<dt>{esc(k)}</dt><dd>{esc(v)}</dd>" for k, v in rows if v is not None)
    if provenance.get("config"):  # sentences, set as prose
        words = "<br>".join(esc(line) for line in provenance["config"])
        dl += f'<dt>{esc(_("configuration"))}</dt><dd class="words">{words}</dd>'
    if provenance.get("experiment_files"):  # a sentence per result file, a line each
        files = "<br>".join(esc(line) for line in provenance["experiment_files"])
        dl += f'<dt>{esc(_("result files"))}</dt><dd class="words">{files}</dd>'
    # The verification's own groups first (as timed by its run, which may be a cached earlier one).
    verify_rows = [
        (f"{_('verification')} · {group_name(name)}", sec)
        for name, sec in provenance.get("verify_timings", {}).items()
        if name != "total"
    ]
    times = "".join(f"<tr><td>{esc(name)}</td><td>{esc(seconds(float(sec)))}</td></tr>" for name, sec in verify_rows)
    times += "".join(f"<tr><td>{esc(s.title)}</td><td>{esc(seconds(s.seconds))}</td></tr>" for s in sections)
    total = provenance.get("total_seconds")
    if total is not None:
        times += f"<tr><td><b>{esc(_('total of the rows above'))}</b></td><td><b>{esc(seconds(total))}</b></td></tr>"
    sections_heading = _(
        "compute time, as recorded in the result files: the verification's groups, then each section's own result (the blog post's chapters have none of their own: they show the verification's); drawing this page is not counted"
    )
    return (
        f'<footer class="provenance" id="provenance"><div class="inner"><h2>{esc(_("How this page was made"))}</h2>'
        f'<dl>{dl}</dl><h3 style="font-size:.9rem;margin:1rem 0 .3rem">{esc(sections_heading)}</h3>'
        f'<div class="table-wrap"><table class="timings"><tbody>{times}</tbody></table></div></div></footer>'
    )


# The formula in pieces that do not break inside: on a phone it wraps between them instead of
# scrolling "· V" out of sight.
FORMULA = (
    '<div class="formula"><span>Attention(Q, K, V) =</span> <span>softmax( Q·Kᵀ <span class="hl">/ √d<sub>k</sub>'
    "</span> )</span> <span>· V</span></div>"
)


def render_page(
    sections: list[Section], claims: list[dict], provenance: dict, glance: str = "", answer: str = ""
) -> str:
    """The page: the hero (title, ``answer``, formula, the tally of ``claims``' verdicts, ``glance``,
    what the page is), the contents and ``sections``, the footer of ``provenance``."""
    html_lang = "zh-CN" if current_lang() == "zh" else "en"
    hero = (
        f'<header class="hero"><div class="hero-inner"><p class="kicker">{esc(_("attnscale report"))}</p>'
        f"<h1>{esc(_('Why divide by √d_k? Every claim of a blog post, measured'))}</h1>{answer}{FORMULA}"
        f'<div class="tally">{tally_badges(claims)}</div>{glance}<p class="sub">{esc(_("A blog post on why dot-product attention is scaled by √d_k, retold with figures and every claim checked by attnscale: Monte Carlo estimates with confidence intervals, exact arithmetic where floats could hide a digit, and a verdict on each claim. No number is typed in; each part says which result file it comes from, when and on what machine that was computed, and whether it was a quick or a full run (see also “How this page was made” at the end)."))}</p></div></header>'
    )
    return embed_fonts(
        f'<!doctype html><html lang="{html_lang}"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{esc(_('Why divide by √d_k? Every claim of a blog post, measured'))}</title>"
        f"<style>{stylesheet()}</style></head><body>{hero}"
        f'<div class="layout">{_toc(sections)}<main>{_sections(sections)}</main></div>'
        f"{footer(provenance, sections)}<script>{reading_script()}</script></body></html>\n"
    )


def embed_fonts(page: str) -> str:
    """``page`` with the glyphs it shows: the ``@font-face`` of :func:`attnscale.report.fonts.font_face_css`
    (a CJK subset with exactly the page's non-ASCII characters) added to its head. Call it on the
    final text: whatever is added afterwards is not covered. Unchanged without a CJK font."""
    css = fonts.font_face_css(page)
    return page.replace("</head>", f"<style>{css}</style></head>", 1) if css else page
