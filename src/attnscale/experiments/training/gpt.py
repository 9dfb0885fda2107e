"""The project's GPT: decoder-only, in nanoGPT's shape, whose attention takes any scale rule and reports
its own figures. Both training experiments build it: ``lm`` with :class:`GPTConfig`'s defaults,
``logit-growth`` with the three options below that make it Wortsman et al. 2023's small-scale proxy.

Token and position embeddings, pre-LayerNorm blocks of causal multi-head attention and a 4× GELU MLP,
a final LayerNorm and the output head; no biases. Letters as everywhere in attnscale: ``B`` batch,
``H`` heads, ``L`` positions, ``d_k`` = ``d_v`` head size, ``D`` = H · d_k the width.

Attention goes through :meth:`attnscale.torch.scales.ScaledLogits.attend` (every rule, through
:func:`attnscale.torch.attention`), so each layer's per-row entropy, log-sum-exp and logit range are
those of the attention the model trains with; each layer keeps the last call's figures, detached,
in ``block.attn.figures``. ``figures=False`` calls plain ``torch.nn.functional.scaled_dot_product_attention``
instead (``attnscale.torch.attention`` without ``aux``): the peer of the benchmark, and the
call that :class:`attnscale.torch.Monitor` sees (and in ``mode="replace"`` computes), named by the layer
(``blocks.0.attn``), which :class:`attnscale.torch.guard.LogitGuard` rescales.

The options (fields of :class:`GPTConfig`; the defaults are ``lm``'s):

* ``init="gpt2"``: linear layers std 1/√fan_in, so that on LayerNorm-ed inputs the components of q
  and k have variance ≈ 1 and Var(q·k) ≈ d_k, the premise of Vaswani et al. 2017 (footnote 4) and
  of the seed; the two projections back into the residual stream are further divided by
  √(2 · layers), and the embeddings drawn with std 0.02, as GPT-2 and nanoGPT do. ``init="fan_in"``:
  every linear layer std 1/√fan_in (LeCun: unit-variance inputs give unit-variance outputs), none
  divided, and the embeddings left at PyTorch's N(0, 1) (the logit-growth proxy's).
* ``tied_head=True``: the output head is the token embedding (nanoGPT); False: a linear layer of its
  own, ``lm_head`` (the logit-growth proxy's).
* ``qk_layernorm=False``; True: a LayerNorm (learnable gain, no bias) on each head's q and k before
  the rule, as Dehghani et al. 2023 and Wortsman et al. 2023 do (``attn.q_norm``, ``attn.k_norm``).

Parameters are created, and random numbers drawn, in the order embeddings, blocks (attention
projections q, k, v, o; QK-layernorm; the rule's gain; MLP), final LayerNorm, head: the order of
the models the two experiments' shipped results were trained with.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from attnscale.attention_aux import AuxRequest
from attnscale.errors import InputError, check_choice, check_count, require
from attnscale.scales import ScaleRule

torch = require("torch", "torch")
nn = torch.nn
F = torch.nn.functional

__all__ = ["GPTConfig", "GPT", "greedy", "INITS"]

INITS = ("gpt2", "fan_in")  # the initialisation schemes (module docstring)


@dataclass(frozen=True)
class GPTConfig:
    """The model's sizes and its three options (module docstring); the defaults are ``lm``'s."""

    vocab: int = 256
    context: int = 128
    d_model: int = 256
    n_layers: int = 2
    d_k: int = 64  # head size; heads = d_model / d_k
    init: str = "gpt2"  # or "fan_in"
    tied_head: bool = True  # False: the head is a linear layer of its own
    qk_layernorm: bool = False  # True: LayerNorm on each head's q and k before the rule

    def __post_init__(self):
        for name in ("vocab", "context", "d_model", "n_layers", "d_k"):
            check_count(name, getattr(self, name))
        check_choice("init", self.init, INITS)
        if self.d_model % self.d_k:
            raise InputError(f"d_k: expected a divisor of d_model={self.d_model}, got {self.d_k}")

    @property
    def n_heads(self) -> int:
        return self.d_model // self.d_k


_FIGURES = AuxRequest(lse=True, entropy=True, logit_range=True)  # what each layer keeps of its last call


class CausalSelfAttention(nn.Module):
    """x: (B, L, D) -> (B, L, D). ``figures``: the last call's AuxOutput fields, detached."""

    def __init__(self, config: GPTConfig, rule: ScaleRule, backend: str, figures: bool):
        from attnscale.torch.scales import ScaledLogits

        super().__init__()
        self.n_heads, self.d_k = config.n_heads, config.d_k
        self.w_q = nn.Linear(config.d_model, config.d_model, bias=False)
        self.w_k = nn.Linear(config.d_model, config.d_model, bias=False)
        self.w_v = nn.Linear(config.d_model, config.d_model, bias=False)
        self.w_o = nn.Linear(config.d_model, config.d_model, bias=False)
        self.q_norm = nn.LayerNorm(config.d_k, bias=False) if config.qk_layernorm else None
        self.k_norm = nn.LayerNorm(config.d_k, bias=False) if config.qk_layernorm else None
        self.rule = ScaledLogits(rule, config.d_k)
        self.backend, self.with_figures = backend, figures
        self.figures: dict | None = None

    def forward(self, x):
        B, L, D = x.shape
        heads = lambda t: t.view(B, L, self.n_heads, self.d_k).transpose(1, 2)  # noqa: E731  (B, H, L, d_k)
        q, k, v = heads(self.w_q(x)), heads(self.w_k(x)), heads(self.w_v(x))
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        if self.with_figures:
            out, stats = self.rule.attend(q, k, v, causal=True, backend=self.backend, aux=_FIGURES)
            self.figures = {
                name: getattr(stats, name).detach() for name in ("lse", "entropy", "max_logit", "min_logit")
            }  # each (B, H, L)
            self.backend_used = stats.backend  # what "auto" chose: a training cell records it
        else:
            out = self.rule.attend(q, k, v, causal=True, backend=self.backend)  # without stats: PyTorch's SDPA
            self.backend_used = "sdpa"
        return self.w_o(out.transpose(1, 2).reshape(B, L, D))


