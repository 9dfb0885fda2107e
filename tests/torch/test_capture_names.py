"""Watching SDPA at the names a model reaches it by (attnscale.torch.sdpa_names): every way of
binding it that the names cover is seen without the mode; a binding they miss is caught by the mode
in the first forward, which then watches alone; the names are SDPA's own again after the context."""

import pytest

torch = pytest.importorskip("torch")

from torch.nn.functional import scaled_dot_product_attention as imported_sdpa  # noqa: E402

from attnscale.torch import Monitor, capture_sdpa  # noqa: E402

F = torch.nn.functional


def builtin():
    """SDPA itself (not through a global of this file's: the capture rebinds those too)."""
    return torch._C._nn.scaled_dot_product_attention


def rebound() -> bool:
    return F.scaled_dot_product_attention is not builtin()


def mode_on() -> bool:
    return torch._C._len_torch_function_stack() > 0


def hooks(model) -> int:
    return sum(len(m._forward_pre_hooks) + len(m._forward_hooks) for m in model.modules())


class ByAttribute(torch.nn.Module):  # F.scaled_dot_product_attention, looked up at each call
    def forward(self, x):
        return F.scaled_dot_product_attention(x, x, x, is_causal=True)


class ByImport(torch.nn.Module):  # this file's global, bound by a from-import
    def forward(self, x):
        return imported_sdpa(x, x, x)


class ByInstance(torch.nn.Module):  # the module's own attribute
    def __init__(self):
        super().__init__()
        self.attend = F.scaled_dot_product_attention

    def forward(self, x):
        return self.attend(x, x, x)


def hidden():
    """A module reaching SDPA through a closure: no name the capture can find."""
    attend = F.scaled_dot_product_attention

    class Hidden(torch.nn.Module):
        def forward(self, x):
            return attend(x, x, x)

    return Hidden()


class Stack(torch.nn.Module):
    def __init__(self, *layers):
        super().__init__()
        self.layers = torch.nn.ModuleList(layers)

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


X = torch.randn(2, 3, 6, 4, generator=torch.Generator().manual_seed(0))


@pytest.mark.parametrize("mode", ["observe", "replace"])
def test_every_name_the_capture_finds_is_watched_without_the_mode(mode):
    model = Stack(ByAttribute(), ByImport(), ByInstance())
    own = model(X)
    with torch.no_grad(), Monitor(model, mode=mode) as mon:
        assert hooks(model) > 0 and rebound()  # the first forward is watched both ways: the mode's hooks, the names
        for s in range(3):
            out = model(X)
            step = mon.step(s)
            assert step.calls == 3 and [h.layer for h in step.heads[::3]] == ["layers.0", "layers.1", "layers.2"]
            assert rebound() and hooks(model) == 2 and not mode_on()  # then the names alone (two hooks on the model)
        assert model.layers[2].attend is not builtin() and imported_sdpa is not builtin()
    assert not rebound() and not mode_on() and model.layers[2].attend is builtin() and imported_sdpa is builtin()
    assert torch.allclose(out, own, atol=1e-6)
    if mode == "observe":
        assert torch.equal(out, own)


@pytest.mark.parametrize("mode", ["observe", "replace"])
def test_a_call_no_name_holds_is_caught_by_the_mode_which_then_watches_alone(mode):
    model = Stack(ByAttribute(), hidden())
    with torch.no_grad(), Monitor(model, mode=mode) as mon:
        for s in range(3):
            model(X)
            step = mon.step(s)
            assert step.calls == 2 and {h.layer for h in step.heads} == {"layers.0", "layers.1"}
            assert not rebound() and hooks(model) > 0  # settled on the mode: the names are SDPA's own again
    assert not rebound() and not mode_on()


def test_another_models_calls_stay_unseen_and_a_capture_inside_watches_with_its_mode():
    model, other = Stack(ByAttribute()), Stack(ByAttribute())
    with torch.no_grad(), Monitor(model) as mon:
        model(X)
        other(X)  # not the watched model's: not seen
        assert mon.step(0).calls == 1
        with capture_sdpa(model) as inner:  # the names are the monitor's: the inner capture uses its mode
            model(X)
        assert len(inner.calls) == 1 and mon.step(1).calls == 1
    assert not rebound()


def test_a_model_compiled_after_the_names_took_over_is_seen_whole_without_a_graph_break():
    model = Stack(ByAttribute(), ByAttribute())
    with torch.no_grad(), Monitor(model, mode="replace") as mon:
        model(X)
        mon.step(0)
        assert rebound() and not mode_on()
        explained = torch._dynamo.explain(model)(X)
        assert explained.graph_break_count == 0, [b.reason for b in explained.break_reasons]
        assert mon.step(1).calls == 2  # explain ran the graph it traced
        compiled = torch.compile(model)
        out = compiled(X)
        step = mon.step(2)
    assert [h.layer for h in step.heads[::3]] == ["layers.0", "layers.1"] and step.calls == 2  # the eager names
    assert torch.allclose(out, model(X), atol=1e-6)


def test_torch_reads_sdpa_by_name_before_the_name_is_rebound():
    """Dynamo's table of torch functions, built from their names the first time it traces: built
    under the rebound name, it would miss SDPA itself for good (every later compiled graph blind)."""
    from torch._dynamo import trace_rules

    trace_rules.get_torch_obj_rule_map.cache_clear()
    torch.overrides._get_overridable_functions.cache_clear()
    with Monitor(Stack(ByAttribute())):
        assert rebound()
        assert builtin() in trace_rules.get_torch_obj_rule_map()
        assert builtin() in torch.overrides._get_overridable_functions()[0][F]


def test_a_function_compiled_outside_the_model_is_not_watched():
    """Traced while the names are rebound but the model is not running: its SDPA stays its own, unseen."""
    model = Stack(ByAttribute())
    other = torch.compile(lambda x: F.scaled_dot_product_attention(x, x, x))
    with torch.no_grad(), Monitor(model) as mon:
        model(X)
        mon.step(0)
        assert rebound() and hooks(model) == 2  # the names alone, and the two hooks that say the model runs
        other(X)
        model(X)
        assert mon.step(1).calls == 1
