"""A small training step's forward: an MLP module's loss; its parameters become graph inputs that
require grad (autograd_aot differentiates them)."""
import torch


class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w1 = torch.nn.Parameter(torch.randn(8, 16) * 0.3)
        self.b1 = torch.nn.Parameter(torch.zeros(16))
        self.w2 = torch.nn.Parameter(torch.randn(16, 4) * 0.3)

    def forward(self, x):
        return torch.tanh(x @ self.w1 + self.b1) @ self.w2


model = MLP()


def fn(x, target):
    return ((model(x) - target) ** 2).mean()


example_inputs = (torch.randn(5, 8), torch.randn(5, 4))
