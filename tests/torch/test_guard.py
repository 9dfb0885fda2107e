"""attnscale.torch.guard (QK-clip): a clipped head's max logit on the batch its figures came from becomes exactly
τ when the weights have not moved since, the others are untouched; in the documented loop (clip after the
update) τ × what the update did to it, measured; GQA, HF BERT and Llama, fused projections, head counts from the
monitor's calls; refusals and bad steps, one line each."""

import dataclasses
import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from attnscale.errors import InputError, InputTypeError  # noqa: E402
from attnscale.experiments.training.gpt import GPT, GPTConfig  # noqa: E402
from attnscale.scales import InverseSqrtDk  # noqa: E402
from attnscale.torch import Monitor  # noqa: E402
from attnscale.torch.guard import LogitGuard  # noqa: E402
from helpers.tiny_hf import llama_config  # noqa: E402

F = torch.nn.functional


def gpt(seed=0, qk_layernorm=False, n_layers=1):
    # One layer by default: a clip in layer 0 changes what later layers see, so only it can be checked exactly.
    # The logit-growth experiment's GPT: its options, attention on SDPA (what the monitor rides).
    torch.manual_seed(seed)
    config = GPTConfig(
        vocab=13,
        context=16,
        d_model=32,
        n_layers=n_layers,
        d_k=8,
        init="fan_in",
        tied_head=False,
        qk_layernorm=qk_layernorm,
    )
    return GPT(config, InverseSqrtDk(), figures=False)


def first_layer(step):
    """The step's figures of its first layer only (later layers see what the clip changed)."""
    import dataclasses

    return dataclasses.replace(step, heads=[h for h in step.heads if h.layer == step.heads[0].layer])


def batch(seed=1):
    return torch.randint(0, 13, (4, 16), generator=torch.Generator().manual_seed(seed))


def recorded_max_logits(model, x) -> np.ndarray:
    """(layers, heads) largest attended logit q·kᵀ/√d_k under the causal mask, in float64 from each
    layer's own projections (not the monitor)."""
    seen = {}
    hooks = [
        getattr(block.attn, name).register_forward_hook(
            lambda module, args, out, key=(i, name): seen.__setitem__(key, out.detach().double())
        )
        for i, block in enumerate(model.blocks)
        for name in ("w_q", "w_k")
    ]
    with torch.no_grad():
        model(x)
    for hook in hooks:
        hook.remove()
    B, L = x.shape
    out = []
    for i, block in enumerate(model.blocks):
        heads = lambda t, attn=block.attn: t.view(B, L, attn.n_heads, attn.d_k).transpose(1, 2)  # noqa: E731
        z = heads(seen[i, "w_q"]) @ heads(seen[i, "w_k"]).transpose(-2, -1) / math.sqrt(block.attn.d_k)
        z = z.masked_fill(~torch.ones(L, L, dtype=torch.bool).tril(), -math.inf)  # (B, H, L, L)
        out.append(z.amax(dim=(0, 2, 3)).tolist())
    return np.array(out)


def renamed(step, layer, heads=None):
    """``step`` with every head in ``layer`` (the first ``heads`` of them): the monitor's figures of a
    module run on its own, as the guard of a model holding it under that name sees them."""
    return dataclasses.replace(step, heads=[dataclasses.replace(h, layer=layer) for h in step.heads[:heads]])


def monitored_step(model, x):
    with Monitor(model, mode="observe", history=False) as mon, torch.no_grad():
        model(x)
        return mon.step(0, log=False)


def test_a_clipped_head_ends_at_tau_exactly_and_the_others_are_untouched():
    model, x = gpt(), batch()
    before = recorded_max_logits(model, x)
    tau = float(np.median(before))  # about half the heads above
    step = monitored_step(model, x)
    np.testing.assert_allclose([h.max_logit for h in step.heads], before.flatten(), rtol=1e-5)
    guard = LogitGuard(model, tau)
    clips = guard.apply(step)
    assert {(c.layer, c.head) for c in clips} == {(f"blocks.{i}.attn", h) for i, h in zip(*np.nonzero(before > tau))}
    after = recorded_max_logits(model, x)
    above = before > tau
    assert above.any() and (~above).any()
    np.testing.assert_allclose(after[above], tau, rtol=1e-5)
    assert np.array_equal(after[~above], before[~above])
    assert all(c.factor == pytest.approx(tau / c.max_logit) for c in clips) and guard.clips == len(clips)


