"""capture_sdpa: what it records must be exactly what the model computed.

Oracles: the model's own attention probabilities (eager, output_attentions=True), SDPA's own output
(probabilities @ v must equal it), and, for a hand-built module, the tensors we passed in.
"""

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from helpers.lazy import lazy_module  # noqa: E402

transformers = lazy_module("transformers")  # imported by the first test that uses it

# Imported by name on purpose: the capture must see calls however SDPA was imported.
from torch.nn.functional import scaled_dot_product_attention  # noqa: E402

from attnscale.errors import InputTypeError  # noqa: E402
from attnscale.torch.capture import SDPACall, capture_sdpa  # noqa: E402


def tiny_bert(impl: str, *, seed: int = 0, decoder: bool = False):
    config = transformers.BertConfig(
        vocab_size=60,
        hidden_size=24,
        num_hidden_layers=2,
        num_attention_heads=3,
        intermediate_size=40,
        max_position_embeddings=40,
        is_decoder=decoder,
        add_cross_attention=decoder,
        attn_implementation=impl,
    )
    torch.manual_seed(seed)
    return transformers.BertModel(config, add_pooling_layer=False).eval()


def padded_batch(seed: int = 1):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, 60, (3, 9), generator=g)
    mask = torch.ones(3, 9, dtype=torch.long)
    mask[1, 6:] = 0
    mask[2, 3:] = 0
    return ids, mask


def test_eager_and_sdpa_captures_reproduce_the_models_own_probabilities():
    eager = tiny_bert("eager")
    sdpa = tiny_bert("sdpa")
    sdpa.load_state_dict(eager.state_dict())
    ids, mask = padded_batch()
    with torch.no_grad():
        with capture_sdpa(eager) as cap_eager:
            own = eager(input_ids=ids, attention_mask=mask, output_attentions=True).attentions
        with capture_sdpa(sdpa) as cap_sdpa:
            sdpa(input_ids=ids, attention_mask=mask)
    assert [c.source for c in cap_eager.calls] == ["interface"] * 2  # transformers' attention interface
    assert [c.source for c in cap_sdpa.calls] == ["sdpa"] * 2
    names = [f"encoder.layer.{i}.attention.self" for i in range(2)]
    assert [c.name for c in cap_eager.calls] == names == [c.name for c in cap_sdpa.calls]
    real_rows = mask.bool()[:, None, :, None]
    for cap in (cap_eager, cap_sdpa):
        for call, weights in zip(cap.calls, own):
            assert call.q.shape == (3, 3, 9, 8) and call.k.shape == (3, 3, 9, 8)
            assert call.scale == pytest.approx(8**-0.5, rel=1e-12)
            diff = ((call.probabilities() - weights.double()).abs() * real_rows).max().item()
            print(cap.calls[0].source, call.name, "max |p - model's own| =", diff)
            assert diff <= 1e-6
            # The rebuilt probabilities times v give the call's own output.
            out = (call.probabilities() @ call.v.double()).float()
            assert torch.allclose(out * real_rows, call.output * real_rows, atol=1e-6)
    # Eager hands back its own probabilities, identical to output_attentions.
    for call, weights in zip(cap_eager.calls, own):
        assert torch.equal(call.weights, weights)


def test_padded_keys_are_masked_in_both_implementations():
    ids, mask = padded_batch()
    for impl in ("eager", "sdpa"):
        model = tiny_bert(impl)
        with torch.no_grad(), capture_sdpa(model) as cap:
            model(input_ids=ids, attention_mask=mask)
        att = cap.calls[0].attended()
        assert att.shape == (3, 3, 9, 9)
        assert torch.equal(att[:, 0, 0, :], mask.bool())
        assert (cap.calls[0].probabilities()[2, :, :, 3:] == 0).all()


