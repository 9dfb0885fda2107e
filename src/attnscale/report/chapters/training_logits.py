"""Report chapter: attention-logit growth at high learning rates (experiment B, ``logit-growth``).

Draws the result of ``attnscale train logit-growth`` (kind ``train/logit-growth``): the layer-0
maximum attention logit over training per learning rate for each variant (plain, QK-layernorm,
QK-clip), the final loss against the learning rate, the LR sensitivities, what the guard held, and
how the setting differs from Wortsman et al. 2023. Every number comes from ``env.data["analysis"]``
(the curves from its cells); which sentences appear is chosen by those numbers.
"""

from __future__ import annotations

from attnscale.i18n import N_, _
from attnscale.report.html import para, table
from attnscale.report.numbers import number
from attnscale.report.plotting import REFERENCE, SERIES, responsive_figure, style

KIND = "train/logit-growth"
TITLE = N_("Training: attention logits grow at high learning rates (a small-scale proxy)")
HOW_TO = "attnscale train logit-growth"
#: The variants, by their name in the result, and their labels.
VARIANTS = {"baseline": N_("plain"), "qk_layernorm": N_("QK-layernorm"), "qk_clip": N_("QK-clip")}
_SHORT = ("base", "qk", "clip")  # their names in the sentences' placeholders

#: What QK-clip did over the runs, by :func:`guard_state`.
GUARD = {
    "idle": N_("No head's logit exceeded τ = {tau:g} in any run (largest: {peak}), so QK-clip never acted."),
    "held": N_(
        "QK-clip held every training step's largest logit at or under τ = {tau:g} (largest seen: {peak}); without it the largest was {base}. "
        "{clips} head clips over {runs} runs."
    ),
    "overshoot": N_(
        "With QK-clip the largest logit on a training batch was {peak}, {ratio}× τ = {tau:g}, against {base} without it. "
        "It is measured in the step's forward, before that step's clip: after one optimiser update's growth, which the clip then undoes; right after each clip a head's largest logit on its batch is τ. "
        "{clips} head clips over {runs} runs."
    ),
}


def guard_state(guard: dict) -> str:
    """ "idle" when no head was ever clipped, "held" when the largest training-batch logit with QK-clip
    stayed at or under τ, else "overshoot" (it is measured before the step's clip)."""
    if guard["clipped_heads"] == 0:
        return "idle"
    ratio = guard["train_peak_over_tau"]
    return "held" if ratio is not None and ratio <= 1 else "overshoot"


def _lr(x) -> str:
    return number(x, "g")


def render(env) -> str:
    a = env.data["analysis"]
    setup = a["setup"]
    parts = [para(setup_sentence(setup)), para(growth_sentence(a)), para(guard_sentence(a["guard"]))]
    parts += _figures(env.data["cells"], a)
    parts.append(para(sensitivity_sentence(a)))
    parts += [para(said) for said in (low_rate_sentence(a), collapse_sentence(a)) if said]
    parts.append(_runs_table(a["table"]))
    parts.append(para(paper_sentence(setup)))
    return "\n".join(parts)


def _runs(a: dict) -> dict[tuple[str, float], dict]:
    """The analysis' table rows by (variant, learning rate)."""
    return {(r["variant"], r["lr"]): r for r in a["table"]}


def setup_sentence(setup: dict) -> str:
    """The model, the data, the optimiser and the three variants."""
    return _(
        "After Wortsman et al. 2023 (Small-scale proxies for large-scale Transformer training instabilities): a decoder-only character LM, {n_layers} layers, width {d_model}, {n_heads} heads, context {context}, pre-LN, no biases, {parameters:,} parameters, on {corpus_chars:,} characters of text from a seeded grammar (vocabulary {vocab}). "
        "AdamW (β₁ 0.9, β₂ 0.95, ε 1e-8, weight decay 1e-4 independent of the LR, clipping at norm 1), {warmup} warm-up steps then cosine decay, {steps} steps of {batch} × {context} tokens, {seeds} seed(s), in three variants: plain attention, per-head QK-layernorm, and QK-clip at τ = {tau:g} (the logit guard of MuonClip, Kimi K2: after each optimiser step, a head whose largest logit exceeded τ has its W_Q and W_K rows scaled by √(τ / max logit)). "
        "The logits are read from the model's own attention by attnscale's monitor.",
        **setup,
    )


