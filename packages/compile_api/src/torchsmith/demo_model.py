"""A small GPT-style language model for the demo: random weights, no downloads, plain nn.Modules.

Token and position embeddings, pre-norm blocks of causal multi-head self-attention and a GELU MLP,
a final LayerNorm and a language-model head: the shape of GPT-2, at a size that compiles in
seconds on two CPU cores.
"""

import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass(frozen=True)
class GPTConfig:
    vocab: int = 512
    context: int = 64
    width: int = 128
    heads: int = 4
    layers: int = 2


class CausalSelfAttention(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.heads = config.heads
        self.qkv = nn.Linear(config.width, 3 * config.width)
        self.proj = nn.Linear(config.width, config.width)
        mask = torch.tril(torch.ones(config.context, config.context, dtype=torch.bool))
        self.register_buffer("mask", mask.view(1, 1, config.context, config.context), persistent=False)

    def forward(self, x):
        batch, time, width = x.shape
        q, k, v = self.qkv(x).split(width, dim=2)
        # (batch, heads, time, head width): each head attends on its own slice of the width
        q, k, v = (t.view(batch, time, self.heads, width // self.heads).transpose(1, 2) for t in (q, k, v))
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(width // self.heads)
        scores = scores.masked_fill(~self.mask[:, :, :time, :time], float("-inf"))
        y = scores.softmax(dim=-1) @ v
        return self.proj(y.transpose(1, 2).reshape(batch, time, width))


class Block(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(config.width), nn.LayerNorm(config.width)
        self.attn = CausalSelfAttention(config)
        self.fc = nn.Linear(config.width, 4 * config.width)
        self.out = nn.Linear(4 * config.width, config.width)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class TinyGPT(nn.Module):
    """`TinyGPT(config)(tokens)`: tokens (batch, time) of ints -> logits (batch, time, vocab)."""

    def __init__(self, config: GPTConfig = GPTConfig()):
        super().__init__()
        self.config = config
        self.tokens = nn.Embedding(config.vocab, config.width)
        self.positions = nn.Embedding(config.context, config.width)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.layers))
        self.ln = nn.LayerNorm(config.width)
        self.head = nn.Linear(config.width, config.vocab, bias=False)

    def forward(self, tokens):
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        x = self.tokens(tokens) + self.positions(positions)
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln(x))


def make_model(seed: int = 0, config: GPTConfig = GPTConfig()) -> TinyGPT:
    """A TinyGPT with reproducible random weights, in eval mode."""
    torch.manual_seed(seed)
    return TinyGPT(config).eval()