def test_decoder_with_cross_attention_queries_differ_from_keys():
    model = tiny_bert("eager", decoder=True)
    ids, mask = padded_batch()
    g = torch.Generator().manual_seed(5)
    memory = torch.randn(3, 5, 24, generator=g)
    memory_mask = torch.ones(3, 5, dtype=torch.long)
    memory_mask[0, 4:] = 0
    with torch.no_grad(), capture_sdpa(model) as cap:
        out = model(
            input_ids=ids,
            attention_mask=mask,
            encoder_hidden_states=memory,
            encoder_attention_mask=memory_mask,
            output_attentions=True,
            use_cache=False,
        )
    cross = [c for c in cap.calls if "crossattention" in c.name]
    selfs = [c for c in cap.calls if c.name.endswith(".attention.self")]
    assert len(cross) == len(selfs) == 2 and not cap.skipped
    for call, weights in zip(selfs, out.attentions):
        assert (call.probabilities() - weights.double()).abs().max().item() <= 1e-6
        assert not call.attended()[0, 0].triu(1).any()  # causal: no future keys
    for call, weights in zip(cross, out.cross_attentions):
        assert call.q.shape[-2] == 9 and call.k.shape[-2] == 5  # L ≠ S
        assert (call.probabilities() - weights.double()).abs().max().item() <= 1e-6


class PlainAttention(torch.nn.Module):
    """A hand-built module calling SDPA through a name imported from torch.nn.functional."""

    def __init__(self, **sdpa_kwargs):
        super().__init__()
        self.sdpa_kwargs = sdpa_kwargs

    def forward(self, q, k, v, mask=None):
        return scaled_dot_product_attention(q, k, v, attn_mask=mask, **self.sdpa_kwargs)


def reference_probabilities(q, k, scale, mask=None, causal=False):
    logits = scale * (q.double() @ k.double().transpose(-2, -1))
    if mask is not None:
        logits = logits.masked_fill(~mask, -math.inf) if mask.dtype == torch.bool else logits + mask.double()
    if causal:
        L, S = logits.shape[-2:]
        logits = logits.masked_fill(~torch.ones(L, S, dtype=torch.bool).tril(), -math.inf)
    return torch.softmax(logits, dim=-1)


@pytest.mark.parametrize(
    "kwargs",
    [
        {},  # scale None → 1/√d_k
        {"scale": 0.0},  # a deliberate 0.0 stays 0.0
        {"scale": 0.37, "is_causal": True},
    ],
)
def test_plain_module_records_exactly_what_was_passed(kwargs):
    g = torch.Generator().manual_seed(2)
    q, k, v = (torch.randn(2, 4, 6, 5, generator=g) for _ in range(3))
    module = PlainAttention(**kwargs)
    with capture_sdpa(module) as cap:
        out = module(q, k, v)
    (call,) = cap.calls
    assert call.name == "PlainAttention" and call.index == 0 and call.source == "sdpa"
    assert call.q is not q and torch.equal(call.q, q) and torch.equal(call.k, k) and torch.equal(call.v, v)
    expected_scale = kwargs.get("scale", 1 / math.sqrt(5))
    assert call.scale == expected_scale
    assert call.is_causal == kwargs.get("is_causal", False)
    assert torch.equal(call.output, out)
    p = reference_probabilities(q, k, expected_scale, causal=call.is_causal)
    assert torch.allclose(call.probabilities(), p, atol=1e-12)
    assert torch.allclose((call.probabilities() @ v.double()).float(), out, atol=1e-6)


def test_masks_bool_and_additive_and_grouped_query_heads():
    g = torch.Generator().manual_seed(3)
    q = torch.randn(2, 4, 3, 8, generator=g)
    k, v = torch.randn(2, 2, 7, 8, generator=g), torch.randn(2, 2, 7, 8, generator=g)  # H_k = 2
    bool_mask = torch.rand(2, 1, 3, 7, generator=g) > 0.3
    bool_mask[..., 0] = True
    additive = torch.randn(2, 1, 3, 7, generator=g)
    for mask in (bool_mask, additive):
        module = PlainAttention(enable_gqa=True)
        with capture_sdpa(module) as cap:
            out = module(q, k, v, mask)
        (call,) = cap.calls
        assert call.enable_gqa
        k_full = k.repeat_interleave(2, dim=1)
        p = reference_probabilities(q, k_full, 8**-0.5, mask)
        assert torch.allclose(call.probabilities(), p, atol=1e-12)
        assert torch.allclose((call.probabilities() @ v.repeat_interleave(2, dim=1).double()).float(), out, atol=1e-6)


