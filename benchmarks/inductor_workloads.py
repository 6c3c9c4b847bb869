"""The workloads of bench_inductor.py: each a function `build(quick) -> (module, inputs)`.

Inference workloads return a tensor (or a tuple of tensors) and run under `torch.no_grad()`;
training workloads (`train=True`) return a scalar loss and run forward, backward and an SGD step.
Sizes suit a 2-core CPU (a few milliseconds of eager time each); `gpu=True` (--device cuda) uses
sizes that keep a GPU busy past its launch overhead (`gpu_title` says which); `quick` makes them
tiny for a smoke run. Random weights, no downloads: GPT-2 and BERT come from small `transformers`
configurations. Dropout is off everywhere so that every system computes the same function.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True)
class Workload:
    """One row of the table: `build(quick, gpu)` returns a fresh `(module, inputs)` on CPU in float32
    (CPU sizes, or with `gpu` the sizes of `gpu_title`)."""

    name: str
    title: str
    build: Callable[[bool, bool], tuple[nn.Module, list[torch.Tensor]]]
    train: bool = False
    memory_bound: bool = False  # bandwidth, not arithmetic, bounds it: the report gives its GB/s
    gpu_title: str = ""
    gpu_only: bool = False  # in the default suite on a GPU only (sizes that mean something there)

    def title_for(self, gpu: bool) -> str:
        return self.gpu_title if gpu and self.gpu_title else self.title


class MLP(nn.Module):
    def __init__(self, width: int, hidden: int, depth: int = 3):
        super().__init__()
        dims = [width] + [hidden] * (depth - 1) + [width]
        self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in zip(dims, dims[1:]))

    def forward(self, x):
        for i, layer in enumerate(self.layers):
            x = layer(x)
            if i < len(self.layers) - 1:
                x = F.gelu(x)
        return x


def mlp(quick: bool, gpu: bool = False):
    batch, width, hidden = (8, 32, 64) if quick else (8192, 1024, 4096) if gpu else (128, 512, 1024)
    return MLP(width, hidden), [torch.randn(batch, width)]


class PointwiseChain(nn.Module):
    """Twenty elementwise ops: eager reads and writes the tensor twenty times, a fused kernel once."""

    def forward(self, x, y):
        a = torch.sin(x) * 1.5 + y
        b = torch.tanh(a) - torch.sigmoid(y * 0.5)
        c = torch.exp(-b.abs()) * a + torch.cos(x)
        d = torch.relu(c - 0.1) + torch.sqrt(y.abs() + 1.0)
        return torch.where(d > 0.5, d * x, d / (1.0 + x * x))


def pointwise(quick: bool, gpu: bool = False):
    n = 64 if quick else 8192 if gpu else 1024
    return PointwiseChain(), [torch.randn(n, n), torch.randn(n, n)]


class Softmax(nn.Module):
    def forward(self, x):
        return torch.softmax(x, dim=-1)


def softmax(quick: bool, gpu: bool = False):
    rows, cols = (16, 64) if quick else (8192, 8192) if gpu else (1024, 1024)
    return Softmax(), [torch.randn(rows, cols)]


class LayerNormGelu(nn.Module):
    """Layer norm, GELU and the residual add: memory bound, one pass over x when fused."""

    def __init__(self, width: int):
        super().__init__()
        self.norm = nn.LayerNorm(width)

    def forward(self, x):
        return x + F.gelu(self.norm(x))


def layernorm_gelu(quick: bool, gpu: bool = False):
    rows, width = (16, 64) if quick else (16384, 4096) if gpu else (4096, 768)
    return LayerNormGelu(width), [torch.randn(rows, width)]


class Attention(nn.Module):
    """Scaled dot-product attention written out: matmul, scale, causal mask, softmax, matmul."""

    def forward(self, q, k, v):
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        n = q.shape[-2]
        causal = torch.ones(n, n, dtype=torch.bool, device=q.device).tril()
        scores = scores.masked_fill(~causal, float("-inf"))
        return torch.softmax(scores, dim=-1) @ v


def attention(quick: bool, gpu: bool = False):
    shape = (1, 2, 16, 8) if quick else (16, 16, 1024, 64) if gpu else (4, 8, 256, 64)
    return Attention(), [torch.randn(shape) for _ in range(3)]


class PlainAttention(nn.Module):
    """softmax(q @ k^T / sqrt(d)) @ v written out, no mask (issue 20's form)."""

    def forward(self, q, k, v):
        return torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-1) @ v


def attention_long(quick: bool, gpu: bool = False):
    shape = (1, 2, 16, 8) if quick else (8, 16, 2048, 64) if gpu else (2, 8, 512, 64)
    return PlainAttention(), [torch.randn(shape) for _ in range(3)]


