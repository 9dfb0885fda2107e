"""Interception inside a graph Dynamo compiles: an SDPA call met while tracing stays in the graph
(observe) or is computed by the replacing function traced in (replace), and a custom operator
beside it hands the call — its inputs, or the figures the graph made — to the innermost capture
when the graph runs, named as the eager model's call would be (:mod:`attnscale.torch.capture.paths`).
No graph break, no recompilation: the ops' arguments are tensors and numbers."""

from __future__ import annotations

import torch

from attnscale.torch.capture.call import SDPAArguments
from attnscale.torch.capture.paths import trace_site
from attnscale.torch.capture.registry import REGISTRY

__all__ = ["compiled_call", "define_ops"]


def _seen(q, k, v, attn_mask, dropout_p, is_causal, scale, enable_gqa, site, token):
    """``attnscale_capture::seen``: one SDPA call of a compiled graph handed to its capture, at run
    time, with real tensors (``output`` None: the graph's own)."""
    cap = REGISTRY.innermost()
    if cap is not None and not cap.paused:
        a = SDPAArguments(q, k, v, attn_mask, dropout_p, is_causal, scale, enable_gqa)
        cap.sdpa_seen += 1
        cap.emit(cap.compiled_name(site), a, None, "sdpa")


def _figures(q, k, v, lse, entropy, max_logit, min_logit, first_key, head_table, counted_entropy, backend, site, token):
    """``attnscale_capture::figures``: the figures of one attention call that a compiled graph
    computed itself (replace mode: :func:`attnscale.torch.attention`'s kernel in the graph, in place
    of the model's SDPA), handed to the innermost capture at run time."""
    cap = REGISTRY.innermost()
    if cap is not None and not cap.paused and cap.on_figures is not None:
        from attnscale.torch.functional import AttentionStats

        cap.sdpa_seen += 1
        stats = AttentionStats(
            lse=lse,
            entropy=entropy,
            max_logit=max_logit,
            min_logit=min_logit,
            backend=backend,
            first_key_weight=first_key,
            head_table=head_table,
            counted_entropy=counted_entropy,
        )
        cap.on_figures(cap.compiled_name(site), q, k, v, stats)


_SCHEMAS = {
    _seen: "(Tensor q, Tensor k, Tensor v, Tensor? attn_mask, float dropout_p, bool is_causal, float? scale, "
    "bool enable_gqa, int site, Tensor(a!) token) -> ()",
    _figures: "(Tensor q, Tensor k, Tensor v, Tensor lse, Tensor entropy, Tensor max_logit, Tensor min_logit, "
    "Tensor first_key, Tensor? head_table, Tensor? counted_entropy, str backend, int site, Tensor(a!) token) -> ()",
}


def define_ops() -> None:
    """The two ops ``attnscale_capture::seen`` and ``::figures``, defined once per process (when a
    capture is entered: Dynamo cannot trace their registration). Each returns nothing and mutates a
    one-element token (its fake does nothing), so that the compiler neither drops it (its result is
    unused) nor reorders it past the step; opaque to Dynamo and Inductor. Defined through a
    ``torch.library.Library``, not ``torch.library.custom_op``, whose Python wrapper cost 46 µs a
    call against 2.5 (measured, 12 arguments): the graph calls one per attention call."""
    if REGISTRY.ops:
        return
    REGISTRY.token.append(torch.zeros(1))
    lib = torch.library.Library("attnscale_capture", "FRAGMENT")
    REGISTRY.library.append(lib)
    for fn, schema in _SCHEMAS.items():
        name = fn.__name__.lstrip("_")
        lib.define(name + schema)
        lib.impl(name, fn, "CompositeExplicitAutograd")
        torch.library.register_fake(f"attnscale_capture::{name}", lambda *args: None, lib=lib)
        REGISTRY.ops[name] = getattr(torch.ops.attnscale_capture, name)


def compiled_call(sdpa, args, kwargs, compiled_replace=None):
    """An SDPA call met while Dynamo traces. With ``compiled_replace`` (replace mode) the graph
    computes the call itself where that function can (it returns ``(output, AttentionStats)`` of
    :func:`attnscale.torch.attention`, traced: the fused kernel is one op there), and the figures
    op hands the figures to the capture when the graph runs. Otherwise the model's own SDPA stays in
    the graph (its output the compiled model's own) and the seen op hands the call's detached inputs
    to the capture, which computes the figures as observe mode does."""
    a = SDPAArguments.of(args, kwargs)
    site = trace_site()  # a constant of the graph: the call's module below the compiled one
    done = None if compiled_replace is None else compiled_replace(a)
    q, k, v = a.query.detach(), a.key.detach(), a.value.detach()
    if done is not None:
        out, stats = done
        REGISTRY.ops["figures"](
            q,
            k,
            v,
            stats.lse,
            stats.entropy,
            stats.max_logit,
            stats.min_logit,
            stats.first_key_weight,
            stats.head_table,
            stats.counted_entropy,
            stats.backend,
            site,
            REGISTRY.token[0],
        )
        return out
    out = sdpa(*args, **(kwargs or {}))
    mask = None if a.attn_mask is None else a.attn_mask.detach()
    scale = None if a.scale is None else float(a.scale)
    REGISTRY.ops["seen"](
        q, k, v, mask, float(a.dropout_p), bool(a.is_causal), scale, bool(a.enable_gqa), site, REGISTRY.token[0]
    )
    return out
