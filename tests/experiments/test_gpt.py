"""The project's one GPT (experiments/training/gpt.py): its options build what they say, its parameters come in
the order the shipped results were trained with, and a monitor and the logit guard ride its SDPA path
by the layers' names."""

import math

import pytest

torch = pytest.importorskip("torch")

from attnscale.errors import InputError  # noqa: E402
from attnscale.experiments.training.gpt import GPT, GPTConfig  # noqa: E402
from attnscale.scales import InverseSqrtDk  # noqa: E402
from attnscale.torch.guard import LogitGuard  # noqa: E402
from attnscale.torch import Monitor  # noqa: E402

SIZES = dict(vocab=256, context=16, d_model=64, n_layers=2, d_k=16)


def build(seed=0, figures=True, **options):
    torch.manual_seed(seed)
    return GPT(GPTConfig(**SIZES, **options), InverseSqrtDk(), figures=figures)


def std(t) -> float:
    return float(t.detach().double().std())


def test_the_init_schemes_draw_what_they_say():
    D, layers = SIZES["d_model"], SIZES["n_layers"]
    gpt2, fan_in = build(), build(init="fan_in")
    for model, embedding, residual in ((gpt2, 0.02, 1 / math.sqrt(2 * layers)), (fan_in, 1.0, 1.0)):
        attn, block = model.blocks[1].attn, model.blocks[1]
        assert std(model.tok.weight) == pytest.approx(embedding, rel=0.05)
        assert std(model.pos.weight) == pytest.approx(embedding, rel=0.1)
        assert std(attn.w_q.weight) == pytest.approx(1 / math.sqrt(D), rel=0.05)
        assert std(block.fc.weight) == pytest.approx(1 / math.sqrt(D), rel=0.05)
        assert std(attn.w_o.weight) == pytest.approx(residual / math.sqrt(D), rel=0.05)
        assert std(block.proj.weight) == pytest.approx(residual / math.sqrt(4 * D), rel=0.05)
    with pytest.raises(InputError, match=r"init: expected one of .*'gpt2'.*'fan_in'.*got 'xavier'"):
        GPTConfig(init="xavier")


def test_the_head_is_the_embedding_or_a_layer_of_its_own():
    tied, untied = build(), build(tied_head=False, init="fan_in")
    assert tied.lm_head is None and tuple(untied.lm_head.weight.shape) == (SIZES["vocab"], SIZES["d_model"])
    count = lambda m: sum(p.numel() for p in m.parameters())  # noqa: E731
    assert count(untied) - count(tied) == SIZES["vocab"] * SIZES["d_model"]
    assert std(untied.lm_head.weight) == pytest.approx(1 / math.sqrt(SIZES["d_model"]), rel=0.05)
    tokens = torch.randint(0, SIZES["vocab"], (2, 16), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        torch.testing.assert_close(tied(tokens), tied.ln_f(_residual_stream(tied, tokens)) @ tied.tok.weight.T)
        torch.testing.assert_close(untied(tokens), untied.lm_head(untied.ln_f(_residual_stream(untied, tokens))))


def _residual_stream(model, tokens):
    x = model.tok(tokens) + model.pos(torch.arange(tokens.shape[1]))
    for block in model.blocks:
        x = block(x)
    return x


def test_qk_layernorm_makes_the_attention_blind_to_the_scale_of_w_q_and_w_k():
    plain, normed = build(figures=False), build(figures=False, qk_layernorm=True)
    attn = normed.blocks[0].attn
    assert tuple(attn.q_norm.weight.shape) == tuple(attn.k_norm.weight.shape) == (SIZES["d_k"],)
    assert plain.blocks[0].attn.q_norm is None
    tokens = torch.randint(0, SIZES["vocab"], (2, 16), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        before_normed, before_plain = normed(tokens), plain(tokens)
        for model in (normed, plain):
            for block in model.blocks:
                block.attn.w_q.weight.mul_(10.0)
                block.attn.w_k.weight.mul_(10.0)
        torch.testing.assert_close(normed(tokens), before_normed, rtol=1e-4, atol=1e-4)
        assert not torch.allclose(plain(tokens), before_plain, rtol=1e-2, atol=1e-2)  # not vacuous


def test_parameters_come_in_the_order_the_experiments_were_trained_with():
    """Creation order is the order of the random draws and of the optimiser's parameters: embeddings,
    then per block ln1, q, k, v, o, QK-layernorm, ln2, MLP; then the final LayerNorm and the head."""
    names = [n for n, _ in build(tied_head=False, init="fan_in", qk_layernorm=True).named_parameters()]
    block = [
        "ln1.weight",
        "attn.w_q.weight",
        "attn.w_k.weight",
        "attn.w_v.weight",
        "attn.w_o.weight",
        "attn.q_norm.weight",
        "attn.k_norm.weight",
        "ln2.weight",
        "fc.weight",
        "proj.weight",
    ]
    assert names == [
        "tok.weight",
        "pos.weight",
        *(f"blocks.{i}.{b}" for i in range(2) for b in block),
        "ln_f.weight",
        "lm_head.weight",
    ]


def test_a_monitor_and_the_guard_ride_the_sdpa_path_by_the_layers_names():
    model = build(figures=False, init="fan_in", tied_head=False)
    tokens = torch.randint(0, SIZES["vocab"], (2, 16), generator=torch.Generator().manual_seed(3))
    with Monitor(model, mode="replace", history=False) as mon, torch.no_grad():
        model(tokens)
        step = mon.step(0, log=False)
    assert sorted({h.layer for h in step.heads}) == ["blocks.0.attn", "blocks.1.attn"]
    tau = sorted(h.max_logit for h in step.heads)[len(step.heads) // 2]
    guard = LogitGuard(model, tau)
    assert sorted(guard.targets) == ["blocks.0.attn", "blocks.1.attn"]
    above = {(h.layer, h.head) for h in step.heads if h.max_logit > tau}
    assert above and {(c.layer, c.head) for c in guard.apply(step)} == above
