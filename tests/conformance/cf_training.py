"""Training programs: outputs are backpropagated on both sides and every gradient compared.

Each program is run with `train=True` (see cf_harness.py): after each call the sum of the float
outputs that require grad is backpropagated, and the gradients of the arguments that require grad and
of every module parameter are compared with eager's, as are buffers such as BatchNorm running stats.
"""

import torch
import torch.nn.functional as F
from cf_harness import program
from torch import nn

import torchsmith

TR = "training"


def T(*shape):
    """A random leaf tensor that requires grad."""
    return torch.randn(*shape).requires_grad_()


def calls(fn, *args_list):
    return fn, [tuple(args) for args in args_list]


def train(**options):
    return program(TR, train=True, **options)


# --- modules ---------------------------------------------------------------------------------------


@train(graphs=1)
def mlp_relu():
    m = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    return calls(m, [torch.randn(5, 8)], [torch.randn(5, 8)])


@train(graphs=1)
def mlp_with_input_grad():
    m = nn.Sequential(nn.Linear(6, 12), nn.Tanh(), nn.Linear(12, 6), nn.Sigmoid())
    return calls(m, [T(3, 6)])


@train()
def conv_bn_relu_train_mode():
    m = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
                      nn.Flatten(), nn.Linear(4, 2))
    return calls(m, [torch.randn(2, 3, 6, 6)], [torch.randn(2, 3, 6, 6)])


@train()
def batchnorm1d_train_updates_running_stats():
    return calls(nn.BatchNorm1d(5), [T(8, 5)], [T(8, 5)])


@train()
def small_convnet_maxpool():
    m = nn.Sequential(nn.Conv2d(1, 3, 3), nn.BatchNorm2d(3), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                      nn.Linear(27, 5))
    return calls(m, [torch.randn(4, 1, 8, 8)])


@train()
def transformer_encoder_layer():
    m = nn.TransformerEncoderLayer(d_model=16, nhead=2, dim_feedforward=32, dropout=0.0, batch_first=True)
    return calls(m, [T(2, 5, 16)])


@train()
def layernorm_gelu_residual():
    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.norm = nn.LayerNorm(8)
            self.fc = nn.Linear(8, 8)

        def forward(self, x):
            return x + F.gelu(self.fc(self.norm(x)))

    return calls(Block(), [T(2, 3, 8)])


@train()
def sdpa_attention_block():
    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            self.qkv = nn.Linear(16, 48)
            self.out = nn.Linear(16, 16)

        def forward(self, x):
            b, t, _ = x.shape
            q, k, v = self.qkv(x).chunk(3, dim=-1)
            q, k, v = (z.view(b, t, 2, 8).transpose(1, 2) for z in (q, k, v))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            return self.out(y.transpose(1, 2).reshape(b, t, 16))

    return calls(Attention(), [T(2, 4, 16)])


