"""Monitor.close(): what leaving the context does, callable inside it — the model is left as it was
(no hook, no mode on torch's stack, SDPA's names SDPA's own), later calls are not seen, the figures
stay; a second close (or the context's exit after it) does nothing and warns no more."""

import warnings

import pytest

torch = pytest.importorskip("torch")

from attnscale.torch.monitor import Monitor, NoAttentionSeen  # noqa: E402

F = torch.nn.functional


class Masked(torch.nn.Module):
    """Self-attention over x (B, H, L, d), taking an attention_mask (B, L) as a Hugging Face model does."""

    def forward(self, x, attention_mask=None):
        return F.scaled_dot_product_attention(x, x, x, is_causal=True)


def state(model):
    """What a monitor may change: hooks on the model's modules, torch's mode stack, SDPA's name."""
    hooks = sum(len(m._forward_pre_hooks) + len(m._forward_hooks) for m in model.modules())
    return hooks, torch._C._len_torch_function_stack(), F.scaled_dot_product_attention


@pytest.mark.parametrize("mode", ["observe", "replace"])
def test_close_leaves_the_model_as_it_was_and_keeps_the_figures(mode):
    model, x = Masked(), torch.randn(1, 2, 4, 8, generator=torch.Generator().manual_seed(0))
    before = state(model)
    with torch.no_grad(), Monitor(model, mode=mode) as mon:
        model(x, attention_mask=torch.ones(1, 4))
        assert state(model) != before  # watching: hooks on the model
        mon.close()
        assert state(model) == before
        model(x, attention_mask=torch.ones(1, 4))  # after close: the model's own, unseen
        summary = mon.summary()
        assert [h.calls for h in summary] == [1, 1] and len(mon.calls) == 1
        mon.close()  # again: nothing
    assert state(model) == before and mon.summary() == summary


def test_close_warns_once_when_nothing_was_seen():
    model = Masked()
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        with Monitor(model) as mon:
            mon.close()
    assert [type(w.message) for w in seen] == [NoAttentionSeen]
