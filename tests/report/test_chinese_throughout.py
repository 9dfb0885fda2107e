"""The Chinese side is Chinese: the page ``attnscale report --lang zh`` builds from the shipped
reference results, and the Chinese output of the commands that take ``--lang zh``, hold no English
sentence. Allowed: names, units, code, formulas (:data:`ALLOWED`, written once here), text inside
<code>, <script>, <style>, and what the page marks ``lang="en"`` or quotes (“…”, "…", 《…》)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from html.parser import HTMLParser

import pytest

from attnscale import results
from attnscale.provenance import cpu

# Words that are names (people, models, papers' systems, tools), units, code or formula letters: any
# run of English words made only of these is allowed. Everything else English is a finding. ("on" and
# "scale" are code and formula: the rule qknorm's formula "1/√d_k on q/rms(q)", attention(q, k, v, scale=…).)
ALLOWED = frozenset(
    """
attnscale report verify softmax rules probe rescale train telemetry-bench full lang en zh quick seed
Amit Shekhar Outcome School Vaswani Nakanishi Wortsman Henry Dehghani Yang Kimi Gemma Team SmolLM SmolLM2
MiniLM Llama Qwen GPT BERT GGUF PyPI PyTorch NumPy torch SDPA sdpa kernel composed naive range chunked flex
AdamW AdamW's SGD sgd adamw adam lr own-best scale-vs-dk logit-growth lm QK-norm QK-layernorm LN Scalable-Softmax
SSMax Var E J V K Q S M q k v c d x n l u s ln exp max min tanh rms Instruct M-Instruct AMD EPYC Intel Xeon
Core GHz MiB GiB KiB ms CE gaussian uniform student_t5 False True None index html zh.html widget rel_ci_target
confidence max_draws groups margin d_k logit logits AVX2 AVX512 mkl K2 SmolLM2-135M-Instruct all-MiniLM-L6-v2
adamw-own-best sgd-own-best CPUs cores
on scale
""".split()
)
WORD = r"[A-Za-z][A-Za-z0-9_'’-]*"


def _cpu_model_words() -> frozenset[str]:
    """The words of the CPU models a page may name ("Intel(R) Xeon(R) Processor"): a vendor's name,
    shown verbatim in the provenance of every result: this machine's, for what is computed here,
    and those of the shipped reference results' machines, whichever CPU the tests run on (an Intel
    Xeon's reference read on an AMD EPYC names the Xeon)."""
    models = [cpu().get("model") or ""]
    for kind in results.KINDS:
        try:
            env = results.read(kind, root=results.shipped_reference())
        except results.ResultMissing:  # a kind that ships no reference (the demo)
            continue
        models.append((env.environment.get("cpu") or {}).get("model") or "")
    return frozenset(w for model in models for w in re.findall(WORD, model))


ALLOWED = ALLOWED | _cpu_model_words()
RUN = re.compile(rf"{WORD}(?:[ ,;:]+(?:\d+[ ,;:]+)?{WORD})+")  # two or more words in a row (a number between): a phrase
QUOTED = re.compile(r"“[^”]*”|\"[^\"]*\"|《[^》]*》")
SKIPPED = {"script", "style", "code", "metadata", "title"}
VOID = {"br", "img", "use", "path", "rect", "image", "meta", "link", "input", "hr", "source", "stop", "circle", "line"}


def english_phrases(text: str) -> list[str]:
    """The runs of two or more English words in ``text`` (quotations removed) that are not all names."""
    found = []
    for run in RUN.finditer(QUOTED.sub(" ", text)):
        words = re.findall(WORD, run.group())
        if not all(w in ALLOWED or w.rstrip("'’s") in ALLOWED for w in words):
            found.append(run.group())
    return found


