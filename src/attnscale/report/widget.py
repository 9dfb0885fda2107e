"""The interactive figure: HTML controls, its configuration (taken from the library's scale rules, so
the page and attnscale.scales use the same parameters) and the inline script ``widget.js``; beside the
iid row, the real rows the probe captured (:mod:`attnscale.report.widget_rows`), under the same slider."""

from __future__ import annotations

import json
from importlib import resources

from attnscale.i18n import N_, _
from attnscale.report.html import esc
from attnscale.report.text import pretty, rule_label
from attnscale.report.widget_rows import RealRows, rows_note
from attnscale.scales import RULES

N_CHOICES = (8, 16, 32, 64, 128)
# The figures read out under the bars: (label, id of the <output> the script fills).
READOUTS = (
    (N_("entropy / ln n"), "w-entropy"),
    (N_("max weight"), "w-maxw"),
    (N_("effective keys e^H"), "w-support"),
    (N_("logit std"), "w-spread"),
)
D_MAX = 4096


def rule_configs() -> list[dict]:
    """The rules the widget offers, with the parameters of attnscale.scales' named rules."""
    logn, qknorm, softcap = RULES["logn"], RULES["qknorm"], RULES["softcap"]
    softcap_unscaled = RULES["softcap_unscaled"]
    return [
        {"id": "inverse_sqrt_dk", "kind": "inverse_sqrt_dk", "formula": RULES["inverse_sqrt_dk"].formula + " · q·k"},
        {"id": "unscaled", "kind": "unscaled", "formula": "q·k"},
        {"id": "inverse_dk", "kind": "inverse_dk", "formula": RULES["inverse_dk"].formula + " · q·k"},
        {
            "id": "qknorm",
            "kind": "qknorm",
            "gain": qknorm.gain,
            "norm": qknorm.norm,
            "eps": qknorm.eps,
            "formula": qknorm.formula,
        },
        {
            "id": "softcap",
            "kind": "softcap",
            "cap": softcap.cap_value,
            "base": softcap.base.name,
            "formula": softcap.formula,
        },
        {
            "id": "softcap_unscaled",
            "kind": "softcap",
            "cap": softcap_unscaled.cap_value,
            "base": softcap_unscaled.base.name,
            "formula": softcap_unscaled.formula,
        },
        {"id": "logn", "kind": "logn", "s": logn.s, "base": logn.base.name, "formula": logn.formula + " · q·k"},
    ]


def widget_config(seed: int, real: RealRows | None = None) -> dict:
    """The script's configuration: the iid row's (seed, d_k, n, the rules) and ``real``'s rows."""
    rules = rule_configs()
    for r in rules:
        r["label"] = rule_label(r["id"], r.get("cap"))
        r["formula"] = pretty(r["formula"])
    return {
        "seed": int(seed) % 2**32,
        "d_max": D_MAX,
        "d_k": 64,
        "n": 16,
        "n_choices": list(N_CHOICES),
        "rule": "inverse_sqrt_dk",
        "rules": rules,
        "labels": {
            "key": _("key"),
            "keys_axis": _("keys"),
            "uniform": _("uniform"),
            "formula": _("logits"),
            "own": _("its model's own logits"),
            "exact": _("this rule on its very q and k"),
            "grown": pretty(_("q·k grown to this d_k, as if iid")),
        },
        "real": [] if real is None else real.rows,
    }


def _script() -> str:
    return resources.files("attnscale.report").joinpath("widget.js").read_text(encoding="utf-8")


def real_rows_html(real: RealRows) -> str:
    """The real rows' frames (each row's bars and figures filled by the script) and their note."""
    readouts = READOUTS[:2]  # entropy / ln n, max weight
    rows = []
    for i, row in enumerate(real.rows):
        title = _(
            "{model}, layer {layer}, head {head} ({pick}), query “{query}”",
            model=row["model"],
            layer=row["layer"],
            head=row["head"],
            pick=row["pick"],
            query=row["query"],
        )
        figures = "".join(f'<span>{esc(_(label))} <output id="{oid}-{i}">–</output></span>' for label, oid in readouts)
        rows.append(
            f'<div class="real-row"><p class="real-title">{esc(title)} <span class="real-tag" id="w-tag-{i}"></span></p>'
            f'<svg class="real-bars" id="w-real-{i}" role="img" aria-label="{esc(title)}" viewBox="0 0 320 48" '
            f'preserveAspectRatio="none"></svg><p class="real-figs">{figures}</p></div>'
        )
    note = rows_note(real)
    if not rows and not note:
        return ""
    heading = _("Real rows under the same slider")
    return f'<div class="real-rows"><h4>{esc(heading)}</h4><p class="formula-line">{esc(note)}</p>{"".join(rows)}</div>'


def widget_html(seed: int, real: RealRows | None = None) -> str:
    """The widget: its controls, the iid row's bars and figures, then ``real``'s rows (none: no
    real rows, as when the page is built without the probe results)."""
    cfg = widget_config(seed, real)
    options = "".join(
        f'<option value="{esc(r["id"])}"{" selected" if r["id"] == cfg["rule"] else ""}>{esc(r["label"])}</option>'
        for r in cfg["rules"]
    )
    n_options = "".join(
        f'<option value="{n}"{" selected" if n == cfg["n"] else ""}>{n}</option>' for n in cfg["n_choices"]
    )
    readouts = "".join(
        f'<div class="readout"><span>{esc(_(label))}</span><output id="{oid}">–</output></div>'
        for label, oid in READOUTS
    )
    # JSON inside <script>: "</" must not appear, or the HTML parser would end the script early.
    config_json = json.dumps(cfg, ensure_ascii=False).replace("</", "<\\/")
    return (
        f'<div class="widget" id="widget"><h3 style="margin-top:0">{esc(_("Try it: one attention row"))}</h3>'
        f'<p class="formula-line">{esc(_("A query q and n keys k with iid N(0, 1) components, drawn once from a seeded generator. Drag d_k and switch the scale rule: the bars are the softmax weights of this row."))}</p>'
        '<div class="controls">'
        f'<div><label class="plain" for="w-dk">{esc(_("dₖ"))} <output id="w-dk-out">64</output></label>'
        '<input type="range" id="w-dk" min="0" max="48" step="1" value="24"></div>'
        f'<div class="row2"><div><label for="w-rule">{esc(_("scale rule"))}</label>'
        f'<select id="w-rule">{options}</select></div>'
        f'<div style="flex:0 0 5.5rem"><label for="w-n">{esc(_("keys n"))}</label><select id="w-n">{n_options}</select></div>'
        f'<button type="button" id="w-resample" title="{esc(_("new sample"))}">↻</button></div>'
        "</div>"
        '<svg class="bars" role="img" aria-label="softmax weights" viewBox="0 0 640 240"></svg>'
        f'<div class="readouts" aria-live="polite">{readouts}</div><p class="formula-line" id="w-formula"></p>'
        f"{'' if real is None else real_rows_html(real)}</div>"
        f'<script type="application/json" id="widget-config">{config_json}</script>'
        f"<script>{_script()}</script>"
    )
