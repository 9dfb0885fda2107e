"""What attention returns beside its output, on request: one request and one result for both entry
points, the exact NumPy core (:func:`attnscale.attention`) and the fast PyTorch one
(:func:`attnscale.torch.attention`)::

    out = attention(q, k, v)                                          # the output alone
    out, aux = attention(q, k, v, aux=AuxRequest(lse=True, entropy=True))
    aux.lse, aux.entropy                                              # (..., H_q, L); the rest None

The shape of PyTorch's FlexAttention (``return_aux=AuxRequest(lse=True)`` -> ``(out, AuxOutput)``):
one typed request rather than a flag per figure, and one result whose fields are None where not
asked for. Each request field asks for the result field of the same name (``logit_range`` for the
pair ``max_logit``, ``min_logit``). Per query row i, over its attended keys j (logits s_ij after the
scale, the cap and the bias):

    lse_i              = ln Σ_j e^{s_ij}                 −inf for a row with nothing attended
    entropy_i          = −Σ_j p_ij ln p_ij (nats)        NaN for a row with nothing attended
    max_logit_i, min_logit_i                             NaN for a row with nothing attended
    first_key_weight_i = p_i0, the weight on key 0       0 where key 0 is not attended; NaN as above

``logits`` and ``weights`` are the full (..., H_q, L, S) matrices (−inf and 0 where not attended):
the NumPy core's alone; the PyTorch one keeps memory O(L·d) and refuses them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from attnscale.errors import InputError, InputTypeError

__all__ = ["AuxRequest", "AuxOutput", "check_aux", "refuse_matrices"]


@dataclass(frozen=True, kw_only=True)
class AuxRequest:
    """Which figures an attention call returns beside its output (``aux=``); each False by default.

    >>> AuxRequest(lse=True, entropy=True)
    AuxRequest(lse=True, entropy=True, logit_range=False, first_key_weight=False, logits=False, weights=False)
    """

    lse: bool = False  # each row's log-sum-exp
    entropy: bool = False  # each row's entropy, nats
    logit_range: bool = False  # each row's largest and smallest attended logit (max_logit, min_logit)
    first_key_weight: bool = False  # each row's weight on key 0 (attention sinks)
    logits: bool = False  # the (..., H_q, L, S) logits: NumPy core only
    weights: bool = False  # the (..., H_q, L, S) softmax weights, before dropout: NumPy core only

    def __post_init__(self) -> None:
        for name, value in vars(self).items():
            if type(value) is not bool:
                raise InputTypeError(
                    f"aux: AuxRequest.{name} expected True or False, got {type(value).__name__} {value!r}"
                )


@dataclass(frozen=True)
class AuxOutput:
    """The figures an :class:`AuxRequest` asked for, each None where not asked for: arrays (NumPy
    core) or detached tensors (PyTorch), shaped as the rows (..., H_q, L), or as the rows by keys
    (..., H_q, L, S) for ``logits`` and ``weights``; ``backend`` names what computed them."""

    lse: Any = None  # ln Σ_j exp(logit_ij); −inf for a row with nothing attended
    entropy: Any = None  # −Σ_j p_ij ln p_ij, nats; NaN for a row with nothing attended
    max_logit: Any = None  # largest attended logit; NaN for a row with nothing attended
    min_logit: Any = None  # smallest attended logit; NaN for a row with nothing attended
    first_key_weight: Any = None  # p_i0; 0 where key 0 is not attended, NaN for a row with nothing attended
    logits: Any = None  # (..., H_q, L, S) after scale, cap and bias; −inf where not attended
    weights: Any = None  # (..., H_q, L, S) softmax before dropout; 0 where not attended
    backend: str | None = None  # "numpy", or the torch backend: "kernel" | "composed" | "chunked" | "flex"


def check_aux(aux) -> AuxRequest | None:
    """``aux`` as given when None or an :class:`AuxRequest`, else the error naming it."""
    if aux is None or isinstance(aux, AuxRequest):
        return aux
    kind = type(aux)
    got = kind.__name__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"
    raise InputTypeError(f"aux: expected an attnscale.AuxRequest or None, got {got} {aux!r:.80}")


def refuse_matrices(request: AuxRequest | None, where: str) -> None:
    """Refuse the (L, S) matrices in a request to an entry point that never forms them."""
    if request is not None and (request.logits or request.weights):
        asked = ", ".join(name for name in ("logits", "weights") if getattr(request, name))
        raise InputError(
            f"aux: {asked} asked for, but {where} never forms the (..., H_q, L, S) matrices "
            "(memory O(L·d)); attnscale.attention (NumPy) returns them"
        )
