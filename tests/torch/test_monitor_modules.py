"""The monitor on the attention users actually run: Hugging Face decoders in their eager and SDPA
implementations (through transformers' attention interface), and PyTorch's own nn.MultiheadAttention,
nn.TransformerEncoder and nn.TransformerDecoderLayer. Every layer and head is reported; figures equal
the models' own attention probabilities; replace mode stays within the stated tolerance; a monitor
that sees nothing says so, naming what it watched.

Oracles: the models' own probabilities (eager ``output_attentions``, nn.MultiheadAttention's
``need_weights=True, average_attn_weights=False``), their own outputs, and PyTorch's standard path
(``torch.backends.mha.set_fastpath_enabled(False)``) for bit-for-bit comparisons.
"""

import math
import warnings

import pytest

torch = pytest.importorskip("torch")
from helpers.lazy import lazy_module  # noqa: E402

transformers = lazy_module("transformers")  # imported by the first test that uses it

from attnscale.torch import Monitor, capture_sdpa  # noqa: E402
from attnscale.torch.monitor import NoAttentionSeen  # noqa: E402

nn = torch.nn
# The module docstring's replace-mode tolerance for a whole float32 model: 1e-5 × max |logit|.
MODEL_TOLERANCE = 1e-5


def tiny_decoder(kind: str, impl: str, **extra):
    """A 2-layer random-weight decoder, float32; weights large enough (initializer_range 0.3) for
    attention far from uniform."""
    common = dict(
        vocab_size=64,
        max_position_embeddings=64,
        initializer_range=0.3,
        bos_token_id=0,
        eos_token_id=0,
        pad_token_id=0,
        attn_implementation=impl,
    )
    torch.manual_seed(0)
    if kind == "gpt2":
        config = transformers.GPT2Config(n_embd=32, n_layer=2, n_head=4, n_positions=64, **common, **extra)
        return transformers.GPT2LMHeadModel(config).eval()
    sizes = dict(
        hidden_size=32,
        intermediate_size=48,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
    )  # grouped-query: 2 key heads for 4
    config_class, model_class = {
        "llama": (transformers.LlamaConfig, transformers.LlamaForCausalLM),
        "qwen3": (transformers.Qwen3Config, transformers.Qwen3ForCausalLM),
        "gemma2": (transformers.Gemma2Config, transformers.Gemma2ForCausalLM),
    }[kind]
    return model_class(config_class(**sizes, **common, **extra)).eval()


def attention_names(kind: str) -> list[str]:
    return [f"transformer.h.{i}.attn" if kind == "gpt2" else f"model.layers.{i}.self_attn" for i in range(2)]


def batch():
    """Three sequences of 10 tokens, the second right-padded after 7 (no query row loses every key)."""
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(1, 64, (3, 10), generator=g)
    mask = torch.ones(3, 10, dtype=torch.long)
    mask[1, 7:] = 0
    return {"input_ids": ids, "attention_mask": mask}


def entropy_figures(weights, real=None):
    """(B, H, L, S) probabilities → per head [(rows, mean entropy, min entropy, single-key rows)],
    float64, over the rows that attend two keys or more (the monitor counts the others apart);
    ``real``: (B, L) bool, the query rows that are tokens (padding is no row of the monitor's)."""
    e = torch.special.entr(weights.double()).sum(-1)  # (B, H, L)
    real = torch.ones(e.shape[0], e.shape[2], dtype=torch.bool) if real is None else real
    multi = ((weights > 0).sum(-1) >= 2) & real[:, None]
    single = ~multi & real[:, None]
    return [
        (
            int(multi[:, h].sum()),
            float(e[:, h][multi[:, h]].mean()),
            float(e[:, h][multi[:, h]].min()),
            int(single[:, h].sum()),
        )
        for h in range(e.shape[1])
    ]


def assert_heads_match(figures, layer, reference, rtol=1e-5, atol=1e-5):
    """The monitor's heads of ``layer`` against entropy_figures of the model's own probabilities."""
    mine = [f for f in figures if f.layer == layer]
    assert [f.head for f in mine] == list(range(len(reference)))
    for f, (rows, mean, low, single) in zip(mine, reference):
        assert f.rows == rows and f.rows_single == single and f.rows_empty == 0 and f.rows_broken == 0
        assert f.entropy_mean == pytest.approx(mean, rel=rtol, abs=atol)
        assert f.entropy_min == pytest.approx(low, rel=rtol, abs=atol)


