"""Shared helpers: run a torch-level graph eagerly (reference interpreter + eager autograd) and
compiled (aot_eager), and compare outputs, gradients and mutated inputs."""

import pytest
import torch

from torchsmith.autograd_aot import aot_eager
from torchsmith.ir import interpret
from torchsmith.ir.verifier import verify


def _clone_inputs(inputs):
    return [x.detach().clone().requires_grad_(x.requires_grad) if isinstance(x, torch.Tensor) else x
            for x in inputs]


def _loss(outputs):
    # A loss that weighs every element differently, so a wrong gradient cannot hide in a sum.
    total = 0
    for out in outputs:
        if isinstance(out, torch.Tensor) and out.requires_grad:
            weights = torch.linspace(0.5, 1.5, out.numel(), dtype=out.dtype, device=out.device)
            total = total + (out * weights.reshape(out.shape)).sum()
    return total


class Comparison:
    """Eager and compiled results of one program on equal inputs."""

    def __init__(self, graph, inputs, *, atol=1e-5, rtol=1e-4, backward=True, decompose=None):
        self.eager_inputs, self.compiled_inputs = _clone_inputs(inputs), _clone_inputs(inputs)
        self.eager_outputs = interpret(graph, *self.eager_inputs)
        self.function = aot_eager(graph, self.compiled_inputs, decompose=decompose)
        self.compiled_outputs = self.function(*self.compiled_inputs)
        self.atol, self.rtol = atol, rtol
        if backward and any(isinstance(x, torch.Tensor) and x.requires_grad for x in inputs):
            _loss(self.eager_outputs).backward()
            _loss(self.compiled_outputs).backward()

    @property
    def program(self):
        return self.function.last_program

    def check(self):
        for graph in (self.program.forward_graph, self.program.backward_graph):
            if graph is not None:
                verify(graph)
        assert len(self.eager_outputs) == len(self.compiled_outputs)
        for expected, actual in zip(self.eager_outputs, self.compiled_outputs):
            if isinstance(expected, torch.Tensor):
                torch.testing.assert_close(actual, expected, atol=self.atol, rtol=self.rtol)
                assert actual.requires_grad == expected.requires_grad
            else:
                assert actual == expected
        for expected, actual in zip(self.eager_inputs, self.compiled_inputs):
            if isinstance(expected, torch.Tensor):
                torch.testing.assert_close(actual.detach(), expected.detach(), atol=self.atol, rtol=self.rtol)
                if expected.requires_grad:
                    assert (actual.grad is None) == (expected.grad is None)
                    if expected.grad is not None:
                        torch.testing.assert_close(actual.grad, expected.grad, atol=self.atol, rtol=self.rtol)
        return self


@pytest.fixture
def compare():
    """`compare(graph, inputs, **tolerances)` runs both ways, checks, and returns the Comparison."""
    return lambda graph, inputs, **kw: Comparison(graph, inputs, **kw).check()
