"""The monitor's cost controls: ``every=N`` (figures on one step in N, the others the model's own),
``rows=K`` (figures from K sampled query rows) and the bounded default history."""

import math

import pytest

torch = pytest.importorskip("torch")

from attnscale.errors import InputError, InputTypeError  # noqa: E402
from attnscale.experiments.training.gpt import GPT, GPTConfig  # noqa: E402
from attnscale.scales import InverseSqrtDk  # noqa: E402
from attnscale.torch.functional import attention_figures  # noqa: E402
from attnscale.torch.monitor.rows import sampled_rows  # noqa: E402
from attnscale.torch.monitor import Monitor  # noqa: E402


@pytest.fixture(scope="module")
def gpt():
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab=32, context=24, d_model=32, n_layers=2, d_k=8), InverseSqrtDk(), figures=False)
    tokens = torch.randint(0, 32, (3, 24), generator=torch.Generator().manual_seed(1))
    return model, tokens


def figures(step):
    return [
        (h.layer, h.head, h.rows, h.entropy_mean, h.entropy_min, h.max_logit, h.min_logit, h.saturated_rows)
        for h in step.heads
    ]


@pytest.mark.parametrize("mode", ["observe", "replace"])
@pytest.mark.parametrize("rows", [None, 5])
def test_every_leaves_unmeasured_steps_to_the_model_and_measures_the_others_as_without_it(gpt, mode, rows):
    model, tokens = gpt
    with torch.no_grad():
        own = model(tokens)
        with Monitor(model, mode=mode, rows=rows) as each:
            steps = [(model(tokens), each.step(s)) for s in range(7)]
        with Monitor(model, mode=mode, rows=rows, every=3) as sparse:
            sparse_steps = []
            for s in range(7):
                # Unmeasured: no torch-function mode on the stack and SDPA's names SDPA's own, so no
                # call of the model is intercepted.
                intercepting = torch._C._len_torch_function_stack() > 0 or rebound()
                sparse_steps.append((model(tokens), sparse.step(s), intercepting))
    for s, ((out, full), (out_sparse, step, intercepting)) in enumerate(zip(steps, sparse_steps)):
        assert step.measured == (s % 3 == 0) and intercepting == step.measured
        if step.measured:
            assert figures(step) == figures(full) and step.calls == full.calls == 2
            assert torch.equal(out_sparse, out)
        else:
            assert torch.equal(out_sparse, own) and step.heads == [] and step.calls == 0
    assert len(sparse.summary()) == 2 * 4 and sum(h.calls for h in sparse.summary()) == 3 * 4 * 2


def test_every_measures_training_steps_with_gradients_and_skips_the_sinks(gpt):
    model, tokens = gpt
    written = []

    class Sink:
        def write(self, step):
            written.append(step.step)

        def close(self):
            pass

    with Monitor(model, mode="replace", every=2, history=False, sinks=[Sink()]) as mon:
        for s in range(5):
            logits = model(tokens)
            logits.square().mean().backward()
            mon.step(s)
    assert written == [0, 2, 4]
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters())
    model.zero_grad()


def self_attention(q, k, v, **kw):
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, **kw)


class SelfAttention(torch.nn.Module):
    def forward(self, q, k, v, **kw):
        return self_attention(q, k, v, **kw)


@pytest.mark.parametrize("mode", ["observe", "replace"])
@pytest.mark.parametrize("kind", ["causal", "mask", "gqa"])
def test_rows_reads_the_sampled_rows_exactly(mode, kind):
    """Each head's sampled figures are those of its rows that the monitor drew, computed here from
    every row's figures (attnscale.torch.attention, float64) and picked out afterwards."""
    gen = torch.Generator().manual_seed(4)
    B, H, L, d = 3, 4, 40, 8
    H_kv = 2 if kind == "gqa" else H
    q = 3 * torch.randn(B, H, L, d, generator=gen)
    k, v = torch.randn(B, H_kv, L, d, generator=gen), torch.randn(B, H_kv, L, d, generator=gen)
    kw = {
        "causal": dict(is_causal=True),
        "gqa": dict(is_causal=True, enable_gqa=True),
        "mask": dict(attn_mask=torch.rand(L, L, generator=gen) > 0.4),
    }[kind]
    layer, K = SelfAttention(), 6
    with Monitor(layer, mode=mode, rows=K) as mon:
        layer(q, k, v, **kw)
        step = mon.step(0)
    picked = sampled_rows(q, K, 0, 0)  # the rows of step 0, call 0
    assert picked.shape == (B, K) and all(len(set(r.tolist())) == K for r in picked)
    _, every = attention_figures(
        q.double(),
        k.double(),
        v.double(),
        mask=kw.get("attn_mask"),
        causal="top_left" if kw.get("is_causal") else False,
        logit_range=True,
    )
    for h, head in enumerate(step.heads):
        ent = every.entropy[:, h].gather(-1, picked)
        hi = every.max_logit[:, h].gather(-1, picked)
        ok = ~torch.isnan(ent)
        assert head.rows == int(ok.sum()) and head.rows_of == B * L
        assert head.entropy_mean == pytest.approx(float(ent[ok].mean()), rel=1e-5, abs=1e-6)
        assert head.max_logit == pytest.approx(float(hi[ok].max()), rel=1e-5)
        assert head.entropy_mean_se > 0