class _Block(nn.Module):
    def __init__(self, config: GPTConfig, rule: ScaleRule, backend: str, figures: bool):
        super().__init__()
        self.ln1 = nn.LayerNorm(config.d_model, bias=False)
        self.attn = CausalSelfAttention(config, rule, backend, figures)
        self.ln2 = nn.LayerNorm(config.d_model, bias=False)
        self.fc = nn.Linear(config.d_model, 4 * config.d_model, bias=False)
        self.proj = nn.Linear(4 * config.d_model, config.d_model, bias=False)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.proj(F.gelu(self.fc(self.ln2(x))))


class GPT(nn.Module):
    """tokens (B, L) long, L <= context -> next-token logits (B, L, vocab)."""

    def __init__(self, config: GPTConfig, rule: ScaleRule, backend: str = "chunked", figures: bool = True):
        super().__init__()
        self.config = config
        self.tok = nn.Embedding(config.vocab, config.d_model)
        self.pos = nn.Embedding(config.context, config.d_model)
        self.blocks = nn.ModuleList(_Block(config, rule, backend, figures) for _ in range(config.n_layers))
        self.ln_f = nn.LayerNorm(config.d_model, bias=False)
        self.lm_head = None if config.tied_head else nn.Linear(config.d_model, config.vocab, bias=False)
        self._init()

    def _init(self) -> None:
        """Redraws in module order (embeddings, then each block's layers, then the head), so that the
        random numbers drawn are those of the scheme's original model."""
        gpt2 = self.config.init == "gpt2"
        residual = 1.0 / math.sqrt(2 * self.config.n_layers) if gpt2 else 1.0
        for name, m in self.named_modules():
            if isinstance(m, nn.Linear):
                std = 1.0 / math.sqrt(m.in_features)
                nn.init.normal_(m.weight, std=std * residual if name.endswith(("w_o", "proj")) else std)
            elif isinstance(m, nn.Embedding) and gpt2:  # "fan_in" keeps nn.Embedding's own N(0, 1)
                nn.init.normal_(m.weight, std=0.02)

    def attention_layers(self) -> list[CausalSelfAttention]:
        return [block.attn for block in self.blocks]

    def forward(self, tokens):
        L = tokens.shape[1]
        if L > self.config.context:
            raise InputError(f"tokens: expected at most context={self.config.context} positions, got {L}")
        x = self.tok(tokens) + self.pos(torch.arange(L, device=tokens.device))
        for block in self.blocks:
            x = block(x)
        x = self.ln_f(x)
        return x @ self.tok.weight.T if self.lm_head is None else self.lm_head(x)


def greedy(model: GPT, prompt: bytes, new: int) -> bytes:
    """``new`` bytes continuing ``prompt``, each the most likely next byte (the last ``context``
    bytes in view)."""
    model.eval()
    tokens = list(prompt)
    with torch.no_grad():
        for _ in range(new):
            window = torch.tensor([tokens[-model.config.context :]])
            tokens.append(int(model(window)[0, -1].argmax()))
    model.train()
    return bytes(tokens[len(prompt) :])
