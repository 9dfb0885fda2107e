"""``attnscale train <experiment>``: run a training sweep (resuming from its cache), write its result
``train/<experiment>`` into the results folder and print its tables."""

from __future__ import annotations

import math

from attnscale.cli.options import add_command, add_results_option, results_root
from attnscale.cli.output import (
    add_json_option,
    add_quiet_option,
    check_json_target,
    check_out_folder,
    emit_json,
    json_to_stdout,
)


def register(sub) -> None:
    from attnscale.experiments.sweeps.ray_backend import DEFAULT_CONNECT_TIMEOUT_S

    p = add_command(
        sub,
        "train",
        help=f"training experiments: {', '.join(PRINTERS)}",
        description="Run a training sweep on the CPU. Finished cells are cached under "
        "DIR/train/<experiment>/cells, so an interrupted run resumes where it stopped. Writes the result "
        "DIR/train/<experiment>/result.json (quick.json for --quick), which the report reads.",
        examples=[
            "attnscale train scale-vs-dk --quick",
            "attnscale train logit-growth --workers 2",
            "attnscale train lm --cells-from saved/train/lm/result.json   rebuilt from an earlier result's cells",
        ],
    )
    p.add_argument("experiment", choices=tuple(PRINTERS), help="which experiment")
    p.add_argument(
        "--quick", action="store_true", help="a small version that runs in seconds (same code, fewer cells and steps)"
    )
    p.add_argument("--seeds", type=int, default=None, help="number of seeds (default: the experiment's)")
    add_results_option(p, "results folder; writes DIR/train/<experiment>/result.json (quick.json for --quick)")
    p.add_argument(
        "--cells-from",
        default=None,
        metavar="FILE",
        help="an earlier result of this experiment (result.json or .json.gz): its cells whose configuration "
        "equals a planned cell are taken as computed, times included, the others computed; rebuilds "
        "a result after an analysis change without retraining",
    )
    add_json_option(p, "the experiment's result")
    add_quiet_option(p)
    p.add_argument(
        "--workers", type=int, default=None, help="worker processes (default: min(2, CPUs)); 1 runs in this process"
    )
    p.add_argument(
        "--backend",
        choices=("local", "ray"),
        default="local",
        help="where cells run: worker processes here (default) or Ray tasks (pip install 'attnscale[cluster]')",
    )
    p.add_argument(
        "--address",
        default=None,
        metavar="auto|HOST:PORT",
        help="with --backend ray: the cluster to join (default: a private local Ray instance of --workers CPUs)",
    )
    p.add_argument(
        "--cpus-per-cell",
        type=int,
        default=1,
        metavar="N",
        help="with --backend ray: CPUs reserved by each cell (default 1)",
    )
    p.add_argument(
        "--connect-timeout",
        type=float,
        default=None,
        metavar="S",
        help="with --address: give up joining the cluster after S seconds, saying what was tried "
        f"(default {DEFAULT_CONNECT_TIMEOUT_S:g})",
    )
    lm = p.add_argument_group("lm only (a small GPT on real text)")
    lm.add_argument(
        "--text",
        metavar="FILE",
        default=None,
        help="train on this UTF-8 text file instead of the standard library's documentation",
    )
    lm.add_argument("--steps", type=int, default=None, help="training steps per run")
    lm.add_argument("--adamw-lrs", default=None, metavar="LR,LR,...", help="the AdamW learning-rate grid")
    lm.add_argument("--sgd-lrs", default=None, metavar="LR,LR,...", help="the SGD learning-rate grid")
    lm.add_argument("--rules", default=None, metavar="RULE,RULE,...", help="scale rules (inverse_sqrt_dk among them)")
    lm.add_argument("--d-ks", default=None, metavar="D,D,...", help="head sizes d_k, each dividing --d-model")
    lm.add_argument("--d-model", type=int, default=None, help="model width")
    lm.add_argument("--context", type=int, default=None, help="tokens (bytes) per sequence")
    p.set_defaults(run=run_train)


