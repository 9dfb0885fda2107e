"""One run of lm trained: :func:`train_cell` (the logged figures, per layer and head
(:func:`head_figures`), the final validation loss and a greedy sample)."""

from __future__ import annotations

import math
import statistics

import numpy as np

from attnscale.errors import check_count
from attnscale.experiments.training.lm.config import PROGRESS_EVERY, RULE_CHOICES, LMCell
from attnscale.experiments.training.text_data import VOCAB, ByteText
from attnscale.results import finite_or_none

__all__ = ["train_cell", "head_figures"]


def _schedule(steps: int):
    """Linear warm-up over the first tenth, then cosine to a tenth of the peak (nanoGPT's)."""
    warmup = max(1, steps // 10)

    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        progress = (step - warmup) / max(1, steps - warmup)
        return 0.1 + 0.45 * (1.0 + math.cos(math.pi * progress))

    return factor


def _optimizer(torch, model, cell: LMCell):
    if cell.optimizer == "sgd":
        return torch.optim.SGD(model.parameters(), lr=cell.lr)
    matrices = [p for p in model.parameters() if p.dim() >= 2]
    others = [p for p in model.parameters() if p.dim() < 2]  # LayerNorm gains, QK-norm's gain
    return torch.optim.AdamW(
        [{"params": matrices, "weight_decay": 0.1}, {"params": others, "weight_decay": 0.0}],
        lr=cell.lr,
        betas=(0.9, 0.95),
    )


def head_figures(figures: dict) -> dict[str, list]:
    """Per head of one layer, over rows that attend at least two keys (causal row 0 attends only
    itself, so is always saturated, with entropy 0): the mean and minimum row entropy (nats), the
    largest |logit|, and the fraction of rows whose largest weight e^(max logit − lse) exceeds
    SATURATED_WEIGHT: the monitor's per-head summary of those rows
    (:func:`attnscale.torch.head_summary.call_figures`), which leaves a row with a NaN or +inf logit
    out of the entropy and saturation figures. figures: the layer's (B, H, L) tensors ``lse``,
    ``entropy``, ``max_logit``, ``min_logit``. A figure that does not exist (no row, not finite) is None."""
    import types

    import torch

    from attnscale.torch.head_summary import call_figures

    rows = {name: figures[name][:, :, 1:] for name in ("lse", "entropy", "max_logit", "min_logit")}
    # The summary also sums each row's weight on key 0, ‖q‖ and ‖k‖, none of which is read here:
    # zeros stand in for them.
    zeros = torch.zeros_like(rows["entropy"])
    stats = types.SimpleNamespace(**rows, first_key_weight=zeros, head_table=None, counted_entropy=None)
    run, _ = call_figures(stats, zeros[..., None], zeros[..., None], entropies=False)
    no_entropy, _, saturated, single = run.counts
    counted = run.total - no_entropy - single  # rows with an entropy figure
    per_row = lambda sums: [finite_or_none(x / n) if n else None for x, n in zip(sums.tolist(), counted.tolist())]  # noqa: E731
    return {
        "entropy_mean": per_row(run.entropy_sum),
        "entropy_min": [finite_or_none(m) if n else None for m, n in zip(run.mins[0].tolist(), counted.tolist())],
        "max_abs_logit": [finite_or_none(v) for v in np.maximum(run.max_logit, -run.mins[1]).tolist()],
        "saturated_frac": per_row(saturated),
    }


def train_cell(cell: LMCell, stop_after: int | None = None) -> dict:
    """Train one GPT; returns plain, strict-JSON data: the log, the final validation bits per byte,
    whether and when it diverged and a greedy sample (its time is the sweep runner's to measure).

    ``stop_after`` (not part of the cell): end after that many updates, with the same schedule and
    batches as the whole run, so that its log is the first entries of the whole run's log (for
    checking a cached result without paying for all of it); ``final_bpb`` is then the last logged
    one and ``stopped_after`` says so."""
    import torch

    from attnscale.experiments.training.gpt import GPT, GPTConfig, greedy
    from attnscale.experiments.sweeps.runner import report_steps
    from attnscale.experiments.training.common import seed_everything

    if stop_after is not None:
        check_count("stop_after", stop_after, minimum=0)
    last = cell.steps if stop_after is None else min(stop_after, cell.steps)

    data = seed_everything(cell.seed)
    text = ByteText.from_source(cell.text, cell.valid_fraction, cell.context)
    model = GPT(
        GPTConfig(VOCAB, cell.context, cell.d_model, cell.n_layers, cell.d_k),
        RULE_CHOICES[cell.rule],
        backend=cell.backend,
    )
    opt = _optimizer(torch, model, cell)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, _schedule(cell.steps))
    valid = text.validation(cell.context, cell.eval_windows, cell.batch)
    layers = model.attention_layers()
    loss_fn = torch.nn.functional.cross_entropy

    log, window, diverged = [], [], None
    for step in range(cell.steps + 1):  # `step` updates done; its batch is the next update's
        x, y = text.batch(cell.batch, cell.context, data)
        loss = loss_fn(model(x).flatten(0, 1), y.flatten())
        if not torch.isfinite(loss):
            diverged = {"step": step, "reason": f"training loss is {float(loss.detach())}"}
            break
        window.append(float(loss.detach()))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if step % cell.log_every == 0 or step == cell.steps:
            entry = _log_entry(cell, step, window, layers)
            bpb = _valid_bpb(model, valid)
            entry["valid_bpb"] = finite_or_none(bpb)
            log.append(entry)
            window = []
            if entry["valid_bpb"] is None:
                diverged = {"step": step, "reason": f"validation loss is {bpb}"}
                break
        if step == last:
            break
        if cell.optimizer == "adamw":
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        if (step + 1) % PROGRESS_EVERY == 0:
            report_steps(step + 1, last)
    sample = None if diverged else greedy(model, cell.prompt.encode("utf-8"), cell.sample_bytes)
    return {
        "log": log,
        "init_bpb": log[0]["valid_bpb"] if log else None,
        "final_bpb": None if diverged or not log else log[-1]["valid_bpb"],
        "final_bpb_reason": "diverged" if diverged else None,
        "diverged": diverged,
        "stopped_after": stop_after,
        "sample": None if sample is None else sample.decode("utf-8", errors="replace"),
        **_run_facts(cell, model, layers, text),
    }