def no_attention_warnings(record) -> None:
    assert [str(w.message) for w in record if issubclass(w.category, NoAttentionSeen)] == []


@pytest.mark.parametrize("impl", ["eager", "sdpa"])
@pytest.mark.parametrize("kind", ["llama", "qwen3", "gpt2"])
def test_hf_decoders_every_layer_and_head_in_eager_and_sdpa(kind, impl):
    """Llama (rotary, grouped-query), Qwen3 (QK-norm, grouped-query), GPT-2 (Conv1D projections):
    loaded in either implementation, all 2 × 4 heads are watched, with the eager model's own figures."""
    model = tiny_decoder(kind, impl)
    eager = tiny_decoder(kind, "eager")  # same seed: the same weights
    inputs = batch()
    with torch.no_grad(), warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        own = eager(**inputs, output_attentions=True).attentions  # the oracle: eager's own maps
        plain = model(**inputs).logits
        with Monitor(model) as seen:
            watched = model(**inputs).logits
        with Monitor(model, mode="replace") as mon:
            replaced = model(**inputs).logits
    no_attention_warnings(record)
    assert torch.equal(plain, watched)  # observe: bit for bit
    assert {c.source for c in seen.calls} == {"interface" if impl == "eager" else "sdpa"}
    assert not seen.skipped and not mon.fallbacks and not mon.skipped
    names = attention_names(kind)
    assert sorted({(f.layer, f.head) for f in seen.summary()}) == [(n, h) for n in names for h in range(4)]
    for layer, weights in zip(names, own):
        reference = entropy_figures(weights, inputs["attention_mask"].bool())
        assert_heads_match(seen.summary(), layer, reference)
        assert_heads_match(mon.summary(), layer, reference)
    gap = float((replaced - plain).abs().max() / plain.abs().max())
    print(f"{kind} {impl}: max |replace − own logits| = {gap:.2g} × max |logit|")
    assert gap <= MODEL_TOLERANCE
    for a, b in zip(seen.summary(), mon.summary()):  # replace's figures are observe's
        assert (a.layer, a.head, a.rows) == (b.layer, b.head, b.rows)
        assert a.max_logit == pytest.approx(b.max_logit, rel=1e-5, abs=1e-5)


def test_generation_with_a_kv_cache_in_replace_mode(monkeypatch):
    """Greedy generation through a KV cache, every token a call of a new length (1 query row, one
    more key each step) in every layer: replace mode gives the model's own tokens, its logits within
    the tolerance, every call seen; and a new length is checked once a forward, in the first layer,
    the second layer's call of it then kept (by key, not by layer)."""
    from attnscale.torch.monitor import kernel as monitor_module

    full = []
    real = monitor_module._figures
    monkeypatch.setattr(monitor_module, "_figures", lambda *a, **k: full.append(1) or real(*a, **k))
    model = tiny_decoder("llama", "sdpa")
    ids = torch.tensor([[5, 9, 3, 17, 22, 8]])
    settings = dict(max_new_tokens=8, do_sample=False, output_logits=True, return_dict_in_generate=True)
    with torch.no_grad():
        plain = model.generate(ids, **settings)
        with Monitor(model, mode="replace", history=False) as mon:
            replaced = model.generate(ids, **settings)
            step = mon.step(0)
    assert torch.equal(replaced.sequences, plain.sequences)
    for a, b in zip(replaced.logits, plain.logits):
        assert float((a - b).abs().max() / b.abs().max()) <= MODEL_TOLERANCE
    assert step.calls == 2 * 8 and not mon.fallbacks and not mon.skipped  # 8 forwards × 2 layers
    assert len(full) == 8  # one a forward: the prompt's, then each new token's


