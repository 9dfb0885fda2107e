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


def test_the_chinese_page_has_no_english_sentence(chinese):
    assert page_phrases(chinese["page"]) == []


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