def test_rows_sampling_error_is_what_the_result_states():
    """The full mean lies within a few stated standard errors of the sample's; the sample's extremes
    never pass the full ones; K ≥ L reads every row (standard error 0); the draw repeats run to run."""
    gen = torch.Generator().manual_seed(5)
    q, k, v = (
        2 * torch.randn(4, 2, 200, 16, generator=gen),
        torch.randn(4, 2, 200, 16, generator=gen),
        torch.randn(4, 2, 200, 16, generator=gen),
    )
    layer = SelfAttention()

    def run(rows):
        with Monitor(layer, rows=rows) as mon:
            layer(q, k, v, is_causal=True)
        return mon.summary()

    sample, again, full, all_rows = run(25), run(25), run(None), run(200)
    assert [figures_of(h) for h in sample] == [figures_of(h) for h in again]
    assert [figures_of(h) for h in all_rows] == [figures_of(h) for h in full]
    for s, f in zip(sample, full):
        # Each sequence's first query attends one key: counted apart, when sampled.
        assert s.rows + s.rows_single == 4 * 25 and s.rows_of == f.rows + f.rows_single == 4 * 200
        assert f.rows_single == 4 and f.entropy_mean_se == 0.0
        assert abs(s.entropy_mean - f.entropy_mean) < 4 * s.entropy_mean_se
        assert s.max_logit <= f.max_logit and s.entropy_min >= f.entropy_min


def figures_of(h):
    return (h.rows, h.entropy_mean, h.entropy_min, h.max_logit, h.entropy_median)


def test_history_is_bounded_by_default_and_says_when_it_stopped():
    layer = SelfAttention()
    q = torch.randn(1, 2, 6, 4)
    with Monitor(layer, history=2) as mon:
        for _ in range(3):
            layer(q, q, q)
        step = mon.step(0)
    assert len(mon.calls) == 2 and mon.history_full
    assert all(math.isnan(h.entropy_median) for h in mon.summary())
    assert all(not math.isnan(h.entropy_median) for h in step.heads)  # a step's rows are kept


@pytest.mark.parametrize(
    "kwargs,error,message",
    [
        (dict(every=0), InputError, "every: expected an integer >= 1, got 0"),
        (dict(rows=0), InputError, "rows: expected an integer >= 1, got 0"),
        (dict(rows=2.5), InputError, "rows: expected an integer >= 1, got 2.5"),
        (dict(history=-1), InputTypeError, "history: expected True, False or a number of calls >= 0, got -1"),
    ],
)
def test_bad_cost_controls_name_the_argument(kwargs, error, message):
    with pytest.raises(error, match=message):
        Monitor(SelfAttention(), **kwargs)


@pytest.mark.parametrize("mode", ["observe", "replace"])
def test_only_the_model_runs_under_the_capture_mode(gpt, mode):
    """The capture's mode is on torch's stack while the model (or one of its modules) runs, and off
    for the loss, the backward and the optimiser: each torch call under a mode costs more. A module
    called on its own, after the model, is still seen."""
    model, tokens = gpt
    depth = []
    with Monitor(model, mode=mode) as mon:
        assert torch._C._len_torch_function_stack() == 1  # entered: on until the model exits
        hook = model.blocks[0].register_forward_hook(lambda *a: depth.append(torch._C._len_torch_function_stack()))
        out = model(tokens)
        assert torch._C._len_torch_function_stack() == 0  # the loss and the rest: no mode
        out.square().mean().backward()
        x = torch.randn(3, 24, 32)
        model.blocks[1].attn(x)  # a module called on its own
        step = mon.step(0)
        hook.remove()
    assert depth == [1]
    assert torch._C._len_torch_function_stack() == 0
    assert step.calls == 3 and {h.layer for h in step.heads} == {"blocks.0.attn", "blocks.1.attn"}


