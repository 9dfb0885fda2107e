"""Experiment B, ``logit-growth``: attention logits grow at high learning rates; QK-layernorm and
QK-clip are two ways to stop it.

A small-scale proxy after Wortsman et al. 2023, "Small-scale proxies for large-scale Transformer
training instabilities" (Figures 1–2): a decoder-only character LM (2 layers, width 64, 4 heads,
context 64, pre-LN, no biases: the project's :class:`~attnscale.experiments.gpt.GPT` with
:func:`gpt_config`'s options, every linear layer std 1/√fan_in, embeddings N(0, 1), an untied head)
on :func:`~attnscale.experiments.tasks.grammar_corpus`, trained with AdamW (β₁ 0.9, β₂ 0.95, ε 1e-8,
weight decay 1e-4 independent of the LR, gradient clipping at norm 1), linear warm-up then cosine decay, at learning rates 1e-3 … 3e-1, in three variants:

- ``baseline``: plain attention;
- ``qk_layernorm``: per-head LayerNorm on q and k (Dehghani et al. 2023; Wortsman et al. 2023);
- ``qk_clip``: the logit guard :class:`attnscale.torch.guard.LogitGuard` at τ (QK-clip, as
  MuonClip for Kimi K2): after each optimiser step, a head whose largest logit in that step
  exceeded τ has its W_Q and W_K rows scaled by √(τ / max logit).

The model's attention (PyTorch SDPA) runs inside :class:`attnscale.torch.Monitor`, which gives every
training step's per-head max logit (it feeds the guard) and the layer-0 max logit over the
validation batches that is logged. It runs in :data:`MONITOR_MODE` "replace": the fused kernel
computes the model's attention, forward and backward, and its figures in the same pass
(``benchmarks/monitor_replace.py``: 1.19× a plain step, where "observe", bit-for-bit plain
training plus one extra forward per call, costs 1.29×). Outputs equal SDPA's to rounding, not
bit-for-bit.

LR sensitivity, as the paper defines it: E over the learning rates of [min(ℓ(lr), ℓ₀) − min_lr ℓ(lr)],
with ℓ the final loss and ℓ₀ the loss at initialisation (a diverged run counts as ℓ₀).

The sweep is 3 variants × 6 learning rates = 18 cells of 1000 steps (the two-variant sweep was
2 × 7 = 14): the lowest rate, 3e-4, was dropped to pay for the third variant, since 1000 steps at
that rate only showed that they are too few.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from attnscale.errors import InputError, check_count, check_positive
from attnscale.experiments.cells import shared_settings
from attnscale.experiments.training import capped_loss, lr_sensitivity
from attnscale.scales import InverseSqrtDk

__all__ = ["LogitCell", "LogitGrowthConfig", "gpt_config", "train_cell", "analyse", "KIND",
           "VARIANTS"]

KIND = "logit-growth"
VARIANTS = ("baseline", "qk_layernorm", "qk_clip")
MONITOR_MODE = "replace"        # the figures from the model's own attention (see above)


@dataclass(frozen=True, kw_only=True)
class LogitRun:
    """What every run of the sweep shares; :class:`LogitGrowthConfig` and :class:`LogitCell` extend
    it, so each setting and its default is declared once."""

    steps: int = 1000
    warmup: int = 50            # linear warm-up steps (5 %, as the paper), then cosine decay to 0
    batch: int = 16             # sequences per step
    log_every: int = 25
    corpus_chars: int = 200_000

    def __post_init__(self):
        for name in ("steps", "batch", "log_every", "corpus_chars"):
            check_count(name, getattr(self, name))
        if not 0 <= self.warmup < self.steps:
            raise InputError(f"warmup: expected 0 <= warmup < steps={self.steps}, got {self.warmup!r}")


@dataclass(frozen=True)
class LogitCell(LogitRun):
    """One training run of the LM. Its hash is its cache key."""

    lr: float                   # peak learning rate
    qk_layernorm: bool
    seed: int
    qk_clip: float | None = None  # τ of the logit guard (None: no guard)
    context: int = 64
    d_model: int = 64
    n_layers: int = 2
    n_heads: int = 4
    weight_decay: float = 1e-4  # independent of the peak LR, as the paper: p ← p − (lr_t/lr)·λ·p
    clip_norm: float = 1.0      # global gradient-norm clipping, as the paper
    eval_batches: int = 4       # fixed validation batches of ``batch`` sequences
    corpus_seed: int = 0
    code_version: int = 4       # bump when training code changes: old cached results then miss

    def __post_init__(self):
        super().__post_init__()
        check_positive("lr", self.lr)
        for name in ("context", "d_model", "n_layers", "n_heads", "eval_batches"):
            check_count(name, getattr(self, name))
        if self.d_model % self.n_heads:
            raise InputError(f"n_heads: expected a divisor of d_model={self.d_model}, got {self.n_heads}")
        if self.qk_clip is not None and not (self.qk_clip > 0 and math.isfinite(self.qk_clip)):
            raise InputError(f"qk_clip: expected None or a finite τ > 0, got {self.qk_clip!r}")
        if self.qk_clip is not None and self.qk_layernorm:
            raise InputError("qk_clip: QK-clip rescales W_Q and W_K, which does nothing before a QK-layernorm; "
                             "use one or the other")

    @property
    def variant(self) -> str:
        return "qk_layernorm" if self.qk_layernorm else "qk_clip" if self.qk_clip is not None else "baseline"

    @property
    def label(self) -> str:
        return f"lr={self.lr:g} {self.variant} seed={self.seed}"


@dataclass(frozen=True)
class LogitGrowthConfig(LogitRun):
    lrs: tuple[float, ...] = (1e-3, 3e-3, 1e-2, 3e-2, 1e-1, 3e-1)
    seeds: int = 1
    tau: float = 100.0          # the guard's threshold (Kimi K2 trained with τ = 100)

    def __post_init__(self):
        super().__post_init__()
        if len(self.lrs) < 1 or any(not (lr > 0) for lr in self.lrs):
            raise InputError(f"lrs: expected positive learning rates, got {self.lrs!r}")
        check_count("seeds", self.seeds)
        check_positive("tau", self.tau)

    @classmethod
    def quick(cls, seeds: int = 1) -> "LogitGrowthConfig":
        """Seconds, not minutes: the lowest and highest learning rates, few steps."""
        return cls(lrs=(1e-3, 3e-1), seeds=seeds, steps=40, warmup=8, batch=8, log_every=10,
                   corpus_chars=20_000)

    def cells(self) -> list[LogitCell]:
        arms = {"baseline": (False, None), "qk_layernorm": (True, None), "qk_clip": (False, self.tau)}
        return [LogitCell(lr, arms[v][0], seed, qk_clip=arms[v][1], **shared_settings(self, LogitRun))
                for seed in range(self.seeds) for v in VARIANTS for lr in self.lrs]


def gpt_config(cell: LogitCell, vocab: int):
    """The cell's model: :class:`~attnscale.experiments.gpt.GPTConfig` with the proxy's options
    (``init="fan_in"``, an untied head, QK-layernorm in that arm); d_k = d_model / n_heads."""
    from attnscale.experiments.gpt import GPTConfig

    return GPTConfig(vocab, cell.context, cell.d_model, cell.n_layers, cell.d_model // cell.n_heads,
                     init="fan_in", tied_head=False, qk_layernorm=cell.qk_layernorm)


def _schedule(cell: LogitCell):
    def factor(step: int) -> float:
        if step < cell.warmup:
            return (step + 1) / cell.warmup
        progress = (step - cell.warmup) / max(1, cell.steps - cell.warmup)
        return 0.5 * (1.0 + math.cos(math.pi * progress))
    return factor


def _finite(x) -> float | None:
    return float(x) if x is not None and math.isfinite(x) else None


def _peak(step, layer: str | None = None) -> float | None:
    """Largest max logit over the heads of a monitor Step (of one layer if given); None if none."""
    values = [h.max_logit for h in step.heads if (layer is None or h.layer == layer) and math.isfinite(h.max_logit)]
    return max(values) if values else None


def train_cell(cell: LogitCell, stop_after: int | None = None) -> dict:
    """Train one LM; returns the validation loss at init and at the end, and the logged curves.
    Strict JSON: a figure that does not exist is None (``final_loss`` with ``final_loss_reason``).

    ``stop_after``: end after that many updates: the log is then exactly the full run's first entries
    (what the reproducibility test recomputes of a shipped result in seconds), and the final figures
    are None (``final_loss_reason`` says why)."""
    import torch

    from attnscale.experiments.gpt import GPT
    from attnscale.experiments.tasks import CharCorpus, grammar_corpus
    from attnscale.experiments.training import seed_everything
    from attnscale.torch.guard import LogitGuard
    from attnscale.torch.monitor import Monitor

    data = seed_everything(cell.seed)
    corpus = CharCorpus(grammar_corpus(cell.corpus_chars, cell.corpus_seed))
    model = GPT(gpt_config(cell, corpus.vocab), InverseSqrtDk(), figures=False)   # SDPA, which the monitor rides
    opt = torch.optim.AdamW(model.parameters(), lr=cell.lr, betas=(0.9, 0.95), eps=1e-8,
                            weight_decay=cell.weight_decay / cell.lr)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, _schedule(cell))
    guard = LogitGuard(model, cell.qk_clip) if cell.qk_clip is not None else None
    valid_gen = torch.Generator().manual_seed(30_000 + cell.corpus_seed)   # same validation set for all
    valid = [corpus.batch("valid", cell.batch, cell.context, valid_gen) for _ in range(cell.eval_batches)]
    attn0 = model.blocks[0].attn
    layer0 = "blocks.0.attn"

    def qk_gain() -> float | None:
        """RMS(q gain) · RMS(k gain) of layer 0's QK-layernorm: the only way its logits can grow."""
        if attn0.q_norm is None:
            return None
        rms = lambda w: float(w.detach().pow(2).mean().sqrt())   # noqa: E731
        return rms(attn0.q_norm.weight) * rms(attn0.k_norm.weight)

    def evaluate(mon, step: int) -> tuple[float, float | None]:
        """Validation loss, and the layer-0 max attention logit over the validation batches."""
        model.eval()
        with torch.no_grad():
            losses = [float(torch.nn.functional.cross_entropy(model(x).flatten(0, 1), y.flatten())) for x, y in valid]
        model.train()
        return statistics.fmean(losses), _peak(mon.step(step, log=False), layer0)

    log = []
    diverged_at = None
    window: list[float] = []
    train_peak, clipped = None, 0
    with Monitor(model, mode=MONITOR_MODE, history=False) as mon:
        init_loss, init_logit = evaluate(mon, 0)
        log.append({"step": 0, "train_loss": None, "valid_loss": _finite(init_loss), "max_logit_layer0": init_logit,
                    "max_logit_train": None, "clipped_heads": 0, "qk_gain_layer0": qk_gain(),
                    "lr": cell.lr * _schedule(cell)(0)})
        for step in range(1, cell.steps + 1):
            x, y = corpus.batch("train", cell.batch, cell.context, data)
            loss = torch.nn.functional.cross_entropy(model(x).flatten(0, 1), y.flatten())
            figures = mon.step(step, log=False)            # this step's forward: every layer and head
            if not torch.isfinite(loss):
                diverged_at = step
                break
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), cell.clip_norm)
            opt.step()
            sched.step()
            if guard is not None:
                clipped += len(guard.apply(figures))
            peak = _peak(figures)
            train_peak = peak if train_peak is None or (peak is not None and peak > train_peak) else train_peak
            window.append(float(loss.detach()))
            if step % cell.log_every == 0 or step == cell.steps:
                valid_loss, peak0 = evaluate(mon, step)
                log.append({"step": step, "train_loss": statistics.fmean(window), "valid_loss": _finite(valid_loss),
                            "max_logit_layer0": peak0, "max_logit_train": train_peak, "clipped_heads": clipped,
                            "qk_gain_layer0": qk_gain(), "lr": cell.lr * _schedule(cell)(step - 1)})
                window, train_peak, clipped = [], None, 0
                if not math.isfinite(valid_loss):
                    diverged_at = step
                    break
            if stop_after is not None and step >= stop_after:
                break
    stopped = stop_after is not None and stop_after < cell.steps and diverged_at is None
    peaks = [e["max_logit_layer0"] for e in log if e["max_logit_layer0"] is not None]
    train_peaks = [e["max_logit_train"] for e in log if e["max_logit_train"] is not None]
    return {
        "variant": cell.variant,
        "init_loss": init_loss,
        "final_loss": log[-1]["valid_loss"] if diverged_at is None and not stopped else None,
        "final_loss_reason": (f"diverged at step {diverged_at}" if diverged_at is not None else
                              f"stopped after {stop_after} updates" if stopped else None),
        "diverged_at": diverged_at,
        "max_logit_layer0_final": log[-1]["max_logit_layer0"],
        "max_logit_layer0_peak": max(peaks) if peaks else None,
        "max_logit_train_peak": max(train_peaks) if train_peaks else None,
        "clipped_heads": sum(e["clipped_heads"] for e in log),
        "attention_fallbacks": dict(mon.fallbacks),
        "vocab": corpus.vocab,
        "parameters": sum(p.numel() for p in model.parameters()),
        "log": log,
    }


