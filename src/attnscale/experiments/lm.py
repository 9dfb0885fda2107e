"""Experiment ``lm``: a real small GPT on real English text, with each scale rule. Does unscaled
attention stop learning?

The model is :class:`~attnscale.experiments.gpt.GPT` (nanoGPT's shape: pre-LN blocks of causal
multi-head attention and MLP, tied head), width ``d_model`` fixed and heads = d_model ÷ d_k, on the
bytes of :mod:`~attnscale.experiments.text_data` (the standard library's documentation unless
``text`` names a file). Every attention call goes through the project's attention with the rule
(:meth:`attnscale.torch.scales.ScaledLogits.attend`), so the per-head figures logged below are those
of the attention the model trains with. For a given (d_k, seed) every rule starts from the same
weights (the rules draw no random numbers) and sees the same batches.

Optimisers: AdamW (β 0.9/0.95, weight decay 0.1 on matrices, clipping at norm 1, nanoGPT's) at one
rate tuned for 1/√d_k; plain SGD (no momentum, no decay, no clipping, so that it can diverge) over a
grid of rates. Both: linear warm-up over the first tenth, then cosine decay to a tenth of the rate.

Logged every ``log_every`` steps (the weights after that many updates): the training loss, the
validation loss in bits per byte on fixed windows, the gradient norms reaching W_Q and W_K per layer,
and per layer and head the mean and minimum row entropy, the largest |logit| and the fraction of
saturated rows (largest weight > :data:`~attnscale.experiments.training.SATURATED_WEIGHT`), over the
rows of a training batch that attend at least two keys (causal row 0 sees only itself). A NaN or inf
loss ends the run as diverged, recorded with its step.

Verdict per rule × d_k × optimiser (:func:`analyse`), per seed against the 1/√d_k run of the same
seed: *diverges*; *fails* (never within :data:`TARGET_FACTOR` × the reference's final validation
loss); else the ratio of the steps each needs to get there: *learns* (≤ :data:`LIKE_RATIO`) or
*slower*. The verdict shown is the seeds' most common one (a tie goes to the worse), with how many
seeds agree. SGD is judged twice: at the rate best for 1/√d_k (``"sgd"``) and at the rule's own best
(``"sgd-own-best"``); the best rate of 1/√d_k must be inside the grid, which the analysis checks.
"""

from __future__ import annotations

import hashlib
import math
import statistics
import time
from dataclasses import dataclass
from typing import ClassVar

from attnscale.errors import InputError, check_choice, check_count, check_positive
from attnscale.experiments import scale_vs_dk
from attnscale.experiments.cells import RuleRun, rule_grid, shared_settings
from attnscale.experiments.text_data import DEFAULT_TEXT, VOCAB, ByteText
from attnscale.results import finite_or_none
from attnscale.scales import RULES, ScaleRule
from attnscale.torch.attention import BACKENDS

__all__ = ["KIND", "RULE_CHOICES", "REFERENCE_RULE", "LMCell", "LMConfig", "train_cell", "analyse",
           "TARGET_FACTOR", "LIKE_RATIO", "VERDICTS"]

KIND = "lm"

#: The rules of the sweep, by the names used in cells and tables (soft-cap on unscaled as in scale-vs-dk).
RULE_CHOICES: dict[str, ScaleRule] = {**scale_vs_dk.RULE_CHOICES, "logn": RULES["logn"]}
REFERENCE_RULE = "inverse_sqrt_dk"
OPTIMIZERS = ("adamw", "sgd")
TARGET_FACTOR = 1.1      # a run "gets there" at TARGET_FACTOR × the reference run's final validation loss
LIKE_RATIO = 1.25        # steps to get there ≤ LIKE_RATIO × the reference's: "learns" like 1/√d_k
VERDICTS = ("learns", "slower", "fails", "diverges")   # best to worst
PROMPT = "The return statement"
#: attnscale.torch.attention's backend for every rule but soft-cap (always "chunked"): "auto", the
#: fused CPU kernel (forward and backward) where it builds, else the composed path.
BACKEND = "auto"


