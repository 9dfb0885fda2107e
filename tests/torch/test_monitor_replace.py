"""attnscale.torch.monitor in replace mode and per-step logging: outputs equal SDPA's within the stated
tolerance, training follows plain SDPA's loss curve, step figures equal an independent float64
recomputation, fallbacks are counted, memory stays bounded."""

import json
import math
import types

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from attnscale.errors import InputError, InputTypeError  # noqa: E402
from attnscale.torch import Monitor  # noqa: E402
from attnscale.softmax_rows import SATURATED_WEIGHT  # noqa: E402
from attnscale.torch.monitor import NoAttentionSeen  # noqa: E402

F = torch.nn.functional


class TwoCalls(torch.nn.Module):
    """Causal self-attention, then grouped-query cross-attention with an HF-style additive mask that
    also biases (and fully masks one row)."""

    def forward(self, x, memory, bias):
        h = F.scaled_dot_product_attention(x, x, x, is_causal=True)
        kv = memory[:, :1]  # one key head for three query heads
        return F.scaled_dot_product_attention(h, kv, kv, attn_mask=bias, scale=0.7, enable_gqa=True)


def problem(dtype, seed=0, dead_row=-math.inf):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(2, 3, 11, 8, generator=g, dtype=dtype)
    memory = torch.randn(2, 3, 13, 8, generator=g, dtype=dtype)
    bias = torch.randn(1, 3, 11, 13, generator=g, dtype=dtype)
    bias[..., 5:8] = torch.finfo(dtype).min
    bias[..., 0, :] = dead_row
    return x, memory, bias


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_replace_outputs_equal_sdpa_within_the_stated_tolerance_and_figures_equal_observe(dtype):
    model = TwoCalls()
    x, memory, bias = problem(dtype)
    with torch.no_grad():
        plain = model(x, memory, bias)
        with Monitor(model, mode="observe") as seen:
            model(x, memory, bias)
        with Monitor(model, mode="replace") as mon:
            replaced = model(x, memory, bias)
    # The module docstring's tolerance: max |Δout| ≤ 1e-5·max|v| in float32 (rounding, not bit-for-bit).
    tol = (1e-5 if dtype == torch.float32 else 1e-12) * float(max(x.abs().max(), memory.abs().max()))
    diff = float((replaced - plain).abs().max())
    print(f"{dtype}: max |replace − SDPA| = {diff:.3g} (tolerance {tol:.3g})")
    assert diff <= tol
    assert not mon.fallbacks and [c.source for c in mon.calls] == ["replaced", "replaced"]
    for a, b in zip(mon.summary(), seen.summary()):
        assert (a.layer, a.head, a.rows, a.rows_empty, a.calls, a.saturated_rows) == (
            b.layer,
            b.head,
            b.rows,
            b.rows_empty,
            b.calls,
            b.saturated_rows,
        )
        np.testing.assert_allclose(
            [a.entropy_mean, a.entropy_min, a.max_logit, a.min_logit],
            [b.entropy_mean, b.entropy_min, b.max_logit, b.min_logit],
            rtol=1e-6,
            atol=1e-9,
        )


@pytest.mark.parametrize("mode", ["observe", "replace"])
def test_figures_the_kernel_tallies_as_it_runs_equal_those_summed_after(mode, monkeypatch):
    """The monitor takes each call's per-head table from the kernel, made with the rows; summed from
    the figures afterwards instead (head_sums), every head's figures are the same: counts, extremes
    and medians exactly, means to rounding."""
    from attnscale.torch import head_summary

    model = TwoCalls()
    x, memory, bias = problem(torch.float32)
    tabled = []
    figures = head_summary.call_figures
    monkeypatch.setattr(
        "attnscale.torch.monitor.tally.call_figures",
        lambda stats, *a, **kw: tabled.append(stats.head_table is not None) or figures(stats, *a, **kw),
    )

    def summary():
        with torch.no_grad(), Monitor(model, mode=mode) as mon:
            model(x, memory, bias)
        return mon.summary()

    made = summary()
    from attnscale.torch.monitor.padding import RealTokens

    monkeypatch.setattr(RealTokens, "table_rows", lambda self, q, picked=None: (False, None))
    summed = summary()
    assert tabled == [True, True, False, False]
    for a, b in zip(made, summed, strict=True):
        for name, value in vars(a).items():
            if isinstance(value, float) and name.endswith(("_mean", "_sum", "_weight", "_se")):
                np.testing.assert_allclose(value, vars(b)[name], rtol=1e-12, err_msg=name)
            else:
                assert value == vars(b)[name] or (value != value and vars(b)[name] != vars(b)[name]), name