def _mean(values) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.fmean(values) if values else None


def analyse(config: LogitGrowthConfig, cells: list[LogitCell], results: list[dict]) -> dict:
    """Every figure the chapter shows, computed here (strict JSON: a missing figure is None).

    ``table``: per (variant, lr), over seeds: final loss (mean, min, max over the runs that did not
    diverge; None with ``final_loss_reason`` when all did), divergences, the loss and the layer-0
    max logit at initialisation, the peak and final layer-0 max logit (validation), the peak
    max logit of any layer on the training batches, QK-layernorm's gains, the guard's clips.
    ``lr_sensitivity`` per variant and seed; ``best`` (lowest mean final loss and its lr) per
    variant; ``low_lr_gap``: how far every variant's loss at the lowest rate is above its best;
    ``collapsed``: the rates where QK-layernorm's final max logit ended below its value at
    initialisation; ``guard``: τ and the training-batch peak over the guarded runs against the
    unguarded; ``setup``: the model and schedule.
    """
    rows = list(zip(cells, results))
    variants = [v for v in VARIANTS if any(c.variant == v for c in cells)]
    table, sensitivity, best = [], {}, {}
    for v in variants:
        per_seed = []
        for seed in range(config.seeds):
            runs = [r for c, r in rows if c.variant == v and c.seed == seed]
            init_loss = statistics.fmean(r["init_loss"] for r in runs)
            per_seed.append(lr_sensitivity([capped_loss(r["final_loss"], init_loss) for r in runs]))
        sensitivity[v] = {"per_seed": per_seed, "mean": statistics.fmean(per_seed)}
        for lr in config.lrs:
            runs = [r for c, r in rows if c.variant == v and c.lr == lr]
            finite = [r["final_loss"] for r in runs if r["final_loss"] is not None]
            diverged = sum(r["diverged_at"] is not None for r in runs)
            table.append({
                "variant": v, "lr": lr, "qk_layernorm": v == "qk_layernorm",
                "final_loss_mean": _mean(finite), "final_loss_min": min(finite, default=None),
                "final_loss_max": max(finite, default=None),
                "final_loss_reason": None if finite else f"all {len(runs)} runs diverged",
                "diverged": diverged, "seeds": len(runs),
                "init_loss": statistics.fmean(r["init_loss"] for r in runs),
                "max_logit_init_mean": _mean(r["log"][0]["max_logit_layer0"] for r in runs),
                "max_logit_peak_mean": _mean(r["max_logit_layer0_peak"] for r in runs),
                "max_logit_final_mean": _mean(r["max_logit_layer0_final"] for r in runs),
                "max_logit_train_peak_mean": _mean(r["max_logit_train_peak"] for r in runs),
                "qk_gain_init_mean": _mean(r["log"][0]["qk_gain_layer0"] for r in runs),
                "qk_gain_final_mean": _mean(r["log"][-1]["qk_gain_layer0"] for r in runs),
                "clipped_heads_mean": statistics.fmean(r["clipped_heads"] for r in runs),
            })
        done = [r for r in table if r["variant"] == v and r["final_loss_mean"] is not None]
        top = min(done, key=lambda r: r["final_loss_mean"]) if done else None
        best[v] = {"final_loss": top["final_loss_mean"] if top else None, "lr": top["lr"] if top else None}
    row = {(r["variant"], r["lr"]): r for r in table}
    lo, hi = min(config.lrs), max(config.lrs)
    gaps = [row[v, lo]["final_loss_mean"] - best[v]["final_loss"] for v in variants
            if row[v, lo]["final_loss_mean"] is not None and best[v]["final_loss"] is not None]
    collapsed = [lr for lr in config.lrs if "qk_layernorm" in variants
                 and None not in (row["qk_layernorm", lr]["max_logit_final_mean"], row["qk_layernorm", lr]["max_logit_init_mean"])
                 and row["qk_layernorm", lr]["max_logit_final_mean"] < row["qk_layernorm", lr]["max_logit_init_mean"]]
    return {"table": table, "lr_sensitivity": sensitivity, "best": best,
            "low_lr_gap": {"lr": lo, "gap": min(gaps) if len(gaps) == len(variants) else None},
            "collapsed": {"lrs": collapsed, "highest": max(collapsed) if collapsed else None},
            "lr_low": lo, "lr_high": hi,
            "guard": _guard_figures(config, rows, variants),
            "setup": _setup(config, cells, results)}


