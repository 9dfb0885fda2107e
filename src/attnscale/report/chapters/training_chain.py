"""The chain-rule check of the scale-vs-d_k chapter (:mod:`.training`): why the gradient reaching W_Q and
W_K has the size it has at step 0, the prediction against the measured norm (a figure and a table),
and what the prediction leaves out. Only formats the analysis' ``chain_rule`` rows."""

from __future__ import annotations

from attnscale.i18n import _
from attnscale.report.html import para, table_with_details
from attnscale.report.numbers import number
from attnscale.report.plotting import SERIES, responsive_figure, style


def chain_rule(chain: dict, names: dict) -> list[str]:
    summary = chain.get("summary")
    if not chain["rows"] or summary is None:
        return []
    quoted = summary["quoted"] or {}
    out = [
        para(
            _(
                "Why the gradient reaching W_Q and W_K has the size it has at step 0. "
                "For the query row, dL/dq = s·Kᵀ J V δ and dL/dK = s·(J V δ) qᵀ with J = diag(p) − ppᵀ (times cap′ for soft-capping): the scale s multiplies the gradient, and Kᵀ J V — the p-weighted covariance of keys and values — vanishes as the row saturates, however large the keys. "
                "Prediction: ‖∇W_Q‖ ≈ C·s·RMS‖Kᵀ J V‖ and ‖∇W_K‖ ≈ C′·s·RMS(‖q‖·‖Xᵀ J V‖), with C, C′ fitted once on {anchor} at dₖ = {anchor_dk}; δ = dL/do is left out (the same weights start every rule). "
                "Measured ÷ predicted ranges from {lo} to {hi} over {n} other (rule, dₖ) pairs, while s alone spans a factor {span}. "
                "The column 'scale alone' is the 1/√dₖ rule's measured gradient times s/s_ref, blind to saturation: for unscaled attention at dₖ = {big} it predicts ‖∇W_Q‖ = {blind}; with the Jacobian factor the prediction is {pred}; measured: {meas}.",
                anchor=names[chain["anchor"]["rule"]],
                anchor_dk=chain["anchor"]["d_k"],
                lo=number(summary["ratio_min"], ".2f"),
                hi=number(summary["ratio_max"], ".2f"),
                n=summary["pairs"],
                span=number(summary["factor_span"], ".0f"),
                big=quoted.get("d_k"),
                blind=number(quoted.get("scale_only")),
                pred=number(quoted.get("predicted")),
                meas=number(quoted.get("measured")),
            )
        )
    ]
    out.append(
        responsive_figure(
            lambda: _chain_figure(chain["rows"], names),
            _("Predicted vs measured gradient norm at initialisation"),
            _(
                "Each point a (rule, dₖ), mean over seeds, labelled by dₖ; the line is measured = predicted. "
                "Filled: the chain-rule prediction; hollow: the scale alone, blind to saturation."
            ),
        )
    )
    header = [
        _("gradient"),
        _("rule"),
        "dₖ",
        "s",
        _("logit sd"),
        _("mean max p"),
        _("scale alone"),
        _("predicted"),
        _("measured", msgctxt="training"),
        _("measured ÷ predicted"),
    ]
    body = [
        [
            "W_Q" if r["gradient"] == "grad_wq" else "W_K",
            names[r["rule"]],
            r["d_k"],
            number(r["factor"], ".4g"),
            number(r["logit_std"], ".2f"),
            number(r["max_weight_mean"], ".3f"),
            number(r["scale_only"]),
            number(r["predicted"]),
            number(r["measured"]),
            number(r["ratio"], ".2f"),
        ]
        for r in chain["rows"]
    ]
    # at a glance the largest d_k (where the rules differ most); every row behind a <details>
    top = max(r["d_k"] for r in chain["rows"])
    glance = [row for row, r in zip(body, chain["rows"]) if r["d_k"] == top]
    return out + [
        table_with_details(header, body, glance, cls="numeric"),
        para(
            _(
                "What the prediction leaves out: the direction of δ relative to Kᵀ J V, and how the per-example gradients add up over the batch; both depend on the attention pattern, hence on the rule."
            )
        ),
    ]


def _chain_figure(rows: list[dict], names: dict):
    rules = list(dict.fromkeys(r["rule"] for r in rows))
    with style() as plt:
        fig, axes = plt.subplots(1, 2, figsize=(9.0, 3.8), constrained_layout=True)
        for ax, which in zip(axes, ("grad_wq", "grad_wk")):
            sel = [r for r in rows if r["gradient"] == which and r["predicted"] and r["measured"]]
            for i, rule in enumerate(rules):
                pts = [r for r in sel if r["rule"] == rule]
                color = SERIES[i % len(SERIES)]
                ax.scatter(
                    [r["predicted"] for r in pts], [r["measured"] for r in pts], color=color, label=names[rule], s=28
                )
                # Hollow: the scale alone (blind to saturation), on the same row as the full prediction.
                blind = [r for r in pts if r["scale_only"]]
                ax.scatter(
                    [r["scale_only"] for r in blind],
                    [r["measured"] for r in blind],
                    facecolors="none",
                    edgecolors=color,
                    s=28,
                    lw=0.9,
                )
                for r in pts:
                    ax.annotate(
                        str(r["d_k"]),
                        (r["predicted"], r["measured"]),
                        fontsize=7,
                        xytext=(3, 2),
                        textcoords="offset points",
                        color="#5d6677",
                    )
            values = [v for r in sel for v in (r["predicted"], r["measured"], r["scale_only"]) if v]
            if values:
                lo, hi = min(values) / 1.5, max(values) * 1.5
                ax.plot([lo, hi], [lo, hi], color="#1d2330", lw=0.8)
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_title("‖∇W_Q‖" if which == "grad_wq" else "‖∇W_K‖")
            ax.set_xlabel(_("predicted"))
            ax.set_ylabel(_("measured", msgctxt="training"))
        axes[0].legend(loc="upper left", fontsize=8)
    return fig