def text_digest(source: str) -> str:
    """sha256 of the text's bytes: in every cell, so that an edited --text file misses the cache."""
    from attnscale.experiments.text_data import load_text

    return hashlib.sha256(load_text(source)).hexdigest()[:16]


def _check_d_k(d_k, d_model: int) -> None:
    check_count("d_k", d_k)
    if d_model % d_k:
        raise InputError(f"d_k: expected a divisor of d_model={d_model}, got {d_k}")


@dataclass(frozen=True, kw_only=True)
class LMRun:
    """What every run of the sweep shares: the model's width and depth, the batches, the schedule's
    length, the text and the attention backend. The sweep (:class:`LMConfig`) and each run
    (:class:`LMCell`) extend it, so each setting and its default is declared once."""

    steps: int = 72
    batch: int = 16
    context: int = 64
    d_model: int = 256
    n_layers: int = 2
    log_every: int = 8
    eval_windows: int = 32      # fixed validation windows of `context` tokens
    text: str = DEFAULT_TEXT
    backend: str = BACKEND

    def __post_init__(self):
        for name in ("steps", "batch", "context", "d_model", "n_layers", "log_every", "eval_windows"):
            check_count(name, getattr(self, name))
        check_choice("backend", self.backend, BACKENDS)


@dataclass(frozen=True)
class LMCell(RuleRun, LMRun):
    """One training run (rule, d_k, optimizer "adamw" or "sgd", peak learning rate, seed, then the
    shared settings). Its hash is its cache key: every field that changes the numbers is here."""

    RULES: ClassVar = RULE_CHOICES
    OPTIMIZERS: ClassVar = OPTIMIZERS

    text_sha256: str = ""
    valid_fraction: float = 0.1
    prompt: str = PROMPT
    sample_bytes: int = 100
    code_version: int = 1       # bump when training code changes: old cached results then miss

    def __post_init__(self):
        super().__post_init__()
        self.check_run()
        _check_d_k(self.d_k, self.d_model)


@dataclass(frozen=True)
class LMConfig(LMRun):
    """The sweep: rules × d_k × (AdamW at one rate + SGD over ``sgd_lrs``) × seeds, by default
    6 × 3 × (1 + 4) × 3 = 270 cells of 72 steps.

    Sized for the issue's budget, the full sweep within 60 minutes on 2 workers. Measured on the
    2-core development machine under a load of 7–15 (so in CPU seconds, which contention inflates
    rather than deflates): 100-step cells cost 30.6 CPU-s at d_k 16 (34.6 with soft-cap), 23.3 at
    d_k 64, 21.3 at d_k 256; 80-step cells 27.2 (unscaled, d_k 16, SGD) and 22.3 (log-n, d_k 256,
    AdamW). At 72 steps that is about 21.5 on average: 270 cells ≈ 5,800 CPU-s ≈ 49 minutes on 2
    workers, before the SGD runs that diverge early. ``--quick``: 48 cells, 196 CPU-s measured, so
    about 100 s on 2 workers.

    The rates come from pilots at d_k 64, seed 0, 120 steps, validation bits per byte. AdamW: 3.649
    at 3e-4, 3.393 at 1e-3, 3.420 at 3e-3. SGD: 4.276 at 0.03, 4.298 at 0.1, 4.70 at 0.3 (150 steps),
    8.00 at 1 (collapsed to uniform), diverged at 3 and 10; the grid brackets that optimum, which the
    analysis checks at every d_k (``reference_best_interior``)."""

    rules: tuple[str, ...] = tuple(RULE_CHOICES)
    d_ks: tuple[int, ...] = (16, 64, 256)
    seeds: int = 3
    adamw_lr: float = 1e-3
    sgd_lrs: tuple[float, ...] = (0.01, 0.03, 0.1, 0.3)

    def __post_init__(self):
        super().__post_init__()
        unknown = [r for r in self.rules if r not in RULE_CHOICES]
        if unknown:
            raise InputError(f"rules: unknown rule(s) {unknown}; expected names among {sorted(RULE_CHOICES)}")
        if REFERENCE_RULE not in self.rules:
            raise InputError(f"rules: expected {REFERENCE_RULE!r} among them (every verdict is against it), "
                             f"got {list(self.rules)}")
        check_count("seeds", self.seeds)
        check_positive("lr", self.adamw_lr)      # the CLI's --lr
        if not self.sgd_lrs:
            raise InputError("sgd_lrs: expected at least one SGD learning rate, got none")
        for lr in self.sgd_lrs:
            check_positive("sgd_lrs", lr)
        if not self.d_ks:
            raise InputError("d_ks: expected at least one d_k, got none")
        for d_k in self.d_ks:
            _check_d_k(d_k, self.d_model)
        ByteText.from_source(self.text, context=self.context)   # the text exists and holds one window each side

    @classmethod
    def quick(cls, seeds: int = 1) -> "LMConfig":
        """Under 2 minutes on 2 workers: every rule, two d_k, three SGD rates, few steps."""
        return cls(d_ks=(16, 256), seeds=seeds, sgd_lrs=(0.03, 0.1, 0.3), steps=20, batch=8, log_every=5,
                   eval_windows=16)

    def cells(self) -> list[LMCell]:
        return rule_grid(LMCell, self.rules, self.d_ks, self.seeds, ("adamw", self.adamw_lr), self.sgd_lrs,
                         **shared_settings(self, LMRun), text_sha256=text_digest(self.text))