def _guard_figures(config: LogitGrowthConfig, rows, variants) -> dict | None:
    """τ; over the guarded runs, the largest training-batch max logit (any layer, any step: measured
    before that step's clip, so it holds one update's growth) and its ratio to τ; the same peak for
    the unguarded baseline; and the guarded runs' clips."""
    if "qk_clip" not in variants:
        return None
    peak = lambda v: max((r["max_logit_train_peak"] for c, r in rows if c.variant == v   # noqa: E731
                          and r["max_logit_train_peak"] is not None), default=None)
    guarded, base = peak("qk_clip"), peak("baseline") if "baseline" in variants else None
    return {"tau": config.tau, "train_peak": guarded, "train_peak_over_tau": None if guarded is None else guarded / config.tau,
            "baseline_train_peak": base, "runs": sum(c.variant == "qk_clip" for c, _ in rows),
            "clipped_heads": sum(r["clipped_heads"] for c, r in rows if c.variant == "qk_clip")}


def _setup(config: LogitGrowthConfig, cells: list[LogitCell], results: list[dict]) -> dict:
    c, r = cells[0], results[0]
    return {"n_layers": c.n_layers, "d_model": c.d_model, "n_heads": c.n_heads, "context": c.context,
            "parameters": r["parameters"], "corpus_chars": c.corpus_chars, "vocab": r["vocab"],
            "warmup": config.warmup, "steps": config.steps, "batch": config.batch, "seeds": config.seeds,
            "log_every": config.log_every, "lrs": list(config.lrs), "tau": config.tau}
