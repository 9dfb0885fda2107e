"""The monitor on a torch.compile'd model: every layer × head seen in both modes, named as the eager model names
them (whole model or block by block; QK-clip on them); observe's outputs the
compiled model's own bit for bit (its gradients to rounding: the graph with the monitor's op in it is
fused another way), replace's (the fused kernel as one op in the graph, one pass) within replace
mode's tolerance of them, gradients too; no graph break and no recompilation per step.
One compiled model for the module (CPU compiles take seconds)."""

import pytest

torch = pytest.importorskip("torch")

from attnscale.experiments.training.gpt import GPT, GPTConfig  # noqa: E402
from attnscale.scales import InverseSqrtDk  # noqa: E402
from attnscale.torch.monitor import Monitor  # noqa: E402
from helpers.tiny_hf import llama_config  # noqa: E402

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


@pytest.mark.slow
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
        (f"blocks.{i}.attn", h) for i in range(LAYERS) for h in range(HEADS)
    ]
    for ours, reference in zip(step.heads, eager.summary()):
        assert ours.rows == reference.rows
        assert ours.entropy_mean == pytest.approx(reference.entropy_mean, rel=1e-5)
        assert ours.max_logit == pytest.approx(reference.max_logit, rel=1e-5)
        assert ours.keys == reference.keys > 0
        for f in ("first_key_weight", "q_norm_mean", "k_norm_mean"):  # the compiled path's inputs reach them
            assert getattr(ours, f) == pytest.approx(getattr(reference, f), rel=1e-5)


@pytest.mark.slow
def test_a_compiled_tiny_llama_is_seen_whole():
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = llama_config(vocab_size=64, max_position_embeddings=32)
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
    # transformers wraps forward in wrapped_func(*args, **kwargs): the model is args[0] there, and still named
    assert sorted({h.layer for h in step.heads}) == ["model.layers.0.self_attn", "model.layers.1.self_attn"]
    from attnscale.torch.guard import LogitGuard

    assert len(LogitGuard(llama, 1e-6, log_only=True).apply(step)) == 8


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


class NanoAttention(torch.nn.Module):
    """nanoGPT's CausalSelfAttention: a fused c_attn (nn.Linear to [q | k | v]), n_head, SDPA."""

    def __init__(self, d=16, n_head=4):
        super().__init__()
        self.n_head = n_head
        self.c_attn = torch.nn.Linear(d, 3 * d)
        self.c_proj = torch.nn.Linear(d, d)

    def forward(self, x):
        B, L, D = x.shape
        q, k, v = (t.view(B, L, self.n_head, -1).transpose(1, 2) for t in self.c_attn(x).split(D, dim=-1))
        y = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.c_proj(y.transpose(1, 2).reshape(B, L, D))


class NanoGPT(torch.nn.Module):
    def __init__(self, layers=2, d=16):
        super().__init__()
        self.h = torch.nn.ModuleList(torch.nn.ModuleDict({"ln": torch.nn.LayerNorm(d)}) for _ in range(layers))
        for block in self.h:
            block.attn = NanoAttention(d)

    def forward(self, x):
        for block in self.h:
            x = x + block.attn(block.ln(x))
        return x


@pytest.mark.slow
def test_qk_clip_on_a_compiled_nanogpt_changes_only_the_q_and_k_rows_of_c_attn():
    """Monitor and guard on the compiled model or the plain one, in every combination: the figures carry
    the eager names, the guard clips them, and only W_Q and W_K (the q and k rows of c_attn) change; on
    layer 0 (whose inputs the clip does not move) the clipped heads' max logit is then τ, with no recompilation."""
    from attnscale.torch.guard import LogitGuard

    torch.manual_seed(0)
    model = NanoGPT()
    with torch.no_grad():
        model.h[0].attn.c_attn.weight[4:8] *= 8.0  # the q rows of layer 0's head 1 run hot
    x = torch.randn(2, 12, 16, generator=torch.Generator().manual_seed(3))
    fast = torch.compile(model)
    layers = ["h.0.attn", "h.1.attn"]

    def figures(watched):
        with torch.no_grad(), Monitor(watched, history=False) as mon:
            fast(x)
            return mon.step(0, log=False)

    for watched, guarded in ((fast, fast), (fast, model), (model, fast)):
        step = figures(watched)
        assert [h.layer for h in step.heads] == [layer for layer in layers for _ in range(4)]
        assert len(LogitGuard(guarded, 1e-6, log_only=True).apply(step)) == 8  # every head of every layer known
    graphs = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    before = {k: v.clone() for k, v in model.state_dict().items()}
    step = figures(fast)
    first = [h.max_logit for h in step.heads[:4]]
    tau = sorted(first)[-2] * 1.01  # only the hottest head of layer 0 is above, and maybe some of layer 1
    clips = LogitGuard(fast, tau).apply(step)
    assert ("h.0.attn", 1) in {(c.layer, c.head) for c in clips}
    d = 16
    for name, value in model.state_dict().items():
        if not name.endswith("c_attn.weight") and not name.endswith("c_attn.bias"):
            assert torch.equal(value, before[name]), name  # nothing but c_attn
            continue
        layer = name.rsplit(".c_attn", 1)[0]
        clipped = {c.head for c in clips if c.layer == layer}
        changed = {i // 4 for i in range(3 * d) if not torch.equal(value[i], before[name][i])}
        assert changed == clipped | {4 + h for h in clipped}, name  # q rows, k rows; never v
    after = figures(fast)
    for was, now in zip(first, [h.max_logit for h in after.heads[:4]]):
        assert now == pytest.approx(min(was, tau), rel=1e-5)
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == graphs


def _attend(attn, x):
    return attn(x)


class Looped(torch.nn.Module):
    """A NanoGPT's blocks, their attention run through one compiled function given the module as an argument."""

    def __init__(self, model):
        super().__init__()
        self.h, self.run = model.h, torch.compile(_attend)

    def forward(self, x):
        for block in self.h:
            x = x + self.run(block.attn, block.ln(x))
        return x


def test_blocks_compiled_one_by_one_share_a_graph_and_keep_their_names():
    """Regional compilation: torch.compile shares one graph between the blocks, so the name is not baked
    in the graph; each call still carries its block's path. A compiled function given the block as an
    argument cannot tell one block from another: its calls are compiled[i], with one warning saying why."""
    import warnings

    from attnscale.torch.capture import UnnamedCompiledCall

    torch.manual_seed(0)
    model = NanoGPT(layers=3)
    x = torch.randn(1, 6, 16, generator=torch.Generator().manual_seed(4))
    for block in model.h:
        block.attn.compile()
    with torch.no_grad(), Monitor(model, history=False) as mon:
        before = torch._dynamo.utils.counters["stats"]["unique_graphs"]
        model(x)
        graphs = torch._dynamo.utils.counters["stats"]["unique_graphs"]
        assert graphs == before + 1  # one graph for the three blocks
        model(x)
        step = mon.step(0, log=False)
        assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == graphs
        assert [h.layer for h in step.heads[::4]] == ["h.0.attn", "h.1.attn", "h.2.attn"]
    looped = Looped(model)
    with torch.no_grad(), Monitor(looped, history=False) as mon, warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        looped(x)
        looped(x)
        step = mon.step(0, log=False)
    assert [h.layer for h in step.heads[::4]] == [f"compiled[{i}]" for i in range(6)]  # by order in the step
    unnamed = [str(w.message) for w in seen if issubclass(w.category, UnnamedCompiledCall)]
    assert len(unnamed) == 1 and "is no module's method" in unnamed[0], unnamed
