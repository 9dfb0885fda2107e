"""attnscale.torch.distributed: two gloo processes on CPU (started by the test, this file run as a
script) train a GPT with the monitor — wrapped in DistributedDataParallel, or sharded by FSDP2's
``fully_shard`` (each block and the whole model; PyTorch runs it on CPU with gloo) — combine each
step's figures and QK-clip from them; one process runs both ranks' batches. The combined figures
equal the single process's (counts exactly, the rest to float64/float32 rounding), are
bit-identical on both ranks, and the clipped weights are identical on both ranks (under FSDP2 the
guard rescales sharded parameters, DTensors: each rank its shard)."""

import dataclasses
import json
import math
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from attnscale.errors import InputError  # noqa: E402
from attnscale.experiments.training.gpt import GPT, GPTConfig  # noqa: E402
from attnscale.scales import InverseSqrtDk  # noqa: E402
from attnscale.torch import Monitor  # noqa: E402
from attnscale.torch.distributed import combine_step  # noqa: E402
from attnscale.torch.guard import LogitGuard  # noqa: E402
from attnscale.torch.monitor.records import HeadFigures, Step  # noqa: E402

F = torch.nn.functional
STEPS, WORLD = 3, 2
COUNTS = ("calls", "rows", "rows_empty", "rows_broken", "saturated_rows", "float16_overflow_rows", "keys")
FLOATS = (
    "entropy_mean",
    "entropy_min",
    "max_logit",
    "min_logit",
    "max_abs_logit",
    "first_key_weight",
    "q_norm_mean",
    "k_norm_mean",
)
SUMS = ("entropy_sum", "first_key_sum", "q_norm_sum", "k_norm_sum")


def model():
    torch.manual_seed(0)
    config = GPTConfig(vocab=13, context=12, d_model=32, n_layers=2, d_k=8, init="fan_in", tied_head=False)
    return GPT(config, InverseSqrtDk(), figures=False)


def batch(step, rank):
    """Rank ``rank``'s batch of step ``step``: (3, 12) tokens; ranks' batches differ."""
    return torch.randint(0, 13, (3, 12), generator=torch.Generator().manual_seed(100 * step + rank))


def loss(net, x):
    return F.cross_entropy(net(x)[:, :-1].flatten(0, 1), x[:, 1:].flatten())


def figures(step):
    return [{f: getattr(h, f) for f in ("layer", "head", *COUNTS, *FLOATS, *SUMS)} for h in step.heads]


def wrapped(net, wrap: str):
    """``net`` for data-parallel training: in DDP ("ddp"), or sharded in place by FSDP2 ("fsdp")."""
    if wrap == "ddp":
        return torch.nn.parallel.DistributedDataParallel(net)
    from torch.distributed.fsdp import fully_shard

    for block in net.blocks:
        fully_shard(block)
    return fully_shard(net)


def full(p):
    """A parameter's whole value: an FSDP2 shard (DTensor) gathered."""
    return p.full_tensor() if hasattr(p, "full_tensor") else p


def worker(rank: int, port: int, tau: float, out: str, wrap: str) -> None:
    """One rank: STEPS steps of data-parallel training (``wrap``: "ddp" or "fsdp"), the combined
    figures of each step and the weights at the end."""
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=WORLD)
    net = model()
    ddp = wrapped(net, wrap)
    opt = torch.optim.SGD(net.parameters(), lr=0.5)
    guard = LogitGuard(net, tau)
    steps = []
    with Monitor(net, mode="replace", history=False) as mon:
        for step in range(STEPS):
            loss(ddp, batch(step, rank)).backward()
            opt.step()
            opt.zero_grad()
            combined = combine_step(mon.step(step, log=False))
            steps.append(
                {
                    "step": combined.step,
                    "calls": combined.calls,
                    "heads": figures(combined),
                    "clipped": [[c.layer, c.head] for c in guard.apply(combined)],
                }
            )
    import dataclasses

    renamed = dataclasses.replace(combined, heads=[dataclasses.replace(h, layer=f"rank{rank}") for h in combined.heads])
    try:
        combine_step(renamed)
        mismatch = None
    except InputError as err:
        mismatch = str(err)
    Path(out).write_text(
        json.dumps(
            {
                "steps": steps,
                "mismatch": mismatch,
                "weights": [full(p).detach().double().flatten().tolist() for p in net.parameters()],
            }
        )
    )
    dist.destroy_process_group()
    time.sleep(0.1)  # gloo's workers done freeing before Python exits: see examples/train_gpt_monitored.py