def _lm_overrides(args) -> dict:
    """The lm config fields the options set; refused for the other experiments."""
    from attnscale.errors import InputError

    def numbers(option: str, text: str, kind):
        try:
            return tuple(kind(x) for x in text.split(",") if x.strip())
        except ValueError:
            raise InputError(f"{option}: expected a comma-separated list of numbers, got {text!r}") from None

    given = {
        "text": args.text,
        "steps": args.steps,
        "d_model": args.d_model,
        "context": args.context,
        "adamw_lrs": None if args.adamw_lrs is None else numbers("--adamw-lrs", args.adamw_lrs, float),
        "sgd_lrs": None if args.sgd_lrs is None else numbers("--sgd-lrs", args.sgd_lrs, float),
        "rules": None if args.rules is None else tuple(r.strip() for r in args.rules.split(",") if r.strip()),
        "d_ks": None if args.d_ks is None else numbers("--d-ks", args.d_ks, int),
    }
    given = {k: v for k, v in given.items() if v is not None}
    if given and args.experiment != "lm":
        raise InputError(f"--{next(iter(given)).replace('_', '-')}: only the lm experiment takes this option")
    if "text" in given:
        from attnscale.experiments.training.text_data import check_text_file

        given["text"] = str(check_text_file(given["text"]).resolve())
    return given


def run_train(args) -> int:
    import dataclasses

    from attnscale.cli.kernel import prepare_kernel
    from attnscale.cli.progress import Progress
    from attnscale.errors import check_count
    from attnscale.experiments.sweeps.runner import default_workers
    from attnscale.experiments.training.registry import EXPERIMENTS, make_config, run_experiment

    if args.seeds is not None:
        check_count("--seeds", args.seeds)
    workers = check_count("--workers", default_workers() if args.workers is None else args.workers)
    check_json_target(args)
    root = check_out_folder(results_root(args), "--results", named=args.results is not None)
    config = make_config(args.experiment, quick=args.quick, seeds=args.seeds)
    overrides = _lm_overrides(args)
    if overrides:
        config = dataclasses.replace(config, **overrides)
    cells_from = _cells_from(args)
    backend = _backend(args, workers)
    if EXPERIMENTS[args.experiment].fused_kernel:
        prepare_kernel(quiet=args.quiet)  # here, once: the cells' worker processes then load the cached build
    with Progress(quiet=args.quiet) as progress:
        env = run_experiment(args.experiment, config, root, backend, progress, quick=args.quick, cells_from=cells_from)
    emit_json(args, env)
    if not json_to_stdout(args):
        PRINTERS[args.experiment](env.data["analysis"])
        print("\n" + _cells_time_line(env))
        d = env.data
        taken = f", {d['cells_from']['cells']} of them from --cells-from" if "cells_from" in d else ""
        print(
            f"wrote {env.path} ({len(d['cells'])} cells: {len(d['cells']) - d['cells_cached']} computed, "
            f"{d['cells_cached']} read from the cache{taken}; {d['wall_s']:.1f} s)"
        )
    return 0


def _cells_from(args):
    """The result ``--cells-from`` names, read as a result of this experiment's kind (refused otherwise)."""
    from attnscale import results
    from attnscale.errors import InputError

    if args.cells_from is None:
        return None
    try:
        return results.read(f"train/{args.experiment}", path=args.cells_from)
    except results.ResultError as err:
        raise InputError(f"--cells-from: {err}") from None


def _cells_time_line(env) -> str:
    """What the sweep's cells took, as they record it (:func:`attnscale.results.cell_seconds`)."""
    from attnscale.results import cell_seconds

    t = cell_seconds(env)
    if t is None or not t.timed:
        return "cells' own run time: not recorded (computed by an attnscale that did not time them)"
    cpu = "" if t.cpu_s is None else f"{t.cpu_s:.0f} CPU-s, "
    at_once = "" if t.workers is None else f", {t.workers} at a time"
    return (
        f"cells' own run time: {cpu}{t.wall_s:.0f} s wall in all, {t.wall_s / t.timed:.2g} s per cell on average "
        f"(at most {t.wall_s_max:.2g} s; {t.timed} of {t.cells} cells timed{at_once})"
    )


def _backend(args, workers: int):
    from attnscale.errors import InputError, check_count, check_positive
    from attnscale.experiments.sweeps.runner import LocalBackend, SerialBackend

    if args.backend == "ray":
        from attnscale.errors import require
        from attnscale.experiments.sweeps.ray_backend import DEFAULT_CONNECT_TIMEOUT_S, RayBackend

        require("ray", "cluster")  # before any work: say which extra to install
        check_count("--cpus-per-cell", args.cpus_per_cell)
        if args.connect_timeout is not None and args.address is None:
            raise InputError(
                "--connect-timeout: only with --address (a private local Ray instance is started, not joined)"
            )
        timeout = DEFAULT_CONNECT_TIMEOUT_S if args.connect_timeout is None else args.connect_timeout
        backend = RayBackend(
            address=args.address,
            num_cpus=None if args.address else workers,
            cpus_per_cell=args.cpus_per_cell,
            connect_timeout_s=check_positive("--connect-timeout", timeout),
        )
        if args.address is not None:
            backend.connect()  # a wrong address is told before the sweep (and its progress) starts
        return backend
    if args.address is not None:
        raise InputError(f"--address: only with --backend ray, got --address {args.address!r} with --backend local")
    if args.connect_timeout is not None:
        raise InputError("--connect-timeout: only with --backend ray --address")
    return SerialBackend() if workers == 1 else LocalBackend(workers)