def test_a_row_masked_by_finite_numbers_falls_back_to_sdpa():
    """SDPA gives a row whose every key is masked by finfo.min the mean of v, not 0: left to SDPA, counted."""
    model = TwoCalls()
    x, memory, bias = problem(torch.float32, dead_row=torch.finfo(torch.float32).min)
    with torch.no_grad():
        plain = model(x, memory, bias)
        with Monitor(model, mode="replace") as mon:
            replaced = model(x, memory, bias)
    # The second call is SDPA's own (on the first call's replaced output: equal to rounding).
    torch.testing.assert_close(replaced, plain, rtol=0, atol=1e-5)
    assert float(plain[:, :, 0].abs().max()) > 0.01  # not the 0 we would give
    assert mon.fallbacks == {"fully masked row": 1}
    assert [c.source for c in mon.calls] == ["replaced", "sdpa"]  # still observed


class TinyLM(torch.nn.Module):
    """Embedding → one causal SDPA layer of 2 heads → logits. Keeps the last q, k it made (detached)
    so that a test can recompute the attention figures independently."""

    def __init__(self, vocab=11, d=16, heads=2):
        super().__init__()
        self.heads, self.d_k = heads, d // heads
        self.emb = torch.nn.Embedding(vocab, d)
        self.qkv = torch.nn.Linear(d, 3 * d)
        self.out = torch.nn.Linear(d, vocab)

    def forward(self, tokens):
        B, L = tokens.shape
        q, k, v = self.qkv(self.emb(tokens)).view(B, L, 3, self.heads, self.d_k).permute(2, 0, 3, 1, 4)
        self.last = (q.detach(), k.detach())
        h = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (B, H, L, d_k)
        return self.out(h.transpose(1, 2).reshape(B, L, -1))


def train(mode, steps=8, seed=0):
    torch.manual_seed(seed)
    model = TinyLM()
    opt = torch.optim.Adam(model.parameters(), lr=3e-2)
    data = torch.Generator().manual_seed(1)
    losses, figures, recomputed = [], [], []
    ctx = Monitor(model, mode=mode, history=False) if mode else None
    mon = ctx.__enter__() if ctx else None
    try:
        for step in range(steps):
            x = (torch.randint(0, 11, (4, 1), generator=data) + 3 * torch.arange(9)) % 11  # learnable
            loss = F.cross_entropy(model(x)[:, :-1].flatten(0, 1), x[:, 1:].flatten())
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(float(loss.detach()))
            recomputed.append(independent_figures(*model.last))
            if mon is not None:
                figures.append(mon.step(step))
    finally:
        if ctx is not None:
            ctx.__exit__(None, None, None)
    return losses, figures, recomputed, (mon.fallbacks if mon else None)


def independent_figures(q, k):
    """Per head, float64 from q and k: entropy mean and min, max logit, max |logit|, saturated fraction
    (entropy and saturation over the query rows after the first, which attends one key)."""
    q, k = q.double(), k.double()
    s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    L = s.shape[-1]
    s = s.masked_fill(~torch.ones(L, L, dtype=torch.bool).tril(), -math.inf)
    p = torch.softmax(s, -1)
    entropy = torch.special.entr(p).sum(-1)  # (B, H, L)
    finite = torch.where(torch.isfinite(s), s, torch.nan)
    out = []
    for h in range(q.shape[1]):
        e, z = entropy[:, h], finite[:, h]
        out.append(
            [
                float(e[:, 1:].mean()),
                float(e[:, 1:].min()),
                float(z.nan_to_num(-math.inf).max()),
                float(z.abs().nan_to_num(-math.inf).max()),
                float((p[:, h, 1:].amax(-1) > SATURATED_WEIGHT).double().mean()),
            ]
        )
    return out


