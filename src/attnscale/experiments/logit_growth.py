"""Experiment B, ``logit-growth``: attention logits grow at high learning rates, and QK-layernorm stops it.

A small-scale proxy after Wortsman et al. 2023, "Small-scale proxies for large-scale Transformer
training instabilities" (Figures 1–2): a decoder-only character LM (2 layers, width 64, 4 heads,
context 64, pre-LN, no biases) on :func:`~attnscale.experiments.tasks.grammar_corpus`, trained with
AdamW (β₁ 0.9, β₂ 0.95, ε 1e-8, weight decay 1e-4 independent of the LR, gradient clipping at
norm 1), linear warm-up then cosine decay, at learning rates
3e-4 … 3e-1, with and without per-head QK-layernorm. Logged: the layer-0 maximum attention logit over
training and the final validation loss.

LR sensitivity, as the paper defines it: E over the learning rates of [min(ℓ(lr), ℓ₀) − min_lr ℓ(lr)],
with ℓ the final loss and ℓ₀ the loss at initialisation (a diverged run counts as ℓ₀).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from attnscale.errors import InputError

__all__ = ["LogitCell", "LogitGrowthConfig", "train_cell", "analyse", "lr_sensitivity", "KIND"]

KIND = "logit-growth"


@dataclass(frozen=True)
class LogitCell:
    """One training run of the LM. Its hash is its cache key."""

    lr: float                   # peak learning rate
    qk_layernorm: bool
    seed: int
    steps: int = 1000
    warmup: int = 50            # linear warm-up steps (5 %, as the paper), then cosine decay to 0
    batch: int = 16             # sequences per step
    context: int = 64
    d_model: int = 64
    n_layers: int = 2
    n_heads: int = 4
    weight_decay: float = 1e-4  # independent of the peak LR, as the paper: p ← p − (lr_t/lr)·λ·p
    clip_norm: float = 1.0      # global gradient-norm clipping, as the paper
    log_every: int = 25
    eval_batches: int = 4       # fixed validation batches of ``batch`` sequences
    corpus_chars: int = 200_000
    corpus_seed: int = 0
    code_version: int = 2       # bump when training code changes: old cached results then miss

    def __post_init__(self):
        if not (self.lr > 0 and math.isfinite(self.lr)):
            raise InputError(f"lr: expected a finite number > 0, got {self.lr!r}")
        if not 0 <= self.warmup < self.steps:
            raise InputError(f"warmup: expected 0 <= warmup < steps={self.steps}, got {self.warmup!r}")
        for name in ("batch", "context", "log_every", "eval_batches"):
            if getattr(self, name) < 1:
                raise InputError(f"{name}: expected an integer >= 1, got {getattr(self, name)!r}")

    @property
    def label(self) -> str:
        return f"lr={self.lr:g} qk_layernorm={self.qk_layernorm} seed={self.seed}"


@dataclass(frozen=True)
class LogitGrowthConfig:
    lrs: tuple[float, ...] = (3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 1e-1, 3e-1)
    seeds: int = 1
    steps: int = 1000
    warmup: int = 50
    batch: int = 16
    log_every: int = 25
    corpus_chars: int = 200_000

    def __post_init__(self):
        if len(self.lrs) < 1 or any(not (lr > 0) for lr in self.lrs):
            raise InputError(f"lrs: expected positive learning rates, got {self.lrs!r}")
        if self.seeds < 1:
            raise InputError(f"seeds: expected an integer >= 1, got {self.seeds!r}")

    @classmethod
    def quick(cls, seeds: int = 1) -> "LogitGrowthConfig":
        """Seconds, not minutes: three learning rates, few steps."""
        return cls(lrs=(1e-3, 3e-2, 3e-1), seeds=seeds, steps=40, warmup=8, batch=8, log_every=10,
                   corpus_chars=20_000)

    def cells(self) -> list[LogitCell]:
        return [LogitCell(lr, qk, seed, steps=self.steps, warmup=self.warmup, batch=self.batch,
                          log_every=self.log_every, corpus_chars=self.corpus_chars)
                for seed in range(self.seeds) for qk in (False, True) for lr in self.lrs]


def _schedule(cell: LogitCell):
    def factor(step: int) -> float:
        if step < cell.warmup:
            return (step + 1) / cell.warmup
        progress = (step - cell.warmup) / max(1, cell.steps - cell.warmup)
        return 0.5 * (1.0 + math.cos(math.pi * progress))
    return factor


def train_cell(cell: LogitCell) -> dict:
    """Train one LM; returns the validation loss at init and at the end, and the logged curves."""
    import torch

    from attnscale.experiments.models import GPTConfig, TinyGPT
    from attnscale.experiments.tasks import CharCorpus, grammar_corpus
    from attnscale.experiments.training import seed_everything

    data = seed_everything(cell.seed)
    corpus = CharCorpus(grammar_corpus(cell.corpus_chars, cell.corpus_seed))
    model = TinyGPT(GPTConfig(corpus.vocab, cell.context, cell.d_model, cell.n_layers, cell.n_heads,
                              cell.qk_layernorm))
    opt = torch.optim.AdamW(model.parameters(), lr=cell.lr, betas=(0.9, 0.95), eps=1e-8,
                            weight_decay=cell.weight_decay / cell.lr)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, _schedule(cell))
    valid_gen = torch.Generator().manual_seed(30_000 + cell.corpus_seed)   # same validation set for all
    valid = [corpus.batch("valid", cell.batch, cell.context, valid_gen) for _ in range(cell.eval_batches)]
    attn0 = model.blocks[0].attn

    def qk_gain() -> float | None:
        """RMS(q gain) · RMS(k gain) of layer 0's QK-layernorm: the only way its logits can grow."""
        if attn0.q_norm is None:
            return None
        rms = lambda w: float(w.detach().pow(2).mean().sqrt())   # noqa: E731
        return rms(attn0.q_norm.weight) * rms(attn0.k_norm.weight)

    def evaluate() -> tuple[float, float]:
        """Validation loss, and the layer-0 max attention logit over the validation batches."""
        model.eval()
        losses, peak = [], -math.inf
        attn0.keep_record = True
        with torch.no_grad():
            for x, y in valid:
                logits = model(x)
                losses.append(float(torch.nn.functional.cross_entropy(logits.flatten(0, 1), y.flatten())))
                z = attn0.record.logits
                peak = max(peak, float(z[torch.isfinite(z)].max()) if torch.isfinite(z).any() else math.nan)
        attn0.keep_record = False
        model.train()
        return statistics.fmean(losses), peak

    log = []
    init_loss, init_logit = evaluate()
    log.append({"step": 0, "train_loss": None, "valid_loss": init_loss, "max_logit_layer0": init_logit,
                "qk_gain_layer0": qk_gain(), "lr": cell.lr * _schedule(cell)(0)})
    diverged_at = None
    window: list[float] = []
    for step in range(1, cell.steps + 1):
        x, y = corpus.batch("train", cell.batch, cell.context, data)
        loss = torch.nn.functional.cross_entropy(model(x).flatten(0, 1), y.flatten())
        if not torch.isfinite(loss):
            diverged_at = step
            break
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cell.clip_norm)
        opt.step()
        sched.step()
        window.append(float(loss.detach()))
        if step % cell.log_every == 0 or step == cell.steps:
            valid_loss, peak = evaluate()
            log.append({"step": step, "train_loss": statistics.fmean(window), "valid_loss": valid_loss,
                        "max_logit_layer0": peak, "qk_gain_layer0": qk_gain(),
                        "lr": cell.lr * _schedule(cell)(step - 1)})
            window = []
            if not math.isfinite(valid_loss):
                diverged_at = step
                break
    final_loss = log[-1]["valid_loss"] if diverged_at is None else float("nan")
    return {
        "init_loss": init_loss,
        "final_loss": final_loss,
        "diverged_at": diverged_at,
        "max_logit_layer0_final": log[-1]["max_logit_layer0"],
        "max_logit_layer0_peak": max((e["max_logit_layer0"] for e in log
                                      if e["max_logit_layer0"] is not None and math.isfinite(e["max_logit_layer0"])),
                                     default=float("nan")),
        "vocab": corpus.vocab,
        "parameters": sum(p.numel() for p in model.parameters()),
        "log": log,
    }