def test_gemma2_soft_cap_and_sliding_window_are_honoured():
    """Gemma 2's eager attention caps its logits (c·tanh(z/c), here c = 3, small enough to bite) and
    scales by query_pre_attn_scalar^-½; the capture's probabilities and the monitor's figures follow."""
    model = tiny_decoder("gemma2", "eager", attn_logit_softcapping=3.0, query_pre_attn_scalar=16, sliding_window=4)
    inputs = batch()
    with torch.no_grad():
        own = model(**inputs, output_attentions=True).attentions
        plain = model(**inputs).logits
        with capture_sdpa(model) as cap:
            model(**inputs)
        with Monitor(model) as seen:
            model(**inputs)
        with Monitor(model, mode="replace") as mon:
            replaced = model(**inputs).logits
    assert [(c.softcap, c.scale) for c in cap.calls] == [(3.0, pytest.approx(16**-0.5))] * 2
    real = inputs["attention_mask"].bool()[:, None, :, None]
    for call, weights in zip(cap.calls, own):
        assert float(((call.probabilities() - weights.double()).abs() * real).max()) <= 1e-6
        uncapped = torch.softmax(
            call.scale * call.q.double() @ call.keys_for_queries().transpose(-2, -1) + call.attn_mask.double(), -1
        )
        assert float(((uncapped - weights.double()).abs() * real).max()) > 1e-2  # the cap matters here
    for layer, weights in zip(attention_names("gemma2"), own):
        assert_heads_match(seen.summary(), layer, entropy_figures(weights, inputs["attention_mask"].bool()))
        assert_heads_match(mon.summary(), layer, entropy_figures(weights, inputs["attention_mask"].bool()))
    assert not mon.fallbacks and float((replaced - plain).abs().max() / plain.abs().max()) <= MODEL_TOLERANCE


def _register(name, fn):
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, eager_mask

    transformers.AttentionInterface.register(name, fn)
    ALL_MASK_ATTENTION_FUNCTIONS.register(name, eager_mask)


def test_attention_functions_it_cannot_read_are_skipped_and_said():
    """An implementation that neither calls SDPA nor returns probabilities, and an eager-like one
    that computes something else than its arguments say (twice the scale): no figures, each call
    counted in ``skipped`` with its reason, and the warning says so."""
    from transformers.models.llama.modeling_llama import eager_attention_forward

    def opaque(module, q, k, v, mask, scaling=None, dropout=0.0, **kw):
        out, _ = eager_attention_forward(module, q, k, v, mask, scaling=scaling)
        return out, None

    def doubled(module, q, k, v, mask, scaling=None, dropout=0.0, **kw):
        return eager_attention_forward(module, q, k, v, mask, scaling=2 * scaling)

    _register("attnscale_test_opaque", opaque)
    _register("attnscale_test_doubled", doubled)
    model = tiny_decoder("llama", "eager")
    inputs = batch()
    for impl, why in (
        ("attnscale_test_opaque", "neither calls SDPA nor returns its probabilities"),
        ("attnscale_test_doubled", "differs from the rebuilt attention beyond rounding"),
    ):
        model.set_attn_implementation(impl)
        with torch.no_grad(), pytest.warns(NoAttentionSeen) as record:
            with Monitor(model) as mon:
                model(**inputs)
        assert mon.summary() == []
        assert [(layer, n) for (layer, _), n in mon.skipped.items()] == [(n, 1) for n in attention_names("llama")]
        assert all(why in reason for _, reason in mon.skipped)
        message = str(record[0].message)
        assert f"attn_implementation={impl!r}" in message and "2 call(s) seen but not read" in message
        assert why in message


def test_no_calls_warning_names_the_implementation_and_modules():
    """GPT-2's reorder_and_upcast_attn computes eager attention by hand, outside the interface: the
    monitor sees nothing, and says so at the step and at the end, naming the model's implementation
    and its attention modules. A model without attention says that too."""
    model = tiny_decoder("gpt2", "eager", reorder_and_upcast_attn=True)
    inputs = batch()
    with torch.no_grad(), pytest.warns(NoAttentionSeen) as record:
        with Monitor(model, history=False) as mon:
            model(**inputs)
            step = mon.step(0)
    assert step.calls == 0 and step.heads == [] and mon.summary() == []
    texts = [str(w.message) for w in record if issubclass(w.category, NoAttentionSeen)]
    assert len(texts) == 2 and "in step 0" in texts[0] and "while the monitor was active" in texts[1]
    for text in texts:
        assert "GPT2LMHeadModel" in text and "attn_implementation='eager'" in text and "GPT2Attention ×2" in text
    with pytest.warns(NoAttentionSeen, match=r"model Linear, no module named like attention"):
        with Monitor(nn.Linear(3, 3)):
            nn.Linear(3, 3)(torch.ones(3))
    # The same model in its SDPA implementation: calls seen, no warning.
    model.set_attn_implementation("sdpa")
    with torch.no_grad(), warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        with Monitor(model) as mon:
            model(**inputs)
            mon.step(0)
    no_attention_warnings(record)
    assert len(mon.summary()) == 8


