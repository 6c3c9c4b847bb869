"""nn.Module programs: builtin layers, containers, custom modules, parameters and buffers, train/eval."""

import torch
from cf_harness import program
from torch import nn

T = lambda *shape: torch.randn(*shape)
M = "modules"


def calls(module, *args_list):
    return module, [tuple(args) for args in args_list]


@program(M)
def linear():
    return calls(nn.Linear(4, 3), [T(2, 4)], [T(2, 4)])


@program(M)
def linear_without_bias():
    return calls(nn.Linear(4, 3, bias=False), [T(5, 4)])


@program(M)
def mlp_sequential():
    return calls(nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4), nn.Tanh()), [T(3, 8)])


@program(M)
def conv_bn_relu_eval():
    m = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU()).eval()
    return calls(m, [T(2, 3, 8, 8)])


@program(M)
def batchnorm_training_updates_running_stats():
    m = nn.BatchNorm1d(4)
    return calls(m, [T(8, 4)], [T(8, 4)])


@program(M)
def layernorm_gelu_block():
    return calls(nn.Sequential(nn.LayerNorm(6), nn.Linear(6, 6), nn.GELU()), [T(2, 3, 6)])


@program(M)
def embedding_module():
    return calls(nn.Embedding(10, 4), [torch.tensor([[1, 2], [9, 0]])])


@program(M)
def dropout_in_eval_mode():
    return calls(nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.5)).eval(), [T(3, 4)])


@program(M)
def pooling_and_flatten():
    return calls(
        nn.Sequential(nn.Conv2d(1, 2, 3), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(18, 3)), [T(2, 1, 8, 8)]
    )


@program(M)
def custom_module_with_submodules():
    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1 = nn.Linear(4, 8)
            self.fc2 = nn.Linear(8, 4)
            self.scale = 0.5

        def forward(self, x):
            return x + self.fc2(torch.relu(self.fc1(x))) * self.scale

    return calls(Block(), [T(3, 4)])


