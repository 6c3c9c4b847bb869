"""Dynamic shapes, adversarial: sizes that change between calls through cat, ceil-div padding,
modulo, min/max and Python loops over sizes, transformer blocks at several sequence lengths,
strided convolutions whose output length depends on the input's, and the recompile budget
(specialize on the first call, one symbolic recompile, then every later size reuses it)."""

import math

import torch
import torch.nn.functional as F
from cf_harness import program

D = "dynamic"


# ----------------------------------------------------------------- cat of parts whose sizes vary
@program(D, graphs=2)
def cat_two_parts_of_different_sizes():
    def f(a, b):
        return torch.cat([a, b]) * 2
    return f, [(torch.randn(n), torch.randn(n + 1)) for n in (2, 3, 5, 7)]


@program(D, graphs=2)
def cat_three_parts_along_columns():
    def f(a, b, c):
        y = torch.cat([a, b, c], dim=1)
        return y.relu() + y.shape[1]
    return f, [(torch.randn(3, n), torch.randn(3, n + 2), torch.randn(3, 2 * n + 5)) for n in (2, 3, 6, 4)]


@program(D, graphs=2)
def cat_then_split_back():
    def f(a, b):
        y = torch.cat([a * 2, b + 1], dim=0)
        head, tail = y[: a.shape[0]], y[a.shape[0]:]
        return head.sum(0), tail.mean(0), y.shape[0] - b.shape[0]
    return f, [(torch.randn(n, 3), torch.randn(2 * n + 1, 3)) for n in (2, 3, 5, 8)]


@program(D, graphs=2)
def cat_of_symbolic_and_static_part():
    bias = torch.randn(4, 5)

    def f(x):
        return torch.cat([x, bias], dim=0).softmax(0)
    return f, [(torch.randn(n, 5),) for n in (3, 6, 9, 11)]


@program(D, graphs=2)
def cat_of_sizes_that_sum_to_the_same_total():
    def f(a, b):  # (2, 7) then (3, 6), (4, 5): totals agree, parts do not
        return torch.cat([a, b.flip(0)], dim=0).cumsum(0)
    return f, [(torch.randn(n, 2), torch.randn(9 - n, 2)) for n in (2, 3, 6, 5)]


# ----------------------------------------------------------------- size arithmetic
@program(D, graphs=2)
def pad_rows_up_to_multiple_of_eight():
    def f(x):
        n, k = x.shape[0], 8
        pad = (n + k - 1) // k * k - n
        return F.pad(x, (0, 0, 0, pad)) + 1
    return f, [(torch.randn(n, 3),) for n in (5, 9, 13, 16, 17)]


