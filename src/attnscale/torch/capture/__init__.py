"""Capture the attention a PyTorch model actually computes: q, k, v, mask and scale of every call.

API::

    from attnscale.torch.capture import capture_sdpa, SDPACall

    with capture_sdpa(model=None, store=True, on_call=None, replace=None) as cap:
        model(**inputs)
    cap.calls        # list[SDPACall] in call order (empty when store=False)
    cap.skipped      # Counter {(module name, reason): calls}: attention seen but not readable

One module per interception path: ``mode`` (a torch-function mode), ``names`` (SDPA's names
rebound), ``interface`` (transformers' attention interface), ``modules`` (``nn.MultiheadAttention``),
``graphs`` (compiled graphs' custom ops); ``recorder`` names and records what they find, ``context``
enters them (:class:`capture_sdpa`), ``call`` holds the types they share (:class:`SDPAArguments`,
:class:`SDPACall`, :class:`Fallback`).

Each intercepted call becomes one :class:`SDPACall`, passed to ``on_call(call)`` as it happens (if
given) and appended to ``cap.calls`` only when ``store=True`` (a monitor computes its figures in
``on_call`` and keeps no tensors). Fields, in PyTorch's SDPA layout:

- ``index``: running number of the call within this capture (0, 1, ...).
- ``name``: the innermost module running when the call happened: its path in ``model``
  (``"encoder.layer.3.attention.self"``) when ``model`` is given, else its class name ("" if none).
- ``q: (..., H_q, L, d_k)``, ``k: (..., H_k, S, d_k)``, ``v: (..., H_k, S, d_v)``: detached tensors,
  shaped exactly as the model passed them — usually 4-D ``(B, H, N, d)``, but SDPA also takes any
  number of leading dimensions, and 3-D ``(N, L, d)`` with no head axis.
- ``attn_mask``: None, a bool tensor (True = attend) or an additive float tensor, broadcastable to
  ``(..., H_q, L, S)``, exactly as the model passed it; :mod:`attnscale.torch.sdpa_mask` says which
  entries mask and which add a bias.
- ``is_causal``: SDPA's flag (top-left aligned causal mask), ``dropout_p``, ``enable_gqa``.
- ``scale``: the factor that actually multiplied q·kᵀ, resolved (SDPA's None → 1/√d_k). Never None.
- ``softcap``: c of Gemma 2's logits c·tanh(scale·q·kᵀ / c), taken before the mask is added; 0.0 = none.
- ``fallback``: the replacing function's :class:`Fallback` when it left this call to the model, else None.
- ``output: (..., H_q, L, d_v)``: what the attention returned (None for ``"module"``, whose
  attention output is only seen after its output projection).
- ``source``: ``"sdpa"``, ``"interface"`` or ``"module"`` (below).
- ``weights``: the model's own probabilities ``(B, H_q, L, S)`` when it computed them (eager
  attention), else None.

Methods (torch, float64): ``call.logits()`` (the capped scale·q·kᵀ plus any additive mask, −inf
where masked), ``call.attended()`` (bool, True = attend, broadcast to ``(B, H_q, L, S)``),
``call.probabilities()`` (softmax of the logits; rows with nothing attended are all 0).

How calls are found (each once):

- ``"sdpa"``: ``torch.nn.functional.scaled_dot_product_attention`` is intercepted however the
  model reaches it, two ways. The names it is bound to where a model finds it
  (:mod:`attnscale.torch.capture.names`: ``torch.nn.functional``'s attribute, the globals of the
  modules defining the model's classes, the model's modules' attributes) are rebound, while the
  capture is active, to a function that sees the call and hands it on: nothing runs for the model's
  other torch calls. And a :class:`torch.overrides.TorchFunctionMode` sees every torch call while it
  is on torch's stack (SDPA found by an identity test), at about 2 µs each (measured: 3.4 → 5.3 µs
  for a small in-place op); with ``model`` given it is on the stack only while the model or one
  of its modules runs (forward pre-hooks on every module put it on, the model's own exit takes it
  off), so a training step's loss, backward and optimiser are not intercepted. The first forward
  of the model is watched both ways; at its end, if every SDPA call of the model came through a
  name, the names alone watch from then on (the mode and its hooks leave; two hooks on the model
  itself say when it runs, so that a graph compiled meanwhile is watched only if it is the
  model's); if the mode saw one that
  no name held (SDPA reached through a closure, say), the mode alone does, and the names are
  SDPA's own again. The mode alone watches from the start without a model, for a compiled model
  (whose graph Dynamo traces with the mode), for a model with an ``nn.MultiheadAttention`` (only a
  mode keeps it off its fused fast path, below) and while another capture watches by the names.
  Inside a graph Dynamo compiles, the call stays SDPA's and the
  custom op ``attnscale_capture::seen`` beside it hands its detached inputs to the innermost
  capture at run time (no graph break; ``output`` None), named as the eager model's call would be
  (:mod:`attnscale.torch.capture.paths`: the module below the compiled one is recorded while
  Dynamo traces, the one running the graph read from the frames when it runs; where that cannot be
  told, ``compiled[i]`` by its order since the last reset, with one :class:`UnnamedCompiledCall`
  warning saying why); with ``compiled_replace`` the graph computes the call itself and the op
  ``attnscale_capture::figures`` hands over its figures instead (a model compiled after the names
  took over is traced through the names' function, to the same ops). ``capture_sdpa.pause()`` /
  ``resume()`` take the mode off torch's stack, its hooks off the model and the names back to
  SDPA, and back (what ``Monitor(every=N)`` does between measured steps).
- ``"interface"``: a Hugging Face model computes attention through transformers' attention
  interface (:mod:`attnscale.torch.capture.interface`), which the capture rides while active. A call whose
  function called SDPA was already seen as ``"sdpa"`` (``attn_implementation="sdpa"``); one that
  did not and returned its probabilities — the model's own eager function, ``"eager"`` — is read
  from the interface's arguments: q and k after rotary embedding and QK-norm, k and v after the
  KV cache, the additive mask (and T5's ``position_bias``), ``scaling`` and ``softcap``. Any other
  call (flash or flex attention, an eager function with attention sinks) is counted in
  ``cap.skipped`` with its reason.
- ``"module"``: PyTorch's ``nn.MultiheadAttention`` (and the transformer layers built on it) hides
  its SDPA call from the mode; the mode sees ``F.multi_head_attention_forward`` instead, and the
  call is rebuilt from its arguments by :mod:`attnscale.torch.capture.modules` (which says why the
  modules then take their standard path, never their fused fast path).
- Only ``model``'s calls, when given: a call while none of its modules runs (another model run
  inside the context) is left to that model, unseen and uncounted.
- Module names: paths in the uncompiled model (``torch.compile``'s ``_orig_mod`` parts left out, so
  the compiled model and the plain one name alike). With ``model`` given, the innermost of its
  modules running at the call — the
  attention module an interface call names, else the nearest caller frame that calls one of them
  (``nn.Module.__call__``: a helper module's method called from a layer's forward names the layer, as
  hooks would), else the nearest frame whose ``self`` is one (no hooks: hooks on every module would
  cost a forward ~10%). Without a model, global module
  hooks kept as a stack (which need no model but only know class names, and cost every module's call).

Tensors are detached, not copied: do not modify them in place while you hold the calls.
"""

from attnscale.torch.capture.call import Fallback, SDPAArguments, SDPACall
from attnscale.torch.capture.context import capture_sdpa, recomputing
from attnscale.torch.capture.paths import UnnamedCompiledCall, compiled
from attnscale.torch.capture.recorder import Capture
from attnscale.torch.sdpa_mask import MASKED_BELOW

__all__ = [
    "SDPACall",
    "SDPAArguments",
    "Fallback",
    "Capture",
    "capture_sdpa",
    "compiled",
    "recomputing",
    "MASKED_BELOW",
    "UnnamedCompiledCall",
]
