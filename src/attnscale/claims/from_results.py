"""Group 10: claims no computation here can settle alone, judged from the project's own results and
from the paper the seed cites.

* "learning stops" and "without it the Transformer can hardly learn effectively, especially when d_k
  is large": from the training experiments' verdicts (``analysis["verdicts"]`` of the kinds in
  :data:`TRAIN_KINDS`), the unscaled rule against 1/√d_k at large d_k;
* "inputs are normalised to mean 0, variance 1 — the standard assumption": from the real models'
  q and k moments per head (the probes, :data:`PROBE_KINDS`);
* "in real Transformers d_k is 64, 128 or more": from the configurations of the models probed;
* "the paper's authors chose √d_k for this reason": a statement about the authors' reasons, not
  checkable by computation; what the paper says is cited.

Results are read with :func:`attnscale.results.read_preferred` under ``VerifyConfig.results_root``: the
full result when there is one, else the quick one, which the row then says. When there is none, the
verdict is "inconclusive" and the row names the command that makes it.
"""

from __future__ import annotations

import math
import statistics

from attnscale import results
from attnscale.claims.context import Context
from attnscale.claims.register import claim
from attnscale.claims.result import clauses, judge_all
from attnscale.i18n import N_, _
from attnscale.stored_words import TRAINING_VERDICT_MARK, TRAINING_VERDICTS

TRAIN_KINDS = ("train/scale-vs-dk", "train/lm")
PROBE_KINDS = ("probe/minilm", "probe/smollm2")
UNSCALED, SCALED = "unscaled", "inverse_sqrt_dk"
LARGE_D_K = 64  # the seed's "large": "in real Transformers d_k is 64, 128 or more"
MEAN_TOLERANCE = 0.1  # |mean of the components| ≤ this counts as "mean 0"
VARIANCE_FACTOR = 1.25  # variance within [1/1.25, 1.25] counts as "variance 1"
HEAD_FIELDS = ("q_mean", "q_var", "k_mean", "k_var")  # of data["heads"] entries, as read
VERDICT_FIELDS = ("rule", "d_k", "optimiser", "lr", "verdict")  # of analysis["verdicts"] entries, as read


def _texts(items) -> list[str]:
    """``items`` in the bound language: each a text worded in it (a function of no argument) or a
    language-neutral str."""
    return [item() if callable(item) else item for item in items]


def _read(ctx: Context, kinds) -> tuple[list[results.Envelope], list[str]]:
    """(the envelopes found, one line per kind not usable: missing, with its command, or broken; each
    worded per language or a str)."""
    found, missing = [], []
    for kind in kinds:
        try:
            found.append(results.read_preferred(kind, ctx.config.results_root))
        except results.ResultMissing:
            missing.append(
                lambda kind=kind: _(
                    "no {kind} result under {root} (run {command})",
                    kind=kind,
                    root=ctx.config.results_root,
                    command=results.KINDS[kind].description,
                )
            )
        except results.ResultError as err:
            missing.append(f"{kind}: {err}")
    return found, missing


def _sources(envs: list[results.Envelope]) -> list[dict] | None:
    return [
        {"kind": e.kind, "quick": e.quick, "origin": e.origin, "created": e.created, "path": str(e.path)} for e in envs
    ] or None


# Which result a claim was judged from, by its envelope's origin (results.read_preferred's choice).
PROVENANCE = {
    "full": N_("{kind} (full, {created})"),
    "reference": N_("{kind} (the full reference run shipped with attnscale, {created})"),
    "quick": N_("{kind} (quick — only a quick result exists, {created})"),
}


def _provenance(envs: list[results.Envelope]) -> str:
    """ "train/scale-vs-dk (full, 2026-…); train/lm (quick — only a quick result exists, 2026-…)"."""
    return clauses(_(PROVENANCE[e.origin], kind=e.kind, created=e.created) for e in envs)


# ---- training -------------------------------------------------------------------------------


