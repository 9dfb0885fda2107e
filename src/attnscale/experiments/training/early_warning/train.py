"""One early-warning run: the logit-growth proxy GPT trained with AdamW under the monitor (replace
mode) while its learning rate rises, every step's loss, gradient norm and attention figures recorded,
until the run diverges (and ``tail`` steps more) or its steps end."""

from __future__ import annotations

import math
from dataclasses import asdict

from attnscale.experiments.training.early_warning.config import ARMS, WarnCell, peak_lr
from attnscale.experiments.training.early_warning.rules import DivergenceWatch
from attnscale.scales import InverseSqrtDk, Unscaled

__all__ = ["train_cell", "LAYER_FIGURES", "DIGITS", "DECIMALS", "MONITOR_MODE", "schedule", "layer_summary"]

MONITOR_MODE = "replace"  # the fused kernel computes the model's attention and its figures in one pass

#: What each step keeps of a layer's heads, and how the heads are reduced to one: the attention
#: detector's per-head figures (attnscale.early_warning) on the chain this experiment breaks, each at
#: the head nearest its alarm (the largest |logit|, the smallest entropy, the largest saturated share,
#: the broken rows of all heads). Its fourth figure, the first-key weight (an attention sink forming or
#: breaking, not a link of this chain), is not kept: the shipped result stays small (4 heads a layer
#: become one), and the per-head detector's own alerts, with every figure, are recorded beside it.
LAYER_FIGURES = {"max_abs_logit": max, "entropy_min": min, "saturated_fraction": max, "rows_broken": sum}
#: How each series is rounded: the loss and gradient norm (what the peers judge) to significant digits,
#: as is the largest |logit| (judged on a log scale); the entropy (nats) and the saturated share, which
#: the detector judges on a linear scale with σ at least 0.01, to 0.001. Every rounding lies far below
#: the step-to-step noise each rule judges, and the shipped result stays near 13 bytes a step, compressed.
DIGITS = {"loss": 4, "grad_norm": 3, "max_abs_logit": 3}
DECIMALS = {"entropy_min": 3, "saturated_fraction": 3, "rows_broken": 0}


def schedule(cell: WarnCell):
    """The learning-rate factor of step index ``t`` (0-based): a linear rise to 1 over the run, so
    that each run meets the rate where it breaks at its own step (an LR range test)."""
    return lambda t: (t + 1) / cell.steps


def _rounded(x: float, digits: int) -> float | None:
    """``x`` to ``digits`` significant digits (a record, not an archive); None where not finite."""
    return float(f"{x:.{digits}g}") if math.isfinite(x) else None


def _kept(name: str, x: float) -> float | None:
    """Figure ``name``'s value as a run keeps it (:data:`DIGITS`, :data:`DECIMALS`); None where not finite."""
    if not math.isfinite(x):
        return None
    return _rounded(x, DIGITS[name]) if name in DIGITS else round(x, DECIMALS[name]) + 0.0  # + 0.0: no -0.0


def layer_summary(step) -> dict[str, dict[str, float | None]]:
    """A monitor Step's heads reduced per layer (:data:`LAYER_FIGURES`), rounded as :func:`_kept`."""
    out = {}
    for layer, heads in step.by_layer().items():
        values = {}
        for name, reduce in LAYER_FIGURES.items():
            xs = [float(getattr(h, name)) for h in heads]
            xs = [x for x in xs if math.isfinite(x)]
            values[name] = _kept(name, reduce(xs)) if xs else None
        out[layer] = values
    return out


def _setup(cell: WarnCell):
    """The data stream, corpus, model and optimiser, made in this order."""
    import torch

    from attnscale.experiments.training.common import seed_everything
    from attnscale.experiments.training.gpt import GPT, GPTConfig
    from attnscale.experiments.training.tasks import CharCorpus, grammar_corpus

    data = seed_everything(cell.seed)
    corpus = CharCorpus(grammar_corpus(cell.corpus_chars, cell.corpus_seed))
    arm = ARMS[cell.arm]
    config = GPTConfig(
        corpus.vocab,
        cell.context,
        cell.d_model,
        cell.n_layers,
        cell.d_model // cell.n_heads,
        init="fan_in",
        tied_head=False,
        qk_layernorm=arm.qk_layernorm,
    )
    model = GPT(config, Unscaled() if arm.unscaled else InverseSqrtDk(), figures=False)  # SDPA, which the monitor rides
    opt = torch.optim.AdamW(model.parameters(), lr=peak_lr(cell), betas=(0.9, 0.95), eps=1e-8, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, schedule(cell))
    return data, corpus, model, opt, sched


def train_cell(cell: WarnCell, stop_after: int | None = None) -> dict:
    """Train one run; returns its per-step series (step i + 1 at index i) and the per-head detector's
    alerts. No gradient clipping (so that a run can diverge); the gradient norm is the global L2 norm
    before the update. Stops at a non-finite loss, ``tail`` steps after the divergence, at
    ``stop_after`` updates, or at the end."""
    import torch

    from attnscale.early_warning import Detector
    from attnscale.torch.monitor import Monitor

    data, corpus, model, opt, sched = _setup(cell)
    series: dict[str, list] = {"loss": [], "grad_norm": []}
    layers: dict[str, dict[str, list]] = {}
    detector, online = Detector(), []
    watch, diverged_at = DivergenceWatch(cell.warmup), None
    with Monitor(model, mode=MONITOR_MODE, history=False) as mon:
        for step in range(1, cell.steps + 1):
            x, y = corpus.batch("train", cell.batch, cell.context, data)
            loss = torch.nn.functional.cross_entropy(model(x).flatten(0, 1), y.flatten())
            figures = mon.step(step, log=False)
            online += [
                {"step": a.step, "layer": a.layer, "head": a.head, "figure": a.figure} for a in detector.update(figures)
            ]
            for layer, values in layer_summary(figures).items():
                for name, v in values.items():
                    layers.setdefault(layer, {}).setdefault(name, []).append(v)
            value = float(loss.detach())
            grad = math.nan
            if math.isfinite(value):
                opt.zero_grad(set_to_none=True)
                loss.backward()
                grad = float(torch.nn.utils.clip_grad_norm_(model.parameters(), math.inf))
                opt.step()
                sched.step()
            series["loss"].append(_kept("loss", value))
            series["grad_norm"].append(_kept("grad_norm", grad))
            if diverged_at is None and watch.update(value):
                diverged_at = step
            ended = not math.isfinite(value) or (diverged_at is not None and step >= diverged_at + cell.tail)
            if ended or (stop_after is not None and step >= stop_after):
                break
    return {
        "arm": cell.arm,
        "steps_run": len(series["loss"]),
        "diverged_at": diverged_at,
        **series,
        "layers": layers,
        "online": {"config": asdict(detector.config), "alerts": online[:_ONLINE_KEPT], "count": len(online)},
        "vocab": corpus.vocab,
        "attention_fallbacks": dict(mon.fallbacks),
    }


_ONLINE_KEPT = 20  # the per-head detector's first alerts kept (the count says how many there were)
