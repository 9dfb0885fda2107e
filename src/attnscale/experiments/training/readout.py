"""Experiment A's transformer in PyTorch, whose attention logits follow a pluggable attnscale scale rule.

The rule objects are the core's (:mod:`attnscale.scales`): their names, formulas and citations are
reused unchanged; this module only computes the same logits with torch tensors so that they can be
trained. Letters as everywhere in attnscale: ``B`` batch, ``H`` heads, ``L`` queries, ``S`` keys,
``d_k`` query/key size, ``d_v`` value size, ``D`` model width.

:class:`ReadoutTransformer` (experiment A, ``scale-vs-dk``): one pre-LN attention layer whose last
position (the query token) is read out by a small MLP. W_Q and W_K are drawn with std 1/√D, so that
on a LayerNorm-ed input the components of q and k have variance ≈ 1 and Var(q·k) ≈ d_k at
initialisation: exactly the assumption of Vaswani et al. 2017, footnote 4. The decoder-only LM of
the other training experiments is :class:`attnscale.experiments.training.gpt.GPT`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from attnscale.errors import require
from attnscale.scales import ScaleRule
from attnscale.torch.scales import ScaledLogits

torch = require("torch", "torch")
nn = torch.nn

__all__ = ["ScaledLogits", "Attention", "ReadoutTransformer", "AttentionRecord"]


@dataclass
class AttentionRecord:
    """What one attention call saw, kept only when asked (for metrics)."""

    logits: torch.Tensor  # (B, H, L, S)
    weights: torch.Tensor  # (B, H, L, S)
    q: torch.Tensor  # (B, H, L, d_k), before the rule's normalisation
    k: torch.Tensor  # (B, H, S, d_k), before the rule's normalisation
    v: torch.Tensor  # (B, H, S, d_v)
    context: torch.Tensor  # (B, S, D), the input the keys are computed from


class Attention(nn.Module):
    """Multi-head attention, no biases, through the explicit softmax of the rule's logits (so that a
    record can keep them). x: (B, L, D) queries, context: (B, S, D) keys and values (default: x
    itself) -> (B, L, D)."""

    def __init__(self, d_model: int, n_heads: int, d_k: int, d_v: int, rule: ScaleRule):
        super().__init__()
        self.n_heads, self.d_k, self.d_v = n_heads, d_k, d_v
        self.w_q = nn.Linear(d_model, n_heads * d_k, bias=False)
        self.w_k = nn.Linear(d_model, n_heads * d_k, bias=False)
        self.w_v = nn.Linear(d_model, n_heads * d_v, bias=False)
        self.w_o = nn.Linear(n_heads * d_v, d_model, bias=False)
        self.logits = ScaledLogits(rule, d_k)
        self.record: AttentionRecord | None = None
        self.keep_record = False

    def _heads(self, x, size):
        b, n, _ = x.shape
        return x.view(b, n, self.n_heads, size).transpose(1, 2)  # (B, H, L, size)

    def forward(self, x, context=None):
        context = x if context is None else context
        q = self._heads(self.w_q(x), self.d_k)
        k = self._heads(self.w_k(context), self.d_k)
        v = self._heads(self.w_v(context), self.d_v)
        z = self.logits(q, k)  # (B, H, L, S)
        p = torch.softmax(z, dim=-1)
        if self.keep_record:
            self.record = AttentionRecord(z.detach(), p.detach(), q.detach(), k.detach(), v.detach(), context.detach())
        out = (p @ v).transpose(1, 2).reshape(x.shape[0], x.shape[1], self.n_heads * self.d_v)
        return self.w_o(out)


def _init_linear(module: nn.Linear) -> None:
    # std 1/√fan_in: unit-variance inputs give unit-variance outputs (LeCun), so Var(q_i) ≈ 1.
    nn.init.normal_(module.weight, std=1.0 / math.sqrt(module.in_features))


class ReadoutTransformer(nn.Module):
    """One pre-LN attention layer over a token sequence, read out at the last position.

    tokens: (B, S) long -> class logits (B, n_classes). The last token is the query; it attends over all
    S positions (itself included). Only its row is computed: no other row reaches the loss.
    """

    def __init__(
        self,
        vocab: int,
        seq_len: int,
        n_classes: int,
        rule: ScaleRule,
        d_k: int,
        d_model: int = 32,
        n_heads: int = 2,
        d_hidden: int = 64,
    ):
        super().__init__()
        self.tok = nn.Embedding(vocab, d_model)
        self.pos = nn.Embedding(seq_len, d_model)
        self.ln = nn.LayerNorm(d_model)
        self.attn = Attention(d_model, n_heads, d_k, d_model // n_heads, rule)
        self.head = nn.Sequential(
            nn.LayerNorm(d_model), nn.Linear(d_model, d_hidden), nn.GELU(), nn.Linear(d_hidden, n_classes)
        )
        for m in (self.attn.w_q, self.attn.w_k, self.attn.w_v, self.attn.w_o):
            _init_linear(m)

    def forward(self, tokens):
        pos = torch.arange(tokens.shape[1], device=tokens.device)
        x = self.tok(tokens) + self.pos(pos)  # (B, S, D)
        normed = self.ln(x)
        h = x[:, -1:] + self.attn(normed[:, -1:], normed)  # (B, 1, D)
        return self.head(h[:, 0])  # (B, n_classes)