def training_cells(envs: list[results.Envelope]) -> tuple[list[dict], list[str]]:
    """The evidence: each unscaled verdict at d_k ≥ LARGE_D_K whose setting (d_k, optimiser, lr) lets
    1/√d_k learn (a setting where the scaled rule does not learn either says nothing about scaling),
    as {"kind", "quick", **verdict}; and one line per result without usable verdicts."""
    cells, unusable = [], []
    for env in envs:
        verdicts = (env.data.get("analysis") or {}).get("verdicts")
        if not isinstance(verdicts, list):
            unusable.append(
                lambda env=env: _(
                    "{path}: no analysis.verdicts (written by an older attnscale? rerun {command})",
                    path=env.path,
                    command=results.KINDS[env.kind].description,
                )
            )
            continue
        bad = [
            v
            for v in verdicts
            if not isinstance(v, dict)
            or v.get("verdict") not in TRAINING_VERDICTS
            or any(key not in v for key in VERDICT_FIELDS)
        ]
        if bad:
            unusable.append(
                lambda env=env, bad=bad: _(
                    "{path}: analysis.verdicts needs {fields} with a verdict among {verdicts} in every entry, e.g. not {bad}",
                    path=env.path,
                    fields=VERDICT_FIELDS,
                    verdicts=TRAINING_VERDICTS,
                    bad=repr(bad[0]),
                )
            )
            continue
        reference = {(v["d_k"], v["optimiser"], v["lr"]): v["verdict"] for v in verdicts if v.get("rule") == SCALED}
        for v in verdicts:
            if v.get("rule") != UNSCALED or v["d_k"] < LARGE_D_K:
                continue
            ref = reference.get((v["d_k"], v["optimiser"], v["lr"]))
            cells.append({"kind": env.kind, "quick": env.quick, "reference": ref, **v})
    return cells, unusable


def _cell_text(c: dict) -> str:
    verdict = _(TRAINING_VERDICT_MARK[c["verdict"]])
    if c.get("seeds_agreeing") == c.get("seeds"):
        return _(
            "d_k={d_k} {optimiser} lr={lr:g}: {verdict}",
            d_k=c["d_k"],
            optimiser=c["optimiser"],
            lr=c["lr"],
            verdict=verdict,
        )
    return _(
        "d_k={d_k} {optimiser} lr={lr:g}: {verdict}, {agreeing}/{seeds} seeds agree",
        d_k=c["d_k"],
        optimiser=c["optimiser"],
        lr=c["lr"],
        verdict=verdict,
        agreeing=c.get("seeds_agreeing"),
        seeds=c.get("seeds"),
    )


def _training_claim(
    ctx: Context, cid: str, statement: str, supports: set, contradicts: set, reading, envs, missing, cells, unusable
) -> None:
    kinds = ", ".join(TRAIN_KINDS)
    evidence = [c for c in cells if c["reference"] in (None, "learns")]
    excluded = len(cells) - len(evidence)
    counts = {v: sum(c["verdict"] == v for c in evidence) for v in TRAINING_VERDICTS}
    quick = any(e.quick for e in envs)

    def measured() -> str:
        if not evidence and (not envs or unusable):
            text = _("no training verdicts to judge from: {why}", why=clauses(_texts(missing + unusable)))
        elif not evidence:
            text = _(
                "no unscaled cell at d_k ≥ {large} where 1/√d_k learns ({excluded} cells where it does not learn either)",
                large=LARGE_D_K,
                excluded=excluded,
            )
        else:
            text = _(
                "{count} unscaled cells at d_k ≥ {large}: {counts} — {cells}",
                count=len(evidence),
                large=LARGE_D_K,
                counts=clauses(
                    (_("{n} {verdict}", n=n, verdict=_(TRAINING_VERDICT_MARK[v])) for v, n in counts.items() if n), ","
                ),
                cells=clauses(f"{c['kind']} {_cell_text(c)}" for c in evidence),
            )
        return _("quick results: {measured}", measured=text) if quick else text

    def note() -> str:
        parts = [_("read from {sources}", sources=_provenance(envs)) if envs else _("no training results")]
        if excluded:
            parts.append(_("{excluded} cells left out: 1/√d_k does not learn there either", excluded=excluded))
        if missing and envs:
            parts += _texts(missing)
        if quick:
            parts.append(_("quick runs are short: run the full sweep before relying on this"))
        return clauses(parts)

    if not evidence:
        verdict = "inconclusive"
    else:
        verdict = judge_all(
            "fails" if c["verdict"] in contradicts else "holds" if c["verdict"] in supports else "inconclusive"
            for c in evidence
        )
    ctx.add(
        claim(
            cid,
            statement,
            expected=lambda: _(
                "{reading}; judged on every unscaled cell at d_k ≥ {large} of {kinds} whose setting (d_k, optimiser, learning rate) lets 1/√d_k learn",
                reading=reading(),
                large=LARGE_D_K,
                kinds=kinds,
            ),
            measured=measured,
            verdict=verdict,
            sources=_sources(envs),
            note=note,
        )
    )