def single_process(tau: float):
    """The reference: one process, both ranks' batches each step (DDP's gradient: the mean of the ranks')."""
    net = model()
    opt = torch.optim.SGD(net.parameters(), lr=0.5)
    guard = LogitGuard(net, tau)
    steps = []
    with Monitor(net, mode="replace", history=False) as mon:
        for step in range(STEPS):
            (sum(loss(net, batch(step, r)) for r in range(WORLD)) / WORLD).backward()
            opt.step()
            opt.zero_grad()
            s = mon.step(step, log=False)
            steps.append(
                {"calls": s.calls, "heads": figures(s), "clipped": [[c.layer, c.head] for c in guard.apply(s)]}
            )
    return steps, [p.detach().double().flatten() for p in net.parameters()]


def first_step_tau() -> float:
    """τ below about half the heads' first-step max logit, so that the guard clips."""
    net = model()
    with Monitor(net, history=False) as mon, torch.no_grad():
        for r in range(WORLD):
            net(batch(0, r))
        return float(np.median([h.max_logit for h in mon.step(0, log=False).heads]))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
@pytest.mark.parametrize("wrap", ["ddp", "fsdp"])
def test_two_gloo_ranks_combine_to_the_figures_of_one_process_on_both_batches(tmp_path, wrap):
    tau = first_step_tau()
    port = free_port()
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    procs = [
        subprocess.Popen(
            [sys.executable, __file__, str(rank), str(port), repr(tau), str(tmp_path / f"{rank}.json"), wrap],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for rank in range(WORLD)
    ]
    for p in procs:
        output, _ = p.communicate(timeout=120)
        assert p.returncode == 0, output
    ranks = [json.loads((tmp_path / f"{rank}.json").read_text()) for rank in range(WORLD)]
    reference, weights = single_process(tau)

    assert ranks[0]["steps"] == ranks[1]["steps"]  # bit-identical on every rank
    assert ranks[0]["weights"] == ranks[1]["weights"]  # so the guard clipped identically
    assert any(s["clipped"] for s in reference)  # not vacuous: the guard clipped
    for got, want in zip(ranks[0]["steps"], reference):
        assert got["calls"] == want["calls"] == 2 * WORLD
        assert got["clipped"] == want["clipped"]
        for g, w in zip(got["heads"], want["heads"], strict=True):
            assert {f: g[f] for f in ("layer", "head", *COUNTS)} == {f: w[f] for f in ("layer", "head", *COUNTS)}
            # Step 0 sees the same weights (float64 rounding of Σ entropy only); later steps weights
            # that differ by DDP's and the single process's gradient summation order (float32).
            np.testing.assert_allclose(
                [g[f] for f in FLOATS + SUMS], [w[f] for f in FLOATS + SUMS], rtol=1e-5, atol=1e-6
            )
            assert g["first_key_weight"] == g["first_key_sum"] / g["rows"] and g["keys"] == WORLD * 3 * 12
    for got, want in zip(ranks[0]["weights"], weights):
        np.testing.assert_allclose(got, want.numpy(), rtol=1e-5, atol=1e-6)
    assert ranks[0]["mismatch"] and "different layers or heads" in ranks[0]["mismatch"]
    assert ranks[1]["mismatch"] == ranks[0]["mismatch"].replace("rank0", "rank1")


def head(**kw):
    base = dict(
        layer="a",
        head=0,
        calls=1,
        rows=4,
        rows_empty=0,
        rows_broken=0,
        saturated_rows=1,
        float16_overflow_rows=0,
        entropy_mean=0.5,
        entropy_median=0.5,
        entropy_min=0.0,
        max_logit=3.0,
        min_logit=-1.0,
        max_abs_logit=3.0,
        rows_single=1,
        rows_of=5,
        first_key_weight=0.25,
        q_norm_mean=2.0,
        k_norm_mean=1.5,
        keys=8,
    )
    base.update(kw)
    rows, keys = base["rows"], base["keys"]
    return HeadFigures(
        **{
            "entropy_sum": base["entropy_mean"] * rows if rows else 0.0,
            "first_key_sum": base["first_key_weight"] * rows if rows else 0.0,
            "q_norm_sum": base["q_norm_mean"] * rows if rows else 0.0,
            "k_norm_sum": base["k_norm_mean"] * keys if keys else 0.0,
            **base,
        }
    )


def test_without_a_process_group_the_step_is_its_own_combination():
    step = Step(step=3, calls=1, fallbacks={}, heads=[head()])
    assert combine_step(step) is step


def test_the_packing_reduces_like_one_process(monkeypatch):
    """_pack/_reduce on two hand-made ranks, one with a head that saw no row: sums, extremes, NaN where none."""
    from attnscale.torch.distributed import _pack, _reduce

    unseen = dict(head=1, rows=0, rows_empty=4, **{f: math.nan for f in FLOATS if f != "k_norm_mean"})
    a = Step(step=1, calls=2, fallbacks={"dropout": 1}, heads=[head(), head(**unseen)])
    b = Step(
        step=1,
        calls=2,
        fallbacks={},
        heads=[
            head(
                rows=6,
                entropy_mean=1.0,
                entropy_min=0.25,
                max_logit=7.0,
                min_logit=-8.0,
                max_abs_logit=8.0,
                first_key_weight=0.5,
                q_norm_mean=3.0,
                k_norm_mean=0.5,
                keys=24,
            ),
            head(**unseen),
        ],
    )
    c = _reduce(np.stack([_pack(a), _pack(b)]), a)
    h0, h1 = c.heads
    assert (c.calls, c.fallbacks) == (4, {"dropout": 1})
    assert (h0.calls, h0.rows, h0.saturated_rows) == (2, 10, 2)
    assert h0.entropy_mean == pytest.approx((0.5 * 4 + 1.0 * 6) / 10)
    assert (h0.entropy_min, h0.max_logit, h0.min_logit, h0.max_abs_logit) == (0.0, 7.0, -8.0, 8.0)
    assert math.isnan(h0.entropy_median)
    assert (h0.rows_single, h0.rows_of, h0.entropy_sum) == (2, 10, pytest.approx(0.5 * 4 + 1.0 * 6))
    assert h0.first_key_weight == pytest.approx((0.25 * 4 + 0.5 * 6) / 10)
    assert h0.q_norm_mean == pytest.approx((2.0 * 4 + 3.0 * 6) / 10)
    assert (h0.keys, h0.k_norm_mean) == (32, pytest.approx((1.5 * 8 + 0.5 * 24) / 32))  # over keys, not rows
    assert h1.rows == 0 and h1.rows_empty == 8
    assert all(math.isnan(getattr(h1, f)) for f in FLOATS if f != "k_norm_mean")
    assert h1.k_norm_mean == pytest.approx(1.5)  # its keys were read, though every row was masked
    # A rank whose head had broken rows only (an overflow to +inf): its +inf is the combined max.
    broken = head(
        rows=0,
        rows_broken=2,
        entropy_mean=math.nan,
        entropy_min=math.nan,
        max_logit=math.inf,
        min_logit=1.0,
        max_abs_logit=math.inf,
    )
    one = Step(step=1, calls=1, fallbacks={}, heads=[head()])
    c = _reduce(np.stack([_pack(one), _pack(dataclasses.replace(one, heads=[broken]))]), one)
    assert (c.heads[0].max_logit, c.heads[0].min_logit, c.heads[0].rows_broken) == (math.inf, -1.0, 2)
    assert c.heads[0].entropy_min == 0.0 and c.heads[0].rows == 4
    with pytest.raises(InputError, match=r"fallback reasons \['made up'\] are not among"):
        _pack(Step(step=1, calls=1, fallbacks={"made up": 1}, heads=[head()]))


if __name__ == "__main__":
    worker(int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]), sys.argv[4], sys.argv[5])