def test_on_call_without_storing_and_global_hooks_without_a_model():
    seen: list[SDPACall] = []
    module = torch.nn.Sequential(PlainAttention())
    q = torch.randn(1, 2, 4, 3)
    with capture_sdpa(store=False, on_call=seen.append) as cap:
        module[0](q, q, q)
        scaled_dot_product_attention(q, q, q)  # outside any module
    assert cap.calls == [] and [c.index for c in seen] == [0, 1]
    assert [c.name for c in seen] == ["PlainAttention", ""]
    # After the block: nothing is recorded and no hook is left behind.
    with capture_sdpa(module) as cap:
        pass
    module[0](q, q, q)
    assert cap.calls == []
    assert not any(m._forward_hooks or m._forward_pre_hooks for m in module.modules())


def test_bad_arguments_are_named():
    with pytest.raises(InputTypeError, match="model: expected a torch.nn.Module"):
        capture_sdpa(model="bert")
    with pytest.raises(InputTypeError, match="on_call: expected a callable"):
        capture_sdpa(on_call=3)


def test_numpy_view_of_a_capture_matches_the_float64_oracle():
    """The statistics read captures as float64 NumPy: that view must not lose the mask."""
    model = tiny_bert("sdpa")
    ids, mask = padded_batch()
    with torch.no_grad(), capture_sdpa(model) as cap:
        model(input_ids=ids, attention_mask=mask)
    p = cap.calls[1].probabilities().numpy()
    np.testing.assert_allclose(p.sum(-1), 1.0, atol=1e-12)
    assert np.all(p[1, :, :, 6:] == 0.0)


class _Helper(torch.nn.Module):
    """Attention in a helper's method, not its forward (as a scale rule's ``attend``)."""

    def attend(self, q, k, v):
        return scaled_dot_product_attention(q, k, v)

    def forward(self, q, k, v):
        return self.attend(q, k, v)


class _Layer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.helper = _Helper()

    def forward(self, x, how):
        if how == "method":  # the helper's method, called from the layer's forward: the layer
            return self.helper.attend(x, x, x)
        if how == "call":  # the helper called as a module: the helper, the innermost running
            return self.helper(x, x, x)
        return self.helper.forward(x, x, x)  # its forward called directly: no module call of its own


class _Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = _Layer()

    def forward(self, x, how="method"):
        return self.layer(x, how)


@pytest.mark.parametrize(
    "call,name",
    [
        (lambda m, x: m(x, "method"), "layer"),
        (lambda m, x: m(x, "call"), "layer.helper"),
        (lambda m, x: m(x, "forward"), "layer"),
        # no module called at all: the nearest frame whose self is the model's, the helper's method
        (lambda m, x: m.layer.forward(x, "method"), "layer.helper"),
        (lambda m, x: scaled_dot_product_attention(x, x, x), None),  # outside the model: not its call
    ],
    ids=["method", "module-call", "forward-direct", "layer-forward-direct", "outside"],
)
def test_a_call_is_named_by_the_innermost_module_running(call, name):
    model, x = _Model(), torch.randn(1, 2, 4, 8)
    with capture_sdpa(model) as cap:
        call(model, x)
    assert [c.name for c in cap.calls] == ([] if name is None else [name])


class _FailsOnce(PlainAttention):
    """Calls SDPA, then raises on its first forward; takes an attention_mask (so the monitor's
    padding hooks are on it too, after the capture's)."""

    failed = False

    def forward(self, q, k, v, attention_mask=None):
        out = scaled_dot_product_attention(q, k, v)
        if not self.failed:
            self.failed = True
            raise ValueError("the model's own error")
        return out


@pytest.mark.parametrize("mode", ["observe", "replace"])
def test_an_error_in_the_first_forward_reaches_the_caller_as_itself(mode):
    """The first forward under a capture watches SDPA two ways and settles on one when the model
    returns; a forward that raises leaves it unsettled (settling changes the model's hooks while
    PyTorch's error handler loops over them: its RuntimeError hid the model's error), and the next
    forward settles it."""
    from attnscale.torch import Monitor

    model = _FailsOnce()
    q = torch.randn(1, 2, 4, 8)
    with torch.no_grad(), Monitor(model, mode=mode) as mon:
        with pytest.raises(ValueError, match="the model's own error"):
            model(q, q, q)
        mon.discard()
        model(q, q, q)
        step = mon.step(0)
    assert len(step.heads) == 2 and step.calls == 1