def lr_sensitivity(final_losses: list[float], init_loss: float) -> float:
    """E over LRs of [min(ℓ, ℓ₀) − min ℓ] (Wortsman et al. 2023, §2); NaN (diverged) counts as ℓ₀."""
    capped = [min(l, init_loss) if math.isfinite(l) else init_loss for l in final_losses]
    return statistics.fmean(capped) - min(capped)


def analyse(config: LogitGrowthConfig, cells: list[LogitCell], results: list[dict]) -> dict:
    """Per (qk_layernorm, lr): final loss and layer-0 max logit over seeds; LR sensitivity per variant
    and seed; and where the max logit first exceeds thresholds (the paper's divergence sign)."""
    rows = list(zip(cells, results))
    table = []
    sensitivity = {}
    for qk in (False, True):
        per_seed = []
        for seed in range(config.seeds):
            runs = [(c, r) for c, r in rows if c.qk_layernorm == qk and c.seed == seed]
            init = statistics.fmean(r["init_loss"] for _, r in runs)
            per_seed.append(lr_sensitivity([r["final_loss"] for _, r in runs], init))
        sensitivity["qk_layernorm" if qk else "baseline"] = {
            "per_seed": per_seed, "mean": statistics.fmean(per_seed)}
        for lr in config.lrs:
            runs = [r for c, r in rows if c.qk_layernorm == qk and c.lr == lr]
            finals = [r["final_loss"] for r in runs]
            finite = [f for f in finals if math.isfinite(f)]
            table.append({
                "qk_layernorm": qk, "lr": lr,
                "final_loss_mean": statistics.fmean(finite) if finite else float("nan"),
                "final_loss_min": min(finite) if finite else float("nan"),
                "final_loss_max": max(finite) if finite else float("nan"),
                "diverged": sum(r["diverged_at"] is not None for r in runs),
                "init_loss": statistics.fmean(r["init_loss"] for r in runs),
                "max_logit_peak_mean": statistics.fmean(r["max_logit_layer0_peak"] for r in runs),
                "max_logit_final_mean": statistics.fmean(r["max_logit_layer0_final"] for r in runs),
                "seeds": len(runs),
            })
    return {"table": table, "lr_sensitivity": sensitivity}
