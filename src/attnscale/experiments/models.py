"""Tiny transformers in PyTorch whose attention logits follow a pluggable attnscale scale rule.

The rule objects are the core's (:mod:`attnscale.scales`): their names, formulas and citations are
reused unchanged; this module only computes the same logits with torch tensors so that they can be
trained. Letters as everywhere in attnscale: ``B`` batch, ``H`` heads, ``L`` queries, ``S`` keys,
``d_k`` query/key size, ``d_v`` value size, ``D`` model width.

Two models:

* :class:`ReadoutTransformer` (experiment A): one pre-LN attention layer whose last position (the
  query token) is read out by a small MLP. W_Q and W_K are drawn with std 1/√D, so that on a
  LayerNorm-ed input the components of q and k have variance ≈ 1 and Var(q·k) ≈ d_k at
  initialisation: exactly the assumption of Vaswani et al. 2017, footnote 4.
* :class:`TinyGPT` (experiment B): a decoder-only character LM after Wortsman et al. 2023
  ("Small-scale proxies for large-scale Transformer training instabilities"): pre-LN, no biases,
  optional per-head QK-layernorm.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from attnscale.errors import InputError, require
from attnscale.scales import InverseSqrtDk, ScaleRule
from attnscale.torch.scales import ScaledLogits

torch = require("torch", "torch")
nn = torch.nn
F = torch.nn.functional

__all__ = ["ScaledLogits", "Attention", "ReadoutTransformer", "TinyGPT", "GPTConfig", "AttentionRecord"]


@dataclass
class AttentionRecord:
    """What one attention call saw, kept only when asked (for metrics)."""

    logits: "torch.Tensor"    # (B, H, L, S), -inf where masked
    weights: "torch.Tensor"   # (B, H, L, S)
    q: "torch.Tensor"         # (B, H, L, d_k), before the rule's normalisation
    k: "torch.Tensor"         # (B, H, S, d_k), before the rule's normalisation
    v: "torch.Tensor"         # (B, H, S, d_v)
    context: "torch.Tensor"   # (B, S, D), the input the keys are computed from


class Attention(nn.Module):
    """Multi-head attention, no biases. x: (B, L, D) queries, context: (B, S, D) keys and values
    (default: x itself) -> (B, L, D). ``causal`` masks key j > query i, so needs L == S (self-attention).

    ``qk_layernorm`` applies a LayerNorm (learnable gain, no bias) to each head's q and k before the
    rule, as Dehghani et al. 2023 and Wortsman et al. 2023 do.

    ``sdpa``: compute the attention with ``torch.nn.functional.scaled_dot_product_attention`` when the
    rule is a constant factor (1/√d_k, 1/d_k, unscaled, a constant) and no record is asked for, as
    production models do — so that :class:`attnscale.torch.Monitor` sees and can replace the call.
    The other rules (QK-norm's learned gain, soft-capping) and ``keep_record`` always use the
    explicit softmax below. Off by default: the two paths round differently.
    """

    def __init__(self, d_model: int, n_heads: int, d_k: int, d_v: int, rule: ScaleRule,
                 causal: bool = False, qk_layernorm: bool = False, sdpa: bool = False):
        super().__init__()
        self.n_heads, self.d_k, self.d_v, self.causal = n_heads, d_k, d_v, causal
        self.sdpa = sdpa
        self.w_q = nn.Linear(d_model, n_heads * d_k, bias=False)
        self.w_k = nn.Linear(d_model, n_heads * d_k, bias=False)
        self.w_v = nn.Linear(d_model, n_heads * d_v, bias=False)
        self.w_o = nn.Linear(n_heads * d_v, d_model, bias=False)
        self.q_norm = nn.LayerNorm(d_k, bias=False) if qk_layernorm else None
        self.k_norm = nn.LayerNorm(d_k, bias=False) if qk_layernorm else None
        self.logits = ScaledLogits(rule, d_k)
        self.record: AttentionRecord | None = None
        self.keep_record = False

    def _constant_factor(self) -> float | None:
        """The rule's factor when SDPA can compute this attention, else None."""
        rule = self.logits.rule
        if not self.sdpa or rule.uses_n or rule.normalizes or rule.caps:
            return None
        return float(rule.factor(self.d_k))

    def _heads(self, x, size):
        b, l, _ = x.shape
        return x.view(b, l, self.n_heads, size).transpose(1, 2)   # (B, H, L, size)

    def forward(self, x, context=None):
        context = x if context is None else context
        q = self._heads(self.w_q(x), self.d_k)
        k = self._heads(self.w_k(context), self.d_k)
        v = self._heads(self.w_v(context), self.d_v)
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        factor = self._constant_factor()
        if factor is not None and not self.keep_record:
            if self.causal and q.shape[-2] != k.shape[-2]:
                raise InputError(f"context: causal attention needs the queries' own positions as keys (L == S), "
                                 f"got x {tuple(x.shape)} and context {tuple(context.shape)}")
            out = F.scaled_dot_product_attention(q, k, v, is_causal=self.causal, scale=factor)  # (B, H, L, d_v)
            return self.w_o(out.transpose(1, 2).reshape(x.shape[0], x.shape[1], self.n_heads * self.d_v))
        z = self.logits(q, k)                                        # (B, H, L, S)
        if self.causal:
            L, S = z.shape[-2:]
            if L != S:  # query i ↔ key i only when they are the same positions; top- or bottom-right is a guess
                raise InputError(f"context: causal attention needs the queries' own positions as keys (L == S), "
                                 f"got x {tuple(x.shape)} and context {tuple(context.shape)}")
            keep = torch.ones(L, S, dtype=torch.bool, device=z.device).tril()
            z = z.masked_fill(~keep, float("-inf"))
        p = torch.softmax(z, dim=-1)
        if self.keep_record:
            self.record = AttentionRecord(z.detach(), p.detach(), q.detach(), k.detach(), v.detach(),
                                          context.detach())
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

    def __init__(self, vocab: int, seq_len: int, n_classes: int, rule: ScaleRule, d_k: int,
                 d_model: int = 32, n_heads: int = 2, d_hidden: int = 64):
        super().__init__()
        self.tok = nn.Embedding(vocab, d_model)
        self.pos = nn.Embedding(seq_len, d_model)
        self.ln = nn.LayerNorm(d_model)
        self.attn = Attention(d_model, n_heads, d_k, d_model // n_heads, rule)
        self.head = nn.Sequential(nn.LayerNorm(d_model), nn.Linear(d_model, d_hidden), nn.GELU(),
                                  nn.Linear(d_hidden, n_classes))
        for m in (self.attn.w_q, self.attn.w_k, self.attn.w_v, self.attn.w_o):
            _init_linear(m)

    def forward(self, tokens):
        pos = torch.arange(tokens.shape[1], device=tokens.device)
        x = self.tok(tokens) + self.pos(pos)                           # (B, S, D)
        normed = self.ln(x)
        h = x[:, -1:] + self.attn(normed[:, -1:], normed)              # (B, 1, D)
        return self.head(h[:, 0])                                      # (B, n_classes)


@dataclass(frozen=True)
class GPTConfig:
    vocab: int                 # characters in the corpus
    context: int = 64          # tokens per sequence
    d_model: int = 64          # width
    n_layers: int = 2
    n_heads: int = 4           # d_k = d_v = d_model / n_heads
    qk_layernorm: bool = False
    sdpa: bool = True          # attention through SDPA (see Attention), so a monitor can ride it

    def __post_init__(self):
        if self.d_model % self.n_heads:
            raise InputError(f"GPTConfig: d_model={self.d_model} must be a multiple of n_heads={self.n_heads}")


class _Block(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        d_head = cfg.d_model // cfg.n_heads
        self.ln1 = nn.LayerNorm(cfg.d_model, bias=False)
        self.attn = Attention(cfg.d_model, cfg.n_heads, d_head, d_head, InverseSqrtDk(), causal=True,
                              qk_layernorm=cfg.qk_layernorm, sdpa=cfg.sdpa)
        self.ln2 = nn.LayerNorm(cfg.d_model, bias=False)
        self.mlp = nn.Sequential(nn.Linear(cfg.d_model, 4 * cfg.d_model, bias=False), nn.GELU(),
                                 nn.Linear(4 * cfg.d_model, cfg.d_model, bias=False))

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class TinyGPT(nn.Module):
    """Decoder-only LM: tokens (B, L) long -> next-token logits (B, L, vocab). Pre-LN, no biases."""

    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.cfg = cfg
        self.tok = nn.Embedding(cfg.vocab, cfg.d_model)
        self.pos = nn.Embedding(cfg.context, cfg.d_model)
        self.blocks = nn.ModuleList(_Block(cfg) for _ in range(cfg.n_layers))
        self.ln_f = nn.LayerNorm(cfg.d_model, bias=False)
        self.lm_head = nn.Linear(cfg.d_model, cfg.vocab, bias=False)
        for m in self.modules():
            if isinstance(m, nn.Linear):
                _init_linear(m)

    def forward(self, tokens):
        pos = torch.arange(tokens.shape[1], device=tokens.device)
        x = self.tok(tokens) + self.pos(pos)
        for block in self.blocks:
            x = block(x)
        return self.lm_head(self.ln_f(x))