@pytest.mark.slow
def test_in_training_every_head_stays_within_tau_times_the_last_updates_growth():
    """Per step t: m_t (the monitor, before the update), m'_t (same batch after the update), m''_t (after
    the clip). A clipped head has m''_t = τ·m'_t/m_t exactly: τ plus the last update's growth."""
    tau = 8.0
    plain, guarded = gpt(), gpt()
    x = batch()  # one batch: logits grow fast
    runs = {}
    for name, model in (("plain", plain), ("guarded", guarded)):
        opt = torch.optim.Adam(model.parameters(), lr=0.1)
        guard = LogitGuard(model, tau) if name == "guarded" else None
        peaks = []
        with Monitor(model, mode="replace" if guard else "observe", history=False) as mon:
            for _ in range(10):
                loss = F.cross_entropy(model(x)[:, :-1].flatten(0, 1), x[:, 1:].flatten())
                step = mon.step(0, log=False)
                opt.zero_grad()
                loss.backward()
                opt.step()
                m = np.array([h.max_logit for h in step.heads]).reshape(1, 4)
                peaks.append(m.max())
                if guard is None:
                    continue
                grown = recorded_max_logits(model, x)  # m'_t
                clipped = {(c.layer, c.head) for c in guard.apply(step)}
                after = recorded_max_logits(model, x)  # m''_t
                for layer in range(1):
                    for h in range(4):
                        if (f"blocks.{layer}.attn", h) in clipped:
                            assert after[layer, h] == pytest.approx(tau * grown[layer, h] / m[layer, h], rel=1e-4)
                            assert after[layer, h] <= tau * max(1.0, grown[layer, h] / m[layer, h]) * (1 + 1e-4)
                        else:
                            assert m[layer, h] <= tau and after[layer, h] == grown[layer, h]
        runs[name] = (peaks, guard.clips if guard else 0)
    print("peak max logit per step, plain:", np.round(runs["plain"][0], 1), "guarded:", np.round(runs["guarded"][0], 1))
    assert max(runs["plain"][0]) > 3 * tau  # not vacuous: without it they run away
    assert runs["guarded"][1] > 0 and max(runs["guarded"][0]) < max(runs["plain"][0]) / 2


# Recomputed on its batch right after the documented loop's clip, a clipped head of the 3-layer GPT below
# measured 0.50-1.07 × τ in layer 0 and 0.57-1.30 × τ deeper (docs/qk-clip.md quotes these numbers and
# this band, which holds them with a margin for another CPU's rounding).
BAND = (0.45, 1.35)


@pytest.mark.slow
def test_in_the_documented_loop_a_clipped_head_ends_at_tau_times_what_the_update_did_to_it():
    """forward, backward, opt.step(), then guard.apply(mon.step()) on a fresh batch each step: the figures
    are the forward's (before the update), so on that batch the clip leaves a head of layer 0 at exactly
    τ·m'/m (m: the forward's max logit, m': after the update, before the clip); deeper layers' inputs move
    with the clips before them. Every clipped head within BAND × τ, and the band not vacuous."""
    tau, model = 4.0, gpt(n_layers=3)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    guard, g = LogitGuard(model, tau), torch.Generator().manual_seed(5)
    ratios: dict[int, list] = {0: [], 1: []}
    with Monitor(model, mode="replace", history=False) as mon:
        for s in range(30):
            x = torch.randint(0, 13, (4, 16), generator=g)
            F.cross_entropy(model(x)[:, :-1].flatten(0, 1), x[:, 1:].flatten()).backward()
            opt.step()
            opt.zero_grad()
            step = mon.step(s, log=False)
            grown = recorded_max_logits(model, x)  # m'
            clips = guard.apply(step)
            after = recorded_max_logits(model, x)
            for c in clips:
                layer = int(c.layer.split(".")[1])
                ratios[min(layer, 1)].append(after[layer, c.head] / tau)
                if layer == 0:
                    assert after[0, c.head] == pytest.approx(tau * grown[0, c.head] / c.max_logit, rel=1e-5)
    print({k: (len(v), round(min(v), 3), round(max(v), 3)) for k, v in ratios.items()})
    assert len(ratios[0]) > 10 and len(ratios[1]) > 5  # clips in every layer
    assert BAND[0] <= min(ratios[0] + ratios[1]) and max(ratios[0] + ratios[1]) <= BAND[1]
    assert min(ratios[0]) < 0.9 and max(ratios[1]) > 1.1  # not exactly τ: what the docs must not promise