# --- one cell --------------------------------------------------------------------------------------

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
    others = [p for p in model.parameters() if p.dim() < 2]      # LayerNorm gains, QK-norm's gain
    return torch.optim.AdamW([{"params": matrices, "weight_decay": 0.1}, {"params": others, "weight_decay": 0.0}],
                             lr=cell.lr, betas=(0.9, 0.95))


def head_figures(figures: dict) -> dict[str, list]:
    """Per head of one layer, over rows that attend at least two keys (causal row 0 attends only
    itself, so is always saturated, with entropy 0): the mean and minimum row entropy (nats), the
    largest |logit|, and the fraction of rows whose largest weight e^(max logit − lse) exceeds
    SATURATED_WEIGHT. figures: the layer's (B, H, L) tensors. NaN figures become None."""
    import torch

    from attnscale.experiments.training import SATURATED_WEIGHT

    H = figures["entropy"].shape[1]
    per_head = lambda t: t[:, :, 1:].double().transpose(0, 1).reshape(H, -1)   # noqa: E731  (H, rows)
    entropy, hi, lo, lse = (per_head(figures[k]) for k in ("entropy", "max_logit", "min_logit", "lse"))
    top_weight = torch.exp(hi - lse)
    as_list = lambda t: [finite_or_none(v) for v in t.tolist()]   # noqa: E731
    return {
        "entropy_mean": as_list(entropy.mean(1)),
        "entropy_min": as_list(entropy.amin(1)),
        "max_abs_logit": as_list(torch.maximum(hi.abs(), lo.abs()).amax(1)),
        "saturated_frac": as_list(torch.where(torch.isnan(top_weight), math.nan,
                                              (top_weight > SATURATED_WEIGHT).double()).mean(1)),
    }