def growth_sentence(a: dict) -> str:
    """The layer-0 maximum logit's peak of each variant at the highest and the lowest learning rate."""
    row, hi, lo = _runs(a), a["lr_high"], a["lr_low"]

    def peak(v, lr):
        return number(row[v, lr]["max_logit_peak_mean"], ".4g")

    return _(
        "Layer-0 maximum attention logit at the highest learning rate ({hi:g}), peak over training: {base} plain, {qk} with QK-layernorm, {clip} with QK-clip (plain at initialisation: {init}). "
        "At the lowest ({lo:g}): {base_lo}, {qk_lo} and {clip_lo}.",
        hi=hi,
        lo=lo,
        init=number(row["baseline", hi]["max_logit_init_mean"], ".3g"),
        **{k + sfx: peak(v, lr) for lr, sfx in ((hi, ""), (lo, "_lo")) for v, k in zip(VARIANTS, _SHORT)},
    )


def guard_sentence(g: dict) -> str:
    """What QK-clip did over the runs (:data:`GUARD`, by :func:`guard_state`)."""
    return _(
        GUARD[guard_state(g)],
        tau=g["tau"],
        peak=number(g["train_peak"], ".4g"),
        base=number(g["baseline_train_peak"], ".4g"),
        ratio=number(g["train_peak_over_tau"], ".3g"),
        clips=g["clipped_heads"],
        runs=g["runs"],
    )


def _figures(cells: list[dict], a: dict) -> list[str]:
    """The max logit over training per learning rate, and the final loss against the learning rate."""
    setup = a["setup"]
    return [
        responsive_figure(
            lambda: logits_figure(cells, setup),
            _("Layer-0 max attention logit over training per learning rate, for each variant"),
            _(
                "Maximum over heads and validation positions, logged every {every} steps (log scale); dashed: τ. "
                "Seed 0.",
                every=setup["log_every"],
            ),
        ),
        responsive_figure(
            lambda: loss_figure(a["table"], setup["lrs"]),
            _("Final validation loss against the learning rate"),
            _("Dotted: the loss at initialisation. A cross marks a diverged run."),
        ),
    ]


def sensitivity_sentence(a: dict) -> str:
    """Each variant's LR sensitivity and its best final loss, with the rate it was reached at."""
    setup, sens, best = a["setup"], a["lr_sensitivity"], a["best"]
    return _(
        "LR sensitivity, E over the {n} learning rates of [min(ℓ, ℓ₀) − min ℓ] (ℓ₀: the loss at initialisation; a diverged run counts as ℓ₀): {s_base} plain, {s_qk} with QK-layernorm, {s_clip} with QK-clip. "
        "Best final loss: {b_base} at lr {l_base}, {b_qk} at lr {l_qk}, {b_clip} at lr {l_clip}.",
        n=len(setup["lrs"]),
        **{
            f"{x}_{k}": f
            for v, k in zip(VARIANTS, _SHORT)
            for x, f in (
                ("s", number(sens[v]["mean"], ".3f")),
                ("b", number(best[v]["final_loss"], ".3f")),
                ("l", _lr(best[v]["lr"])),
            )
        },
    )


def low_rate_sentence(a: dict) -> str | None:
    """What every variant loses at the lowest learning rate against its best; None when nothing."""
    gap = a["low_lr_gap"]["gap"]
    if gap is None or gap <= 0:
        return None
    lo, setup = a["lr_low"], a["setup"]
    return _(
        "Every variant loses {gap:.2f} nats or more at the lowest learning rate ({lr:g}) against its best. "
        "A likely cause, not measured here, is that {steps} steps are too few at that rate; the shortfall counts in every LR sensitivity.",
        gap=gap,
        lr=lo,
        steps=setup["steps"],
    )


def collapse_sentence(a: dict) -> str | None:
    """Where QK-layernorm's maximum logit ended below its value at initialisation, with the gains that
    bound it; None when it did not."""
    lr_c = a["collapsed"]["highest"]
    if lr_c is None:
        return None
    r = _runs(a)["qk_layernorm", lr_c]
    return _(
        "With QK-layernorm at lr {lr:g} the layer-0 maximum logit ended at {end}, below its value at initialisation ({init}); both are means over {seeds} seed(s). "
        "The normalised q and k can only reach large logits through the LayerNorm gains; the product of their RMS values in layer 0 went from {g0} to {g1} over training (same mean).",
        lr=lr_c,
        end=number(r["max_logit_final_mean"]),
        init=number(r["max_logit_init_mean"]),
        seeds=r["seeds"],
        g0=number(r["qk_gain_init_mean"]),
        g1=number(r["qk_gain_final_mean"]),
    )