def _encoder_layer(quick: bool, gpu: bool = False) -> tuple[nn.Module, torch.Tensor]:
    d, heads, ffn, batch, seq = (
        (32, 2, 64, 2, 8) if quick else (1024, 16, 4096, 16, 512) if gpu else (256, 4, 1024, 8, 64)
    )
    layer = nn.TransformerEncoderLayer(d, heads, dim_feedforward=ffn, dropout=0.0, batch_first=True)
    return layer, torch.randn(batch, seq, d)


def encoder(quick: bool, gpu: bool = False):
    layer, x = _encoder_layer(quick, gpu)
    return layer, [x]


class ConvBnRelu(nn.Module):
    """Three conv -> BatchNorm (eval: a per-channel affine) -> ReLU blocks."""

    def __init__(self, channels: int):
        super().__init__()
        blocks, c_in = [], 3
        for _ in range(3):
            conv = nn.Conv2d(c_in, channels, 3, padding=1, bias=False)
            blocks += [conv, nn.BatchNorm2d(channels), nn.ReLU()]
            c_in = channels
        self.body = nn.Sequential(*blocks)

    def forward(self, x):
        return self.body(x)


def conv_bn_relu(quick: bool, gpu: bool = False):
    batch, channels, size = (1, 4, 8) if quick else (32, 64, 112) if gpu else (8, 32, 56)
    model = ConvBnRelu(channels)
    with torch.no_grad():  # BatchNorm statistics that are not the identity, as after training
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.uniform_(-0.5, 0.5)
                m.running_var.uniform_(0.5, 2.0)
    return model, [torch.randn(batch, 3, size, size)]


class Logits(nn.Module):
    """A `transformers` model called with keyword inputs, returning only its logits tensor."""

    def __init__(self, model: nn.Module, keys: tuple[str, ...]):
        super().__init__()
        self.model, self.keys = model, keys

    def forward(self, *inputs):
        return self.model(**dict(zip(self.keys, inputs)), use_cache=False).logits


def _transformer_sizes(quick: bool, gpu: bool) -> tuple[int, ...]:
    """(width, layers, heads, vocab, batch, sequence) of the GPT-2 and BERT workloads."""
    if quick:
        return 32, 1, 2, 64, 1, 8
    return (768, 4, 12, 2048, 32, 512) if gpu else (256, 4, 4, 2048, 4, 128)


def gpt2(quick: bool, gpu: bool = False):
    from transformers import GPT2Config, GPT2LMHeadModel

    d, layers, heads, vocab, batch, seq = _transformer_sizes(quick, gpu)
    config = GPT2Config(
        vocab_size=vocab, n_positions=max(seq, 16), n_embd=d, n_layer=layers, n_head=heads,
        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0, eos_token_id=0,
        attn_implementation="eager",
    )
    return Logits(GPT2LMHeadModel(config), ("input_ids",)), [torch.randint(0, vocab, (batch, seq))]


class BertLogits(Logits):
    def forward(self, *inputs):  # BERT's forward takes no use_cache
        return self.model(**dict(zip(self.keys, inputs))).logits