def train_cell(cell: LMCell) -> dict:
    """Train one GPT; returns plain, strict-JSON data: the log, the final validation bits per byte,
    whether and when it diverged, a greedy sample, and its cost."""
    import torch

    from attnscale.experiments.gpt import GPT, GPTShape, greedy
    from attnscale.experiments.training import grad_norm, seed_everything

    wall0, cpu0 = time.monotonic(), time.process_time()
    data = seed_everything(cell.seed)
    text = ByteText.from_source(cell.text, cell.valid_fraction, cell.context)
    model = GPT(GPTShape(VOCAB, cell.context, cell.d_model, cell.n_layers, cell.d_k), RULE_CHOICES[cell.rule],
                backend=cell.backend)
    opt = _optimizer(torch, model, cell)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, _schedule(cell.steps))
    valid = text.validation(cell.context, cell.eval_windows, cell.batch)
    layers = model.attention_layers()
    loss_fn = torch.nn.functional.cross_entropy

    def valid_bpb() -> float:
        with torch.no_grad():
            total = sum(float(loss_fn(model(x).flatten(0, 1), y.flatten(), reduction="sum")) for x, y in valid)
        return total / sum(y.numel() for _, y in valid) / math.log(2)

    log, window, diverged = [], [], None
    for step in range(cell.steps + 1):          # `step` updates done; its batch is the next update's
        x, y = text.batch(cell.batch, cell.context, data)
        loss = loss_fn(model(x).flatten(0, 1), y.flatten())
        if not torch.isfinite(loss):
            diverged = {"step": step, "reason": f"training loss is {float(loss.detach())}"}
            break
        window.append(float(loss.detach()))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if step % cell.log_every == 0 or step == cell.steps:
            entry = {"step": step, "lr": cell.lr * _schedule(cell.steps)(step),
                     "train_loss": statistics.fmean(window),
                     "grad_wq": [finite_or_none(grad_norm(a.w_q.weight)[0]) for a in layers],
                     "grad_wk": [finite_or_none(grad_norm(a.w_k.weight)[0]) for a in layers],
                     "heads": [head_figures(a.figures) for a in layers]}
            bpb = valid_bpb()
            entry["valid_bpb"] = finite_or_none(bpb)
            log.append(entry)
            window = []
            if entry["valid_bpb"] is None:
                diverged = {"step": step, "reason": f"validation loss is {bpb}"}
                break
        if step == cell.steps:
            break
        if cell.optimizer == "adamw":
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
    sample = None if diverged else greedy(model, cell.prompt.encode("utf-8"), cell.sample_bytes)
    return {
        "log": log,
        "init_bpb": log[0]["valid_bpb"] if log else None,
        "final_bpb": None if diverged or not log else log[-1]["valid_bpb"],
        "final_bpb_reason": "diverged" if diverged else None,
        "diverged": diverged,
        "sample": None if sample is None else sample.decode("utf-8", errors="replace"),
        "unigram_bpb": text.unigram_bits(),
        "parameters": sum(p.numel() for p in model.parameters()),
        "n_heads": cell.d_model // cell.d_k,
        "train_bytes": len(text.train),
        "valid_bytes": len(text.valid),
        "cpu_s": time.process_time() - cpu0,
        "wall_s": time.monotonic() - wall0,
    }


# --- analysis --------------------------------------------------------------------------------------

def _final_or_init(result: dict) -> float:
    """The final validation loss, a diverged run counting as its loss at initialisation (as the LR
    sensitivity of Wortsman et al. 2023 does), so that a rate where runs diverge is never "best"."""
    if result["final_bpb"] is not None:
        return result["final_bpb"]
    return result["init_bpb"] if result["init_bpb"] is not None else math.inf


def _steps_to(log: list[dict], target: float) -> int | None:
    """The first logged step whose validation loss is at most ``target``; None if none is."""
    return next((e["step"] for e in log if e["valid_bpb"] is not None and e["valid_bpb"] <= target), None)


def judge(run: dict, reference: dict) -> tuple[str | None, float | None]:
    """(verdict, steps ratio) of one run against the 1/√d_k run of the same seed and optimiser; the
    verdict is None when the reference itself diverged (nothing to compare with)."""
    if reference["final_bpb"] is None:
        return None, None
    if run["diverged"]:
        return "diverges", None
    target = TARGET_FACTOR * reference["final_bpb"]
    mine, theirs = _steps_to(run["log"], target), _steps_to(reference["log"], target)
    if mine is None:
        return "fails", None
    ratio = mine / theirs if theirs else (1.0 if mine == 0 else math.inf)
    return ("learns" if ratio <= LIKE_RATIO else "slower"), finite_or_none(ratio)