# -- PyTorch's own modules --------------------------------------------------------------------------


def standard_path(fn):
    """fn() with PyTorch's MHA fast path off: the path a monitored module takes (nn_modules)."""
    before = torch.backends.mha.get_fastpath_enabled()
    torch.backends.mha.set_fastpath_enabled(False)
    try:
        return fn()
    finally:
        torch.backends.mha.set_fastpath_enabled(before)


def first(x):
    return x[0] if isinstance(x, tuple) else x


def run_three_ways(module, *args, **kwargs):
    """(standard-path output, fast-path-or-not output, observe monitor, its output, replace monitor, its output)."""
    with torch.no_grad(), warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        standard = first(standard_path(lambda: module(*args, **kwargs)))
        default = first(module(*args, **kwargs))
        with Monitor(module) as seen:
            watched = first(module(*args, **kwargs))
        with Monitor(module, mode="replace") as mon:
            replaced = first(module(*args, **kwargs))
    no_attention_warnings(record)
    return standard, default, seen, watched, mon, replaced


def mha_reference(mha, query, key, value, **kwargs):
    """The module's own per-head probabilities (B, H, L, S), standard path."""
    kwargs = {**kwargs, "need_weights": True, "average_attn_weights": False}
    kwargs.pop("is_causal", None)  # a hint only; the mask says it
    with torch.no_grad():
        return standard_path(lambda: mha(query, key, value, **kwargs))[1]


def close_to(a, b, scale) -> float:
    """max |a − b| ÷ max |scale|."""
    return float((a - b).abs().max() / scale.abs().max())


MASKS = {
    "none": {},
    "padding": {"key_padding_mask": torch.tensor([[False] * 7, [False] * 5 + [True] * 2, [False] * 6 + [True]])},
    "causal": {"attn_mask": nn.Transformer.generate_square_subsequent_mask(7), "is_causal": True},
    "bool and float": {
        "attn_mask": torch.eye(7, dtype=torch.bool).roll(1, 0),  # True = masked
        "key_padding_mask": torch.zeros(3, 7).index_fill_(1, torch.tensor([6]), -2.0),
    },
}


@pytest.mark.filterwarnings("ignore:Support for mismatched key_padding_mask")  # "bool and float", on purpose
@pytest.mark.parametrize("need_weights", [True, False])
@pytest.mark.parametrize("batch_first", [False, True])
@pytest.mark.parametrize("masks", list(MASKS))
def test_multihead_attention_every_head_both_layouts_and_masks(masks, batch_first, need_weights):
    torch.manual_seed(0)
    mha = nn.MultiheadAttention(16, 4, batch_first=batch_first).eval()
    x = 2 * torch.randn(3, 7, 16, generator=torch.Generator().manual_seed(2))
    xx = x if batch_first else x.transpose(0, 1)
    kwargs = {**MASKS[masks], "need_weights": need_weights}
    if masks == "causal" and need_weights:
        kwargs.pop("is_causal")
    standard, default, seen, watched, mon, replaced = run_three_ways(mha, xx, xx, xx, **kwargs)
    assert torch.equal(watched, standard)  # observe: the standard path, bit for bit
    assert close_to(watched, default, default) <= MODEL_TOLERANCE  # and the fast path, to rounding
    reference = entropy_figures(mha_reference(mha, xx, xx, xx, **kwargs))
    for mon_ in (seen, mon):
        assert_heads_match(mon_.summary(), "MultiheadAttention", reference)  # the root: its class
    assert {c.source for c in seen.calls} == {"module"}
    if need_weights:  # the caller wants the maps back
        assert dict(mon.fallbacks) == {"attention weights asked": 1} and torch.equal(replaced, standard)
    else:
        assert not mon.fallbacks and [c.source for c in mon.calls] == ["replaced"]
        gap = close_to(replaced, standard, standard)
        print(f"MHA {masks}, batch_first={batch_first}: max |replace − own| = {gap:.2g} × max |out|")
        assert gap <= MODEL_TOLERANCE


