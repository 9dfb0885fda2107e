"""attnscale.torch.monitor where training runs: recomputed calls counted once, figures for causal
models, discarded calls, sinks left to their owner, one model's calls only."""

import dataclasses
import math
import warnings

import pytest

torch = pytest.importorskip("torch")

from attnscale.experiments.training.gpt import GPT, GPTConfig  # noqa: E402
from attnscale.scales import InverseSqrtDk  # noqa: E402
from attnscale.torch import Monitor  # noqa: E402
from attnscale.torch.monitor import NoAttentionSeen  # noqa: E402
from helpers.tiny_hf import llama_config  # noqa: E402

F = torch.nn.functional


def gpt(seed=0):
    torch.manual_seed(seed)
    config = GPTConfig(vocab=13, context=12, d_model=32, n_layers=2, d_k=8, init="fan_in", tied_head=False)
    return GPT(config, InverseSqrtDk(), figures=False)


def tokens(seed=1):
    return torch.randint(0, 13, (3, 12), generator=torch.Generator().manual_seed(seed))


def checkpointed(net, reentrant):
    """Each block's forward rerun by torch.utils.checkpoint in the backward."""
    from torch.utils.checkpoint import checkpoint

    for block in net.blocks:
        block.forward = (lambda f: lambda x: checkpoint(f, x, use_reentrant=reentrant))(block.forward)
    return net


def train_steps(net, mode, steps=2):
    """Monitored training steps of ``net``: the steps, the gradients of the last and the loss."""
    out = []
    with Monitor(net, mode=mode) as mon:
        for step in range(steps):
            x = tokens(step)
            loss = F.cross_entropy(net(x)[:, :-1].flatten(0, 1), x[:, 1:].flatten())
            net.zero_grad()
            loss.backward()
            out.append(mon.step(step))
        calls = list(mon.calls)
    return out, [p.grad.clone() for p in net.parameters()], calls


@pytest.mark.parametrize("mode", ["observe", "replace"])
@pytest.mark.parametrize("reentrant", [True, False])
def test_checkpointed_blocks_count_their_calls_once(mode, reentrant):
    """A checkpointed GPT reruns each block's attention in the backward; the monitor reports the
    calls, rows and figures of the same model unchecked, bit for bit, and replace mode's gradients
    are those of the attention it computed in the forward."""
    plain, plain_grads, plain_calls = train_steps(gpt(), mode)
    rerun, rerun_grads, rerun_calls = train_steps(checkpointed(gpt(), reentrant), mode)
    assert [s.calls for s in rerun] == [s.calls for s in plain] == [2, 2]
    assert [dataclasses.asdict(h) for s in rerun for h in s.heads] == [
        dataclasses.asdict(h) for s in plain for h in s.heads
    ]
    assert len(rerun_calls) == len(plain_calls) == 4
    assert all(s.fallbacks == {} for s in rerun)
    for a, b in zip(rerun_grads, plain_grads):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_a_recomputed_fallback_is_counted_once():
    """Replace mode's fallbacks (dropout here) during a checkpoint's recomputation are not counted again."""
    from torch.utils.checkpoint import checkpoint

    class Dropped(torch.nn.Module):
        def forward(self, x):
            return F.scaled_dot_product_attention(x, x, x, dropout_p=0.5)

    layer = Dropped()
    x = torch.randn(1, 2, 5, 8, requires_grad=True)
    with Monitor(layer, mode="replace") as mon:
        checkpoint(layer, x, use_reentrant=False).sum().backward()
        step = mon.step(0)
    assert step.calls == 1 and step.fallbacks == {"dropout": 1} and mon.fallbacks == {"dropout": 1}


