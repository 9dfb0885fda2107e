"""Every documented command runs end to end, as a user types it (issue 25).

The command lines are read, not listed here: the README's commands table, its ``sh`` blocks and the
commands quoted in its prose, and the ``examples:`` of ``attnscale --help`` and of each subcommand's
--help (cli/options.py add_command puts them in the parser's epilog). A command added later with
examples is run without editing this file; a subcommand that no README line or example shows fails
:func:`test_every_command_is_documented`.

Each line runs as a subprocess at its smallest size (``--quick``, one repeat, a few tokens, the
examples' own text files made small) in a temporary folder, so the defaults (``./attnscale-results``)
land there; every command with ``--json`` also writes it, and that file is its expected output (with
the result file it names). Lines of one subcommand run in order in one folder (``--markdown`` reads
what the run before it wrote); subcommands run side by side in a pool.

A line that cannot run here is run to its refusal (exit 2, one line on stderr, nothing written), for
a stated reason: a CUDA device without CUDA, a cluster address (no Ray cluster here), a path to a
model that is not here. SmolLM2-135M lines are skipped unless ATTNSCALE_SMOKE_SMOLLM2=1: loading it
costs more CPU time than the whole smoke set's budget (2 minutes on 2 cores; see the test's report).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest

import attnscale
from attnscale import results
from attnscale.cli import build_parser

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
# The user pages of the documentation site whose command lines are run too (the README's commands
# table and prose moved there); the development notes are dated working notes, not run.
DOC_PAGES = tuple(
    REPO / "docs" / p
    for p in (
        "report.md",
        "experiments.md",
        "real-models.md",
        "cluster.md",
        "reference-results.md",
        "benchmarks/index.md",
    )
)
SOURCE = Path(attnscale.__file__).resolve().parents[1]  # the attnscale under test (src/)
SENTENCES = Path(attnscale.__file__).resolve().parent / "experiments" / "pretrained" / "sentences.txt"

# The smallest size of a command: options set where the command's parser has them (the value after
# an option given is replaced; telemetry-bench forward only: its backward is tested in
# test_telemetry_bench); "--connect-timeout" only next to "--address", which it qualifies.
SMALLEST = {
    "--quick": None,
    "--repeats": "1",
    "--no-backward": None,
    "--max-tokens": "16",
    "--window": "16",
    "--dry-run": None,
}  # `full`: its plan only (the real run is hours; tests/experiments/test_full.py runs it faked)
SHORT_TIMEOUT = {"--connect-timeout": ("5", "--address")}
# Options that name what a command writes (never a missing input).
OUTPUT_DESTS = {"json", "results", "page_dir"}
# Cases no document shows but issue 25 asks for: a cluster address where nothing listens, a CUDA
# device on a machine without one. Each must be refused at once, in one line.
EXTRA = ("train scale-vs-dk --quick --backend ray --address 127.0.0.1:1", "telemetry-bench --quick --device cuda")
SMOLLM2_OPT_IN = "ATTNSCALE_SMOKE_SMOLLM2"


@dataclass
class Case:
    argv: tuple[str, ...]  # after "attnscale", at the smallest size
    stdin: str | None
    expect: str  # "run", "refusal" or "skip"
    why: str = ""
    where: list[str] = field(default_factory=list)

    @property
    def group(self) -> str:
        return self.argv[0]

    @property
    def id(self) -> str:
        return (f"echo {self.stdin.strip()} | " if self.stdin else "") + " ".join(self.argv)


@dataclass
class Outcome:
    returncode: int
    stdout: str
    stderr: str
    seconds: float
    cpu_seconds: float  # of the process and the processes it waited for
    cwd: Path
    written: set[str]  # files new or changed in cwd
    json_text: str | None = None  # its --json file as this run left it (a later line of
    # the group, run in the same folder, may replace it)


# --- where the command lines are documented ---------------------------------------------------------


def _code_spans(text: str) -> list[str]:
    return re.findall(r"`([^`]+)`", text)


def _drop_optional(line: str) -> str:
    return re.sub(r"\s*\[[^\]]*\]", "", line).strip()


def readme_lines(text: str) -> list[tuple[str, str, bool]]:
    """(where, command line, strict) for every attnscale command line of the README. ``strict``: a
    table row or a code block, which must parse; a span quoted in prose counts only when it parses
    (``attnscale train`` in a sentence names the command group, it is no command line)."""
    found, section, fence = [], "", None
    for raw in text.splitlines():
        if raw.startswith("```"):
            fence = raw[3:].strip() if fence is None else None
            continue
        if fence is not None:
            if fence in ("sh", "bash", "console"):
                code = re.split(r"\s+#", raw)[0]
                found += [
                    (f"README § {section} (code)", part.strip(), True)
                    for part in code.split("&&")
                    if re.match(r"(echo .*\| *)?attnscale ", part.strip())
                ]
            continue
        if raw.startswith("#"):
            section = raw.lstrip("#").strip()
        elif raw.startswith("| `attnscale"):
            cell = re.split(r"(?<!\\)\|", raw)[1].replace("\\|", "|")
            lines: list[str] = []
            for span in _code_spans(cell):
                if span.startswith("attnscale "):
                    lines.append(_drop_optional(span))
                elif not span.startswith("[") and lines:  # `attnscale train a` / `b`: b replaces a
                    lines.append(lines[-1].rsplit(" ", 1)[0] + " " + _drop_optional(span))
            found += [(f"README § {section} (table)", line, True) for line in lines]
        else:
            found += [
                (f"README § {section} (prose)", _drop_optional(s), False)
                for s in _code_spans(raw)
                if s.startswith("attnscale ")
            ]
    return found


def subparsers(parser) -> dict:
    action = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    return dict(action.choices)


def example_lines(parser) -> list[tuple[str, str, bool]]:
    """The ``examples:`` of ``attnscale --help`` and of each subcommand's --help, each line's command
    (what follows three spaces or more is its explanation)."""
    found = []
    helps = [("attnscale --help", parser), *((f"attnscale {n} --help", p) for n, p in subparsers(parser).items())]
    for where, p in helps:
        if p.epilog and "examples:\n" in p.epilog:
            block = p.epilog.split("examples:\n", 1)[1].split("\n\n", 1)[0]
            found += [
                (where, re.split(r"\s{3,}", line.strip())[0], True) for line in block.splitlines() if line.strip()
            ]
    return found


# --- from a documented line to a case ----------------------------------------------------------------


def split_line(line: str) -> tuple[str | None, list[str]]:
    """``attnscale ARGS`` or ``echo WORDS | attnscale ARGS`` as (stdin, ARGS)."""
    tokens = shlex.split(line)
    stdin = None
    if "|" in tokens:
        i = tokens.index("|")
        if tokens[0] != "echo" or i == 0:
            raise ValueError(f"{line!r}: only 'echo ... | attnscale ...' pipelines are run by this test")
        stdin, tokens = " ".join(tokens[1:i]) + "\n", tokens[i + 1 :]
    if not tokens or tokens[0] != "attnscale":
        raise ValueError(f"{line!r}: expected a line starting with 'attnscale'")
    return stdin, tokens[1:]


def parse(parser, argv) -> object | None:
    """The namespace ``argv`` parses to, or None when the parser refuses it (argparse would exit 2)."""
    try:
        with open(os.devnull, "w") as devnull:
            err, sys.stderr = sys.stderr, devnull
            try:
                return parser.parse_args(list(argv))
            finally:
                sys.stderr = err
    except SystemExit:
        return None


def _options(parser, sub: str) -> dict:
    return subparsers(parser)[sub]._option_string_actions if sub in subparsers(parser) else {}


def smallest(parser, argv: list[str]) -> list[str]:
    """``argv`` with :data:`SMALLEST` applied where the subcommand has the option."""
    argv, options = list(argv), _options(parser, argv[0])
    wanted = dict(SMALLEST, **{opt: value for opt, (value, beside) in SHORT_TIMEOUT.items() if beside in argv})
    positional_end = argv.index("--") if "--" in argv else len(argv)
    for opt, value in wanted.items():
        if opt not in options:
            continue
        if opt in argv[:positional_end]:
            if value is not None:
                argv[argv.index(opt) + 1] = value
        elif value is None:
            argv.insert(positional_end, opt)
        else:
            argv[positional_end:positional_end] = [opt, value]
        positional_end = argv.index("--") if "--" in argv else len(argv)
    if "--json" in options and "--json" not in argv[:positional_end]:
        argv[positional_end:positional_end] = ["--json", "smoke.json"]  # the expected file
    return argv


def _input_paths(parser, ns, sub: str) -> dict[str, str]:
    """{option: path} of the input files and folders the command was given (metavar FILE/PATH/DIR)."""
    found = {}
    for action in _options(parser, sub).values():
        if action.dest in OUTPUT_DESTS or not isinstance(action.metavar, str):
            continue
        value = getattr(ns, action.dest, None)
        if (
            isinstance(value, str)
            and re.search(r"FILE|PATH|DIR", action.metavar)
            and value not in (action.choices or ())
        ):
            found[action.option_strings[0]] = value
    return found


def _cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


def expectation(parser, ns, argv) -> tuple[str, str]:
    """("run" | "refusal" | "skip", why) for a parsed command line."""
    sub = argv[0]
    device = getattr(ns, "device", None)
    if isinstance(device, str) and device.startswith("cuda") and not _cuda_available():
        return "refusal", f"--device {device}: this machine has no CUDA GPU"
    if getattr(ns, "address", None) and not getattr(ns, "dry_run", False):  # a dry run connects to nothing
        return "refusal", f"--address {ns.address}: no Ray cluster is reachable from a test machine"
    if getattr(ns, "model", None) == "smollm2" and os.environ.get(SMOLLM2_OPT_IN) != "1":
        return "skip", (
            f"SmolLM2-135M: loading it alone costs more CPU time than the smoke set's 2-minute budget; "
            f"set {SMOLLM2_OPT_IN}=1 to run it"
        )
    from attnscale.experiments.pretrained.loading import MODELS  # --model's bundled names are not paths

    for opt, path in _input_paths(parser, ns, sub).items():
        if opt == "--model" and path in MODELS:
            continue
        if opt != "--text" and not (REPO / path).exists() and not Path(path).is_absolute():
            return "refusal", f"{opt} {path}: the example's path is not on this machine"
    return "run", ""


def documented_cases(parser, readme_text: str) -> list[Case]:
    """Every documented command line as a case (duplicates after :func:`smallest` merged, as parsed), then
    :data:`EXTRA` (the README's Python blocks: tests/meta/test_readme_python.py). A strict line that does
    not parse raises."""
    lines = [*example_lines(parser), *readme_lines(readme_text), *(("issue 25", f"attnscale {x}", True) for x in EXTRA)]
    cases: dict[tuple, Case] = {}
    for where, line, strict in lines:
        stdin, argv = split_line(line)
        ns = parse(parser, argv)
        if ns is None or not getattr(ns, "run", None):
            if strict:
                raise ValueError(f"{where}: {line!r} does not parse as an attnscale command")
            continue
        argv = smallest(parser, argv)
        # One run per command as parsed: the same options in another order are the same command.
        key = (repr(sorted(vars(parse(parser, argv)).items(), key=lambda kv: kv[0])), stdin)
        if key not in cases:
            expect, why = expectation(parser, parse(parser, argv), argv)
            cases[key] = Case(tuple(argv), stdin, expect, why)
        cases[key].where.append(f"{where}: {line}")
    return list(cases.values())


def uncovered(parser, cases: list[Case]) -> list[str]:
    """The subcommands of ``parser`` that no case runs."""
    shown = {c.argv[0] for c in cases if c.argv}
    return sorted(set(subparsers(parser)) - shown)


# --- running them ------------------------------------------------------------------------------------


def _snapshot(folder: Path) -> dict[str, int]:
    return {str(p.relative_to(folder)): p.stat().st_mtime_ns for p in folder.rglob("*") if p.is_file()}


def _prepare(case: Case, parser, cwd: Path) -> None:
    """Inputs the line names: a repository path it reads (``docs/results``) is copied in; an example
    text file that is not here (``my.txt``) is made, from the package's own sentences."""
    for token in case.argv:
        if "/" in token and not Path(token).is_absolute() and (REPO / token).exists() and not (cwd / token).exists():
            (cwd / token).parent.mkdir(parents=True, exist_ok=True)
            copy = shutil.copytree if (REPO / token).is_dir() else shutil.copy2
            copy(REPO / token, cwd / token)
    ns = parse(parser, case.argv) if case.argv else None  # the Python snippet has no command line
    text = _input_paths(parser, ns, case.argv[0]).get("--text") if ns is not None else None
    if text and not (cwd / text).exists():
        (cwd / text).write_text(SENTENCES.read_text(encoding="utf-8"), encoding="utf-8")


def smoke_env(source: Path, bin_dir: Path) -> dict:
    """The environment of every run: ``attnscale`` on PATH runs ``source``'s package with this Python;
    one thread per process (two runs share the machine); a browser that opens nothing."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    shim = bin_dir / "attnscale"
    shim.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} -m attnscale "$@"\n')
    shim.chmod(0o755)
    return {
        **os.environ,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
        "PYTHONPATH": str(source),
        "OMP_NUM_THREADS": "1",
        "BROWSER": "true",
        "PYTHONUNBUFFERED": "1",
    }


def run_case(case: Case, parser, cwd: Path, env: dict, timeout_s: float = 600) -> Outcome:
    _prepare(case, parser, cwd)
    before = _snapshot(cwd)
    cmd = ["attnscale", *case.argv]
    t0 = time.monotonic()
    proc = subprocess.Popen(
        cmd, cwd=cwd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    timer = threading.Timer(timeout_s, proc.kill)
    timer.start()
    try:
        stdout, stderr = _talk(proc, case.stdin or "")
        _, status, usage = os.wait4(proc.pid, 0)  # its CPU time: the machine is shared, wall time is not it
    finally:
        timer.cancel()
    proc.returncode = os.waitstatus_to_exitcode(status)
    after = _snapshot(cwd)
    written = {p for p, t in after.items() if before.get(p) != t}
    target = getattr(parse(parser, case.argv), "json", None) if case.argv else None
    json_text = (cwd / target).read_text(encoding="utf-8") if target in written else None
    return Outcome(
        proc.returncode, stdout, stderr, time.monotonic() - t0, usage.ru_utime + usage.ru_stime, cwd, written, json_text
    )


def _talk(proc, stdin: str) -> tuple[str, str]:
    """Write stdin, read stdout and stderr to their ends, without reaping the process."""
    streams = {}

    def read(name):
        streams[name] = getattr(proc, name).read()

    readers = [threading.Thread(target=read, args=(name,)) for name in ("stdout", "stderr")]
    for r in readers:
        r.start()
    try:
        proc.stdin.write(stdin)
        proc.stdin.close()
    except BrokenPipeError:
        pass  # the command did not read its stdin
    for r in readers:
        r.join()
    return streams["stdout"], streams["stderr"]


def run_all(
    cases: list[Case], parser, root: Path, source: Path = SOURCE, workers: int | None = None
) -> dict[str, Outcome]:
    """Run every case not skipped: the cases of one group in order in one folder, groups in a pool."""
    env = smoke_env(source, root / "bin")
    groups: dict[str, list[Case]] = {}
    for case in cases:
        if case.expect != "skip":
            groups.setdefault(case.group, []).append(case)

    def run_group(name: str) -> dict[str, Outcome]:
        cwd = root / re.sub(r"[^\w.-]", "_", name)
        cwd.mkdir(parents=True, exist_ok=True)
        return {case.id: run_case(case, parser, cwd, env) for case in groups[name]}

    outcomes: dict[str, Outcome] = {}
    with ThreadPoolExecutor(max_workers=workers or min(4, os.cpu_count() or 1)) as pool:
        for found in pool.map(run_group, sorted(groups, key=lambda g: -len(groups[g]))):
            outcomes.update(found)
    return outcomes


# --- what a run must show ----------------------------------------------------------------------------


def _strict_json(text: str):
    def refuse(name):
        raise ValueError(f"non-strict JSON constant {name}")

    return json.loads(text, parse_constant=refuse)


def _accepted_codes(parser, case: Case) -> set[int]:
    """0, and 1 where an option given says in its help that it exits 1 (``verify --strict``), or the
    command's own help does (``watch``: exit 1 when the log raises an alert)."""
    options = _options(parser, case.argv[0])
    action = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    own = next((c.help or "" for c in action._choices_actions if c.dest == case.argv[0]), "")
    return (
        {0}
        | ({1} if "exit 1" in own else set())
        | {1 for a in case.argv if a in options and "exit 1" in (options[a].help or "")}
    )


def problems(case: Case, out: Outcome, parser) -> list[str]:
    """What is wrong with ``out`` for ``case`` (empty: the documented command works)."""
    errors = []
    if "Traceback" in out.stderr:
        errors.append("a traceback on stderr")
    if case.expect == "refusal":
        lines = out.stderr.strip().splitlines()
        if out.returncode != 2:
            errors.append(f"exit {out.returncode}, expected 2 (a refusal)")
        if len(lines) != 1 or not lines[0].startswith(f"attnscale {case.argv[0]}: error: "):
            errors.append(f"expected one line 'attnscale {case.argv[0]}: error: ...' on stderr, got {len(lines)} lines")
        if out.written:
            errors.append(f"a refused command wrote {sorted(out.written)}")
        return errors
    codes = _accepted_codes(parser, case)
    if out.returncode not in codes:
        errors.append(f"exit {out.returncode}, expected {' or '.join(map(str, sorted(codes)))}")
    ns = parse(parser, case.argv)
    target = getattr(ns, "json", None)
    try:
        if target == "-":
            data = _strict_json(out.stdout)
        elif target is not None:
            if target not in out.written:
                return errors + [f"did not write its --json file {target}"]
            data = _strict_json(out.json_text)
        else:
            return errors + ([] if out.stdout.strip() or out.written else ["printed and wrote nothing"])
    except ValueError as err:
        return errors + [f"its JSON does not parse: {err}"]
    if isinstance(data, dict) and "schema" in data and "kind" in data:  # a result envelope
        root = getattr(ns, "results", None) or results.DEFAULT_ROOT
        path = results.result_path(data["kind"], out.cwd / root, bool(data.get("quick")))
        if not path.is_file():
            errors.append(f"its result file {path.relative_to(out.cwd)} is not there")
    if isinstance(data, dict) and isinstance(data.get("page"), str) and not Path(data["page"]).is_file():
        errors.append(f"its page {data['page']} is not there")
    return errors


def describe(case: Case, out: Outcome) -> str:
    tail = "\n".join((out.stderr.strip().splitlines() or [""])[-8:])
    return (
        f"attnscale {case.id} (documented in: {'; '.join(case.where)}) -> exit {out.returncode} after "
        f"{out.seconds:.1f} s\nstderr ends:\n{tail}"
    )


# --- the tests ----------------------------------------------------------------------------------------

PARSER = build_parser()


def documented_text() -> str:
    """The README, then each of :data:`DOC_PAGES` that exists, as one text for :func:`documented_cases`."""
    return "\n".join(p.read_text(encoding="utf-8") for p in (README, *DOC_PAGES) if p.exists())


CASES = documented_cases(PARSER, documented_text())


def _selected(items) -> list[Case]:
    """The cases the selected tests look at (``-k softmax`` runs the softmax lines only)."""
    ids = {
        item.callspec.params["case"].id
        for item in items  # this file's cases (other files have a "case" too)
        if getattr(item, "callspec", None) and isinstance(item.callspec.params.get("case"), Case)
    }
    names = {item.originalname for item in items}
    if "test_wrong_cluster_address_gives_up_at_once" in names:
        ids |= {c.id for c in CASES if "127.0.0.1:1" in c.argv}
    return [c for c in CASES if c.id in ids]


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory, request):
    root = tmp_path_factory.mktemp("smoke")
    t0 = time.monotonic()
    found = run_all(_selected(request.session.items), PARSER, root)
    wall = time.monotonic() - t0
    cpu = sum(o.cpu_seconds for o in found.values())
    lines = [
        f"smoke set: {len(found)} runs, {wall:.1f} s wall, {cpu:.1f} CPU-s, on {os.cpu_count()} CPUs "
        f"(load average now {', '.join(f'{x:.1f}' for x in os.getloadavg())})"
    ]
    lines += [
        f"{o.seconds:8.1f} s {o.cpu_seconds:8.1f} CPU-s  exit {o.returncode}  {k}"
        for k, o in sorted(found.items(), key=lambda kv: -kv[1].cpu_seconds)
    ]
    (root / "timing.txt").write_text("\n".join(lines) + "\n")
    print("\n" + "\n".join(lines))
    return found


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_documented_command(case, outcomes):
    if case.expect == "skip":
        pytest.skip(case.why)
    out = outcomes[case.id]
    found = problems(case, out, PARSER)
    assert not found, f"{'; '.join(found)}\n{describe(case, out)}" + (
        f"\n(expected a refusal: {case.why})" if case.why else ""
    )


