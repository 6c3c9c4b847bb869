"""A small MLP step with a graph break, for `python -m torchsmith explain|report` (see README.md)."""

import torch

import torchsmith


@torchsmith.compile
def mlp_step(x, w1, b1, w2):
    h = torch.nn.functional.gelu(x @ w1 + b1)
    scale = h.abs().mean()
    print(f"activation scale {scale.item():.3f}")  # a graph break: .item() and print
    y = (h / scale) @ w2
    return torch.softmax(y, dim=-1)


x, w1, b1, w2 = torch.randn(8, 16), torch.randn(16, 32), torch.randn(32), torch.randn(32, 4)
print(mlp_step(x, w1, b1, w2).sum())
