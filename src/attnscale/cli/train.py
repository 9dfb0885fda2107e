"""``attnscale train <experiment>``: run a training sweep (resuming from its cache) and print its tables."""

from __future__ import annotations

import argparse
import math


def register(sub) -> None:
    p = sub.add_parser(
        "train", help="training experiments: scale-vs-dk, logit-growth",
        description="Run a training sweep on the CPU. Finished cells are cached under OUT/cells, so an "
                    "interrupted run resumes where it stopped. Writes OUT/summary.json.",
        epilog="examples:\n  attnscale train scale-vs-dk --quick\n  attnscale train logit-growth --workers 2",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("experiment", choices=("scale-vs-dk", "logit-growth"), help="which experiment")
    p.add_argument("--quick", action="store_true",
                   help="a small version that runs in seconds (same code, fewer cells and steps)")
    p.add_argument("--seeds", type=int, default=None, help="number of seeds (default: the experiment's)")
    p.add_argument("--out", default=None,
                   help="output folder (default: ./attnscale-results/train/<experiment>)")
    p.add_argument("--workers", type=int, default=None,
                   help="worker processes (default: min(2, CPUs)); 1 runs in this process")
    p.set_defaults(run=run_train)


def run_train(args) -> int:
    from pathlib import Path

    from attnscale.cli.progress import Progress
    from attnscale.errors import InputError
    from attnscale.experiments.runner import LocalBackend, SerialBackend, default_workers
    from attnscale.experiments.sweeps import DEFAULT_OUT, make_config, run_experiment

    if args.seeds is not None and args.seeds < 1:
        raise InputError(f"--seeds: expected an integer >= 1, got {args.seeds}")
    workers = default_workers() if args.workers is None else args.workers
    if workers < 1:
        raise InputError(f"--workers: expected an integer >= 1, got {workers}")
    config = make_config(args.experiment, quick=args.quick, seeds=args.seeds)
    out = Path(args.out) if args.out else DEFAULT_OUT / args.experiment
    backend = SerialBackend() if workers == 1 else LocalBackend(workers)
    with Progress() as progress:
        summary = run_experiment(args.experiment, config, out, backend, progress)
    render = _print_scale_vs_dk if args.experiment == "scale-vs-dk" else _print_logit_growth
    render(summary["analysis"])
    print(f"\nwrote {out / 'summary.json'} ({len(summary['cells'])} cells, {summary['wall_s']:.1f} s)")
    return 0


def _fmt(x, spec=".3f") -> str:
    return "-" if x is None or (isinstance(x, float) and not math.isfinite(x)) else format(x, spec)


def _acc(s) -> str:
    a = s["final_accuracy"]
    return f"{_fmt(a['mean'], '.2f')} [{_fmt(a['min'], '.2f')},{_fmt(a['max'], '.2f')}]"


def _reach(s) -> str:
    if not s["reached"]:
        return f"never 0/{s['seeds']}"
    return f"{_fmt(s['steps_to_target']['mean'], '.0f')} {s['reached']}/{s['seeds']}"


def _print_scale_vs_dk(a: dict) -> None:
    print(f"target accuracy {a['target_accuracy']:g}; chance-level ceilings: prior {a['prior_ceiling']:.3f}, "
          f"one attended key {a['single_key_ceiling']:.3f}")
    print("SGD learning rate tuned for 1/sqrt(d_k): "
          + ", ".join(f"d_k={k}: {v:g}" for k, v in a["sgd_lr_tuned_for_reference"].items()))
    print("final accuracy mean [min,max] over seeds; steps to target: mean over seeds that reached it, reached/seeds")
    head = f"{'rule':<17}{'d_k':>4}  {'Adam acc':<17}{'steps':<11}{'SGD@ref acc':<17}{'steps':<11}" \
           f"{'SGD@best lr':>11} {'acc':<17}{'steps':<11}"
    print(head)
    for row in a["table"]:
        adam, ref, best = row["adam"], row["sgd_reference_lr"], row["sgd_best_lr"]
        print(f"{row['rule']:<17}{row['d_k']:>4}  {_acc(adam):<17}{_reach(adam):<11}{_acc(ref):<17}"
              f"{_reach(ref):<11}{best['lr']:>11g} {_acc(best):<17}{_reach(best):<11}")
    rows = a["chain_rule"]["rows"]
    if rows:
        anchor = a["chain_rule"]["anchor"]
        print("\ngradient at initialisation, seed mean: predicted = C*s*RMS||K^T J V|| (W_Q), "
              "C'*s*RMS(||q||*||X^T J V||) (W_K),")
        print(f"C and C' fitted once on {anchor['rule']} d_k={anchor['d_k']}; J rms = RMS ||J diag(cap')||_F")
        print("'s only' = the 1/sqrt(d_k) rule's measured gradient at the same d_k times s/s_ref (blind to saturation)")
        print(f"{'grad':<8}{'rule':<17}{'d_k':>4}{'s':>9}{'logit sd':>9}{'max p':>7}{'J rms':>7}"
              f"{'s only':>10}{'predicted':>11}{'measured':>11}{'ratio':>7}")
        for r in rows:
            print(f"{r['gradient']:<8}{r['rule']:<17}{r['d_k']:>4}{r['factor']:>9.4g}{r['logit_std']:>9.3g}"
                  f"{r['max_weight_mean']:>7.3f}{r['effective_jacobian_rms']:>7.3f}{r['scale_only']:>10.4g}"
                  f"{r['predicted']:>11.4g}{r['measured']:>11.4g}{r['ratio']:>7.2f}")


def _print_logit_growth(a: dict) -> None:
    print(f"{'variant':<14}{'lr':>8}{'final loss':>12}{'diverged':>9}{'init loss':>10}"
          f"{'peak max logit':>15}{'final max logit':>16}{'train peak':>12}{'clips':>7}")
    for r in a["table"]:
        print(f"{r['variant']:<14}{r['lr']:>8g}{_fmt(r['final_loss_mean']):>12}{r['diverged']:>9}"
              f"{_fmt(r['init_loss']):>10}{_fmt(r['max_logit_peak_mean'], '.4g'):>15}"
              f"{_fmt(r['max_logit_final_mean'], '.4g'):>16}{_fmt(r['max_logit_train_peak_mean'], '.4g'):>12}"
              f"{_fmt(r['clipped_heads_mean'], '.0f'):>7}")
    for name, s in a["lr_sensitivity"].items():
        print(f"LR sensitivity {name}: {s['mean']:.4f} (per seed: {', '.join(f'{v:.4f}' for v in s['per_seed'])})")
    g = a.get("guard")
    if g:
        print(f"QK-clip at tau {g['tau']:g}: largest training-batch max logit {_fmt(g['train_peak'], '.4g')} "
              f"({_fmt(g['train_peak_over_tau'], '.3g')} x tau; measured before that step's clip), "
              f"without the guard {_fmt(g['baseline_train_peak'], '.4g')}")