@pytest.mark.slow
def test_wrong_cluster_address_gives_up_at_once(outcomes):
    case = next(c for c in CASES if "127.0.0.1:1" in c.argv)
    out = outcomes[case.id]
    timeout = float(case.argv[case.argv.index("--connect-timeout") + 1])
    # Ray's own wait is minutes; the refusal comes at once (start-up included, on a machine maybe busy).
    assert out.seconds < timeout + 60, describe(case, out)
    assert "'127.0.0.1:1'" in out.stderr and "refused" in out.stderr, out.stderr
    assert out.returncode == 2 and not out.written


def test_every_command_is_documented():
    assert uncovered(PARSER, CASES) == [], "subcommands that no README line or --help example shows (add examples)"


def test_a_new_command_is_run_or_named_missing():
    """The list follows the parser: a command added with examples becomes a case by itself; one added
    without any is named by :func:`uncovered`."""
    from attnscale.cli.options import add_command

    parser = build_parser()
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    add_command(sub, "frobnicate", help="new").set_defaults(run=lambda args: 0)
    cases = documented_cases(parser, documented_text())
    assert uncovered(parser, cases) == ["frobnicate"]
    add_command(sub, "frobnicate2", help="new", examples=["attnscale frobnicate2   does it"]).set_defaults(
        run=lambda a: 0
    )
    cases = documented_cases(parser, documented_text())
    assert [c.argv for c in cases if c.argv[:1] == ("frobnicate2",)] == [("frobnicate2",)]
    assert uncovered(parser, cases) == ["frobnicate"]