class GroupedQuery(torch.nn.Module):
    """Llama-style names: q_proj, k_proj (with biases, as Qwen2), head_dim; 4 query heads on 2 key heads."""

    def __init__(self, d=16, heads=4, kv_heads=2, head_dim=4):
        super().__init__()
        self.head_dim, self.heads, self.kv_heads = head_dim, heads, kv_heads
        self.q_proj = torch.nn.Linear(d, heads * head_dim)
        self.k_proj = torch.nn.Linear(d, kv_heads * head_dim)
        self.v_proj = torch.nn.Linear(d, kv_heads * head_dim)

    def forward(self, x):
        B, L, _ = x.shape
        q = self.q_proj(x).view(B, L, self.heads, -1).transpose(1, 2)
        k = self.k_proj(x).view(B, L, self.kv_heads, -1).transpose(1, 2)
        v = self.v_proj(x).view(B, L, self.kv_heads, -1).transpose(1, 2)
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)


def test_grouped_query_heads_each_shrink_by_their_own_factor():
    torch.manual_seed(0)
    model = GroupedQuery()
    with torch.no_grad():
        model.q_proj.weight[4:8] *= 6.0  # head 1 (group 0) and ...
        model.q_proj.weight[12:16] *= 3.0  # ... head 3 (group 1) run hot
    x = torch.randn(2, 9, 16, generator=torch.Generator().manual_seed(2))
    before = np.array([h.max_logit for h in monitored_step(model, x).heads])
    tau = float(np.sort(before)[1]) * 1.01  # two heads above τ
    clips = LogitGuard(model, tau).apply(monitored_step(model, x))
    assert len(clips) == 2
    after = np.array([h.max_logit for h in monitored_step(model, x).heads])
    np.testing.assert_allclose(after, np.minimum(before, tau), rtol=1e-5)


def test_refusals_name_the_reason():
    with pytest.raises(InputError, match="QK-norm"):
        LogitGuard(gpt(qk_layernorm=True), 10.0)
    with pytest.raises(InputError, match="no attention projections"):
        LogitGuard(torch.nn.Sequential(torch.nn.Linear(3, 3)), 10.0)
    for tau in (0.0, -1.0, math.inf, True):
        with pytest.raises(InputError, match="tau: expected a finite number > 0"):
            LogitGuard(gpt(), tau)
    other = GroupedQuery()
    with pytest.raises(InputError, match="give monitor and guard the same model"):
        LogitGuard(gpt(), 1.0).apply(monitored_step(other, torch.randn(1, 3, 16)))