class _Visible(HTMLParser):
    """The text a reader sees, outside code and outside what is marked lang="en"."""

    def __init__(self):
        super().__init__()
        self.stack: list[tuple[str, bool]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        if tag not in VOID:
            self.stack.append((tag, tag in SKIPPED or dict(attrs).get("lang") == "en"))

    def handle_endtag(self, tag):
        while self.stack and self.stack.pop()[0] != tag:
            pass

    def handle_data(self, data):
        if data.strip() and not any(skip for _tag, skip in self.stack):
            self.text.append(data.strip())


def page_phrases(html: str) -> list[str]:
    parser = _Visible()
    parser.feed(html)
    return sorted({p for chunk in parser.text for p in english_phrases(chunk)})


def test_the_checker_finds_english_and_allows_names_and_quotes():
    assert english_phrases("注意（权重）：weights de-quantised from the 4-bit GGUF file") == [
        "weights de-quantised from the",
        "bit GGUF file",
    ]
    assert english_phrases("第 1 组：seed_numbers") == []  # one word is a name
    assert english_phrases("group 1: seed_numbers") == ["group 1: seed_numbers"]
    assert english_phrases("Vaswani 等 2017，《Attention Is All You Need》，SmolLM2 与 MiniLM") == []
    assert english_phrases("对“The capital of France is”的贪心续写") == []
    assert page_phrases('<p>前向 <code>torch.nn.functional.sdpa</code></p><td lang="en">The answer is</td>') == []
    assert page_phrases("<li>mostly attends to the previous token: 0.2 (1)</li>") == [
        "mostly attends to the previous token"
    ]


@pytest.fixture(scope="module")
def chinese(tmp_path_factory) -> dict[str, str]:
    """The Chinese page and the Chinese CLI's output (stdout and stderr), from the shipped results."""
    tmp = tmp_path_factory.mktemp("zh")
    env = {**os.environ, results.REFERENCE_ENV: str(results.shipped_reference())}
    said = {}
    for argv in (
        ("report", "--quick", "--lang", "zh"),
        ("verify", "--quick", "--lang", "zh"),
        ("rules", "--lang", "zh"),
        ("softmax", "14", "10", "12", "--scale", "0.125", "--lang", "zh"),
    ):
        done = subprocess.run(
            [sys.executable, "-m", "attnscale", *argv], capture_output=True, text=True, timeout=600, env=env, cwd=tmp
        )
        assert done.returncode == 0, done.stderr
        said[" ".join(argv)] = done.stdout + done.stderr
    said["page"] = (tmp / "attnscale-report" / "index.zh.html").read_text(encoding="utf-8")
    return said


@pytest.mark.slow
def test_the_chinese_page_has_no_english_sentence(chinese):
    assert page_phrases(chinese["page"]) == []


@pytest.mark.slow
@pytest.mark.parametrize(
    "command",
    [
        "report --quick --lang zh",
        "verify --quick --lang zh",
        "rules --lang zh",
        "softmax 14 10 12 --scale 0.125 --lang zh",
    ],
)
def test_the_chinese_cli_has_no_english_sentence(chinese, command):
    lines = [
        line.strip() for line in chinese[command].splitlines() if not re.search(r"(/|\.json|\.html)\S*$", line.strip())
    ]  # a path printed alone is a path
    assert english_phrases("\n".join(lines)) == []  # whole: a quotation may wrap over lines


# The CLI's own technical names, allowed in its Chinese output beside ALLOWED: the scale rules and the
# optimisers as the results name them, and the tables' column symbols, each defined in its table's legend.
def _cli_names() -> frozenset[str]:
    from attnscale.cli.probe import COLUMNS
    from attnscale.scales import RULES

    symbols = {h for _figure, h, _width in COLUMNS} | {"cos", "mean", "ppl", "maxw", "lnn", "H", "CE", "bpb"}
    optimisers = {"adam", "Adam", "adamw", "sgd", "adamw-own-best", "sgd-own-best", "grad_wq", "grad_wk"}
    formula = {"T", "J", "V", "p", "diag", "cap", "B", "H", "L", "d", "GEMM", "float32", "float16", "mm", "GFLOP"}
    words = {w for name in (*RULES, *symbols, *optimisers, *formula) for w in re.findall(WORD, name)}
    return frozenset(words) | frozenset(RULES)


CLI_NAMES = _cli_names()
REPR = re.compile(r"'(?:[^'\\]|\\.)*'")  # a quoted repr: a model's own continuation, or its prompt (data)
OPTION = re.compile(r"--[a-z][a-z-]*(?: [^\s-]\S*)?")  # an option and its value, in a command shown: code
# What the library says in English inside a line, shown as it is (data, not the CLI's words): why the
# benchmark skipped a variant.
LIBRARY_WORDS = re.compile(r"已跳过：.*$", re.MULTILINE)
# A command shown (`attnscale train early-warning`): code, whatever words its name is made of.
COMMAND = re.compile(r"\battnscale(?: train)? [a-z][a-z-]*[a-z]")


def cli_phrases(text: str) -> list[str]:
    """The runs of English words in a command's output that are neither names nor data: a line that is
    a path alone, and quoted reprs, are left out."""
    lines = [line for line in text.splitlines() if not re.search(r"(/|\.json|\.html)\S*$", line.strip())]
    found = english_phrases(LIBRARY_WORDS.sub(" ", COMMAND.sub(" ", OPTION.sub(" ", REPR.sub(" ", "\n".join(lines))))))
    return [p for p in found if not all(w in CLI_NAMES or w in ALLOWED for w in re.findall(WORD, p))]


def test_every_command_takes_lang():
    from attnscale.cli import build_parser
    from attnscale.i18n import LANGS

    commands = next(a for a in build_parser()._actions if a.dest == "command").choices
    for name, parser in commands.items():
        lang = [a for a in parser._actions if a.dest == "lang"]
        assert lang and lang[0].choices == LANGS, f"attnscale {name} has no --lang"


def test_every_table_and_line_renders_in_chinese(capsys, monkeypatch):
    """Every command's tables and lines, from the shipped reference results, with no English sentence."""
    from attnscale.cli import full, probe, report, rescale, telemetry, train
    from attnscale.i18n import language

    monkeypatch.setenv(results.REFERENCE_ENV, str(results.shipped_reference()))

    with language("zh"):
        said = [
            probe.summary_table(results.read_reference("probe/minilm").data),
            probe.summary_table(results.read_reference("probe/smollm2").data),
            rescale.summary_table(results.read_reference("rescale/minilm").data),
            rescale.summary_table(results.read_reference("rescale/smollm2").data),
            telemetry.format_table(results.read_reference("telemetry")),
            train.short_run_caveat("lm", {"steps": 10, "seeds": 1}, {"steps": 100, "seeds": 3}, quick=True),
            train.short_run_caveat("lm", {"steps": 10, "seeds": 1}, {"steps": 100, "seeds": 3}, quick=False),
            report.unrendered_lines({"lm": "error"}, "nowhere"),
        ]
        for name, printer in train.PRINTERS.items():
            env = results.read_reference(f"train/{name}")
            printer(env.data["analysis"])
            print(train._cells_time_line(env))
        full.print_dry_run(full.dry_run(full.plan(results.DEFAULT_ROOT, "pages"), results.DEFAULT_ROOT))
    text = "\n".join(map(str, said)) + capsys.readouterr().out
    assert cli_phrases(text) == []


def test_the_librarys_progress_labels_are_said_in_the_clis_language(tmp_path):
    """The labels the library hands the CLI's progress with data in them (a sweep's running steps, the
    benchmark's steps, the probe's batch) are said in the bound language, not passed on in English."""
    import io

    from attnscale.cli.progress import Progress
    from attnscale.experiments import telemetry
    from attnscale.experiments.sweeps.runner import SerialBackend, report_steps, run_sweep
    from attnscale.i18n import N_, filled, language
    from attnscale.store import ResultCache

    def cell(x):
        for step in (1, 2):
            report_steps(step, 2)
        return {"x": x}

    stream = io.StringIO()
    with language("zh"), Progress(stream=stream, tty=False, every_s=0.0, heartbeat=False) as progress:
        run_sweep("labels", [1, 2], cell, ResultCache(tmp_path), SerialBackend(), progress)
        progress(1, 3, telemetry._step_label("peak memory", "forward+backward", (1, 2, 8, 4), True))
        progress(2, 3, filled(telemetry.PEAK_LABEL, n=64))
        progress(3, 3, filled(N_("batch {b}/{n}"), b=3, n=3))
    said = stream.getvalue()
    assert "运行中的格子已走步数 1/2" in said and "峰值内存：前向+反向，形状 (1, 2, 8, 4)，因果" in said
    assert "第 3/3 批" in said and cli_phrases(said) == []


@pytest.fixture(scope="module")
def chinese_runs(tmp_path_factory) -> dict[str, str]:
    """The Chinese output of the commands that compute, each run small (quick modes, tiny inputs)."""
    tmp = tmp_path_factory.mktemp("zh-runs")
    env = {**os.environ, results.REFERENCE_ENV: str(results.shipped_reference()), "OMP_NUM_THREADS": "1"}
    said = {}
    for argv in (
        ("probe", "--lang", "zh"),
        # a tiny sweep (tests/experiments/test_lm.py's): every line a quick lm run prints, in seconds
        ("train", "lm", "--quick", "--rules", "inverse_sqrt_dk,unscaled", "--d-ks", "8", "--d-model", "16")
        + (
            "--context",
            "16",
            "--steps",
            "2",
            "--adamw-lrs",
            "3e-3",
            "--sgd-lrs",
            "0.3",
            "--workers",
            "1",
            "--lang",
            "zh",
        ),
        # with its progress lines: their labels are the library's, said in Chinese by the CLI
        ("telemetry-bench", "--quick", "--no-model", "--repeats", "1", "--lang", "zh"),
        ("full", "--dry-run", "--lang", "zh"),
    ):
        done = subprocess.run(
            [sys.executable, "-m", "attnscale", *argv], capture_output=True, text=True, timeout=900, env=env, cwd=tmp
        )
        assert done.returncode == 0, done.stderr
        said[argv[0]] = done.stdout + done.stderr
    return said


@pytest.mark.slow
@pytest.mark.parametrize("command", ["probe", "train", "telemetry-bench", "full"])
def test_the_commands_that_compute_speak_chinese(chinese_runs, command):
    assert cli_phrases(chinese_runs[command]) == []


@pytest.mark.slow
def test_a_quick_runs_verdicts_carry_its_own_size(chinese_runs):
    # the page's caveat, in Chinese, with this run's own steps (2, from --steps) and seeds
    assert "快速扫描（2 步，1 个种子）：下面每句话只描述这次短运行，而非完整扫描。" in chinese_runs["train"]
