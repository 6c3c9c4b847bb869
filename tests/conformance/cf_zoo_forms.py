"""Minimal forms of what the transformers zoo broke on: a torch.library custom op with a fake
implementation and an autograd formula (Mixtral's grouped_mm_fallback), and a config deep-copied
and edited inside forward (T5/BART's EncoderDecoderCache, Whisper's decoder cache config)."""

import copy

import torch
from cf_harness import program

T = lambda *shape: torch.randn(*shape)
Z = "zoo_forms"


@torch.library.custom_op("torchsmith_conformance::grouped_rows", mutates_args=())
def grouped_rows(x: torch.Tensor, w: torch.Tensor, offs: torch.Tensor) -> torch.Tensor:
    """Rows of `x` in groups ending at `offs`, group i times w[i] (a data-dependent loop)."""
    out, start = torch.zeros(x.shape[0], w.shape[2], dtype=x.dtype), 0
    for i, end in enumerate(offs.tolist()):
        out[start:end] = x[start:end] @ w[i]
        start = end
    return out


@grouped_rows.register_fake
def _(x, w, offs):
    return x.new_empty(x.shape[0], w.shape[2])


@torch.library.custom_op("torchsmith_conformance::grouped_rows_backward", mutates_args=())
def grouped_rows_backward(
    x: torch.Tensor, w: torch.Tensor, offs: torch.Tensor, grad: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    grad_x, grad_w, start = torch.zeros_like(x), torch.zeros_like(w), 0
    for i, end in enumerate(offs.tolist()):
        grad_x[start:end] = grad[start:end] @ w[i].T
        grad_w[i] = x[start:end].T @ grad[start:end]
        start = end
    return grad_x, grad_w


@grouped_rows_backward.register_fake
def _(x, w, offs, grad):
    return torch.empty_like(x), torch.empty_like(w)


def _setup(ctx, inputs, output):
    ctx.save_for_backward(inputs[0], inputs[1])
    ctx.offs = inputs[2]


def _backward(ctx, grad):
    x, w = ctx.saved_tensors
    grad_x, grad_w = torch.ops.torchsmith_conformance.grouped_rows_backward(x, w, ctx.offs, grad)
    return grad_x, grad_w, None


grouped_rows.register_autograd(_backward, setup_context=_setup)


class Experts(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(3, 4, 5))

    def forward(self, x, offs):
        return torch.ops.torchsmith_conformance.grouped_rows(x.relu(), self.w, offs).sigmoid()


@program(Z, graphs=1, breaks=0, fullgraph=True)
def custom_op_with_a_fake_is_one_graph_op():
    torch.manual_seed(0)
    offs = torch.tensor([2, 2, 6])
    return Experts(), [(T(6, 4), offs), (T(6, 4), offs)]


@program(Z, graphs=1, breaks=0, train=True)
def custom_op_with_an_autograd_formula_trains():
    torch.manual_seed(0)
    return Experts(), [(T(6, 4).requires_grad_(), torch.tensor([1, 4, 6]))]


class Config:
    def __init__(self):
        self.decoder_layers = 2
        self.encoder_layers = 3
        self.dropout = 0.0
        self.sizes = {"hidden": 4}

    def __setattr__(self, name, value):
        super().__setattr__(name, value)


class CacheFromConfigCopy(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.config = Config()
        self.proj = torch.nn.Linear(4, 4)

    def forward(self, x):
        decoder = copy.deepcopy(self.config)
        decoder.num_layers = decoder.decoder_layers
        del decoder.decoder_layers
        h = x
        for _ in range(decoder.num_layers):
            h = self.proj(h) * decoder.sizes["hidden"]
        return h


@program(Z, graphs=2, breaks=0)
def config_deep_copied_in_forward_is_one_graph_guarded_on_the_config():
    torch.manual_seed(0)
    model = CacheFromConfigCopy()

    def more_layers():
        model.config.decoder_layers = 3  # read by the copy: recompiles

    return model, [(T(2, 4),), (T(2, 4),), more_layers, (T(2, 4),)]
