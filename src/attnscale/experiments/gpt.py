"""A decoder-only GPT in nanoGPT's shape whose attention takes any scale rule and reports its own figures.

Token and position embeddings, pre-LayerNorm blocks of causal multi-head attention and a 4× GELU MLP,
a final LayerNorm and a head tied to the token embedding; no biases. Letters as everywhere in
attnscale: ``B`` batch, ``H`` heads, ``L`` positions, ``d_k`` = ``d_v`` head size, ``D`` = H · d_k
the width.

Attention goes through :meth:`attnscale.torch.scales.ScaledLogits.attend` (every rule, through
:func:`attnscale.torch.attention`), so each layer's per-row entropy, log-sum-exp and logit range are
those of the attention the model trains with; each layer keeps the last call's figures, detached,
in ``block.attn.figures``. ``figures=False`` calls plain ``torch.nn.functional.scaled_dot_product_attention``
instead (``attnscale.torch.attention`` without ``return_stats``), the peer of the benchmark.

Initialisation: linear layers std 1/√fan_in, so that on LayerNorm-ed inputs the components of q and
k have variance ≈ 1 and Var(q·k) ≈ d_k, the premise of Vaswani et al. 2017 (footnote 4) and of the
seed; the two projections back into the residual stream are further divided by √(2 · layers), and
the embeddings drawn with std 0.02, as GPT-2 and nanoGPT do.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from attnscale.errors import InputError, check_count, require
from attnscale.scales import ScaleRule

torch = require("torch", "torch")
nn = torch.nn
F = torch.nn.functional

__all__ = ["GPTShape", "GPT", "greedy"]


@dataclass(frozen=True)
class GPTShape:
    vocab: int = 256
    context: int = 128
    d_model: int = 256
    n_layers: int = 2
    d_k: int = 64                # head size; heads = d_model / d_k

    def __post_init__(self):
        for name in ("vocab", "context", "d_model", "n_layers", "d_k"):
            check_count(name, getattr(self, name))
        if self.d_model % self.d_k:
            raise InputError(f"d_k: expected a divisor of d_model={self.d_model}, got {self.d_k}")

    @property
    def n_heads(self) -> int:
        return self.d_model // self.d_k


class CausalSelfAttention(nn.Module):
    """x: (B, L, D) -> (B, L, D). ``figures``: the last call's AttentionStats fields, detached."""

    def __init__(self, shape: GPTShape, rule: ScaleRule, backend: str, figures: bool):
        from attnscale.torch.scales import ScaledLogits

        super().__init__()
        self.n_heads, self.d_k = shape.n_heads, shape.d_k
        self.w_q = nn.Linear(shape.d_model, shape.d_model, bias=False)
        self.w_k = nn.Linear(shape.d_model, shape.d_model, bias=False)
        self.w_v = nn.Linear(shape.d_model, shape.d_model, bias=False)
        self.w_o = nn.Linear(shape.d_model, shape.d_model, bias=False)
        self.rule = ScaledLogits(rule, shape.d_k)
        self.backend, self.with_figures = backend, figures
        self.figures: dict | None = None

    def forward(self, x):
        B, L, D = x.shape
        heads = lambda t: t.view(B, L, self.n_heads, self.d_k).transpose(1, 2)   # noqa: E731  (B, H, L, d_k)
        q, k, v = heads(self.w_q(x)), heads(self.w_k(x)), heads(self.w_v(x))
        if self.with_figures:
            out, stats = self.rule.attend(q, k, v, causal=True, backend=self.backend, return_stats=True)
            self.figures = {name: getattr(stats, name).detach()
                            for name in ("lse", "entropy", "max_logit", "min_logit")}   # each (B, H, L)
        else:
            out = self.rule.attend(q, k, v, causal=True, backend=self.backend)
        return self.w_o(out.transpose(1, 2).reshape(B, L, D))


class _Block(nn.Module):
    def __init__(self, shape: GPTShape, rule: ScaleRule, backend: str, figures: bool):
        super().__init__()
        self.ln1 = nn.LayerNorm(shape.d_model, bias=False)
        self.attn = CausalSelfAttention(shape, rule, backend, figures)
        self.ln2 = nn.LayerNorm(shape.d_model, bias=False)
        self.fc = nn.Linear(shape.d_model, 4 * shape.d_model, bias=False)
        self.proj = nn.Linear(4 * shape.d_model, shape.d_model, bias=False)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.proj(F.gelu(self.fc(self.ln2(x))))


class GPT(nn.Module):
    """tokens (B, L) long, L <= context -> next-token logits (B, L, vocab)."""

    def __init__(self, shape: GPTShape, rule: ScaleRule, backend: str = "chunked", figures: bool = True):
        super().__init__()
        self.shape = shape
        self.tok = nn.Embedding(shape.vocab, shape.d_model)
        self.pos = nn.Embedding(shape.context, shape.d_model)
        self.blocks = nn.ModuleList(_Block(shape, rule, backend, figures) for _ in range(shape.n_layers))
        self.ln_f = nn.LayerNorm(shape.d_model, bias=False)
        self._init()

    def _init(self) -> None:
        residual = 1.0 / math.sqrt(2 * self.shape.n_layers)
        for name, m in self.named_modules():
            if isinstance(m, nn.Linear):
                std = 1.0 / math.sqrt(m.in_features)
                nn.init.normal_(m.weight, std=std * residual if name.endswith(("w_o", "proj")) else std)
            elif isinstance(m, nn.Embedding):
                nn.init.normal_(m.weight, std=0.02)

    def attention_layers(self) -> list[CausalSelfAttention]:
        return [block.attn for block in self.blocks]

    def forward(self, tokens):
        L = tokens.shape[1]
        if L > self.shape.context:
            raise InputError(f"tokens: expected at most context={self.shape.context} positions, got {L}")
        x = self.tok(tokens) + self.pos(torch.arange(L, device=tokens.device))
        for block in self.blocks:
            x = block(x)
        return self.ln_f(x) @ self.tok.weight.T            # the head tied to the token embedding


def greedy(model: GPT, prompt: bytes, new: int) -> bytes:
    """``new`` bytes continuing ``prompt``, each the most likely next byte (the last ``context``
    bytes in view)."""
    model.eval()
    tokens = list(prompt)
    with torch.no_grad():
        for _ in range(new):
            window = torch.tensor([tokens[-model.shape.context:]])
            tokens.append(int(model(window)[0, -1].argmax()))
    model.train()
    return bytes(tokens[len(prompt):])
