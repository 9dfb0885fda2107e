"""How the probe's time and memory grow with a model's parameters and the sequence length.

    python benchmarks/probe_scaling.py                 # two tiny random Llamas × three lengths, then MiniLM
    python benchmarks/probe_scaling.py --smollm2       # ... and SmolLM2-135M (its GGUF file, as --model PATH)

Each run is one ``attnscale probe --model PATH`` in its own process (16 sequences of about L tokens
each), so its peak resident memory (``ru_maxrss`` from ``os.wait4``) and CPU seconds
(user + system, which a loaded machine inflates less than wall-clock time) are the probe's alone.
The baseline is a process that only imports torch and transformers. The tiny models are random
Llamas built here (nothing downloaded) with the bundled MiniLM's tokenizer (30,522 tokens, so the
embeddings dominate their parameter counts). Prints a Markdown table.
"""

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SIZES = {
    "tiny-64x2": dict(
        hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, intermediate_size=128
    ),
    "tiny-256x8": dict(
        hidden_size=256, num_hidden_layers=8, num_attention_heads=8, num_key_value_heads=4, intermediate_size=512
    ),
}
LENGTHS = (32, 128, 512)
SEQUENCES = 16


def build(folder: Path, size: dict) -> None:
    """A random Llama of ``size`` with MiniLM's tokenizer in ``folder``."""
    import torch
    import transformers

    from attnscale.experiments.pretrained.pinned import _minilm_folder

    tokenizer = transformers.AutoTokenizer.from_pretrained(str(_minilm_folder()), local_files_only=True)
    config = transformers.LlamaConfig(vocab_size=len(tokenizer), max_position_embeddings=1024, **size)
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)


def texts(folder: Path, length: int) -> Path:
    """SEQUENCES lines of about ``length`` tokens each (words of the built-in sentences)."""
    from attnscale.experiments.pretrained.probe.run import builtin_sentences

    words = " ".join(builtin_sentences()).split()
    path = folder / f"texts-{length}.txt"
    # About 1.3 WordPiece tokens per word, and [CLS] [SEP]: a line of L tokens has ~ (L - 2) / 1.3 words.
    n = max(1, int((length - 2) / 1.3))
    path.write_text("\n".join(" ".join(words[i * 7 : i * 7 + n]) for i in range(SEQUENCES)) + "\n", encoding="utf-8")
    return path


def run(command: list[str]) -> tuple[str, dict]:
    """(stdout, {wall, cpu, rss}) of one child process: its own CPU seconds and peak RSS (MiB), from
    os.wait4 (RUSAGE_CHILDREN's ru_maxrss would be the largest of all children so far). Its output
    goes to temporary files, so that nothing but wait4 reaps it."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        t0 = time.perf_counter()
        child = subprocess.Popen(command, stdout=out, stderr=err, text=True)
        _, status, usage = os.wait4(child.pid, 0)
        wall = time.perf_counter() - t0
        child.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0), err.seek(0)
        if child.returncode != 0:
            raise SystemExit(f"{' '.join(command)} failed:\n{err.read()}")
        return out.read(), {"wall": wall, "cpu": usage.ru_utime + usage.ru_stime, "rss": usage.ru_maxrss / 1024}


def baseline() -> dict:
    """CPU seconds and peak RSS (MiB) of a process that only imports torch and transformers."""
    return run([sys.executable, "-c", "import torch, transformers, transformers.models.llama"])[1]


def probe(model: str, text: Path | None, out: Path) -> tuple[int, dict]:
    """(the model's parameter count, as its result records it; the run's measurements)."""
    import json

    command = [
        sys.executable,
        "-m",
        "attnscale",
        "probe",
        "--model",
        model,
        "--results",
        str(out),
        "--json",
        "-",
        "--quiet",
    ]
    stdout, measured = run(command + (["--text", str(text)] if text else []))
    data = json.loads(stdout)["data"]
    return data["model"]["n_parameters"], {**measured, "tokens": data["config"]["n_tokens"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smollm2", action="store_true", help="also SmolLM2-135M through its GGUF file")
    args = parser.parse_args()
    rows = []
    base = baseline()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        for name, size in SIZES.items():
            build(tmp / name, size)
            for length in LENGTHS:
                rows.append((name, f"~{length}", *probe(str(tmp / name), texts(tmp, length), tmp / "out")))
        rows.append(("all-MiniLM-L6-v2", "built-in", *probe("minilm", None, tmp / "out")))
        if args.smollm2:
            from attnscale.experiments.pretrained.pinned import _smollm2_file

            rows.append(
                ("SmolLM2-135M (its GGUF file as PATH)", "built-in", *probe(str(_smollm2_file()), None, tmp / "out"))
            )
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(
        f"{os.cpu_count()} CPUs, load average after the run {load}; baseline (import torch + transformers): "
        f"{base['cpu']:.1f} CPU-s, {base['rss']:.0f} MiB\n"
    )
    print("| model | parameters | tokens per sequence | tokens in all | wall s | CPU s | peak RSS MiB |")
    print("|---|---|---|---|---|---|---|")
    for name, length, params, m in rows:
        print(
            f"| {name} | {params / 1e6:.1f} M | {length} | {m['tokens']} | {m['wall']:.1f} | {m['cpu']:.1f} | "
            f"{m['rss']:.0f} |"
        )


if __name__ == "__main__":
    main()