def bert(quick: bool, gpu: bool = False):
    from transformers import BertConfig, BertForMaskedLM

    d, layers, heads, vocab, batch, seq = _transformer_sizes(quick, gpu)
    config = BertConfig(
        vocab_size=vocab, hidden_size=d, num_hidden_layers=layers, num_attention_heads=heads,
        intermediate_size=4 * d, max_position_embeddings=max(seq, 16), hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0, attn_implementation="eager",
    )
    ids, types = torch.randint(0, vocab, (batch, seq)), torch.randint(0, 2, (batch, seq))
    mask = torch.ones(batch, seq, dtype=torch.long)
    mask[0, seq // 2:] = 0  # padding in one sequence, so the attention mask does something
    keys = ("input_ids", "token_type_ids", "attention_mask")
    return BertLogits(BertForMaskedLM(config), keys), [ids, types, mask]


def _gpt2_sdpa(quick: bool, gpu: bool, layers: int):
    """GPT-2 at GPT-2 small's width and vocabulary (50257: not a multiple of 8), transformers'
    default attention (sdpa), `layers` layers."""
    from transformers import GPT2Config, GPT2LMHeadModel

    vocab, batch, seq = (101, 1, 8) if quick else (50257, 8, 512) if gpu else (50257, 1, 128)
    d, heads = (32, 2) if quick else (768, 12)
    config = GPT2Config(
        vocab_size=vocab, n_positions=max(seq, 16), n_embd=d, n_layer=layers, n_head=heads,
        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0, eos_token_id=0,
    )
    return Logits(GPT2LMHeadModel(config), ("input_ids",)), [torch.randint(0, vocab, (batch, seq))]


def gpt2_vocab(quick: bool, gpu: bool = False):
    """GPT-2 small's width and vocabulary, 4 layers."""
    return _gpt2_sdpa(quick, gpu, 1 if quick else 4)


def bert_base(quick: bool, gpu: bool = False):
    """BERT-base's width and vocabulary, transformers' default attention (sdpa), 4 layers."""
    from transformers import BertConfig, BertForMaskedLM

    vocab, batch, seq = (101, 1, 8) if quick else (30522, 16, 512) if gpu else (30522, 2, 128)
    d, layers, heads = (32, 1, 2) if quick else (768, 4, 12)
    config = BertConfig(
        vocab_size=vocab, hidden_size=d, num_hidden_layers=layers, num_attention_heads=heads,
        intermediate_size=4 * d, max_position_embeddings=max(seq, 16), hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )
    ids, types = torch.randint(0, vocab, (batch, seq)), torch.randint(0, 2, (batch, seq))
    mask = torch.ones(batch, seq, dtype=torch.long)
    keys = ("input_ids", "token_type_ids", "attention_mask")
    return BertLogits(BertForMaskedLM(config), keys), [ids, types, mask]


class WithLoss(nn.Module):
    """A model followed by a loss against `target`: one scalar to call `.backward()` on."""

    def __init__(self, model: nn.Module, loss: str):
        super().__init__()
        self.model, self.loss = model, loss

    def forward(self, x, target):
        out = self.model(x)
        if self.loss == "cross_entropy":
            return F.cross_entropy(out, target)
        return (out * target).mean()  # a weighted mean: layer-normed outputs give mse almost no gradient


def mlp_train(quick: bool, gpu: bool = False):
    model, (x,) = mlp(quick, gpu)
    return WithLoss(model, "cross_entropy"), [x, torch.randint(0, x.shape[1], (x.shape[0],))]


def encoder_train(quick: bool, gpu: bool = False):
    layer, x = _encoder_layer(quick, gpu)
    return WithLoss(layer, "weighted_mean"), [x, torch.randn_like(x)]


def gpt2_small(quick: bool, gpu: bool = False):
    """GPT-2 small: all 12 layers."""
    return _gpt2_sdpa(quick, gpu, 2 if quick else 12)


def llama_prefill(quick: bool, gpu: bool = False):
    """A Llama-style decoder (transformers' Llama: RMSNorm, rotary embeddings, grouped-query
    attention, SwiGLU) at d=2048, 32 heads over 8 key/value heads, 4 layers: one prefill of 1024
    tokens."""
    from transformers import LlamaConfig, LlamaForCausalLM

    if quick:
        d, heads, kv_heads, ffn, layers, vocab, seq = 64, 4, 2, 160, 2, 128, 16
    else:
        d, heads, kv_heads, ffn, layers, vocab = 2048, 32, 8, 5632, 4, 32000
        seq = 1024 if gpu else 128
    config = LlamaConfig(
        vocab_size=vocab, hidden_size=d, intermediate_size=ffn, num_hidden_layers=layers,
        num_attention_heads=heads, num_key_value_heads=kv_heads, max_position_embeddings=max(seq, 16),
    )
    return Logits(LlamaForCausalLM(config), ("input_ids",)), [torch.randint(0, vocab, (1, seq))]


class Bottleneck(nn.Module):
    """ResNet-50's bottleneck block (eval): 1x1, 3x3, 1x1 convolutions with BatchNorm and ReLU, and
    the residual added before the last ReLU."""

    def __init__(self, channels: int, width: int):
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(channels, width, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU(),
            nn.Conv2d(width, width, 3, padding=1, bias=False), nn.BatchNorm2d(width), nn.ReLU(),
            nn.Conv2d(width, channels, 1, bias=False), nn.BatchNorm2d(channels),
        )

    def forward(self, x):
        return F.relu(self.body(x) + x)


def resnet_stack(quick: bool, gpu: bool = False):
    """Three bottleneck blocks of ResNet-50's first stage: 256 channels (64 inside), 56x56."""
    batch, channels, width, size = (1, 16, 4, 8) if quick else (32, 256, 64, 56) if gpu else (4, 256, 64, 28)
    model = nn.Sequential(*[Bottleneck(channels, width) for _ in range(3)])
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.uniform_(-0.5, 0.5)
                m.running_var.uniform_(0.5, 2.0)
    return model, [torch.randn(batch, channels, size, size)]


class RowStatsColumnNorm(nn.Module):
    """`var_mean` over each row and the L2 norm of each column: a reduction over the inner axis
    and one over the outer axis of the same tensor."""

    def forward(self, x):
        var, mean = torch.var_mean(x, dim=1)
        return var, mean, torch.linalg.vector_norm(x, dim=0)


def row_and_column_stats(quick: bool, gpu: bool = False):
    shape = (64, 48) if quick else (65536, 8192) if gpu else (2048, 2048)
    return RowStatsColumnNorm(), [torch.randn(shape)]


WORKLOADS = {
    w.name: w
    for w in [
        Workload("mlp", "MLP 128x512 -> 1024 -> 1024 -> 512, GELU", mlp,
                 gpu_title="MLP 8192x1024 -> 4096 -> 4096 -> 1024, GELU"),
        Workload("pointwise", "pointwise chain, 20 ops on 1024x1024", pointwise, memory_bound=True,
                 gpu_title="pointwise chain, 20 ops on 8192x8192"),
        Workload("softmax", "softmax 1024x1024, last dim", softmax, memory_bound=True,
                 gpu_title="softmax 8192x8192, last dim"),
        Workload("layernorm_gelu", "x + gelu(layer_norm(x)), 4096x768", layernorm_gelu, memory_bound=True,
                 gpu_title="x + gelu(layer_norm(x)), 16384x4096"),
        Workload("attention", "causal attention 4x8x256x64 (written out)", attention,
                 gpu_title="causal attention 16x16x1024x64 (written out)"),
        Workload("encoder", "nn.TransformerEncoderLayer d=256, 4 heads, ffn 1024, 8x64", encoder,
                 gpu_title="nn.TransformerEncoderLayer d=1024, 16 heads, ffn 4096, 16x512"),
        Workload("conv_bn_relu", "3x (conv3x3, BatchNorm eval, ReLU), 8x32x56x56", conv_bn_relu,
                 gpu_title="3x (conv3x3, BatchNorm eval, ReLU), 32x64x112x112"),
        Workload("gpt2", "GPT-2 (transformers) 4 layers, d=256, 4x128 tokens", gpt2,
                 gpu_title="GPT-2 (transformers) 4 layers, d=768, 32x512 tokens"),
        Workload("bert", "BERT (transformers, masked LM) 4 layers, d=256, 4x128 tokens", bert,
                 gpu_title="BERT (transformers, masked LM) 4 layers, d=768, 32x512 tokens"),
        Workload("mlp_train", "MLP training step (fwd + bwd + SGD), cross entropy", mlp_train, train=True,
                 gpu_title="MLP 8192x1024 training step (fwd + bwd + SGD), cross entropy"),
        Workload("encoder_train", "TransformerEncoderLayer training step (fwd + bwd + SGD)", encoder_train,
                 train=True, gpu_title="TransformerEncoderLayer d=1024, 16x512 training step"),
        Workload("attention_long", "attention 2x8x512x64 (written out, no mask)", attention_long,
                 gpu_title="attention 8x16x2048x64 (written out, no mask)"),
        Workload("gpt2_vocab", "GPT-2 (sdpa) 4 layers, d=768, vocab 50257, 1x128 tokens", gpt2_vocab,
                 gpu_title="GPT-2 (sdpa) 4 layers, d=768, vocab 50257, 8x512 tokens", gpu_only=True),
        Workload("bert_base", "BERT-base (sdpa) 4 layers, vocab 30522, 2x128 tokens", bert_base,
                 gpu_title="BERT-base (sdpa) 4 layers, vocab 30522, 16x512 tokens", gpu_only=True),
        Workload("gpt2_small", "GPT-2 small (sdpa) 12 layers, d=768, vocab 50257, 1x128 tokens", gpt2_small,
                 gpu_title="GPT-2 small (sdpa) 12 layers, d=768, vocab 50257, 8x512 tokens", gpu_only=True),
        Workload("llama_prefill", "Llama-style 4 layers, d=2048, GQA 32/8 heads, prefill 1x128",
                 llama_prefill,
                 gpu_title="Llama-style 4 layers, d=2048, GQA 32/8 heads, prefill 1x1024", gpu_only=True),
        Workload("resnet_stack", "3 ResNet-50 bottlenecks (eval), 4x256x28x28", resnet_stack,
                 gpu_title="3 ResNet-50 bottlenecks (eval), 32x256x56x56", gpu_only=True),
        Workload("row_column_stats", "var_mean over rows + L2 norm over columns, 2048x2048",
                 row_and_column_stats, memory_bound=True,
                 gpu_title="var_mean over rows + L2 norm over columns, 65536x8192"),
    ]
}