@program(D, graphs=2)
def ceil_div_chunks_reshaped():
    def f(x):
        n, k = x.shape[-1], 4
        chunks = -(-n // k)
        y = F.pad(x, (0, chunks * k - n))
        return y.reshape(x.shape[0], chunks, k).sum(-1)
    return f, [(torch.randn(2, n),) for n in (6, 10, 13, 7)]


@program(D, graphs=2)
def modulo_of_size_pads_remainder():
    def f(x):
        rem = x.shape[1] % 3
        return F.pad(x, (0, (3 - rem) % 3)).view(x.shape[0], -1, 3).amax(-1)
    return f, [(torch.randn(2, n),) for n in (5, 7, 9, 10)]


# `b[:n]` with n = min(len(a), len(b)) is min(s0, s1) rows; added to `a[:n]` it only broadcasts
# where s0 <= s1, and the size inference's other points (s0 doubled) break that: the sizes
# specialize, one graph a size pair (each right).
@program(D, graphs=4)
def min_max_of_two_sizes():
    def f(a, b):
        n = min(a.shape[0], b.shape[0])
        m = max(a.shape[0], b.shape[0])
        return a[:n] + b[:n], m - n
    return f, [(torch.randn(n, 2), torch.randn(n + 3, 2)) for n in (2, 4, 6, 9)]


@program(D, graphs=2)
def min_max_of_sizes_stay_symbolic():
    def f(a, b):
        n = min(a.shape[0], b.shape[0])
        m = max(a.shape[0], b.shape[0], 3)
        return a[:n].sum(0) * b[:n].mean(0), m - n, torch.zeros(m).shape
    return f, [(torch.randn(n, 2), torch.randn(n + 3, 2)) for n in (2, 4, 6, 9)]


# a loop over a size unrolls: every length is its own graph, each right.
@program(D, graphs=3)
def python_loop_over_size_chunks():
    def f(x):
        total = x.new_zeros(x.shape[1])
        for start in range(0, x.shape[0] - 1, 2):
            total = total + x[start] * x[start + 1]
        return total
    return f, [(torch.randn(n, 3),) for n in (4, 6, 8)]


# math.sqrt of a size specializes it: one graph a size.
@program(D, graphs=4)
def size_used_as_float_scale():
    def f(x):
        return x / math.sqrt(x.shape[-1]) + x.shape[0] * 0.5
    return f, [(torch.randn(3, n),) for n in (4, 9, 16, 25)]


# ----------------------------------------------------------------- transformer blocks
def _seq_calls(width, lengths=(5, 7, 9, 12), batch=2):
    return [(torch.randn(batch, s, width),) for s in lengths]


@program(D, graphs=2)
def transformer_encoder_layer_at_several_lengths():
    layer = torch.nn.TransformerEncoderLayer(16, 2, 32, batch_first=True, dropout=0.0).eval()
    return layer, _seq_calls(16)


class _GPT2Block(torch.nn.Module):
    def __init__(self, width=16, heads=2):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = torch.nn.LayerNorm(width), torch.nn.LayerNorm(width)
        self.qkv, self.proj = torch.nn.Linear(width, 3 * width), torch.nn.Linear(width, width)
        self.fc, self.out = torch.nn.Linear(width, 4 * width), torch.nn.Linear(4 * width, width)
        self.register_buffer("causal", torch.ones(64, 64).tril().bool())

    def forward(self, x):
        b, s, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
        q, k, v = (t.view(b, s, self.heads, c // self.heads).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(k.shape[-1])
        att = att.masked_fill(~self.causal[:s, :s], float("-inf")).softmax(-1)
        y = (att @ v).transpose(1, 2).contiguous().view(b, s, c)
        x = x + self.proj(y)
        return x + self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


@program(D, graphs=2)
def gpt2_block_with_sliced_causal_mask():
    return _GPT2Block().eval(), _seq_calls(16)


class _PositionalEncoder(torch.nn.Module):
    def __init__(self, width=16):
        super().__init__()
        self.pos = torch.nn.Parameter(torch.randn(64, width))
        self.attn = torch.nn.MultiheadAttention(width, 2, batch_first=True)

    def forward(self, x):
        h = x + self.pos[: x.shape[1]]
        y, _ = self.attn(h, h, h, need_weights=False)
        return y + h


@program(D, graphs=2)
def multihead_attention_with_position_slice():
    return _PositionalEncoder().eval(), _seq_calls(16)


class _CausalSDPA(torch.nn.Module):
    def __init__(self, width=16, heads=4):
        super().__init__()
        self.heads, self.qkv = heads, torch.nn.Linear(width, 3 * width)

    def forward(self, x):
        b, s, c = x.shape
        q, k, v = self.qkv(x).reshape(b, s, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return y.transpose(1, 2).reshape(b, s, c)


@program(D, graphs=2)
def causal_sdpa_reshape_permute():
    return _CausalSDPA().eval(), _seq_calls(16, (6, 8, 11, 13))


@program(D, graphs=2, train=True)
def transformer_layer_training_at_several_lengths():
    layer = torch.nn.TransformerEncoderLayer(8, 2, 16, batch_first=True, dropout=0.0)
    return layer, [(torch.randn(2, s, 8),) for s in (4, 6, 9)]


# ----------------------------------------------------------------- strided convolutions
class _FeatureExtractor(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv1d(1, 8, 10, stride=5)
        self.ln, self.lin = torch.nn.LayerNorm(8), torch.nn.Linear(8, 16)

    def forward(self, x):
        h = self.conv(x[:, None]).transpose(1, 2)
        return self.lin(self.ln(h))


@program(D, graphs=2)
def conv_feature_extractor_stride_five():
    return _FeatureExtractor().eval(), [(torch.randn(2, n),) for n in (400, 480, 560)]


@program(D, graphs=2)
def conv_stride_two_padding_then_gelu():
    conv = torch.nn.Conv1d(4, 6, 3, stride=2, padding=1)

    def f(x):
        return F.gelu(conv(x)).mean(-1) + conv(x).shape[-1]
    f.conv = conv
    return f, [(torch.randn(2, 4, n),) for n in (16, 20, 24, 32)]


@program(D, graphs=2)
def max_pool_then_linear_over_time():
    lin = torch.nn.Linear(3, 5)

    def f(x):
        return lin(F.max_pool1d(x, 2).transpose(1, 2))
    return f, [(torch.randn(2, 3, n),) for n in (8, 12, 20, 28)]


@program(D, graphs=2)
def conv2d_stride_two_on_growing_images():
    conv = torch.nn.Conv2d(3, 4, 3, stride=2)

    def f(x):
        return conv(x).flatten(2).softmax(-1)
    return f, [(torch.randn(1, 3, n, n),) for n in (9, 13, 17, 21)]


@program(D, graphs=2)
def stacked_strided_convs():
    convs = torch.nn.Sequential(torch.nn.Conv1d(1, 4, 4, stride=2), torch.nn.ReLU(),
                                torch.nn.Conv1d(4, 4, 4, stride=2))
    return convs.eval(), [(torch.randn(2, 1, n),) for n in (64, 96, 128, 160)]


# ----------------------------------------------------------------- recompile budget
@program(D, graphs=2)
def eight_lengths_compile_twice():
    def f(x):
        return (x.softmax(-1) * 2).sum(1)
    return f, [(torch.randn(2, n, 4),) for n in (3, 4, 5, 6, 7, 8, 9, 10, 11, 12)]


@program(D, graphs=2)
def reshape_merging_symbolic_dims():
    def f(x):
        b, s, c = x.shape
        return x.reshape(b * s, c).relu().view(b, s, c).sum(0)
    return f, [(torch.randn(2, n, 4),) for n in (3, 5, 7, 9, 11)]


@program(D, graphs=2)
def arange_of_length_added():
    def f(x):
        pos = torch.arange(x.shape[1], dtype=x.dtype)
        return x + pos
    return f, [(torch.randn(2, n),) for n in (3, 5, 6, 9, 14)]


@program(D, graphs=2)
def view_with_minus_one_and_size():
    def f(x):
        return x.view(-1, x.shape[-1]).t().contiguous().sum(1)
    return f, [(torch.randn(3, n, 2),) for n in (4, 6, 10, 12)]


@program(D, graphs=2)
def attention_scores_square_in_length():
    def f(q, k):
        scores = q @ k.transpose(-1, -2)
        return scores.softmax(-1).sum(-2)
    return f, [(torch.randn(2, n, 4), torch.randn(2, n, 4)) for n in (3, 5, 8, 13)]