# ---- probes ---------------------------------------------------------------------------------


def _normalised(head: dict) -> bool:
    lo, hi = 1.0 / VARIANCE_FACTOR, VARIANCE_FACTOR
    return (
        abs(head["q_mean"]) <= MEAN_TOLERANCE
        and abs(head["k_mean"]) <= MEAN_TOLERANCE
        and lo <= head["q_var"] <= hi
        and lo <= head["k_var"] <= hi
    )


def _model_name(env: results.Envelope) -> str:
    return str(env.data["model"].get("name", env.kind))


def _normalised_claim(ctx: Context, envs, missing) -> None:
    per, missing = {}, list(missing)
    for env in envs:
        heads = env.data["heads"]
        if not isinstance(heads, list) or any(
            not isinstance(h, dict) or any(f not in h for f in HEAD_FIELDS) for h in heads
        ):
            missing.append(
                lambda env=env: _("{path}: data.heads needs {fields} in every head", path=env.path, fields=HEAD_FIELDS)
            )
            continue
        met = sum(_normalised(h) for h in heads)
        per[_model_name(env)] = (
            met,
            len(heads),
            env.quick,
            statistics.median(h["q_var"] for h in heads) if heads else math.nan,
            statistics.median(h["k_var"] for h in heads) if heads else math.nan,
        )
    parts = {
        m: ("holds" if met / total >= 0.5 else "fails") if total else "inconclusive"
        for m, (met, total, *_rest) in per.items()
    }

    def model_text(model: str, met: int, total: int, quick: bool, var_q: float, var_k: float) -> str:
        values = dict(model=model, met=met, total=total, share=met / total, var_q=var_q, var_k=var_k)
        if quick:
            return _(
                "{model} (quick): {met}/{total} heads ({share:.0%}) meet it; median Var q {var_q:.3g}, Var k {var_k:.3g}",
                **values,
            )
        return _(
            "{model}: {met}/{total} heads ({share:.0%}) meet it; median Var q {var_q:.3g}, Var k {var_k:.3g}", **values
        )

    def note() -> str:
        parts = [
            _(
                "read from {sources}; the probe's moments are pair-weighted (each token weighted by the pairs it is in)",
                sources=_provenance(envs),
            )
            if envs
            else _("no probe results")
        ]
        if missing and envs:
            parts += _texts(missing)
        parts.append(
            _("the blog post's statement is about inputs; q and k are projections of them, where the proof needs it")
        )
        return clauses(parts)

    ctx.add(
        claim(
            "S10.3",
            N_("the components of q and k are normalised to mean 0, variance 1: the standard assumption"),
            expected=lambda: _(
                "in real models, at least half of the heads have q and k with |mean| ≤ {tolerance:g} and variance within [{low:g}, {high:g}] (per head, over components and tokens), each model",
                tolerance=MEAN_TOLERANCE,
                low=1 / VARIANCE_FACTOR,
                high=VARIANCE_FACTOR,
            ),
            measured=lambda: (
                clauses([model_text(m, *row) for m, row in per.items() if row[1]])
                or _("no usable probe results: {why}", why=clauses(_texts(missing)))
            ),
            verdict=judge_all(parts.values()) if parts else "inconclusive",
            sources=_sources(envs),
            note=note,
        )
    )


