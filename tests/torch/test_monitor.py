"""attnscale.torch.monitor: outputs untouched, figures equal to independent computations, no tensors kept."""

import math
import types

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from attnscale.errors import InputError, InputTypeError  # noqa: E402
from attnscale.torch import Monitor, capture_sdpa  # noqa: E402


class TwoLayers(torch.nn.Module):
    """Causal self-attention, then cross-attention with an additive mask that also biases (ALiBi-like)."""

    def __init__(self, bias):
        super().__init__()
        self.bias = bias

    def forward(self, x, memory):
        F = torch.nn.functional
        h = F.scaled_dot_product_attention(x, x, x, is_causal=True)
        return F.scaled_dot_product_attention(h, memory, memory, attn_mask=self.bias, scale=0.7)


def two_layer_problem(seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(2, 3, 11, 8, generator=g, dtype=dtype)
    memory = torch.randn(2, 3, 13, 8, generator=g, dtype=dtype)
    bias = torch.randn(1, 3, 11, 13, generator=g, dtype=dtype)
    bias[..., 0, :] = torch.finfo(dtype).min  # one fully masked row per head, HF style
    bias[..., 5:8] = -math.inf
    return TwoLayers(bias), x, memory


def walk_for_tensors(obj, seen=None):
    """Every torch.Tensor reachable from obj's attributes and containers, but for the model's own
    (the monitor holds the model it watches, whose parameters and buffers are not its figures) and
    Python modules' globals (the capture holds the modules whose names it rebinds)."""
    seen = set() if seen is None else seen
    if id(obj) in seen or isinstance(obj, (torch.nn.Module, types.ModuleType)):
        return []
    seen.add(id(obj))
    if isinstance(obj, torch.Tensor):
        return [obj]
    found = []
    children = (
        obj.values()
        if isinstance(obj, dict)
        else obj
        if isinstance(obj, (list, tuple, set))
        else vars(obj).values()
        if hasattr(obj, "__dict__")
        else ()
    )
    for child in children:
        found += walk_for_tensors(child, seen)
    return found


def test_outputs_unchanged_and_figures_equal_a_float64_recomputation():
    model, x, memory = two_layer_problem()
    plain = model(x, memory)
    with capture_sdpa(model, store=True) as cap:
        again = model(x, memory)
    with Monitor(model) as mon:
        watched = model(x, memory)
    assert torch.equal(plain, watched) and torch.equal(plain, again)
    heads = {(f.layer, f.head): f for f in mon.summary()}
    assert len(heads) == 3 and [c.layer for c in mon.calls] == ["TwoLayers", "TwoLayers"]
    # Both calls come from the root module, so each head aggregates both: recompute from the capture.
    per_head = {h: [] for h in range(3)}
    logits_seen = {h: [] for h in range(3)}
    empty, single = 0, 0
    for call in cap.calls:
        p = call.probabilities()  # float64, capture's own softmax
        entropy = torch.special.entr(p).sum(-1)
        keys = call.attended().sum(-1)
        empty += int((keys == 0).sum())
        single += int((keys == 1).sum())  # the causal layer's first queries
        logits = call.logits()
        for h in range(3):
            per_head[h].append(entropy[:, h][keys[:, h] >= 2])
            logits_seen[h].append(logits[:, h][torch.isfinite(logits[:, h])])
    assert empty == 2 * 3 and single == 2 * 3
    for h in range(3):
        e = torch.cat(per_head[h]).numpy()
        f = heads[("TwoLayers", h)]
        assert f.calls == 2 and f.rows == e.size and f.rows_empty == 2 and f.rows_single == 2
        np.testing.assert_allclose(
            [f.entropy_mean, f.entropy_median, f.entropy_min], [e.mean(), np.median(e), e.min()], rtol=1e-9, atol=1e-12
        )
        s = torch.cat(logits_seen[h])
        np.testing.assert_allclose([f.max_logit, f.min_logit], [s.max().item(), s.min().item()], rtol=1e-12)
        assert f.float16_overflow_rows == 0
    assert walk_for_tensors(mon) == []  # figures only: no q, k, v, weights


def test_float16_overflow_is_flagged_per_call_and_head():
    F = torch.nn.functional

    class Loud(torch.nn.Module):
        def forward(self, q, k):
            return F.scaled_dot_product_attention(q, k, k)

    layer = Loud()
    g = torch.Generator().manual_seed(1)
    q, k = torch.randn(1, 2, 4, 16, generator=g), torch.randn(1, 2, 6, 16, generator=g)
    q[0, 1, 2] *= 3e5  # head 1, row 2: logits ≈ 10⁵
    with Monitor(layer) as mon:
        layer(q, k)
        layer(q[:, :, :2], k)  # rows 0, 1 only: no overflow
    assert [c.float16_overflow_rows for c in mon.calls] == [1, 0]
    assert mon.calls[0].max_abs_logit > 65504 > mon.calls[1].max_abs_logit
    assert [f.float16_overflow_rows for f in mon.summary()] == [0, 1]


def test_bad_arguments():
    with pytest.raises(InputTypeError, match="model: expected a torch.nn.Module or None, got str"):
        Monitor("bert")
    with pytest.raises(InputError, match="backend: expected one of"):
        Monitor(None, backend="fastest")
    assert Monitor().summary() == []


@pytest.mark.slow
@pytest.mark.model
def test_monitor_on_minilm_equals_the_probe_and_the_eager_weights():
    transformers = pytest.importorskip("transformers")
    from attnscale.experiments.pretrained.loading import load_encoder
    from attnscale.experiments.pretrained.probe.run import builtin_sentences, run_probe

    texts = builtin_sentences()[:4]
    loaded = load_encoder()  # eager attention, float32
    loaded.model.double()  # float64: compare at 1e-9
    # The probe averages over real query rows, and so does the monitor: the padded batch's
    # attention_mask says which rows are padding (they are no figure).
    probe = run_probe(loaded, texts, batch_size=4)
    assert probe["check"]["passed"]
    batch = loaded.tokenizer(texts, padding=True, return_tensors="pt")
    assert not batch["attention_mask"].all()  # padding there is
    with Monitor(loaded.model) as mon, torch.no_grad():
        loaded.model(**batch)
    assert {c.source for c in mon.calls} == {"interface"}
    layers = probe["layers"]
    ours = np.array([[f.entropy_mean for f in mon.summary() if f.layer == name] for name in layers])
    theirs = np.array([[h["entropy"] for h in probe["heads"] if h["layer"] == i] for i in range(len(layers))])
    assert ours.shape == theirs.shape == (6, 12)
    np.testing.assert_allclose(ours, theirs, rtol=1e-9, atol=0)
    real = int(batch["attention_mask"].sum())
    assert {f.rows + f.rows_single for f in mon.summary()} == {real}  # 46 real tokens, not 4 × 15 rows

    # The same weights in the SDPA implementation, a padded float32 batch: entropies of the real
    # tokens' rows against the eager model's own attention maps.
    sdpa = transformers.AutoModel.from_pretrained(
        loaded.folder, attn_implementation="sdpa", local_files_only=True
    ).eval()
    eager = loaded.model.float()
    with torch.no_grad():
        maps = eager(**batch, output_attentions=True).attentions
        plain = sdpa(**batch).last_hidden_state
        with Monitor(sdpa) as mon:
            watched = sdpa(**batch).last_hidden_state
    assert torch.equal(plain, watched)
    assert {c.source for c in mon.calls} == {"sdpa"} and len(mon.calls) == 6
    figures = mon.summary()
    keep = batch["attention_mask"].bool()
    for i, weights in enumerate(maps):
        entropy = torch.special.entr(weights.double()).sum(-1)  # (B, H, L)
        for f in figures[i * 12 : (i + 1) * 12]:
            e = entropy[:, f.head][keep].numpy()
            np.testing.assert_allclose([f.entropy_mean, f.entropy_min], [e.mean(), e.min()], rtol=2e-5, atol=2e-6)


def test_cli_help():
    from attnscale.cli import main

    with pytest.raises(SystemExit) as done:
        main(["telemetry-bench", "--help"])
    assert done.value.code == 0


class SelfAttention(torch.nn.Module):
    def forward(self, x):
        return torch.nn.functional.scaled_dot_product_attention(x, x, x, scale=0.5)


@pytest.mark.parametrize("shape", [(2, 5, 8), (2, 3, 5, 8), (2, 3, 2, 5, 8)])
def test_any_sdpa_layout_three_four_or_five_dimensional(shape):
    """SDPA takes 3-D (N, L, E) and any leading dimensions; the monitor must neither break the
    forward nor change its output, and its figures equal the softmax's computed here directly."""
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(len(shape)), dtype=torch.float64)
    layer = SelfAttention()
    plain = layer(x)
    with Monitor(layer) as mon:
        watched = layer(x)
    assert torch.equal(plain, watched)
    p = torch.softmax(0.5 * x @ x.transpose(-2, -1), dim=-1)
    entropy = torch.special.entr(p).sum(-1)  # (..., L)
    heads = 1 if len(shape) == 3 else shape[-3]
    per_head = entropy.reshape(-1, 1, shape[-2]) if len(shape) == 3 else entropy.reshape(-1, heads, shape[-2])
    figures = mon.summary()
    assert [f.head for f in figures] == list(range(heads))
    for f in figures:
        e = per_head[:, f.head].flatten().numpy()
        assert f.rows == e.size and f.rows_empty == 0 and f.rows_broken == 0
        np.testing.assert_allclose([f.entropy_mean, f.entropy_min], [e.mean(), e.min()], rtol=1e-12, atol=1e-14)
    B = math.prod(shape[:-3]) if len(shape) > 3 else shape[0]
    assert mon.calls[0].shape == (B, heads, shape[-2], shape[-2], shape[-1], shape[-1])


