"""``attnscale train <experiment>``: run a training sweep (resuming from its cache), write its result
``train/<experiment>`` into the results folder and print its tables."""

from __future__ import annotations

from attnscale.cli.options import add_command, add_lang_option, add_results_option, options_named, results_root
from attnscale.cli.output import (
    add_json_option,
    add_quiet_option,
    check_json_target,
    check_out_folder,
    emit_json,
    hold_results,
    json_to_stdout,
)
from attnscale.cli.train_tables import PRINTERS
from attnscale.i18n import N_, _

#: The experiments' configuration fields as their options are typed (errors name the option).
TRAIN_OPTIONS = {
    "steps": "--steps",
    "seeds": "--seeds",
    "d_model": "--d-model",
    "context": "--context",
    "d_k": "--d-ks",
    "d_ks": "--d-ks",
    "adamw_lrs": "--adamw-lrs",
    "sgd_lrs": "--sgd-lrs",
    "rules": "--rules",
}
#: What a run smaller than the experiment's full configuration says before its verdicts: the quick
#: run's words are the page's (report/chapters/training.py), a run made short by --steps or --seeds
#: says the same of itself; then the full run's size and command.
SHORT_RUN = {
    True: N_(
        "Quick sweep ({steps} steps, {seeds} seed(s)): every sentence below describes this short run only, not the full sweep."
    ),
    False: N_(
        "Short sweep ({steps} steps, {seeds} seed(s)): every verdict below describes this short run only, not the full sweep."
    ),
}
FULL_RUN = N_("The full sweep: {steps} steps, {seeds} seed(s), with {command}.")


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
    add_lang_option(p, "the tables and lines")
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
    from attnscale.experiments.training.registry import EXPERIMENTS, kind_of, make_config, run_experiment

    if args.seeds is not None:
        check_count("--seeds", args.seeds)
    workers = check_count("--workers", default_workers() if args.workers is None else args.workers)
    check_json_target(args)
    root = check_out_folder(results_root(args), "--results", named=args.results is not None)
    with options_named(TRAIN_OPTIONS):
        config = make_config(args.experiment, quick=args.quick, seeds=args.seeds)
        overrides = _lm_overrides(args)
        if overrides:
            config = dataclasses.replace(config, **overrides)
    cells_from = _cells_from(args)
    backend = _backend(args, workers)
    if EXPERIMENTS[args.experiment].fused_kernel:
        prepare_kernel(quiet=args.quiet)  # here, once: the cells' worker processes then load the cached build
    # One run per results folder and experiment: a second waits, then reads the first's cells from the cache.
    with hold_results(kind_of(args.experiment), root), Progress(quiet=args.quiet) as progress:
        env = run_experiment(args.experiment, config, root, backend, progress, quick=args.quick, cells_from=cells_from)
    emit_json(args, env)
    if not json_to_stdout(args):
        caveat = short_run_caveat(args.experiment, env.config, _full_size(args.experiment), env.quick)
        if caveat:
            print(caveat + "\n")
        PRINTERS[args.experiment](env.data["analysis"])
        print("\n" + _cells_time_line(env))
        print(_wrote_line(env))
    return 0


def _full_size(experiment: str) -> dict:
    """Steps and seeds of ``experiment``'s full configuration."""
    from attnscale.experiments.training.registry import make_config

    full = make_config(experiment)
    return {"steps": full.steps, "seeds": full.seeds}


def short_run_caveat(experiment: str, run: dict, full: dict, quick: bool) -> str | None:
    """What a run smaller than the full one says around its verdicts, from its own size (``run``: its
    configuration, with ``steps`` and ``seeds``) and the full one's (``full``); None for a run of at
    least the full steps and seeds that is not a quick one."""
    steps, seeds = run["steps"], run["seeds"]
    if not quick and steps >= full["steps"] and seeds >= full["seeds"]:
        return None
    return " ".join(
        (
            _(SHORT_RUN[bool(quick)], steps=steps, seeds=seeds),
            _(FULL_RUN, steps=full["steps"], seeds=full["seeds"], command=f"attnscale train {experiment}"),
        )
    )


def _wrote_line(env) -> str:
    d = env.data
    computed, cached = len(d["cells"]) - d["cells_cached"], d["cells_cached"]
    values = dict(path=env.path, cells=len(d["cells"]), computed=computed, cached=cached, s=f"{d['wall_s']:.1f}")
    if "cells_from" in d:
        return _(
            "wrote {path} ({cells} cells: {computed} computed, {cached} read from the cache, {taken} of them from --cells-from; {s} s)",
            taken=d["cells_from"]["cells"],
            **values,
        )
    return _("wrote {path} ({cells} cells: {computed} computed, {cached} read from the cache; {s} s)", **values)


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
        return _("cells' own run time: not recorded (computed by an attnscale that did not time them)")
    values = dict(
        wall=f"{t.wall_s:.0f}",
        each=f"{t.wall_s / t.timed:.2g}",
        most=f"{t.wall_s_max:.2g}",
        timed=t.timed,
        cells=t.cells,
        cpu=None if t.cpu_s is None else f"{t.cpu_s:.0f}",
        workers=t.workers,
    )
    key = (t.cpu_s is not None, t.workers is not None)
    return _(CELLS_TIME[key], **values)


# The cells' time, by what the cells record: (CPU seconds recorded, how many ran at once recorded).
CELLS_TIME = {
    (True, True): N_(
        "cells' own run time: {cpu} CPU-s, {wall} s wall in all, {each} s per cell on average (at most {most} s; {timed} of {cells} cells timed, {workers} at a time)"
    ),
    (True, False): N_(
        "cells' own run time: {cpu} CPU-s, {wall} s wall in all, {each} s per cell on average (at most {most} s; {timed} of {cells} cells timed)"
    ),
    (False, True): N_(
        "cells' own run time: {wall} s wall in all, {each} s per cell on average (at most {most} s; {timed} of {cells} cells timed, {workers} at a time)"
    ),
    (False, False): N_(
        "cells' own run time: {wall} s wall in all, {each} s per cell on average (at most {most} s; {timed} of {cells} cells timed)"
    ),
}


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