def _fmt(x, spec=".3f") -> str:
    return "-" if x is None or (isinstance(x, float) and not math.isfinite(x)) else format(x, spec)


def _acc(s) -> str:
    a = s["final_accuracy"]
    div = f" div{s['diverged']}" if s["diverged"] else ""
    return f"{_fmt(a['mean'], '.2f')} [{_fmt(a['min'], '.2f')},{_fmt(a['max'], '.2f')}]{div}"


def _reach(s) -> str:
    if not s["reached"]:
        return f"never 0/{s['seeds']}"
    return f"{_fmt(s['steps_to_target']['mean'], '.0f')} {s['reached']}/{s['seeds']}"


def _verdict(s) -> str:
    ratio = f" x{s['steps_ratio']:.2g}" if s["verdict"] == "slower" and s["steps_ratio"] is not None else ""
    return f"{s['verdict']}{ratio} {s['seeds_agreeing']}/{s['seeds']}" if s["verdict"] else "-"


def _print_scale_vs_dk(a: dict) -> None:
    print(
        f"target accuracy {a['target_accuracy']:g}; chance-level ceilings: prior {a['prior_ceiling']:.3f}, "
        f"one attended key {a['single_key_ceiling']:.3f}"
    )
    grid = ", ".join(f"{lr:g}" for lr in a["setup"]["sgd_lrs"])
    print(
        f"SGD learning rate tuned for 1/sqrt(d_k) on the grid {grid}: "
        + ", ".join(
            f"d_k={t['d_k']}: {t['lr']:g}" + (f" (at the grid's {t['edge']} edge)" if t["edge"] else "")
            for t in a["sgd_tuning"]
        )
    )
    print("final accuracy mean [min,max] over seeds; steps to target: mean over seeds that reached it, reached/seeds;")
    print(
        f"verdict against 1/sqrt(d_k) on the same seeds: learns (within {a['setup']['like_reference_steps']:g}x its "
        f"steps), slower, fails, diverges; seeds agreeing"
    )
    print(
        f"{'rule':<17}{'d_k':>4}  {'Adam acc':<17}{'steps':<11}{'verdict':<18}{'SGD@tuned acc':<17}{'steps':<11}"
        f"{'verdict':<18}{'own lr':>7} {'acc':<17}{'steps':<11}"
    )
    for row in a["table"]:
        adam, ref, best = row["adam"], row["sgd_reference_lr"], row["sgd_best_lr"]
        edge = {"low": "<", "high": ">"}.get(best.get("edge"), "")
        print(
            f"{row['rule']:<17}{row['d_k']:>4}  {_acc(adam):<17}{_reach(adam):<11}{_verdict(adam):<18}"
            f"{_acc(ref):<17}{_reach(ref):<11}{_verdict(ref):<18}{edge + format(best['lr'], 'g'):>7} "
            f"{_acc(best):<17}{_reach(best):<11}"
        )
    rows = a["chain_rule"]["rows"]
    if rows:
        anchor = a["chain_rule"]["anchor"]
        print(
            "\ngradient at initialisation, seed mean: predicted = C*s*RMS||K^T J V|| (W_Q), "
            "C'*s*RMS(||q||*||X^T J V||) (W_K),"
        )
        print(f"C and C' fitted once on {anchor['rule']} d_k={anchor['d_k']}; J rms = RMS ||J diag(cap')||_F")
        print("'s only' = the 1/sqrt(d_k) rule's measured gradient at the same d_k times s/s_ref (blind to saturation)")
        print(
            f"{'grad':<8}{'rule':<17}{'d_k':>4}{'s':>9}{'logit sd':>9}{'max p':>7}{'J rms':>7}"
            f"{'s only':>10}{'predicted':>11}{'measured':>11}{'ratio':>7}"
        )
        for r in rows:
            print(
                f"{r['gradient']:<8}{r['rule']:<17}{r['d_k']:>4}{_fmt(r['factor'], '.4g'):>9}"
                f"{_fmt(r['logit_std'], '.3g'):>9}{_fmt(r['max_weight_mean']):>7}{_fmt(r['effective_jacobian_rms']):>7}"
                f"{_fmt(r['scale_only'], '.4g'):>10}{_fmt(r['predicted'], '.4g'):>11}{_fmt(r['measured'], '.4g'):>11}"
                f"{_fmt(r['ratio'], '.2f'):>7}"
            )