def test_an_overflowed_row_counts_as_overflow_not_as_empty():
    """q·k beyond float32's range is +inf: such a row has no distribution, but it attended keys."""
    layer = SelfAttention()
    x = torch.full((1, 2, 3, 4), 1e19)
    with Monitor(layer) as mon:
        layer(x)
    for f in mon.summary():
        assert (f.rows_empty, f.rows_broken, f.float16_overflow_rows, f.rows) == (0, 3, 3, 0)
    assert mon.calls[0].float16_overflow_rows == 6  # 3 rows × 2 heads


def test_a_step_and_the_summary_give_one_record_type():
    """Monitor.step and Monitor.summary both give HeadFigures: a step's over its own calls (its
    median over its own rows), the summary's over every call of the context."""
    from attnscale.torch.monitor.records import HeadFigures

    layer = SelfAttention()
    g = torch.Generator().manual_seed(3)
    xs = [torch.randn(1, 2, 5, 8, generator=g) * s for s in (1.0, 4.0)]
    with Monitor(layer) as mon:
        steps = []
        for i, x in enumerate(xs):
            layer(x)
            steps.append(mon.step(i, log=False))
    for i, x in enumerate(xs):
        p = torch.softmax(0.5 * (x.double() @ x.double().transpose(-2, -1)), -1)  # SelfAttention's scale
        entropy = -(p * p.clamp_min(1e-300).log()).sum(-1)[0]  # (H, L)
        for h, figures in enumerate(steps[i].heads):
            assert isinstance(figures, HeadFigures) and figures.calls == 1
            assert figures.entropy_median == pytest.approx(float(np.median(entropy[h].numpy())), abs=1e-5)
    summary = mon.summary()
    assert all(isinstance(f, HeadFigures) and f.calls == 2 and f.rows == 10 for f in summary)
    assert [f.max_logit for f in summary] == [max(a.max_logit, b.max_logit) for a, b in zip(*(s.heads for s in steps))]