def test_readme_lines_are_read_as_documented():
    text = (
        "## Commands\n| `attnscale train a` / `b` `[--json F\\|-]` | x |\n"
        "Prose: `attnscale verify --quick` and `attnscale[cluster]`.\n```sh\n"
        "ray start --head   # not ours\nattnscale rules && attnscale report   # both\n```\n"
    )
    assert [line for _, line, _ in readme_lines(text)] == [
        "attnscale train a",
        "attnscale train b",
        "attnscale verify --quick",
        "attnscale rules",
        "attnscale report",
    ]
    assert split_line("echo 14 10 | attnscale softmax --json -") == ("14 10\n", ["softmax", "--json", "-"])
    assert smallest(PARSER, ["softmax", "--", "1", "-inf"]) == ["softmax", "--json", "smoke.json", "--", "1", "-inf"]


@pytest.mark.slow
def test_a_renamed_keyword_in_a_copy_is_caught(tmp_path):
    """The issue's own crash, put back into a copy of the package: its smoke cases fail, naming it."""
    copy = tmp_path / "src" / "attnscale"
    shutil.copytree(Path(attnscale.__file__).parent, copy, ignore=shutil.ignore_patterns("__pycache__"))
    module = copy / "cli" / "telemetry.py"
    text = module.read_text(encoding="utf-8")
    assert "Progress(quiet=" in text
    module.write_text(text.replace("Progress(quiet=", "Progress(enabled="), encoding="utf-8")
    cases = [c for c in CASES if c.group == "telemetry-bench" and c.expect == "run" and "--markdown" not in c.argv][:1]
    assert cases
    found = run_all(cases, PARSER, tmp_path / "runs", source=copy.parent)
    failed = {c.id: problems(c, found[c.id], PARSER) for c in cases}
    assert all(failed.values()), failed
    assert all("unexpected keyword argument 'enabled'" in found[c.id].stderr for c in cases)