def test_multihead_cross_attention_with_separate_projections_and_unbatched_input():
    """kdim, vdim ≠ embed_dim: q_proj_weight, k_proj_weight, v_proj_weight; L = 7 queries, S = 5 keys."""
    torch.manual_seed(0)
    mha = nn.MultiheadAttention(16, 4, kdim=8, vdim=12, batch_first=True).eval()
    g = torch.Generator().manual_seed(3)
    q, k = 2 * torch.randn(3, 7, 16, generator=g), 2 * torch.randn(3, 5, 8, generator=g)
    v = torch.randn(3, 5, 12, generator=g)
    for args in ((q, k, v), (q[0], k[0], v[0])):  # batched, and unbatched (L, E)
        standard, _, seen, watched, mon, replaced = run_three_ways(mha, *args, need_weights=False)
        assert torch.equal(watched, standard) and close_to(replaced, standard, standard) <= MODEL_TOLERANCE
        weights = mha_reference(mha, *args)
        reference = entropy_figures(weights if weights.dim() == 4 else weights[None])
        assert_heads_match(seen.summary(), "MultiheadAttention", reference)
        assert seen.calls[0].shape == (args[0].shape[0] if args[0].dim() == 3 else 1, 4, 7, 5, 4, 4)


def layer_inputs(model, *args, **kwargs):
    """Every self_attn / multihead_attn module's (args, kwargs) in one standard-path run, by name."""
    seen = {}
    handles = [
        m.register_forward_pre_hook(lambda m, a, k, name=name: seen.setdefault(name, (a, k)), with_kwargs=True)
        for name, m in model.named_modules()
        if isinstance(m, nn.MultiheadAttention)
    ]
    try:
        with torch.no_grad():
            standard_path(lambda: model(*args, **kwargs))
    finally:
        for h in handles:
            h.remove()
    return seen


def module_references(model, *args, **kwargs):
    """{attention module name: entropy_figures of its own probabilities on its own inputs}."""
    modules = dict(model.named_modules())
    out = {}
    for name, (a, k) in layer_inputs(model, *args, **kwargs).items():
        out[name] = entropy_figures(mha_reference(modules[name], *a, **k))
    return out


@pytest.mark.parametrize("training", [True, False])
def test_transformer_encoder_train_and_eval_fast_path(training):
    """Two nn.TransformerEncoderLayer in an nn.TransformerEncoder. In eval, without the monitor,
    PyTorch takes its fused fast path (and its nested-tensor path with a padding mask, which writes
    0 at padded positions); with it, the standard path, bit for bit, and the fast path's output to
    rounding at every real position."""
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(16, 4, 32, dropout=0.0, batch_first=True)
    encoder = nn.TransformerEncoder(layer, 2).train(training)
    x = 2 * torch.randn(3, 7, 16, generator=torch.Generator().manual_seed(4))
    padding = MASKS["padding"]["key_padding_mask"]
    kwargs = {"src_key_padding_mask": padding}
    if training:
        kwargs.update(mask=torch.ones(7, 7, dtype=torch.bool).triu(1), is_causal=True)  # True = masked
    standard, default, seen, watched, mon, replaced = run_three_ways(encoder, x, **kwargs)
    real = ~padding[..., None]
    assert torch.equal(watched, standard)
    assert close_to(watched * real, default * real, default * real) <= MODEL_TOLERANCE
    references = module_references(encoder, x, **kwargs)
    assert sorted(references) == ["layers.0.self_attn", "layers.1.self_attn"]
    for name, reference in references.items():
        assert_heads_match(seen.summary(), name, reference)
        assert_heads_match(mon.summary(), name, reference)
    assert not mon.fallbacks
    gap = close_to(replaced, standard, standard)
    print(f"encoder training={training}: max |replace − own| = {gap:.2g} × max |out|")
    assert gap <= MODEL_TOLERANCE