@pytest.mark.parametrize("family", ["bert", "llama"])
def test_hugging_face_attention_is_found_and_clipped_exactly(family):
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    if family == "bert":
        config = transformers.BertConfig(
            vocab_size=50,
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=4,
            intermediate_size=64,
            attn_implementation="sdpa",
        )
        model = transformers.BertModel(config).eval()
        layers = [f"encoder.layer.{i}.attention.self" for i in range(2)]
    else:
        config = llama_config(attn_implementation="sdpa")
        model = transformers.LlamaModel(config).eval()
        layers = [f"layers.{i}.self_attn" for i in range(2)]
    ids = torch.randint(0, 50, (2, 12), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        for layer in layers:  # logits large enough to clip
            attn = model.get_submodule(layer)
            for proj in (attn.query, attn.key) if family == "bert" else (attn.q_proj, attn.k_proj):
                proj.weight *= 4.0

    def figures():
        with Monitor(model, mode="observe", history=False) as mon, torch.no_grad():
            model(input_ids=ids)
            return mon.step(0, log=False)

    before = figures()
    assert sorted({h.layer for h in before.heads}) == layers
    first = first_layer(before)
    tau = float(np.median([h.max_logit for h in first.heads]))
    guard = LogitGuard(model, tau)
    assert sorted(guard.targets) == layers
    assert len(guard.apply(first)) == 2
    after = first_layer(figures())
    np.testing.assert_allclose(
        [h.max_logit for h in after.heads], [min(h.max_logit, tau) for h in first.heads], rtol=1e-4
    )


class FusedQKV(torch.nn.Module):
    """nanoGPT's CausalSelfAttention (c_attn: nn.Linear to [q | k | v], n_head), or with attr="qkv" and
    num_heads the timm/nanoGPT-style one; heads_attr=None keeps no head count (refused)."""

    def __init__(self, attr="c_attn", heads_attr="n_head", d=16, heads=4):
        super().__init__()
        self.attr, self.heads = attr, heads
        if heads_attr:
            setattr(self, heads_attr, heads)
        setattr(self, attr, torch.nn.Linear(d, 3 * d))

    def forward(self, x):
        B, L, D = x.shape
        q, k, v = getattr(self, self.attr)(x).split(D, dim=-1)
        q, k, v = (t.view(B, L, self.heads, -1).transpose(1, 2) for t in (q, k, v))
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def hot(model, *rows):
    """Scale weight rows [a, b) of the first (fused) projection so that some heads exceed τ."""
    proj = model.q_proj if hasattr(model, "q_proj") else getattr(model, model.attr)
    with torch.no_grad():
        for (a, b), f in rows:
            proj.weight[a:b] *= f


def clip_two_hottest(model, x, **options):
    """(max logits before, after) per head, with τ just above the third-hottest head: two heads clip."""
    before = np.array([h.max_logit for h in monitored_step(model, x).heads])
    tau = float(np.sort(before)[-3]) * 1.01
    clips = LogitGuard(model, tau, **options).apply(monitored_step(model, x))
    assert len(clips) == 2
    return before, np.array([h.max_logit for h in monitored_step(model, x).heads]), tau


@pytest.mark.parametrize("attr, heads_attr", [("c_attn", "n_head"), ("qkv", "num_heads"), ("qkv", "n_heads")])
def test_a_fused_qkv_projection_is_clipped_exactly(attr, heads_attr):
    torch.manual_seed(0)
    model = FusedQKV(attr, heads_attr)
    hot(model, ((4, 8), 6.0), ((16 + 12, 16 + 16), 3.0))  # q rows of head 1, k rows of head 3
    x = torch.randn(2, 9, 16, generator=torch.Generator().manual_seed(2))
    before, after, tau = clip_two_hottest(model, x)
    np.testing.assert_allclose(after, np.minimum(before, tau), rtol=1e-5)


@pytest.mark.parametrize("alpha", [0.0, 0.3, 0.5, 1.0])
def test_the_split_exponent_puts_gamma_to_the_alpha_on_q_and_the_rest_on_k(alpha):
    torch.manual_seed(0)
    model = GroupedQuery(kv_heads=4)  # one key head per query head
    hot(model, ((4, 8), 6.0))
    x = torch.randn(2, 9, 16, generator=torch.Generator().manual_seed(2))
    q0, k0 = model.q_proj.weight.detach().clone(), model.k_proj.weight.detach().clone()
    qb0 = model.q_proj.bias.detach().clone()
    step = monitored_step(model, x)
    tau = float(step.heads[1].max_logit) / 2
    clips = LogitGuard(model, tau, alpha=alpha).apply(step)
    gamma = {c.head: c.factor for c in clips}
    assert 1 in gamma and gamma[1] == pytest.approx(0.5)
    for h in range(4):
        g = gamma.get(h, 1.0)
        rows = slice(4 * h, 4 * h + 4)
        torch.testing.assert_close(model.q_proj.weight[rows], q0[rows] * g**alpha, rtol=1e-6, atol=0)
        torch.testing.assert_close(model.q_proj.bias[rows], qb0[rows] * g**alpha, rtol=1e-6, atol=0)
        torch.testing.assert_close(model.k_proj.weight[rows], k0[rows] * g ** (1 - alpha), rtol=1e-6, atol=0)
    assert monitored_step(model, x).heads[1].max_logit == pytest.approx(tau, rel=1e-5)


def test_log_only_reports_the_heads_it_would_clip_and_changes_no_weight():
    torch.manual_seed(0)
    model = GroupedQuery()
    hot(model, ((4, 8), 6.0), ((12, 16), 3.0))
    x = torch.randn(2, 9, 16, generator=torch.Generator().manual_seed(2))
    weights = {k: v.clone() for k, v in model.state_dict().items()}
    step = monitored_step(model, x)
    tau = float(np.sort([h.max_logit for h in step.heads])[1]) * 1.01
    logged = LogitGuard(model, tau, log_only=True)
    would = logged.apply(step)
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in weights.items())
    assert logged.clips == len(would) == 2
    assert would == LogitGuard(model, tau).apply(step)  # the same heads and factors clip for real
    assert not all(torch.equal(v, model.state_dict()[k]) for k, v in weights.items())


