"""Fast attention on PyTorch that also reports each query row's health, without the L×S matrix.

Same conventions as the NumPy core (:func:`attnscale.attention`)::

    q: (..., H_q, L, d_k)   k: (..., H_kv, S, d_k)   v: (..., H_kv, S, d_v)   ->   out: (..., H_q, L, d_v)

``scale`` multiplies q·k (None = 1/√d_k, 0.0 legal) and may be any rule of :mod:`attnscale.scales`
(QK-norm normalises q and k first, log-n scales each row by s·ln(attended keys), soft-capping caps
the logits; as the NumPy core); ``mask`` is bool, True = attend; ``causal`` is False, "top_left",
"bottom_right" or True (L == S only); H_q a multiple of H_kv (grouped-query).
Per query row i, with logits s_ij = cap(scale·q̂_i·k̂_j) (+ bias) over the attended keys, the
figures an ``aux=``:class:`~attnscale.AuxRequest` asks for (:mod:`attnscale.attention_aux`):

    lse_i     = ln Σ_j e^{s_ij}                          (what fused kernels keep for their backward)
    entropy_i = −Σ_j p_ij ln p_ij = lse_i − Σ_j p_ij s_ij  (nats)
    max_logit_i, min_logit_i                             (logit_range: float16 overflows past 65504)
    first_key_weight_i = p_i0 = e^{s_i0 − lse_i}         (the weight on key 0: attention sinks)

A row with nothing attended gets output 0, lse −inf, and NaN figures (as :func:`attnscale.row_health`).
A row with a NaN logit, or a +inf one (q·k overflowed: huge finite inputs, or an inf one, which
is let through unless ``check_finite=True``) is not disguised as one with nothing attended: its
output and entropy are NaN, its lse +inf (overflow) or NaN (kernel, composed and chunked backends).
(PyTorch's CPU flash kernel turns such a row of at most 8 keys into a finite one, lse 0: the
composed backend sets it back to NaN.) docs/attention.md says when to choose which backend and
states the numerical limits this module shares with SDPA's CPU flash kernel.

Masked keys: a key that no query row of its KV head attends (a padding mask's, or past a top-left
causal reach) is zeroed in k and v before any backend sees it, so NaN or ±inf there reaches neither
the output nor a gradient (SDPA's math path gives such rows NaN; 0 × NaN in a backward's products
would put NaN in dq), and its dk, dv are 0, as SDPA's. A key attended by some rows and masked for
others is not zeroed: NaN in it makes the attending rows NaN, and the gradient of the rows that mask
it too. A bias isolates nothing: a NaN logit plus −inf stays NaN, as in SDPA.

Zero sizes, as SDPA answers them: a batch, heads (H_q = H_kv = 0) or rows of size 0 give empty
results and gradients; S = 0 keys leave each row nothing to attend (output 0, as SDPA's zeros; lse
−inf, NaN figures); d_k = 0 makes every logit 0, so the weights are uniform over the attended keys
and the output their mean of v (SDPA's answer with its default scale too). The NumPy core refuses
S = 0 and d_k = 0.

Dropout (``dropout_p``, SDPA's): each attention weight kept with probability 1 − p and scaled by
1/(1 − p), all dropped at p = 1, whenever p > 0 (training or not, as SDPA's argument); the figures
describe the softmax before it. "auto" without figures hands it to SDPA (PyTorch's default
generator); with figures or a ``generator``, the chunked backend computes it, the one of ours that
can ("kernel", "composed" and "flex" refuse it: their fused passes have no dropout).

Gradients: ``out`` is differentiable on every backend (with respect to q, k, v and a float bias);
the kernel has its own flash-style backward (probabilities recomputed block by block from the saved
lse, memory O(L·d); one task per (batch, KV head), so dk and dv of a query-head group are summed
without atomics). The kernel, forward and backward, gives the same bits run after run at a given
thread count; another thread count may change the last bits (within 16 eps of the largest entry,
as tested), because the BLAS may pick its GEMM kernels by it (MKL does on Intel Xeon CPUs). A bias that requires grad gets
its gradient from a (B, H_q, L, S) buffer: O(L·S), the size of the bias when it is given in full (a
broadcast one is summed back from it). The figures (lse, entropy, logit range) are diagnostics and
come back **detached**: no gradient flows through them.

Four backends, all with memory O(L·d) except where said; the kernel and chunked ones are exact to
rounding (the entropy a sum of non-negative terms), the composed and flex ones subtract:

- ``"kernel"`` (CPU, float32/float64): the fused C++ kernel of :mod:`attnscale.torch.ext`, a
  flash-style online softmax that accumulates Σ p·(s − max) next to the softmax sum (one extra
  multiply-add per score). The max logit is its running max, free; the min logit is one compare
  and select per score in the same pass (about 2% more time, measured by benchmarks/telemetry.py).
- ``"composed"`` (CPU or CUDA, no bias, no soft-cap): PyTorch's own fused kernel, called once with [V, K] as the
  values — the output's last d_k columns are P·K, so Σ_j p_ij s_ij = scale·q_i·(P K)_i, and the
  entropy lse − scale·q·(PK) is a difference: its absolute error is about eps·|lse| (float32 at
  scale 10 on unit-variance q, k of d_k 64: ~1e-4 nats), clamped at 0 from below. PyTorch's
  fused CPU kernel wants one head size for q, k and v, so q and k are zero-padded to d_v + d_k; a
  mask is handed to it as an additive float (B, H_q, L, S) tensor, the only form it takes; the
  logit range needs its own pass (the chunked logits below).
- ``"chunked"`` (anywhere, bias included, dropout): logits for a block of query rows at a time,
  O(rows·S) memory with rows chosen to keep a block near 16 MiB; its backward is autograd's through
  the blocks (O(L·S) kept for it), exact where the flash-style backward is not (docs/attention.md).
- ``"flex"`` (CUDA compiled, CPU eager; every rule, bias included): PyTorch's FlexAttention, the
  same [V, K] construction in one call with block masks, computing in the inputs' own dtype
  (bfloat16 and float16 too, unlike the others; their figures from a float32 pass), its fused backward on CUDA, none on CPU; soft-cap
  and bias through a score_mod plus a chunked pass for the figures (:mod:`attnscale.torch.backends.flex`,
  which states its costs and its measured precision).

``"auto"`` picks the kernel on CPU when it builds, else composed (chunked when a bias or a soft-cap
is given). On CUDA it picks flex when compiled FlexAttention runs there (tried once per device:
``kernel_status()["cuda"]`` says which and why), else composed through PyTorch's memory-efficient
kernel, which returns the log-sum-exp and whose own backward gives the gradients; float64 on CUDA
takes chunked. The CUDA paths are tested by tests that run only where a GPU is present and by
benchmarks/gpu.py; neither has run on a GPU in this project yet.

This module is the entry point: :func:`attention` and the monitor's :func:`attention_figures`. The
arguments are checked in :mod:`attnscale.torch.arguments`, the problem made in
:mod:`attnscale.torch.prepare`, the backend chosen and run in :mod:`attnscale.torch.choice`, its
figures shaped in :mod:`attnscale.torch.stats`; the backends themselves are in
:mod:`attnscale.torch.backends`, one module each.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from attnscale.attention_aux import AuxRequest, check_aux, refuse_matrices
from attnscale.softmax_rows import FLOAT16_MAX
from attnscale.torch.arguments import check_dropout, check_options, counted_rows, keepable, signature_of
from attnscale.torch.backends.kernel import call_kernel, kernel_arguments
from attnscale.torch.backends.problem import Problem, plain_sdpa
from attnscale.torch.choice import BACKENDS, check_graph, run_backend, with_dropout
from attnscale.torch.prepare import isolate_unattended_keys, prepare, refuse_non_finite
from attnscale.torch.stats import AttentionStats, aux_output, stats_of

__all__ = [
    "attention",
    "attention_figures",
    "AttentionStats",
    "BACKENDS",
    "FLOAT16_MAX",
    "KeptAttention",
    "kept_attention",
]


def attention(
    q,
    k,
    v,
    *,
    scale=None,
    mask=None,
    bias=None,
    causal=False,
    dropout_p: float = 0.0,
    generator=None,
    aux: AuxRequest | None = None,
    backend: str = "auto",
    check_finite: bool = False,
):
    """Scaled dot-product attention, exact, in memory O(L·d), with its per-row figures on request.

    Args:
        q: (..., H_q, L, d_k). k: (..., H_kv, S, d_k). v: (..., H_kv, S, d_v). torch tensors of one
            floating dtype and device; H_q a multiple of H_kv; leading dimensions broadcast; rank 2
            (N, d) means one head.
        scale: multiplies q·k. None = 1/√d_k; a number (0.0 is legal); a rule or its name
            (:mod:`attnscale.scales`: inverse_sqrt_dk, inverse_dk, unscaled, logn, qknorm, softcap;
            the composed backend cannot soft-cap and says so).
        mask: bool tensor, True = attend, broadcastable to (..., H_q, L, S) (masked keys: module docstring).
        bias: additive float tensor, broadcastable to (..., H_q, L, S); -inf entries are not attended;
            float32 beside half-precision inputs stays float32, as in SDPA.
        causal: False, "top_left" (PyTorch is_causal), "bottom_right" (KV-cache decoding), or True (L == S).
        dropout_p, generator: SDPA's dropout, drawn from ``generator`` (None: PyTorch's default
            one); the figures describe the softmax before it (module docstring).
        aux: an :class:`~attnscale.AuxRequest` of the per-row figures to return beside the output:
            ``lse``, ``entropy``, ``logit_range`` (each row's largest and smallest attended logit; its
            cost: module docstring), ``first_key_weight`` (each row's weight on key 0: a head that
            puts most of every row's weight there is an attention sink; the kernel's own pass, else
            one product of q̂ with k̂_0 per head, O(L·d_k)). ``logits`` and ``weights`` are refused:
            this function never forms the L×S matrices (the NumPy core returns them). None: the
            output alone, and backend "auto" hands the call to
            ``torch.nn.functional.scaled_dot_product_attention`` (but a soft-cap).
        backend: "auto", "kernel", "composed", "chunked" or "flex" (module docstring).
        check_finite: refuse NaN/Inf in q, k, v and NaN/+Inf in bias, naming the first. Off by
            default, as in PyTorch: the scan reads every input once more (on CUDA a host sync per
            call), and a non-finite input still shows, as NaN output and figures.

    Returns:
        The output tensor (..., H_q, L, d_v); with ``aux``, ``(out, figures)``, figures an
        :class:`~attnscale.AuxOutput` whose fields not asked for are None (``backend`` names the
        backend that ran). ``out`` carries gradients (``.backward()`` works on every backend); the
        figures are detached diagnostics, float32 (float64 for float64 inputs), shaped as the rows
        (..., H_q, L). A backend that could not record a backward for inputs that require grad
        raises :class:`InputError` rather than return an output without one.

    >>> import torch
    >>> from attnscale import AuxRequest
    >>> q = torch.tensor([[1.0, 0.0, 1.0, 0.0]]); k = torch.tensor([[0.0, 1.0, 1.0, 1.0], [0.0, 0.0, 0.0, 0.0]])
    >>> out, aux = attention(q, k, torch.ones(2, 3), aux=AuxRequest(lse=True, entropy=True, logit_range=True))
    >>> [round(float(x), 4) for x in (aux.max_logit[0], aux.lse[0], aux.entropy[0])]   # logits 0.5 and 0
    [0.5, 0.9741, 0.6628]
    >>> aux.first_key_weight is None
    True
    """
    request = check_aux(aux)
    refuse_matrices(request, "attnscale.torch.attention")
    if request is None:
        return _attend(q, k, v, scale, mask, bias, causal, dropout_p, generator, backend, check_finite, None)
    figures = (request.logit_range, request.first_key_weight, False, None)
    out, stats = _attend(q, k, v, scale, mask, bias, causal, dropout_p, generator, backend, check_finite, figures)
    return out, aux_output(stats, request)


def attention_figures(
    q,
    k,
    v,
    *,
    scale=None,
    mask=None,
    bias=None,
    causal=False,
    dropout_p: float = 0.0,
    generator=None,
    logit_range: bool = False,
    first_key: bool = False,
    backend: str = "auto",
    check_finite: bool = False,
    head_table: bool = False,
    counted=None,
) -> tuple:
    """The monitor's call: :func:`attention` (the same arguments but ``aux``) returning ``(out,
    stats)``, stats an :class:`AttentionStats` with lse and entropy, the logit range with
    ``logit_range``, the weight on key 0 with ``first_key``, and:

    Args:
        head_table: the figures also summed per head as the monitor keeps them (counts, sums,
            extremes: :mod:`attnscale.torch.monitor_aggregates`), made by the kernel with the rows, in
            ``stats.head_table`` and ``stats.counted_entropy``; needs ``logit_range`` and ``first_key``.
            Other backends leave both None (the caller sums the figures: its ``call_figures``).
        counted: with ``head_table``, bool (..., L) (q's leading dimensions, L): the rows it counts; None: all.
    """
    figures = (logit_range, first_key, head_table, counted)
    return _attend(q, k, v, scale, mask, bias, causal, dropout_p, generator, backend, check_finite, figures)


def _attend(q, k, v, scale, mask, bias, causal, dropout_p, generator, backend, check_finite, figures):
    """The output, or with ``figures`` = (logit_range, first_key, head_table, counted) the output and
    its :class:`AttentionStats`: the checks, the problem, the backend, its run."""
    logit_range, first_key, head_table, counted = figures or (False, False, False, None)
    check_options(backend, logit_range, first_key, head_table)
    dropout = check_dropout(dropout_p, generator, q)
    p, chosen = prepare(q, k, v, scale, mask, bias, causal, check_finite, backend, figures is not None)
    p, chosen = with_dropout(p, chosen, backend, dropout, generator) if dropout else (p, chosen)
    if chosen is None:  # PyTorch's SDPA cannot cap: a capped call has a backend
        if check_finite:
            refuse_non_finite({"q": q, "k": k, "v": v}, kernel=False)
        return p.shaped(plain_sdpa(p)).to(p.out_dtype)
    if check_finite:
        refuse_non_finite({"q": q, "k": k, "v": v}, kernel=chosen == "kernel")
    rows = counted_rows(p, q, counted) if head_table else None
    result, chosen = run_backend(p, chosen, backend, logit_range, first_key, head_table, rows)
    check_graph((q, k, v, bias), result[0], chosen)
    out = p.shaped(result[0])
    out = out if out.dtype == p.out_dtype else out.to(p.out_dtype)
    return out if figures is None else (out, stats_of(p, result, chosen, logit_range, first_key))


@dataclass(frozen=True)
class KeptAttention:
    """:func:`attention_figures` with every figure and the head table (``logit_range``,
    ``first_key``, ``head_table``) on the fused kernel, for one signature whose checks were made
    (:func:`kept_attention`): called again with tensors of that signature (the monitor's replace
    mode, layer after layer, step after step), it runs the op and nothing else. Its results are
    attention_figures()'s, bit for bit (tested)."""

    target: tuple  # (B, H_q, L, S): what the mask broadcasts to
    arguments: tuple  # the op's others (backends.kernel.kernel_arguments)
    alignment: str | None = None  # the causal alignment, for the keys no row attends

    def __call__(self, q, k, v, mask, counted):
        """q, k, v (B, H, L, d) of the signature; mask None or bool broadcastable to (B, H_q, L, S);
        counted None or bool (B, L) (:func:`attention_figures`'s): ``(out, stats)`` as it returns them."""
        mask = None if mask is None else mask.expand(self.target)
        if mask is not None or (self.alignment == "top_left" and self.target[3] > self.target[2]):
            # as attention() does: the non-finite values of keys no row attends zeroed (prepare.isolate_unattended_keys)
            iso = isolate_unattended_keys(Problem(q, k, v, mask, None, self.alignment, 1.0, 0.0, (), False, q.dtype))
            k, v = iso.k, iso.v
        out, lse, entropy, hi, lo, first, table, counted_entropy = call_kernel(
            q, k, v, mask, None, counted, self.arguments
        )
        stats = AttentionStats(
            lse=lse,
            entropy=entropy,
            max_logit=hi,
            min_logit=lo,
            first_key_weight=first,
            backend="kernel",
            head_table=table,
            counted_entropy=counted_entropy,
        )
        return out, stats


def kept_attention(q, k, v, *, scale, causal, mask, backend: str = "auto") -> KeptAttention | None:
    """The :class:`KeptAttention` of ``attention_figures(q, k, v, scale=scale, mask=mask,
    causal=causal, backend=backend, logit_range=True, first_key=True, head_table=True)``, for its
    signature (call it after that call succeeded: its arguments are checked there), when the fused
    kernel computes it on the tensors as given and returns its results as they are: q, k and v 4-D
    of one batch, in the dtype it computes in, a query and a value column at least, a constant scale
    (not QK-norm, log-n or a soft-cap), no mask or a bool one; else None."""
    if type(backend) is not str or not keepable(scale, causal):
        return None
    sig = signature_of(q, k, v, scale, causal, False, backend, True)
    as_given = q.dim() == k.dim() == v.dim() == 4 and q.shape[0] == k.shape[0] == v.shape[0] == sig.batch
    if not (sig.chosen == "kernel" and sig.factor is not None and as_given and q.dtype == sig.compute):
        return None
    if 0 in (*q.shape, k.shape[-2], v.shape[-1]) or not (mask is None or mask.dtype == torch.bool):
        return None  # a zero size: attention_figures() takes another path (choice.run_backend)
    p = Problem(q, k, v, None, None, sig.alignment, sig.factor, 0.0, sig.shapes.lead, False, q.dtype)
    return KeptAttention(sig.target, kernel_arguments(p, True, True, True), sig.alignment)