def rebound() -> bool:
    """Whether SDPA's name in torch.nn.functional is bound to the capture's function."""
    return torch.nn.functional.scaled_dot_product_attention is not torch._C._nn.scaled_dot_product_attention


def test_steps_every_leaves_alone_have_no_hook_and_no_mode(gpt):
    """A paused step costs nothing per module call either: the capture's hooks leave with the mode,
    and SDPA's names are SDPA's own. The first forward is watched both ways (hooks and mode, and the
    names); once every call came through the names, they alone watch: no mode, and two hooks on the
    model only (whether it runs), none on its modules."""
    model, tokens = gpt
    hooks = lambda: sum(len(m._forward_pre_hooks) + len(m._forward_hooks) for m in model.modules())  # noqa: E731
    seen = []
    with torch.no_grad(), Monitor(model, every=2) as mon:
        for s in range(4):
            seen.append((hooks(), torch._C._len_torch_function_stack(), rebound()))
            model(tokens)
            mon.step(s)
    assert hooks() == 0 and not rebound()
    checking = (len(list(model.modules())) + 1, 1, True)
    assert seen == [checking, (0, 0, False), (2, 0, True), (0, 0, False)]


def test_the_padding_hook_leaves_with_the_paused_steps_too(gpt):
    """A model whose forward takes an attention_mask gets the monitor's padding pre-hook on measured
    steps only: the steps every=N leaves alone run with no hook of the monitor's."""
    model, tokens = gpt

    class Wrapped(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = model

        def forward(self, x, attention_mask=None):
            return self.inner(x)

    wrapped = Wrapped()
    seen = []
    with torch.no_grad(), Monitor(wrapped, every=2) as mon:
        pre = lambda: sum(h == mon._tokens._read for h in wrapped._forward_pre_hooks.values())  # noqa: E731
        for s in range(4):
            seen.append(pre())
            wrapped(tokens, attention_mask=torch.ones_like(tokens))
            mon.step(s)
    assert seen == [1, 0, 1, 0] and pre() == 0


class _Attending(torch.nn.Module):
    """Self-attention over x (B, L, 8) as 2 heads; its forward takes an attention_mask it does not use."""

    def forward(self, x, attention_mask=None):
        q = x.unflatten(-1, (2, 4)).transpose(1, 2)  # (B, 2, L, 4)
        return torch.nn.functional.scaled_dot_product_attention(q, q, q)


class _Padded(torch.nn.Module):
    """An outer module taking the attention_mask, around an inner one that takes one too."""

    def __init__(self):
        super().__init__()
        self.inner = _Attending()

    def forward(self, x, attention_mask=None):
        return self.inner(x, attention_mask=attention_mask)


@pytest.mark.parametrize("mode", ["observe", "replace"])
def test_the_outermost_module_alone_reads_the_padding_and_only_for_its_own_forward(mode):
    """Only the outermost module taking an attention_mask gets the padding hook (a hook on each
    inner one would slow each of its calls); its rows are the real tokens during its forward, and
    a module inside it called on its own afterwards has every row counted, not the last forward's."""
    model = _Padded()
    x = torch.randn(2, 5, 8, generator=torch.Generator().manual_seed(0))
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]])
    with torch.no_grad(), Monitor(model, mode=mode) as mon:
        hooked = [m for m in model.modules() if any(h == mon._tokens._read for h in m._forward_pre_hooks.values())]
        assert hooked == [model]
        model(x, attention_mask=mask)
        through = mon.step(0)
        model.inner(x)
        alone = mon.step(1)
        model(x, mask)  # the mask in its place, not by name
        in_place = mon.step(2)
    assert {h.rows + h.rows_single for h in through.heads} == {8}  # 3 + 5 real tokens
    assert {h.rows + h.rows_single for h in alone.heads} == {10}  # 2 × 5: no padding read
    assert repr(in_place.heads) == repr(through.heads)