@pytest.mark.parametrize("impl", ["eager", "sdpa"])
def test_a_transformers_model_with_gradient_checkpointing_counts_each_call_once(impl):
    transformers = pytest.importorskip("transformers")

    def run(checkpointing):
        torch.manual_seed(0)
        config = llama_config(attn_implementation=impl)
        net = transformers.LlamaForCausalLM(config).train()
        if checkpointing:
            # transformers 5 renamed it; 4.x has only the old name
            (getattr(net, "activation_checkpointing_enable", None) or net.gradient_checkpointing_enable)()
        x = tokens().clamp(max=49)
        with Monitor(net) as mon:
            net(input_ids=x, labels=x).loss.backward()
            return mon.step(0)

    plain, rerun = run(False), run(True)
    assert rerun.calls == plain.calls == 2
    assert [dataclasses.asdict(h) for h in rerun.heads] == [dataclasses.asdict(h) for h in plain.heads]


@pytest.mark.parametrize("mode", ["observe", "replace"])
def test_a_causal_models_single_key_rows_are_counted_apart(mode):
    """Random-weight causal GPT: the first query of each sequence attends one key. It is counted in
    rows_single (3 sequences), not in rows, saturation or the entropy figures, whose smallest is
    then that of a row with two keys or more; its logit stays in the logit figures."""
    net = gpt()
    x = tokens()
    with torch.no_grad(), Monitor(net, mode=mode) as mon:
        net(x)
        step = mon.step(0)
    from attnscale.torch import capture_sdpa

    with torch.no_grad(), capture_sdpa(net) as cap:
        net(x)
    for call, layer in zip(cap.calls, ("blocks.0.attn", "blocks.1.attn")):
        logits = call.logits()  # (3, H, 12, 12), float64
        p = logits.softmax(-1)
        entropy = -(p * logits.log_softmax(-1)).nan_to_num().sum(-1)[:, :, 1:]  # rows with ≥ 2 keys
        top = p.amax(-1)[:, :, 1:]
        for h in [f for f in step.heads if f.layer == layer]:
            assert (h.rows, h.rows_single, h.rows_empty, h.rows_broken) == (3 * 11, 3, 0, 0)
            assert h.entropy_min > 0.05
            assert h.entropy_min == pytest.approx(float(entropy[:, h.head].min()), rel=1e-5)
            assert h.entropy_mean == pytest.approx(float(entropy[:, h.head].mean()), rel=1e-5)
            assert h.saturated_rows == int((top[:, h.head] > 0.99).sum()) < 3
            finite = logits[:, h.head][torch.isfinite(logits[:, h.head])]
            assert h.max_logit == pytest.approx(float(finite.max()), rel=1e-5)
            assert h.min_logit == pytest.approx(float(finite.min()), rel=1e-5)


def test_a_call_of_single_key_rows_only_keeps_its_logits():
    """One query, one key (a decoder's first token): no entropy figure, the logit reported."""

    class One(torch.nn.Module):
        def forward(self, q, k):
            return F.scaled_dot_product_attention(q, k, k)

    q, k = torch.randn(1, 2, 1, 8, dtype=torch.float64), torch.randn(1, 2, 1, 8, dtype=torch.float64)
    layer = One()
    with Monitor(layer) as mon:
        layer(q, k)
        step = mon.step(0)
    for h in step.heads:
        assert (h.rows, h.rows_single, h.saturated_rows) == (0, 1, 0)
        assert math.isnan(h.entropy_mean) and math.isnan(h.entropy_min)
        assert h.max_logit == h.min_logit == pytest.approx(float(q[0, h.head, 0] @ k[0, h.head, 0]) / math.sqrt(8))
    assert step.to_json()["heads"][0]["why_null"] == "every attended row attended a single key"


class Causal(torch.nn.Module):
    def forward(self, x):
        return F.scaled_dot_product_attention(x, x, x, is_causal=True)