def _runs_table(runs: list[dict]) -> str:
    """A row per (variant, learning rate): its final loss, divergences, max logits and head clips."""
    header = [
        _("variant"),
        _("learning rate"),
        _("final loss"),
        _("diverged"),
        _("peak max logit"),
        _("final max logit"),
        _("training peak"),
        _("head clips"),
    ]
    body = [
        [
            _(VARIANTS[r["variant"]]),
            _lr(r["lr"]),
            number(r["final_loss_mean"], ".3f"),
            f"{r['diverged']}/{r['seeds']}",
            number(r["max_logit_peak_mean"], ".4g"),
            number(r["max_logit_final_mean"], ".4g"),
            number(r["max_logit_train_peak_mean"], ".4g"),
            number(r["clipped_heads_mean"], ".0f"),
        ]
        for r in runs
    ]
    return table(header, body, cls="numeric")


def paper_sentence(setup: dict) -> str:
    """How this setting differs from Wortsman et al. 2023's."""
    return _(
        "How this differs from the paper. "
        "Wortsman et al. train on C4 for 1e5 steps, with models from millions to over a billion parameters, and see the attention logits of the models without QK-layernorm grow by orders of magnitude at high learning rates — at lower learning rates the larger the model — while QK-layernorm keeps the loss low across the learning-rate range (their Figures 1–2). "
        "Here the model has {parameters:,} parameters and trains for {steps} steps, so the learning rate at which the logits run away is not comparable. "
        "Compare shapes, not thresholds.",
        steps=setup["steps"],
        parameters=setup["parameters"],
    )


def logits_figure(cells: list[dict], setup: dict):
    """Seed 0's logged layer-0 max logit per learning rate, one panel per variant."""
    lrs = setup["lrs"]
    with style() as plt:
        cmap = plt.get_cmap("viridis")
        fig, axes = plt.subplots(1, len(VARIANTS), figsize=(12.0, 3.9), sharey=True, constrained_layout=True)
        for ax, v in zip(axes, VARIANTS):
            for i, lr in enumerate(lrs):
                logs = [
                    c["result"]["log"]
                    for c in cells
                    if c["result"]["variant"] == v and c["cell"]["lr"] == lr and c["cell"]["seed"] == 0
                ]
                points = [
                    (e["step"], abs(e["max_logit_layer0"]))
                    for e in (logs[0] if logs else [])
                    if e["max_logit_layer0"] is not None
                ]
                if points:
                    ax.plot(*zip(*points), color=cmap(i / max(1, len(lrs) - 1)), label=f"{lr:g}")
            ax.axhline(setup["tau"], color=REFERENCE, ls="--", lw=0.8)
            ax.set_yscale("log")
            ax.set_title(_(VARIANTS[v]))
            ax.set_xlabel(_("step"))
        axes[0].set_ylabel(_("max attention logit, layer 0"))
        axes[-1].legend(title=_("learning rate"), fontsize=8, loc="upper left")
    return fig


def loss_figure(rows: list[dict], lrs: list[float]):
    """Mean final loss per variant against the learning rate; loss at initialisation dotted."""
    with style() as plt:
        fig, ax = plt.subplots(figsize=(9.5, 3.6), constrained_layout=True)
        for v, color in zip(VARIANTS, SERIES):
            mine = [r for r in rows if r["variant"] == v]
            ax.plot(
                [r["lr"] for r in mine],
                [r["final_loss_mean"] if r["final_loss_mean"] is not None else float("nan") for r in mine],
                "o-",
                color=color,
                label=_(VARIANTS[v]),
            )
            ax.plot([r["lr"] for r in mine], [r["init_loss"] for r in mine], ":", color=color, lw=1)
            ax.plot(
                [r["lr"] for r in mine if r["diverged"]],
                [r["init_loss"] for r in mine if r["diverged"]],
                "x",
                color=color,
                ms=9,
            )
        ax.set_xscale("log")
        ax.set_xlabel(_("learning rate"))
        ax.set_ylabel(_("final validation loss"))
        ax.legend()
    return fig