def _spread(values: list) -> dict:
    finite = [v for v in values if v is not None and math.isfinite(v)]
    if not finite:
        return {"mean": None, "min": None, "max": None, "n": 0}
    return {"mean": statistics.fmean(finite), "min": min(finite), "max": max(finite), "n": len(finite)}


def _verdict(rule: str, d_k: int, optimiser: str, lr: float, runs: dict, refs: dict) -> dict:
    """One row of ``analysis["verdicts"]``: runs and refs map seed -> result."""
    judged = {seed: judge(run, refs[seed]) for seed, run in runs.items() if seed in refs}
    verdicts = [v for v, _ in judged.values() if v is not None]
    if verdicts:
        counts = {v: verdicts.count(v) for v in VERDICTS}
        top = max(counts.values())
        verdict = [v for v in VERDICTS if counts[v] == top][-1]        # a tie goes to the worse verdict
    else:
        verdict, top = None, 0
    ratios = [r for v, r in judged.values() if r is not None]
    return {"rule": rule, "d_k": d_k, "optimiser": optimiser, "lr": lr, "verdict": verdict,
            "verdict_reason": None if verdict else "the 1/√d_k reference diverged on every seed",
            "seeds": len(verdicts), "seeds_agreeing": top,
            "steps_ratio": statistics.median(ratios) if ratios else None,
            "steps_ratio_spread": _spread(ratios),
            "per_seed": [{"seed": s, "verdict": v, "steps_ratio": r} for s, (v, r) in sorted(judged.items())],
            "final_bpb": _spread([run["final_bpb"] for run in runs.values()]),
            "diverged": sum(bool(run["diverged"]) for run in runs.values())}


def _curve(runs: list[dict]) -> dict:
    """Over seeds, per logged step: validation bits per byte (mean, min, max), the largest |logit|
    over layers and heads (mean), and the mean row entropy over layers and heads (mean). A diverged
    seed drops out from its divergence on; ``seeds`` says how many are left at each step."""
    steps = sorted({e["step"] for run in runs for e in run["log"]})
    at = lambda run, s: next((e for e in run["log"] if e["step"] == s), None)   # noqa: E731
    out = {"step": steps, "valid_bpb": {"mean": [], "min": [], "max": []}, "max_abs_logit": [],
           "entropy_mean": [], "saturated_frac": [], "seeds": []}
    for s in steps:
        entries = [e for e in (at(run, s) for run in runs) if e is not None]
        bpb = _spread([e["valid_bpb"] for e in entries])
        for key in ("mean", "min", "max"):
            out["valid_bpb"][key].append(bpb[key])
        flat = lambda e, k: [v for layer in e["heads"] for v in layer[k] if v is not None]   # noqa: E731
        out["max_abs_logit"].append(_spread([max(flat(e, "max_abs_logit"), default=None) for e in entries])["mean"])
        out["entropy_mean"].append(_spread([statistics.fmean(flat(e, "entropy_mean")) if flat(e, "entropy_mean")
                                            else None for e in entries])["mean"])
        out["saturated_frac"].append(_spread([statistics.fmean(flat(e, "saturated_frac")) if flat(e, "saturated_frac")
                                              else None for e in entries])["mean"])
        out["seeds"].append(bpb["n"])
    return out