def test_training_in_replace_mode_follows_sdpa_and_logs_the_true_figures():
    plain, _, _, _ = train(None)
    replaced, steps, recomputed, fallbacks = train("replace")
    print("loss curves:", [f"{a:.6f}/{b:.6f}" for a, b in zip(plain, replaced)])
    np.testing.assert_allclose(replaced, plain, rtol=1e-5)  # float32 rounding, 8 Adam steps
    assert plain[-1] < plain[0]  # it learned: a curve, not a constant
    assert not fallbacks
    for step, mine in zip(steps, recomputed):
        assert step.calls == 1 and [(h.layer, h.head) for h in step.heads] == [("TinyLM", 0), ("TinyLM", 1)]
        for h, ref in zip(step.heads, mine):
            assert h.rows == 4 * 8 and h.rows_single == 4 and h.rows_empty == 0
            got = [h.entropy_mean, h.entropy_min, h.max_logit, h.max_abs_logit, h.saturated_fraction]
            np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)


def test_gradients_flow_through_the_replaced_call():
    q, k, v = (torch.randn(2, 2, 7, 5, dtype=torch.float64, requires_grad=True) for _ in range(3))

    class One(torch.nn.Module):
        def forward(self, q, k, v):
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    layer = One()
    ref = torch.autograd.grad(layer(q, k, v).square().sum(), (q, k, v))
    with Monitor(layer, mode="replace") as mon:
        got = torch.autograd.grad(layer(q, k, v).square().sum(), (q, k, v))
    assert mon.calls[0].backend == "kernel"  # the fused kernel, with its own backward
    for a, b in zip(got, ref):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


class Dropping(torch.nn.Module):
    def forward(self, x, mask=None):
        return F.scaled_dot_product_attention(x, x, x, attn_mask=mask, dropout_p=0.5 if self.training else 0.0)


def test_fallbacks_are_counted_and_still_observed_where_they_can_be():
    layer = Dropping().train()
    x = torch.randn(1, 2, 6, 4)
    with Monitor(layer, mode="replace") as mon:
        torch.manual_seed(0)
        out = layer(x)
        step = mon.step(0)
    torch.manual_seed(0)
    assert torch.equal(out, layer(x))  # SDPA ran it, with its dropout
    assert mon.fallbacks == {"dropout": 1} and step.fallbacks == {"dropout": 1}
    assert step.calls == 1 and all(h.rows == 6 for h in step.heads)  # figures recomputed (pre-dropout)

    learned = torch.zeros(6, 6, requires_grad=True)
    with Monitor(layer.eval(), mode="replace") as mon:
        layer(x, learned).sum().backward()
    assert mon.fallbacks == {"learned mask": 1} and learned.grad is not None

    class NoKeys(torch.nn.Module):
        def forward(self, q, k):
            return F.scaled_dot_product_attention(q, k, k)

    no_keys = NoKeys()
    with Monitor(no_keys, mode="replace") as mon:  # S = 0 keys: computed as SDPA computes it (zeros)
        out = no_keys(x, x[:, :, :0])
    assert torch.equal(out, F.scaled_dot_product_attention(x, x[:, :, :0], x[:, :, :0]))
    heads = mon.summary()
    assert not mon.fallbacks and len(heads) == 2  # its rows attend no key: counted apart, no figure
    assert all(h.rows == 0 and h.rows_empty == 6 and h.keys == 0 and math.isnan(h.entropy_mean) for h in heads)

    class InfiniteScale(torch.nn.Module):
        def forward(self, q):
            return F.scaled_dot_product_attention(q, q, q, scale=math.inf)

    infinite = InfiniteScale()
    with Monitor(infinite, mode="replace") as mon:  # SDPA takes it; attention() refuses: SDPA runs it
        out = infinite(x)
    assert torch.equal(out.isnan(), F.scaled_dot_product_attention(x, x, x, scale=math.inf).isnan())
    assert mon.fallbacks == {"unsupported": 1} and mon.summary() == []