@program(M)
def module_list_iteration():
    class Stack(nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = nn.ModuleList([nn.Linear(4, 4) for _ in range(3)])

        def forward(self, x):
            for i, layer in enumerate(self.layers):
                x = layer(x) * (i + 1)
            return x

    return calls(Stack(), [T(2, 4)])


@program(M)
def module_list_indexing_and_len():
    class Pick(nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = nn.ModuleList([nn.Linear(3, 3), nn.Linear(3, 3)])

        def forward(self, x):
            return self.layers[len(self.layers) - 1](self.layers[0](x))

    return calls(Pick(), [T(2, 3)])


@program(M)
def module_dict_iteration():
    class Heads(nn.Module):
        def __init__(self):
            super().__init__()
            self.heads = nn.ModuleDict({"a": nn.Linear(3, 2), "b": nn.Linear(3, 1)})

        def forward(self, x):
            return {name: self.heads[name](x) for name in self.heads}

    return calls(Heads(), [T(2, 3)])


@program(M)
def parameters_and_buffers_used_directly():
    class Affine(nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = nn.Parameter(torch.randn(4))
            self.register_buffer("offset", torch.arange(4.0))

        def forward(self, x):
            return x * self.weight + self.offset

    return calls(Affine(), [T(2, 4)])


@program(M)
def training_flag_branch():
    class Noisy(nn.Module):
        def forward(self, x):
            if self.training:
                return x * 2
            return x

    m = Noisy()
    return calls(m, [T(3)])


@program(M)
def eval_mode_module():
    class Noisy(nn.Module):
        def forward(self, x):
            return x * 2 if self.training else x - 1

    return calls(Noisy().eval(), [T(3)])


@program(M)
def nested_custom_modules_with_super_init_attrs():
    class Inner(nn.Module):
        def __init__(self, k):
            super().__init__()
            self.k = k
            self.fc = nn.Linear(2, 2)

        def forward(self, x):
            return self.fc(x) * self.k

    class Outer(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = Inner(2)
            self.b = Inner(3)

        def forward(self, x):
            return self.a(x) + self.b(x)

    return calls(Outer(), [T(4, 2)])


@program(M)
def module_helper_method_and_kwargs():
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(3, 3)

        def project(self, x, *, scale=1.0):
            return self.fc(x) * scale

        def forward(self, x, scale=2.0):
            return self.project(x, scale=scale)

    return Net(), [(T(2, 3),), (T(2, 3), 3.0)]


@program(M)
def shared_submodule_used_twice():
    fc = nn.Linear(3, 3)
    return calls(nn.Sequential(fc, nn.ReLU(), fc), [T(2, 3)])


@program(M)
def multihead_style_reshape():
    class Attn(nn.Module):
        def __init__(self):
            super().__init__()
            self.qkv = nn.Linear(8, 24)
            self.heads = 2

        def forward(self, x):
            b, n, c = x.shape
            q, k, v = self.qkv(x).reshape(b, n, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
            att = (q @ k.transpose(-2, -1)) * (c // self.heads) ** -0.5
            return (att.softmax(dim=-1) @ v).transpose(1, 2).reshape(b, n, c)

    return calls(Attn(), [T(2, 5, 8)])


@program(M)
def gru_cell_like_module():
    class Cell(nn.Module):
        def __init__(self):
            super().__init__()
            self.x2h = nn.Linear(3, 8)
            self.h2h = nn.Linear(4, 8)

        def forward(self, x, h):
            gates = self.x2h(x) + self.h2h(h)
            z, r = gates.chunk(2, 1)
            return torch.sigmoid(z) * h + torch.tanh(r)

    return calls(Cell(), [T(2, 3), T(2, 4)])


@program(M)
def conv1d_and_conv_transpose():
    return calls(
        nn.Sequential(nn.Conv1d(2, 3, 3, padding=1), nn.ConvTranspose1d(3, 2, 2, stride=2)), [T(1, 2, 5)]
    )


@program(M)
def identity_and_softmax_modules():
    return calls(nn.Sequential(nn.Identity(), nn.Softmax(dim=-1)), [T(2, 4)])


@program(M)
def forward_hook_runs_on_top_level_module():
    m = nn.Linear(3, 3)
    seen = []
    m.register_forward_hook(lambda mod, args, out: out * 2)
    m.register_forward_pre_hook(lambda mod, args: (args[0] + 1,))
    del seen
    return calls(m, [T(2, 3)])


@program(M)
def compiled_module_keeps_state_dict_keys():
    class Check(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(2, 2)

        def forward(self, x):
            return self.fc(x)

    return calls(Check(), [T(1, 2)])


@program(M)
def forward_hooks_on_submodule():
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(3, 3)
            self.fc.register_forward_hook(lambda mod, args, out: out.relu())
            self.fc.register_forward_pre_hook(lambda mod, args: (args[0] * 2,))

        def forward(self, x):
            return self.fc(x) + 1

    return calls(Net(), [T(2, 3)])


@program(M)
def parameters_list_and_functional_use():
    class Mix(nn.Module):
        def __init__(self):
            super().__init__()
            self.ws = nn.ParameterList([nn.Parameter(torch.randn(3)) for _ in range(2)])

        def forward(self, x):
            for w in self.ws:
                x = x * w
            return x

    return calls(Mix(), [T(3)])


@program(M)
def module_calls_other_module_method():
    class Enc(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 4)

        def encode(self, x):
            return self.fc(x).tanh()

        def forward(self, x):
            return self.encode(self.encode(x))

    return calls(Enc(), [T(2, 4)])


@program(M)
def group_norm_and_instance_norm():
    return calls(nn.Sequential(nn.GroupNorm(2, 4), nn.InstanceNorm1d(4)), [T(2, 4, 5)])


@program(M)
def transformer_like_block():
    class Block(nn.Module):
        def __init__(self, d=8):
            super().__init__()
            self.ln1 = nn.LayerNorm(d)
            self.ln2 = nn.LayerNorm(d)
            self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))
            self.proj = nn.Linear(d, d)

        def forward(self, x):
            h = self.ln1(x)
            att = torch.softmax(h @ h.transpose(-1, -2) / h.shape[-1] ** 0.5, dim=-1) @ h
            x = x + self.proj(att)
            return x + self.mlp(self.ln2(x))

    return calls(Block(), [T(2, 5, 8)])


@program(M)
def batchnorm_train_then_eval_calls():
    m = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4))
    return m, [(T(6, 3),), (T(6, 3),)]


@program(M)
def multihead_attention_module():
    return calls(nn.MultiheadAttention(8, 2, batch_first=True).eval(), [T(2, 5, 8), T(2, 5, 8), T(2, 5, 8)])


@program(M)
def transformer_encoder_layer_training_mode():
    return calls(nn.TransformerEncoderLayer(8, 2, 16, batch_first=True, dropout=0.0), [T(2, 5, 8)])


@program(M)
def lstm_module():
    return calls(nn.LSTM(4, 6, batch_first=True), [T(2, 3, 4)])


@program(M)
def gru_module_with_initial_state():
    return calls(nn.GRU(4, 6), [T(3, 2, 4), T(1, 2, 6)])


@program(M)
def iterate_parameters_and_modules():
    class P(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Linear(2, 2)
            self.b = nn.Sequential(nn.Linear(2, 2))

        def forward(self, x):
            total = sum(p.sum() for p in self.parameters())
            names = [n for n, _ in self.named_parameters()]
            return x * total, names, len(list(self.modules()))

    return calls(P(), [T(2)])


@program(M)
def forward_patched_on_instance():
    m = nn.Linear(3, 3)
    original = m.forward
    m.forward = lambda x: original(x) * 2
    return calls(m, [T(2, 3)])


@program(M)
def submodule_with_patched_forward():
    class Outer(nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = nn.Linear(2, 2)
            inner_forward = self.inner.forward
            self.inner.forward = lambda x: inner_forward(x) + 100

        def forward(self, x):
            return self.inner(x) - 1

    return calls(Outer(), [T(2)])


@program(M)
def module_with_custom_call():
    class Scaled(nn.Module):
        def forward(self, x):
            return x + 1

        def __call__(self, x):
            return super().__call__(x) * 3

    class Outer(nn.Module):
        def __init__(self):
            super().__init__()
            self.s = Scaled()

        def forward(self, x):
            return self.s(x)

    return calls(Outer(), [T(2)])


@program(M)
def top_level_module_with_custom_call():
    class Scaled(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(2, 2)

        def forward(self, x):
            return self.fc(x)

        def __call__(self, x):
            return super().__call__(x) * 3

    return calls(Scaled(), [T(2)])