def analyse(config: LMConfig, cells: list[LMCell], results: list[dict]) -> dict:
    """Everything the chapter and the table show: the SGD grid and its best rates (with the check
    that 1/√d_k's best is inside the grid), the verdicts, the curves, the samples, the cost."""
    rows = list(zip(cells, results))

    def runs(rule, d_k, optimizer, lr) -> dict:
        return {c.seed: r for c, r in rows if (c.rule, c.d_k, c.optimizer, c.lr) == (rule, d_k, optimizer, lr)}

    def mean_final(rule, d_k, lr) -> float:
        return statistics.fmean(_final_or_init(r) for r in runs(rule, d_k, "sgd", lr).values())

    grid = []
    best = {}                                                  # (rule, d_k) -> the SGD rate best for it
    for d_k in config.d_ks:
        for rule in config.rules:
            scores = {lr: mean_final(rule, d_k, lr) for lr in config.sgd_lrs}
            best[rule, d_k] = min(config.sgd_lrs, key=lambda lr: scores[lr])
            for lr in config.sgd_lrs:
                group = runs(rule, d_k, "sgd", lr)
                grid.append({"rule": rule, "d_k": d_k, "lr": lr, "final_bpb": _spread([r["final_bpb"] for r in group.values()]),
                             "score": finite_or_none(scores[lr]), "diverged": sum(bool(r["diverged"]) for r in group.values()),
                             "seeds": len(group)})
    reference_best = {d_k: best[REFERENCE_RULE, d_k] for d_k in config.d_ks}
    lrs = sorted(config.sgd_lrs)
    interior = {d_k: len(lrs) >= 3 and lrs[0] < lr < lrs[-1] for d_k, lr in reference_best.items()}

    verdicts, curves = [], []
    for d_k in config.d_ks:
        ref_adam = runs(REFERENCE_RULE, d_k, "adamw", config.adamw_lr)
        ref_sgd = runs(REFERENCE_RULE, d_k, "sgd", reference_best[d_k])
        for rule in config.rules:
            adam = runs(rule, d_k, "adamw", config.adamw_lr)
            at_ref = runs(rule, d_k, "sgd", reference_best[d_k])
            own = runs(rule, d_k, "sgd", best[rule, d_k])
            verdicts.append(_verdict(rule, d_k, "adamw", config.adamw_lr, adam, ref_adam))
            verdicts.append(_verdict(rule, d_k, "sgd", reference_best[d_k], at_ref, ref_sgd))
            verdicts.append(_verdict(rule, d_k, "sgd-own-best", best[rule, d_k], own, ref_sgd))
            for optimiser, lr, group in (("adamw", config.adamw_lr, adam), ("sgd", reference_best[d_k], at_ref)):
                curves.append({"rule": rule, "d_k": d_k, "optimiser": optimiser, "lr": lr,
                               **_curve([group[s] for s in sorted(group)])})

    first = results[0]
    seed0 = lambda rule, d_k: runs(rule, d_k, "adamw", config.adamw_lr)[0]   # noqa: E731
    samples = [{"rule": rule, "texts": [seed0(rule, d_k)["sample"] for d_k in config.d_ks],
                "final_bpb": [seed0(rule, d_k)["final_bpb"] for d_k in config.d_ks]} for rule in config.rules]
    return {
        "reference_rule": REFERENCE_RULE,
        "target_factor": TARGET_FACTOR,
        "like_ratio": LIKE_RATIO,
        "unigram_bpb": first["unigram_bpb"],
        "init_bpb": _spread([r["init_bpb"] for r in results]),
        "model": {"d_model": config.d_model, "n_layers": config.n_layers, "context": config.context,
                  "parameters": first["parameters"], "heads": {str(d_k): config.d_model // d_k for d_k in config.d_ks}},
        "text": {"source": config.text, "train_bytes": first["train_bytes"], "valid_bytes": first["valid_bytes"]},
        "adamw_lr": config.adamw_lr,
        "sgd": {"lrs": list(config.sgd_lrs), "grid": grid, "reference_best_lr": {str(k): v for k, v in reference_best.items()},
                "reference_best_interior": {str(k): v for k, v in interior.items()},
                "own_best_lr": [{"rule": r, "d_k": d, "lr": lr} for (r, d), lr in best.items()]},
        "verdicts": verdicts,
        "curves": curves,
        "samples": {"prompt": cells[0].prompt, "d_ks": list(config.d_ks), "optimiser": "adamw", "seed": 0,
                    "rows": samples},
        "cost": {"cells": len(results), "cpu_s": sum(r["cpu_s"] for r in results),
                 "cpu_s_per_cell": _spread([r["cpu_s"] for r in results])},
    }