def test_step_figures_are_strict_json_with_reasons_for_nulls():
    class Masked(torch.nn.Module):
        def forward(self, x, mask):
            return F.scaled_dot_product_attention(x, x, x, attn_mask=mask)

    x = torch.randn(1, 2, 3, 4)
    mask = torch.ones(1, 2, 3, 3, dtype=torch.bool)
    mask[0, 1] = False  # head 1 attends nothing
    layer = Masked()
    with Monitor(layer, mode="replace", history=False) as mon:
        layer(x, mask)
        first = mon.step(5)
        with pytest.warns(NoAttentionSeen, match="no attention call seen in step 6"):
            second = mon.step(6)  # nothing since: no heads, said
    record = json.loads(json.dumps(first.to_json(), allow_nan=False))
    assert record["step"] == 5 and record["calls"] == 1
    h0, h1 = record["heads"]
    assert h0["rows"] == 3 and h0["entropy_mean"] > 0 and h0["entropy_median"] is None  # history=False
    assert "why_null" not in h0  # said once, for every head:
    assert record["why_null"] == {"entropy_median": "history=False keeps no per-row entropies to take a median of"}
    assert h1["rows_empty"] == 3 and h1["entropy_mean"] is None and h1["why_null"] == "no row attended any key"
    assert second.heads == [] and second.calls == 0
    assert [f.rows for f in mon.summary()] == [3, 0]  # the context keeps the total


def kept_numbers(obj, seen=None) -> int:
    """Numbers in every NumPy array and tensor reachable from obj's attributes and containers, but
    for Python modules' globals (the capture holds the modules whose names it rebinds)."""
    seen = set() if seen is None else seen
    if id(obj) in seen or isinstance(obj, types.ModuleType):
        return 0
    seen.add(id(obj))
    if isinstance(obj, (np.ndarray, torch.Tensor)):
        return obj.size if isinstance(obj, np.ndarray) else obj.numel()
    children = (
        obj.values()
        if isinstance(obj, dict)
        else obj
        if isinstance(obj, (list, tuple, set))
        else vars(obj).values()
        if hasattr(obj, "__dict__")
        else ()
    )
    return sum(kept_numbers(c, seen) for c in children)


def test_memory_is_bounded_whatever_the_number_of_calls():
    layer = Dropping().eval()
    x = torch.randn(2, 4, 16, 8)
    with Monitor(layer, mode="replace", history=False) as mon:
        layer(x)
        after_one = kept_numbers(mon)
        for _ in range(50):
            layer(x)
        after_many = kept_numbers(mon)
        assert mon.step(0).heads[0].calls == 51
    assert after_one == after_many <= 14 * 4  # per head: Running's 14 (counts, sums, extremes; ROWS)


def test_bad_arguments():
    with pytest.raises(InputError, match="mode: expected one of"):
        Monitor(None, mode="rewrite")
    with pytest.raises(InputTypeError, match="sinks: expected objects with write"):
        Monitor(None, sinks=[print])
    with pytest.warns(NoAttentionSeen, match="while the monitor was active"):  # it saw no call
        with Monitor(None, mode="replace") as mon, pytest.raises(InputTypeError, match="global_step: expected an int"):
            mon.step("3")


class _Layer(torch.nn.Module):
    def forward(self, x, mask, causal):
        return F.scaled_dot_product_attention(x, x, x, attn_mask=mask, is_causal=causal)