def _print_logit_growth(a: dict) -> None:
    print(
        f"{'variant':<14}{'lr':>8}{'final loss':>12}{'diverged':>9}{'init loss':>10}"
        f"{'peak max logit':>15}{'final max logit':>16}{'train peak':>12}{'clips':>7}"
    )
    for r in a["table"]:
        print(
            f"{r['variant']:<14}{r['lr']:>8g}{_fmt(r['final_loss_mean']):>12}{r['diverged']:>9}"
            f"{_fmt(r['init_loss']):>10}{_fmt(r['max_logit_peak_mean'], '.4g'):>15}"
            f"{_fmt(r['max_logit_final_mean'], '.4g'):>16}{_fmt(r['max_logit_train_peak_mean'], '.4g'):>12}"
            f"{_fmt(r['clipped_heads_mean'], '.0f'):>7}"
        )
    for name, s in a["lr_sensitivity"].items():
        print(f"LR sensitivity {name}: {s['mean']:.4f} (per seed: {', '.join(f'{v:.4f}' for v in s['per_seed'])})")
    g = a.get("guard")
    if g:
        print(
            f"QK-clip at tau {g['tau']:g}: largest training-batch max logit {_fmt(g['train_peak'], '.4g')} "
            f"({_fmt(g['train_peak_over_tau'], '.3g')} x tau; measured before that step's clip), "
            f"without the guard {_fmt(g['baseline_train_peak'], '.4g')}"
        )


def _print_lm(a: dict) -> None:
    m = a["model"]
    print(f"GPT: width {m['d_model']}, {m['n_layers']} layers, context {m['context']}, {m['parameters']:,} parameters")
    print(
        "baselines on the validation bytes scored ("
        + a["baselines"]["smoothing"]
        + "): "
        + ", ".join(f"{r['name']} {r['bpb']:.3f}" for r in a["baselines"]["rows"])
        + " bits/byte"
    )
    print(
        "1/sqrt(d_k) at its best AdamW rate ends at "
        + ", ".join(
            f"d_k={d}: {_fmt(v)} (below {a['reference_final']['beats'][d] or 'no baseline'})"
            for d, v in a["reference_final"]["bpb"].items()
        )
    )
    for o in ("adamw", "sgd"):
        interior = a["reference_best_interior"][o]
        print(
            f"{o} rate best for 1/sqrt(d_k): "
            + ", ".join(
                f"d_k={k}: {v:g}{'' if interior[k] else ' (at the edge of the grid)'}"
                for k, v in a["reference_best_lr"][o].items()
            )
        )
    print(
        f"verdict vs 1/sqrt(d_k) at its best rate, same seed: steps to {a['target_factor']:g}x its final loss, ratio "
        f"<= {1 / a['like_ratio']:.2g} faster, <= {a['like_ratio']:g} learns; median ratio [min,max] over seeds; "
        f"halfway: the verdict on the logs up to step {a['halfway_step']}"
    )
    print(
        f"{'rule':<17}{'d_k':>4}  {'optimiser':<15}{'lr':>7}  {'final bpb':<10}{'below':<9}{'verdict':<10}{'seeds':<7}"
        f"{'ratio':<18}{'halfway':<9}"
    )
    for v in a["verdicts"]:
        s = v["steps_ratio_spread"]
        ratio = "-" if v["steps_ratio"] is None else f"{v['steps_ratio']:.2f} [{s['min']:.2f},{s['max']:.2f}]"
        print(
            f"{v['rule']:<17}{v['d_k']:>4}  {v['optimiser']:<15}{v['lr']:>7g}  {_fmt(v['final_bpb']['mean']):<10}"
            f"{v['beats'] or '-':<9}{v['verdict'] or '-':<10}{str(v['seeds_agreeing']) + '/' + str(v['seeds']):<7}"
            f"{ratio:<18}{v['verdict_halfway'] or '-':<9}"
        )
    print(
        "LR sensitivity (Wortsman et al. 2023), bits/byte: "
        + "; ".join(
            f"{s['optimiser']} {s['rule']} d_k={s['d_k']}: {_fmt(s['lr_sensitivity'])}" for s in a["lr_sensitivity"]
        )
    )


# The experiments this command runs, each with its table printer: those of
# attnscale.experiments.training.registry.EXPERIMENTS (a test holds the two equal; not imported here, so that the
# CLI starts without loading the experiments).
PRINTERS = {"scale-vs-dk": _print_scale_vs_dk, "logit-growth": _print_logit_growth, "lm": _print_lm}