def _valid_bpb(model, valid) -> float:
    """The validation loss in bits per byte over the fixed windows ``valid`` [(x, y), ...]."""
    import torch

    with torch.no_grad():
        total = sum(
            float(torch.nn.functional.cross_entropy(model(x).flatten(0, 1), y.flatten(), reduction="sum"))
            for x, y in valid
        )
    return total / sum(y.numel() for _, y in valid) / math.log(2)


def _log_entry(cell: LMCell, step: int, window: list[float], layers) -> dict:
    """A logged step's figures before its validation loss: the rate, the mean training loss since the
    last entry, the gradient norms reaching W_Q and W_K, and each layer's per-head figures."""
    from attnscale.experiments.training.common import grad_norm

    return {
        "step": step,
        "lr": cell.lr * _schedule(cell.steps)(step),
        "train_loss": statistics.fmean(window),
        "grad_wq": [finite_or_none(grad_norm(a.w_q.weight)[0]) for a in layers],
        "grad_wk": [finite_or_none(grad_norm(a.w_k.weight)[0]) for a in layers],
        "heads": [head_figures(a.figures) for a in layers],
    }


def _run_facts(cell: LMCell, model, layers, text) -> dict:
    """What a run's result records of its model and text beside its losses."""
    return {
        "unigram_bpb": text.unigram_bits(),
        "parameters": sum(p.numel() for p in model.parameters()),
        # what backend "auto" chose ("kernel", or "composed" where the kernel does not build), per layer if they differ
        "attention_backend": "+".join(sorted({a.backend_used for a in layers if hasattr(a, "backend_used")})),
        "n_heads": cell.d_model // cell.d_k,
        "train_bytes": len(text.train),
        "valid_bytes": len(text.valid),
    }