@pytest.mark.parametrize("family", ["gpt2", "phi3"])
def test_hugging_face_fused_projections_are_found_and_clipped_exactly(family):
    """GPT-2's c_attn (a Conv1D, weight (in, out)) and Phi-3's qkv_proj (grouped-query: 4 query, 2 key heads)."""
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    if family == "gpt2":
        config = transformers.GPT2Config(
            vocab_size=50, n_embd=32, n_layer=1, n_head=4, n_positions=16, attn_implementation="sdpa"
        )
        model = transformers.GPT2Model(config).eval()
        layer, proj = "h.0.attn", lambda a: a.c_attn.weight[:, :32]  # the q columns
    else:
        config = transformers.Phi3Config(
            vocab_size=50,
            hidden_size=32,
            num_hidden_layers=1,
            num_attention_heads=4,
            num_key_value_heads=2,
            intermediate_size=64,
            pad_token_id=0,
            attn_implementation="sdpa",
        )
        model = transformers.Phi3Model(config).eval()
        layer, proj = "layers.0.self_attn", lambda a: a.qkv_proj.weight[:32]  # the q rows
    ids = torch.randint(0, 50, (2, 12), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        proj(model.get_submodule(layer)).mul_(6.0)

    def figures():
        with Monitor(model, mode="observe", history=False) as mon, torch.no_grad():
            model(input_ids=ids)
            return mon.step(0, log=False)

    before = figures()
    tau = float(np.median([h.max_logit for h in before.heads]))
    guard = LogitGuard(model, tau)
    assert list(guard.targets) == [layer] and len(guard.apply(before)) == 2
    np.testing.assert_allclose(
        [h.max_logit for h in figures().heads], [min(h.max_logit, tau) for h in before.heads], rtol=1e-4
    )


class DHead(GroupedQuery):
    """q_proj and k_proj, but the head size under another name."""

    def __init__(self):
        super().__init__()
        self.d_head = self.head_dim
        del self.head_dim


@pytest.mark.parametrize(
    "make",
    [DHead, lambda: FusedQKV("qkv", None), lambda: FusedQKV("c_attn", None)],
    ids=["q_proj-without-head_dim", "qkv-without-n_head", "c_attn-without-n_head"],
)
def test_a_module_without_its_head_count_is_sized_by_the_calls_the_monitor_saw(make):
    """No head_dim (n_head for a fused projection): the step's head count sizes the heads (grouped-query
    for DHead: 4 query heads on 2 key heads), and the clip is as exact as with the attribute."""
    torch.manual_seed(0)
    model = torch.nn.ModuleDict({"layer": make()})
    hot(model["layer"], ((4, 8), 6.0), ((12, 16), 3.0))  # q rows of heads 1 and 3
    x = torch.randn(2, 9, 16, generator=torch.Generator().manual_seed(2))
    run = lambda: monitored_step(model["layer"], x)  # noqa: E731
    step = renamed(run(), "layer")
    before = np.array([h.max_logit for h in step.heads])
    tau = float(np.sort(before)[-3]) * 1.01
    assert len(LogitGuard(model, tau).apply(step)) == 2
    np.testing.assert_allclose([h.max_logit for h in run().heads], np.minimum(before, tau), rtol=1e-5)


def test_head_counts_that_do_not_fit_the_projections_are_named():
    model = torch.nn.ModuleDict({"layer": DHead()})
    step = renamed(monitored_step(model["layer"], torch.randn(1, 3, 16)), "layer", 3)  # 3 heads of 16 features
    with pytest.raises(
        InputError,
        match=r"layer 'layer' has 3 query heads, which do not fit: layer: 16 query "
        r"features are not whole heads \(layer: has q_proj and k_proj but no int attribute head_dim",
    ):
        LogitGuard(model, 1.0).apply(step)
    sized = FusedQKV("qkv", "n_head")
    step = monitored_step(sized, torch.randn(1, 3, 16))
    step = dataclasses.replace(step, heads=step.heads + [dataclasses.replace(step.heads[0], head=4)])
    with pytest.raises(InputError, match=r"has 5 query heads, its projections 4 of size 4"):
        LogitGuard(sized, 1.0).apply(step)


@pytest.mark.parametrize(
    "model, message",
    [
        (
            lambda: FusedQKV("qkv", "n_head", heads=5),
            r"qkv has 48 output features, not q, k, v of 5, 5, 5 heads of size 3",
        ),
    ],
)
def test_refusals_name_what_is_missing(model, message):
    with pytest.raises(InputError, match=message):
        LogitGuard(torch.nn.ModuleDict({"layer": model()}), 10.0)


class Two(torch.nn.Module):
    """Two attention modules, the second with a QK-norm (refused by the guard)."""

    def __init__(self):
        super().__init__()
        self.a, self.b = GroupedQuery(), GroupedQuery()
        self.b.q_norm = torch.nn.LayerNorm(4)

    def forward(self, x):
        return self.a(x) + self.b(x)


@pytest.mark.parametrize(
    "kind, message",
    [
        ("none", r"^step: expected a Step \(what Monitor.step returns, or combine_step\), got NoneType$"),
        ("list", r"^step: expected a Step .* got list$"),
        ("refused", r"layer 'b' is not one the guard can rescale: the guard refused that module: b: q and k are "),
        ("compiled", r"layer 'compiled\[0\]' is not one .* a compiled graph that the monitor could not name"),
    ],
)
def test_a_step_the_guard_cannot_use_is_one_line_naming_what_is_missing(kind, message):
    model = Two()
    step = (
        {"none": None, "list": []}.get(kind)
        if kind in ("none", "list")
        else monitored_step(model, torch.randn(1, 3, 16))
    )
    if kind == "compiled":  # what a compiled graph's call the monitor could not name is called
        step = renamed(step, "compiled[0]")
    with pytest.raises(InputError if kind in ("refused", "compiled") else InputTypeError, match=message):
        LogitGuard(model, 1.0).apply(step)


@pytest.mark.parametrize("alpha", [-0.1, 1.5, math.nan, True, "0.5"])
def test_alpha_outside_zero_one_is_refused(alpha):
    with pytest.raises(InputError, match=r"alpha: expected a number in \[0, 1\]"):
        LogitGuard(gpt(), 10.0, alpha=alpha)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
@pytest.mark.parametrize("transposed", [False, True], ids=["linear", "conv1d"])
def test_rescaling_whole_tensors_gives_the_bits_of_per_head_slices(dtype, transposed):
    """The guard multiplies whole weights by a vector of per-feature factors (what reaches every
    shard of an FSDP2 parameter): the bits of the per-head slice products it replaced, and a head
    with factor 1 untouched."""
    from attnscale.torch.guard import _Rows

    torch.manual_seed(0)
    layer = torch.nn.Linear(8, 24).to(dtype)
    if transposed:
        layer.weight = torch.nn.Parameter(layer.weight.detach().T.contiguous())
    weight, bias = layer.weight.detach().clone(), layer.bias.detach().clone()
    factors, d, offset = [0.7312345, 1.0, 0.123456789], 4, 8
    for i, f in enumerate(factors):
        a, b = offset + i * d, offset + (i + 1) * d
        (weight[:, a:b] if transposed else weight[a:b]).mul_(f)
        bias[a:b].mul_(f)
    with torch.no_grad():
        _Rows(layer, offset, transposed).scale_heads(factors, d)
    assert torch.equal(layer.weight, weight) and torch.equal(layer.bias, bias)