@train()
def embedding_cross_entropy():
    class LM(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(20, 8)
            self.head = nn.Linear(8, 20)

        def forward(self, tokens, targets):
            logits = self.head(self.emb(tokens))
            return F.cross_entropy(logits.view(-1, 20), targets.view(-1))

    tokens = torch.randint(0, 20, (2, 5))
    return calls(LM(), [tokens, torch.randint(0, 20, (2, 5))])


@train()
def dropout_in_eval_mode():
    m = nn.Sequential(nn.Linear(4, 8), nn.Dropout(0.5), nn.ReLU(), nn.Linear(8, 2)).eval()
    return calls(m, [T(3, 4)])


@train()
def module_with_buffer_scale():
    class Scaled(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 4)
            self.register_buffer("scale", torch.tensor([1.0, 2.0, 3.0, 4.0]))

        def forward(self, x):
            return self.fc(x) * self.scale

    return calls(Scaled(), [T(2, 4)])


@train()
def buffer_updated_in_forward():
    class Counter(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(3, 3)
            self.register_buffer("seen", torch.zeros(3))

        def forward(self, x):
            with torch.no_grad():
                self.seen.add_(x.mean(0))
            return self.fc(x)

    return calls(Counter(), [T(4, 3)], [T(4, 3)])


@train(graphs=2, breaks=1)
def module_with_graph_break_both_sides_need_grads():
    class Broken(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Linear(4, 6)
            self.b = nn.Linear(6, 2)

        def forward(self, x):
            h = torch.relu(self.a(x))
            print("break")
            return self.b(h)

    return calls(Broken(), [T(3, 4)])


# --- functions ---------------------------------------------------------------------------------------


@train(graphs=1)
def elementwise_chain():
    def f(x, y):
        return torch.sin(x) * y.exp() + x.pow(2) / (1 + y.abs())

    return calls(f, [T(3, 4), T(3, 4)])


@train(graphs=1)
def matmul_softmax():
    def f(a, b):
        return torch.softmax(a @ b, dim=-1)

    return calls(f, [T(3, 5), T(5, 4)])


@train(graphs=1)
def in_place_ops_on_intermediates():
    def f(x, w):
        h = x @ w
        h.mul_(2)
        h.add_(1)
        h.relu_()
        return h

    return calls(f, [T(3, 4), T(4, 5)])


@train(graphs=1)
def in_place_on_view_of_intermediate():
    def f(x):
        h = x * 3
        h[:, 0] += 1
        h.narrow(1, 1, 2).mul_(x[:, :2])
        return h

    return calls(f, [T(4, 3)])


@train(graphs=2, breaks=1)
def graph_break_both_sides_need_grads():
    def f(x, w):
        h = torch.tanh(x @ w)
        print("break")
        return (h * x.sum(1, keepdim=True)).sum(0)

    return calls(f, [T(3, 4), T(4, 4)])


@train(breaks=1)
def graph_break_tensor_passes_through():
    def f(x):
        y = x.sigmoid()
        print("break")
        z = y * x
        return z, y

    return calls(f, [T(5)])


@train(graphs=1)
def no_grad_region():
    def f(x, w):
        with torch.no_grad():
            scale = (x * w).abs().max()
        return x * w / scale

    return calls(f, [T(4), T(4)])


@train(graphs=1)
def detach_stops_gradient():
    def f(x, w):
        return (x * w).detach() * w + x * w

    return calls(f, [T(3), T(3)])


@train(graphs=1)
def input_without_grad_mixed():
    def f(x, w):
        return (x @ w).tanh()

    return calls(f, [torch.randn(2, 3), T(3, 3)])


@train(graphs=1)
def multiple_outputs_and_non_tensor():
    def f(x):
        return x.relu(), x.shape[0], x.sum(0)

    return calls(f, [T(3, 2)])


@train(graphs=1)
def output_view_of_intermediate():
    def f(x):
        h = x * x
        return h.t(), h[1:]

    return calls(f, [T(3, 4)])


@train(graphs=1)
def reductions_and_broadcast():
    def f(x, b):
        return (x - x.mean(-1, keepdim=True)) / (x.var(-1, keepdim=True) + 1e-5).sqrt() + b

    return calls(f, [T(4, 6), T(6)])


@train(graphs=1)
def log_softmax_nll():
    def f(logits, target):
        return F.nll_loss(F.log_softmax(logits, dim=-1), target)

    return calls(f, [T(4, 7), torch.tensor([0, 3, 6, 1])])


@train(graphs=1)
def where_and_masked_fill():
    def f(x, y):
        mask = x > 0
        return torch.where(mask, x * y, y).masked_fill(~mask & (y > 0), 0.0)

    return calls(f, [T(4, 4), T(4, 4)])


@train(graphs=1)
def cat_stack_index():
    def f(x, y):
        z = torch.cat([x, y], dim=0)
        return torch.stack([z[0], z[-1]]) + z[torch.tensor([1, 2])]

    return calls(f, [T(2, 3), T(2, 3)])


@train(graphs=1)
def float64_inputs():
    def f(x, w):
        return (x @ w).sin()

    return calls(f, [T(3, 4).double().detach().requires_grad_(), T(4, 2).double().detach().requires_grad_()])


@train(graphs=2)
def dynamic_batch_mlp():
    m = nn.Sequential(nn.Linear(4, 8), nn.GELU(), nn.Linear(8, 3))
    return calls(m, *[[torch.randn(n, 4)] for n in (2, 3, 5, 7)])


@train(dynamic=True)
def dynamic_true_layernorm():
    m = nn.Sequential(nn.LayerNorm(6), nn.Linear(6, 6))
    return calls(m, *[[T(n, 6)] for n in (3, 5)])


@train(graphs=2, breaks=1)
def disabled_helper_between_graphs():
    @torchsmith.disable
    def helper(t):
        return t * 2

    def f(x):
        return helper(x.exp()).log()

    return calls(f, [T(4)])


@train(graphs=1)
def repeated_calls_accumulate_nothing_extra():
    m = nn.Linear(3, 2)
    return calls(m, [T(4, 3)], [T(4, 3)], [T(4, 3)])