class _TwoLayers(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.first, self.second = _Layer(), _Layer()

    def forward(self, x, mask=None, causal=False):
        return self.second(self.first(x, mask, causal), mask, causal)


def test_a_kept_call_gives_what_a_fresh_monitor_gives_and_changes_with_its_call(monkeypatch):
    """Replace mode keeps the calls it checked by key (by key) and runs the kernel straight for
    a later call of the same key: every step equals, bit for bit (outputs and every head figure),
    the step a fresh monitor gives the same forward, whatever changed between forwards — the batch,
    the mask's presence, shape and values, causal, the dtype, gradients on. And it is taken:
    attention() itself runs only for the first call of each key (the two layers share theirs)."""
    from attnscale.torch.monitor import kernel as monitor_module

    calls = []
    real = monitor_module._figures
    monkeypatch.setattr(monitor_module, "_figures", lambda *a, **k: calls.append(1) or real(*a, **k))
    g = torch.Generator().manual_seed(5)
    x, wide = torch.randn(2, 3, 7, 8, generator=g), torch.randn(4, 3, 7, 8, generator=g)
    mask = torch.rand(2, 1, 7, 7, generator=g) > 0.4
    # Each forward changes one thing from the one before it (or nothing: kept).
    forwards = [
        dict(x=x),
        dict(x=x * 2),  # kept: other values, the same key
        dict(x=wide),  # another batch
        dict(x=x),
        dict(x=x, causal=True),
        dict(x=x, mask=mask),
        dict(x=x, mask=~mask),  # kept: the mask's values are not the key
        dict(x=x, mask=mask[:, :, :1]),  # a mask of another shape
        dict(x=x),
        dict(x=x.clone().requires_grad_()),  # gradients on: the training backend's key
        dict(x=x),
        dict(x=x),  # kept
        dict(x=x.double()),
    ]
    model = _TwoLayers()

    def step_of(mon, s, f):
        out = model(f["x"], f.get("mask"), f.get("causal", False))
        return out.detach(), repr(mon.step(s).heads), len(calls)

    with Monitor(model, mode="replace") as kept:
        steps = [step_of(kept, s, f) for s, f in enumerate(forwards)]
    # attention() ran for the first layer on a forward of a key not seen before, the second layer's
    # call of that key kept (and x's key from the first forward still kept on the fourth and later).
    made = [b - a for a, b in zip([0] + [n for *_, n in steps], [n for *_, n in steps])]
    assert made == [1, 0, 1, 0, 1, 1, 0, 1, 0, 1, 0, 0, 1]
    for s, f in enumerate(forwards):
        with Monitor(model, mode="replace") as fresh:
            out, heads, _ = step_of(fresh, s, f)
        assert torch.equal(out, steps[s][0]) and heads == steps[s][1], f"forward {s}"


class _SelfThenCross(torch.nn.Module):
    """One module making two kinds of call in turn: self-attention on x, then cross-attention to memory."""

    def forward(self, x, memory):
        x = F.scaled_dot_product_attention(x, x, x)
        return F.scaled_dot_product_attention(x, memory, memory)


def test_kept_calls_serve_every_module_whatever_it_called_before_and_are_bounded(monkeypatch):
    """A kept key serves any call of it: a module making two kinds of call in turn runs both kept
    from its second forward on (its steps still a fresh monitor's), and batches of another length
    are one attention() a forward, not one a layer. At most KEPT_KEYS keys are kept, the oldest
    going first."""
    from attnscale.torch.monitor import kernel as monitor_module
    from attnscale.torch.monitor import replace as replace_module

    calls = []
    real = monitor_module._figures
    monkeypatch.setattr(monitor_module, "_figures", lambda *a, **k: calls.append(1) or real(*a, **k))
    g = torch.Generator().manual_seed(6)
    x, memory = torch.randn(2, 3, 5, 8, generator=g), torch.randn(2, 3, 9, 8, generator=g)
    both = _SelfThenCross()

    def made_by(mon, s, module, *inputs):
        """attention()'s runs in step s, its output and its heads."""
        before = len(calls)
        out = module(*inputs)
        return len(calls) - before, out, repr(mon.step(s).heads)

    with Monitor(both, mode="replace") as mon:
        steps = [made_by(mon, s, both, x * (s + 1), memory) for s in range(3)]
    assert [made for made, *_ in steps] == [2, 0, 0]
    with Monitor(both, mode="replace") as fresh:
        _, out, heads = made_by(fresh, 2, both, x * 3, memory)
    assert torch.equal(out, steps[2][1]) and heads == steps[2][2]

    monkeypatch.setattr(replace_module, "KEPT_KEYS", 2)
    model = _TwoLayers()
    lengths = [5, 7, 5, 7, 9, 5]  # the third key pushes out the first: 5 is made again
    xs = [torch.randn(2, 3, n, 8, generator=g) for n in lengths]
    with Monitor(model, mode="replace") as mon:
        made = [made_by(mon, s, model, xs[s])[0] for s in range(len(xs))]
        assert len(mon._replacer._kept) == 2
    assert made == [1, 1, 0, 0, 1, 1]
