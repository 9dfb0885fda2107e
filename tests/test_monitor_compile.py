"""The monitor on a torch.compile'd model: every layer × head seen in both modes; observe's outputs the
compiled model's own bit for bit (its gradients to rounding: the graph with the monitor's op in it is
fused another way), replace's (the fused kernel as one op in the graph, one pass) within replace
mode's tolerance of them, gradients too; no graph break and no recompilation per step.
One compiled model for the module (CPU compiles take seconds)."""

import pytest

torch = pytest.importorskip("torch")

from attnscale.experiments.training.gpt import GPT, GPTConfig  # noqa: E402
from attnscale.scales import InverseSqrtDk  # noqa: E402
from attnscale.torch.monitor import Monitor  # noqa: E402

LAYERS, HEADS = 2, 4


@pytest.fixture(scope="module")
def compiled():
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab=32, context=24, d_model=32, n_layers=LAYERS, d_k=8), InverseSqrtDk(), figures=False)
    tokens = torch.randint(0, 32, (3, 24), generator=torch.Generator().manual_seed(1))
    fast = torch.compile(model)
    return model, fast, tokens, fast(tokens).detach()


def _grads(model, fast, tokens):
    """The compiled model's gradients of one step's loss (then zeroed again)."""
    fast(tokens).square().mean().backward()
    grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    return grads


def _close(ours, theirs):
    """Replace mode's tolerance (the module docstring of attnscale.torch.monitor): 1e-5 × max |theirs|."""
    return float((ours - theirs).abs().max()) <= 1e-5 * float(theirs.abs().max())


def test_no_graph_break_under_the_monitor(compiled):
    """Fails when a change puts a graph break in the model's path or the monitor's (explain traces afresh)."""
    model, _, tokens, _ = compiled
    for mode in ("observe", "replace"):
        with Monitor(model, mode=mode):
            explained = torch._dynamo.explain(model)(tokens)
        assert explained.graph_break_count == 0, [b.reason for b in explained.break_reasons]
        assert explained.graph_count == 1


@pytest.mark.parametrize("mode", ["observe", "replace"])
def test_every_layer_and_head_of_a_compiled_training_step(compiled, mode):
    model, fast, tokens, own = compiled
    with torch.no_grad(), Monitor(model) as eager:
        model(tokens)
    own_grads = _grads(model, fast, tokens)
    with Monitor(fast, mode=mode) as mon:
        for s in range(3):
            out = fast(tokens)
            out.square().mean().backward()
            step = mon.step(s)
            if s == 0:
                graphs = torch._dynamo.utils.counters["stats"]["unique_graphs"]
                grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == graphs  # no recompilation per step
    if mode == "observe":  # the compiled model's own output; its gradients to rounding (see the module docstring)
        assert torch.equal(out.detach(), own) and all(_close(a, b) for a, b in zip(grads, own_grads))
    else:  # its own to rounding
        assert not torch.equal(out.detach(), own), "replace mode ran the model's own SDPA"
        assert _close(out.detach(), own) and all(_close(a, b) for a, b in zip(grads, own_grads))
    assert step.fallbacks == {}
    assert [(h.layer, h.head) for h in step.heads] == [
        (f"compiled[{i}]", h) for i in range(LAYERS) for h in range(HEADS)
    ]
    for ours, reference in zip(step.heads, eager.summary()):
        assert ours.rows == reference.rows
        assert ours.entropy_mean == pytest.approx(reference.entropy_mean, rel=1e-5)
        assert ours.max_logit == pytest.approx(reference.max_logit, rel=1e-5)
        assert ours.keys == reference.keys > 0
        for f in ("first_key_weight", "q_norm_mean", "k_norm_mean"):  # the compiled path's inputs reach them
            assert getattr(ours, f) == pytest.approx(getattr(reference, f), rel=1e-5)


def test_a_compiled_tiny_llama_is_seen_whole():
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=32,
    )
    config._attn_implementation = "sdpa"
    llama = transformers.LlamaForCausalLM(config).eval()
    tokens = torch.randint(0, 64, (2, 12), generator=torch.Generator().manual_seed(2))
    fast = torch.compile(llama)
    with torch.no_grad():
        own = fast(tokens).logits
        with Monitor(fast, mode="replace") as mon:
            out = fast(tokens).logits
            step = mon.step(0)
    assert _close(out, own) and step.fallbacks == {}
    assert len(step.heads) == 2 * 4 and all((h.rows, h.rows_single) == (2 * 11, 2) for h in step.heads)


def test_a_new_monitor_compiles_nothing_new(compiled):
    """Each monitor's capture puts a mode on torch's stack, which Dynamo guards by type: a mode class
    per monitor recompiled the model for every monitor entered (and at the 8th fell back to eager).
    One class per mode: a graph for each, then none."""
    model, fast, tokens, own = compiled
    for mode in ("replace", "observe"):
        with Monitor(fast, mode=mode):
            fast(tokens)
    graphs = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    for mode in ("replace", "observe", "replace", "observe"):
        with Monitor(fast, mode=mode) as mon:
            out = fast(tokens)
            step = mon.step(0)
        assert len(step.heads) == LAYERS * HEADS
    assert torch.equal(out.detach(), own)  # observe: the compiled model's own
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == graphs