def test_transformer_encoder_training_with_dropout_falls_back_and_is_still_watched():
    torch.manual_seed(0)
    encoder = nn.TransformerEncoder(nn.TransformerEncoderLayer(16, 4, 32, dropout=0.1, batch_first=True), 2).train()
    x = torch.randn(3, 7, 16, requires_grad=True)
    with Monitor(encoder, mode="replace", history=False) as mon:
        torch.manual_seed(5)
        out = encoder(x)
        out.sum().backward()
        step = mon.step(0)
    torch.manual_seed(5)
    assert torch.equal(out, encoder(x))  # PyTorch's own, with its dropout
    assert step.fallbacks == {"dropout": 2} and step.calls == 2
    heads = sorted({(h.layer, h.head) for h in step.heads})
    assert heads == [(f"layers.{i}.self_attn", h) for i in range(2) for h in range(4)]
    assert all(h.rows == 21 for h in step.heads) and x.grad is not None


def test_transformer_decoder_layer_self_and_cross_attention():
    """Causal self-attention over 7 targets, cross-attention to 5 memory positions with padding."""
    torch.manual_seed(0)
    decoder = nn.TransformerDecoderLayer(16, 4, 32, dropout=0.0, batch_first=True).eval()
    g = torch.Generator().manual_seed(6)
    tgt, memory = 2 * torch.randn(3, 7, 16, generator=g), 2 * torch.randn(3, 5, 16, generator=g)
    memory_padding = torch.tensor([[False] * 5, [False] * 3 + [True] * 2, [False] * 4 + [True]])
    kwargs = {
        "tgt_mask": nn.Transformer.generate_square_subsequent_mask(7),
        "tgt_is_causal": True,
        "memory_key_padding_mask": memory_padding,
    }
    standard, default, seen, watched, mon, replaced = run_three_ways(decoder, tgt, memory, **kwargs)
    assert torch.equal(watched, standard)
    references = module_references(decoder, tgt, memory, **kwargs)
    assert sorted(references) == ["multihead_attn", "self_attn"]
    for name, reference in references.items():
        assert_heads_match(seen.summary(), name, reference)
        assert_heads_match(mon.summary(), name, reference)
    assert [c.shape[2:4] for c in seen.calls] == [(7, 7), (7, 5)]
    assert not mon.fallbacks and close_to(replaced, standard, standard) <= MODEL_TOLERANCE


def test_refused_options_are_counted_not_guessed():
    """add_bias_kv adds a learned key the projections do not make: skipped, with its reason, and said."""
    mha = nn.MultiheadAttention(8, 2, add_bias_kv=True).eval()
    x = torch.randn(4, 1, 8)
    with torch.no_grad(), pytest.warns(NoAttentionSeen, match="add_bias_kv"):
        with Monitor(mha) as mon:
            out = mha(x, x, x)[0]
    assert mon.summary() == [] and [why for (_, why) in mon.skipped] == [
        "add_bias_kv=True adds a learned key and value the projections do not make"
    ]
    assert torch.equal(out, mha(x, x, x)[0])
    assert math.isfinite(float(out.sum()))


@pytest.mark.filterwarnings("ignore::attnscale.torch.monitor.NoAttentionSeen")  # the hidden outer one
def test_nested_monitors_see_interface_calls_innermost_first_and_transformers_is_restored():
    from transformers.modeling_utils import AttentionInterface

    original = AttentionInterface.get_interface
    model = tiny_decoder("llama", "eager")
    with torch.no_grad(), Monitor(model) as outer:
        with Monitor(model) as inner:
            model(**batch())
        model(**batch())
    assert len(inner.calls) == 2 and len(outer.calls) == 4
    with torch.no_grad(), Monitor(model) as outer:
        with Monitor(model, mode="replace") as inner:  # computes the calls: hidden from outer
            model(**batch())
    assert [c.source for c in inner.calls] == ["replaced"] * 2 and not inner.fallbacks and outer.calls == []
    assert AttentionInterface.get_interface is original
