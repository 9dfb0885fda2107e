"""One cell of scale-vs-dk trained: :func:`train_cell` (the logged metrics, the chain-rule factors at
initialisation and the final evaluation)."""

from __future__ import annotations

from attnscale.experiments.training.scale_vs_dk.chain_rule import init_chain_rule
from attnscale.experiments.training.scale_vs_dk.config import RULE_CHOICES, ScaleCell
from attnscale.results import finite_or_none

__all__ = ["train_cell"]


def train_cell(cell: ScaleCell, stop_after: int | None = None) -> dict:
    """Train one cell; returns plain data: final metrics, per-step loss/accuracy, logged metrics (every
    ``log_every`` steps: loss, accuracy, gradient norms, logit standard deviation, saturated fraction),
    and the chain-rule factors at initialisation (its time is the sweep runner's to measure).

    A non-finite loss stops the cell: ``diverged`` is True, ``diverged_at`` its step, and the final
    figures are None (strict JSON: the reason is ``diverged``).

    ``stop_after``: end after that many updates, without the final evaluation (its figures None): the
    per-step lists are then exactly the full run's first entries (what the reproducibility test
    recomputes of a shipped result in seconds)."""
    import torch

    from attnscale.experiments.training.common import make_optimizer, seed_everything

    data = seed_everything(cell.seed)
    rule = RULE_CHOICES[cell.rule]
    model = _model(cell, rule)
    attn = model.attn
    opt = make_optimizer(cell.optimizer, model.parameters(), cell.lr)
    losses, correct, log = [], [], []
    init = None
    diverged_at = None
    for step in range(cell.steps + 1):
        tokens, labels = cell.task.sample(cell.batch, data)
        attn.keep_record = step % cell.log_every == 0
        logits = model(tokens)
        loss = torch.nn.functional.cross_entropy(logits, labels)
        if not torch.isfinite(loss):
            diverged_at = step
            break
        losses.append(float(f"{float(loss.detach()):.6g}"))  # 6 digits: the summary stays small
        correct.append(float((logits.argmax(-1) == labels).double().mean()))
        if step == cell.steps:
            break  # the last batch is measured, not trained on
        opt.zero_grad(set_to_none=False)
        loss.backward()
        if attn.keep_record:
            log.append(_log_entry(step, cell, attn, losses, correct))
            if step == 0:
                init = _at_init(attn, rule, log[-1])
        opt.step()
        if stop_after is not None and step + 1 >= stop_after:
            break
    stopped = stop_after is not None and stop_after < cell.steps
    final = _final_eval(model, cell) if diverged_at is None and not stopped else {"accuracy": None, "loss": None}
    if diverged_at is None and not stopped and final["loss"] is None:  # finite while training, not held out
        diverged_at = cell.steps
    return {
        "final_accuracy": final["accuracy"],
        "final_loss": final["loss"],
        "diverged": diverged_at is not None,
        "diverged_at": diverged_at,
        "grad_zero_ever": any(e["grad_zero"] for e in log),
        "init": init,
        "loss": losses,
        "accuracy": correct,
        "log": log,
    }


def _model(cell: ScaleCell, rule):
    """The cell's readout transformer, its weights drawn from the generator :func:`seed_everything` seeded."""
    from attnscale.experiments.training.readout import ReadoutTransformer

    # Same weights for every rule at a given (d_k, seed): the rule adds at most a scalar gain, which
    # draws no random numbers.
    return ReadoutTransformer(
        cell.task.vocab,
        cell.task.seq_len,
        cell.task.n_classes,
        rule,
        cell.d_k,
        d_model=cell.d_model,
        n_heads=cell.n_heads,
    )


def _log_entry(step: int, cell: ScaleCell, attn, losses: list[float], correct: list[float]) -> dict:
    """A logged step, after its backward pass: loss and accuracy over the last ``log_every`` batches,
    the gradient norms of W_Q and W_K, and the health of the attention rows the layer recorded."""
    from attnscale.experiments.training.common import attention_metrics, grad_norm

    rows_z = attn.record.logits  # (B, H, 1, S): the query's row
    gq, zero_q = grad_norm(attn.w_q.weight)
    gk, zero_k = grad_norm(attn.w_k.weight)
    window = slice(max(0, step - cell.log_every + 1), step + 1)
    entry = {
        "step": step,
        "loss": _mean(losses[window]),
        "accuracy": _mean(correct[window]),
        "grad_wq": finite_or_none(gq),
        "grad_wk": finite_or_none(gk),
        "grad_zero": zero_q and zero_k,
    }
    entry.update(attention_metrics(rows_z))
    return entry


def _at_init(attn, rule, entry: dict) -> dict:
    """Step 0's gradient norms of W_Q and W_K (from its log ``entry``) and its chain-rule factors (a
    non-finite one None)."""
    init = {
        "grad_wq": entry["grad_wq"],
        "grad_wk": entry["grad_wk"],
        **init_chain_rule(attn.record, rule, attn.logits.factor()),
    }
    return {k: finite_or_none(v) for k, v in init.items()}


def _final_eval(model, cell: ScaleCell) -> dict[str, float]:
    import torch

    gen = torch.Generator().manual_seed(20_000 + cell.seed)  # a held-out stream, same for every rule
    tokens, labels = cell.task.sample(cell.final_eval, gen)
    with torch.no_grad():
        logits = model(tokens)
    loss = finite_or_none(torch.nn.functional.cross_entropy(logits, labels))
    accuracy = float((logits.argmax(-1) == labels).double().mean())
    return {"accuracy": accuracy if loss is not None else None, "loss": loss}


def _mean(xs) -> float:
    return float(sum(xs) / len(xs))
