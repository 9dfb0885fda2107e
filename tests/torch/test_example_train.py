"""examples/train_gpt_monitored.py runs, briefly, as `python …` and under torchrun with 2 gloo
processes on CPU: it prints its step lines, the 2-process figures count both ranks' rows, and rank 0
writes TensorBoard scalars."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("tensorboard")

SCRIPT = Path(__file__).resolve().parents[2] / "examples" / "train_gpt_monitored.py"
ARGS = ["--steps", "3", "--batch", "2", "--context", "16", "--print-every", "2", "--tau", "1.0"]
STEP = re.compile(
    r"step +(\d+)  loss [\d.]+ bits/byte  max logit +[\d.]+ \(blocks\.\d\.attn head \d\)  "
    r"entropy [\d.]+ nats  rows (\d+)  clipped (\d) heads \((\d+) so far\)"
)


def run(tmp_path, launcher):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [*launcher, str(SCRIPT), *ARGS, "--logdir", str(tmp_path / "tb")],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    steps = [m.groups() for m in STEP.finditer(done.stdout)]
    events = list((tmp_path / "tb").glob("events.out.tfevents.*"))
    return steps, events, done.stdout


@pytest.mark.slow
@pytest.mark.parametrize("world", [1, 2])
def test_the_example_trains_monitored_and_clipped_in_one_or_two_processes(tmp_path, world):
    launcher = (
        [sys.executable]
        if world == 1
        else [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
    )
    steps, events, out = run(tmp_path, launcher)
    assert [s[0] for s in steps] == ["0", "2"], out  # rank 0 alone prints
    rows = 2 * 15 * 4 * 2 * world  # batch × (context − the first query, one key) × heads × layers × ranks
    assert all(int(s[1]) == rows for s in steps)
    assert int(steps[-1][3]) > 0  # τ = 1 clips
    assert len(events) == 1 and events[0].stat().st_size > 0  # one writer: rank 0's