def test_discard_drops_the_calls_since_the_step_silently_and_counts_no_step():
    layer, x = Causal(), torch.randn(1, 2, 6, 8)
    with warnings.catch_warnings():
        warnings.simplefilter("error", NoAttentionSeen)
        with Monitor(layer, every=2) as mon:
            layer(x)
            first = mon.step(0)
            mon.discard()  # nothing since: no warning either
            layer(x)  # step 1 is not measured
            mon.step(1)
            layer(2 * x)  # an evaluation between steps
            mon.discard()
            layer(x)
            again = mon.step(2)
            summary = mon.summary()
            calls = len(mon.calls)
    assert again.measured and [dataclasses.asdict(h) for h in again.heads] == [
        dataclasses.asdict(h) for h in first.heads
    ]
    assert calls == 2 and [h.calls for h in summary] == [2, 2]
    assert [h.entropy_median for h in summary] == [h.entropy_median for h in first.heads]


def test_the_monitor_leaves_the_sinks_it_was_given_open():
    class Sink:
        closed = False
        got = 0

        def write(self, step):
            assert not self.closed
            self.got += 1

        def close(self):
            self.closed = True

    sink, layer = Sink(), Causal()
    with Monitor(layer, sinks=[sink]) as mon:
        layer(torch.randn(1, 2, 5, 8))
        mon.step(0)
    assert sink.got == 1 and not sink.closed


def test_a_monitor_sees_its_own_models_calls_only():
    a, b, x = Causal(), Causal(), torch.randn(1, 2, 5, 8)
    for mode in ("observe", "replace"):
        with Monitor(a, mode=mode) as mon:
            b(x)  # before a's first call: the mode is on
            a(x)
            b(x)
            step = mon.step(0)
        assert step.calls == 1 and {h.layer for h in step.heads} == {"Causal"} and step.heads[0].calls == 1
        assert torch.equal(b(x), F.scaled_dot_product_attention(x, x, x, is_causal=True))


def test_reduce_combines_before_the_sinks():
    seen = []

    class Sink:
        def write(self, step):
            seen.append(step)

    def reduce(step):
        return dataclasses.replace(step, calls=10 * step.calls)

    layer = Causal()
    with Monitor(layer, sinks=[Sink()], reduce=reduce) as mon:
        layer(torch.randn(1, 2, 5, 8))
        step = mon.step(0)
    assert step.calls == 10 and seen == [step]
    with pytest.raises(TypeError, match="reduce: expected a function of a Step"):
        Monitor(layer, reduce=3)


@pytest.mark.parametrize("impl", ["eager", "sdpa"])
@pytest.mark.parametrize("mode", ["observe", "replace"])
def test_padded_query_rows_are_no_figures_whichever_side_pads(impl, mode):
    """A tiny Llama on three sequences of different lengths, padded right and padded left: the rows
    are the real tokens' (the attention_mask says which), so both paddings give the same figures as
    the sequences one at a time, which have no padding."""
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = llama_config(attn_implementation=impl)
    net = transformers.LlamaForCausalLM(config).eval()
    lengths = (9, 5, 7)
    seqs = [torch.randint(1, 50, (n,), generator=torch.Generator().manual_seed(n)) for n in lengths]

    def padded(side):
        ids = torch.zeros(len(seqs), max(lengths), dtype=torch.long)
        mask = torch.zeros_like(ids)
        for i, s in enumerate(seqs):
            where = slice(0, len(s)) if side == "right" else slice(max(lengths) - len(s), None)
            ids[i, where], mask[i, where] = s, 1
        return {"input_ids": ids, "attention_mask": mask}

    def figures(batches):
        with Monitor(net, mode=mode) as mon, torch.no_grad():
            for batch in batches:
                net(**batch)
        return {(f.layer, f.head): (f.rows, f.rows_single, f.entropy_mean, f.max_logit) for f in mon.summary()}

    alone = figures([{"input_ids": s[None], "attention_mask": torch.ones(1, len(s), dtype=torch.long)} for s in seqs])
    assert {r + single for r, single, *_ in alone.values()} == {sum(lengths)}
    for side in ("right", "left"):
        got = figures([padded(side)])
        assert got.keys() == alone.keys()
        for key, (rows, single, entropy, top) in got.items():
            assert (rows, single) == alone[key][:2], (side, key)
            assert entropy == pytest.approx(alone[key][2], rel=1e-5) and top == pytest.approx(alone[key][3], rel=1e-5)