def _dk_claim(ctx: Context, envs, missing) -> None:
    missing = list(missing) + [
        lambda e=e: _("{path}: data.model has no integer d_k", path=e.path)
        for e in envs
        if not isinstance(e.data["model"].get("d_k"), int)
    ]
    models = {_model_name(e): e.data["model"]["d_k"] for e in envs if isinstance(e.data["model"].get("d_k"), int)}
    small = {m: d for m, d in models.items() if d < LARGE_D_K}
    verdict = "inconclusive" if not models else "fails" if small else "holds"

    def note() -> str:
        if small:
            parts = [
                _(
                    "{small} of {count} loaded models below {large}: {models}",
                    small=len(small),
                    count=len(models),
                    large=LARGE_D_K,
                    models=clauses((f"{m} ({d})" for m, d in small.items()), ","),
                )
            ]
        elif models:
            parts = [_("all {count} loaded models at or above {large}", count=len(models), large=LARGE_D_K)]
        else:
            parts = [_("no probe results")]
        if models:
            parts.append(_("the models probed are a sample, not a census of real Transformers"))
        if missing and envs:
            parts += _texts(missing)
        return clauses(parts)

    ctx.add(
        claim(
            "S10.4",
            N_("in real Transformer models d_k is 64, 128 or more"),
            expected=lambda: _("d_k ≥ {large} in every real model this project loads", large=LARGE_D_K),
            measured=lambda: (
                clauses((f"{m}: d_k = {d}" for m, d in models.items()))
                or _("no usable probe results: {why}", why=clauses(_texts(missing)))
            ),
            verdict=verdict,
            sources=_sources(envs),
            note=note,
        )
    )


# ---- the paper --------------------------------------------------------------------------------


def _citation_claim(ctx: Context) -> None:
    ctx.add(
        claim(
            "S10.5",
            N_(
                "the authors of 'Attention Is All You Need' chose √d_k because it is mathematically the value that keeps the scores' variance at 1"
            ),
            expected=lambda: _(
                "not checkable by computation: a statement about the authors' reasons; compared with what the paper says"
            ),
            measured=lambda: _(
                'Vaswani et al. 2017, §3.2.1: "We suspect that for large values of d_k, the dot products grow large in magnitude, pushing the softmax function into regions where it has extremely small gradients. '
                'To counteract this effect, we scale the dot products by 1/√d_k." Footnote 4: assume the components of q and k are independent with mean 0 and variance 1; then q·k has mean 0 and variance d_k'
            ),
            verdict="inconclusive",
            note=lambda: _(
                "verdict 'inconclusive' stands for 'not checkable by computation' (the nearest verdict there is). "
                "The paper gives a suspected mechanism (small softmax gradients) and the variance argument as an illustration in a footnote; it does not say √d_k was chosen as 'the mathematically right value'. "
                "The computable parts are S2 (variance d_k), S4 (÷√d_k gives variance 1) and S6 (gradients)"
            ),
        )
    )


def run(ctx: Context) -> None:
    train, train_missing = _read(ctx, TRAIN_KINDS)
    cells, unusable = training_cells(train)
    common = dict(envs=train, missing=train_missing, cells=cells, unusable=unusable)
    _training_claim(
        ctx,
        "S10.1",
        N_("with large d_k and no scaling the gradients vanish and learning stops"),
        supports={"fails"},
        contradicts={"faster", "learns", "slower"},
        reading=lambda: _(
            "'learning stops' read as: the unscaled rule fails to learn (a 'fails' verdict) where 1/√d_k learns; 'faster', 'learns' or 'slower' contradicts it, 'diverges' is another failure (undecided)"
        ),
        **common,
    )
    _training_claim(
        ctx,
        "S10.2",
        N_("without ÷√d_k the Transformer can hardly learn effectively, especially when d_k is large"),
        supports={"fails", "slower", "diverges"},
        contradicts={"faster", "learns"},
        reading=lambda: _(
            "'can hardly learn effectively' read as: at large d_k the unscaled rule does not learn as 1/√d_k does (verdict 'fails', 'diverges' or 'slower'); a 'learns' or 'faster' contradicts it"
        ),
        **common,
    )
    probes, probe_missing = _read(ctx, PROBE_KINDS)
    _normalised_claim(ctx, probes, probe_missing)
    _dk_claim(ctx, probes, probe_missing)
    _citation_claim(ctx)
    ctx.tick(N_("training and probe results; the paper"))
