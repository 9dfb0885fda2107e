"""One logit-growth run: the proxy GPT trained with AdamW under the monitor (and the logit guard in
the qk_clip arm), its validation loss and max logits logged."""

from __future__ import annotations

import math
import statistics

from attnscale.experiments.training.logit_growth.config import MONITOR_MODE, LogitCell
from attnscale.scales import InverseSqrtDk

__all__ = ["gpt_config", "train_cell"]


def gpt_config(cell: LogitCell, vocab: int):
    """The cell's model: :class:`~attnscale.experiments.training.gpt.GPTConfig` with the proxy's options
    (``init="fan_in"``, an untied head, QK-layernorm in that arm); d_k = d_model / n_heads."""
    from attnscale.experiments.training.gpt import GPTConfig

    return GPTConfig(
        vocab,
        cell.context,
        cell.d_model,
        cell.n_layers,
        cell.d_model // cell.n_heads,
        init="fan_in",
        tied_head=False,
        qk_layernorm=cell.qk_layernorm,
    )


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


def _qk_gain(attn) -> float | None:
    """RMS(q gain) · RMS(k gain) of a layer's QK-layernorm: the only way its logits can grow."""
    if attn.q_norm is None:
        return None
    rms = lambda w: float(w.detach().pow(2).mean().sqrt())  # noqa: E731
    return rms(attn.q_norm.weight) * rms(attn.k_norm.weight)


def _setup_run(cell: LogitCell):
    """The run's data stream, corpus, model, optimiser, schedule, guard and validation batches, made
    in this order (the order of the random draws a shipped result was made with)."""
    import torch

    from attnscale.experiments.training.common import seed_everything
    from attnscale.experiments.training.gpt import GPT
    from attnscale.experiments.training.tasks import CharCorpus, grammar_corpus
    from attnscale.torch.guard import LogitGuard

    data = seed_everything(cell.seed)
    corpus = CharCorpus(grammar_corpus(cell.corpus_chars, cell.corpus_seed))
    model = GPT(gpt_config(cell, corpus.vocab), InverseSqrtDk(), figures=False)  # SDPA, which the monitor rides
    opt = torch.optim.AdamW(
        model.parameters(), lr=cell.lr, betas=(0.9, 0.95), eps=1e-8, weight_decay=cell.weight_decay / cell.lr
    )
    sched = torch.optim.lr_scheduler.LambdaLR(opt, _schedule(cell))
    guard = LogitGuard(model, cell.qk_clip) if cell.qk_clip is not None else None
    valid_gen = torch.Generator().manual_seed(30_000 + cell.corpus_seed)  # same validation set for all
    valid = [corpus.batch("valid", cell.batch, cell.context, valid_gen) for _ in range(cell.eval_batches)]
    return data, corpus, model, opt, sched, guard, valid


def _evaluate(model, valid, mon, step: int) -> tuple[float, float | None]:
    """Validation loss, and the layer-0 max attention logit over the validation batches."""
    import torch

    model.eval()
    with torch.no_grad():
        losses = [float(torch.nn.functional.cross_entropy(model(x).flatten(0, 1), y.flatten())) for x, y in valid]
    model.train()
    return statistics.fmean(losses), _peak(mon.step(step, log=False), _LAYER0)


_LAYER0 = "blocks.0.attn"


def train_cell(cell: LogitCell, stop_after: int | None = None) -> dict:
    """Train one LM; returns the validation loss at init and at the end, and the logged curves.
    Strict JSON: a figure that does not exist is None (``final_loss`` with ``final_loss_reason``).

    ``stop_after``: end after that many updates: the log is then exactly the full run's first entries
    (what the reproducibility test recomputes of a shipped result in seconds), and the final figures
    are None (``final_loss_reason`` says why)."""
    import torch

    from attnscale.torch.monitor import Monitor

    data, corpus, model, opt, sched, guard, valid = _setup_run(cell)
    attn0 = model.blocks[0].attn
    log = []
    diverged_at = None
    window: list[float] = []
    train_peak, clipped = None, 0
    with Monitor(model, mode=MONITOR_MODE, history=False) as mon:
        init_loss, init_logit = _evaluate(model, valid, mon, 0)
        log.append(
            {
                "step": 0,
                "train_loss": None,
                "valid_loss": _finite(init_loss),
                "max_logit_layer0": init_logit,
                "max_logit_train": None,
                "clipped_heads": 0,
                "qk_gain_layer0": _qk_gain(attn0),
                "lr": cell.lr * _schedule(cell)(0),
            }
        )
        for step in range(1, cell.steps + 1):
            x, y = corpus.batch("train", cell.batch, cell.context, data)
            loss = torch.nn.functional.cross_entropy(model(x).flatten(0, 1), y.flatten())
            figures = mon.step(step, log=False)  # this step's forward: every layer and head
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
                valid_loss, peak0 = _evaluate(model, valid, mon, step)
                log.append(
                    {
                        "step": step,
                        "train_loss": statistics.fmean(window),
                        "valid_loss": _finite(valid_loss),
                        "max_logit_layer0": peak0,
                        "max_logit_train": train_peak,
                        "clipped_heads": clipped,
                        "qk_gain_layer0": _qk_gain(attn0),
                        "lr": cell.lr * _schedule(cell)(step - 1),
                    }
                )
                window, train_peak, clipped = [], None, 0
                if not math.isfinite(valid_loss):
                    diverged_at = step
                    break
            if stop_after is not None and step >= stop_after:
                break
    stopped = stop_after is not None and stop_after < cell.steps and diverged_at is None
    return _result(
        cell,
        log,
        init_loss,
        diverged_at,
        stop_after if stopped else None,
        dict(mon.fallbacks),
        corpus.vocab,
        sum(p.numel() for p in model.parameters()),
    )


def _result(
    cell: LogitCell,
    log: list[dict],
    init_loss: float,
    diverged_at: int | None,
    stopped_after: int | None,
    fallbacks: dict,
    vocab: int,
    parameters: int,
) -> dict:
    """The run's result from its log: the final figures (None, with the reason, for a run that
    diverged or was stopped after ``stopped_after`` updates) and the peaks over the log."""
    peaks = [e["max_logit_layer0"] for e in log if e["max_logit_layer0"] is not None]
    train_peaks = [e["max_logit_train"] for e in log if e["max_logit_train"] is not None]
    return {
        "variant": cell.variant,
        "init_loss": init_loss,
        "final_loss": log[-1]["valid_loss"] if diverged_at is None and stopped_after is None else None,
        "final_loss_reason": (
            f"diverged at step {diverged_at}"
            if diverged_at is not None
            else f"stopped after {stopped_after} updates"
            if stopped_after is not None
            else None
        ),
        "diverged_at": diverged_at,
        "max_logit_layer0_final": log[-1]["max_logit_layer0"],
        "max_logit_layer0_peak": max(peaks) if peaks else None,
        "max_logit_train_peak": max(train_peaks) if train_peaks else None,
        "clipped_heads": sum(e["clipped_heads"] for e in log),
        "attention_fallbacks": fallbacks,
        "vocab": vocab,
        "parameters": parameters,
        "log": log,
    }
