import pytest
import torch

from torchsmith.capture import CaptureSession, capture
from torchsmith.ir import interpret


class Counting:
    """A backend interpreting graphs and keeping them."""

    def __init__(self):
        self.graphs = []

    def __call__(self, graph, example_inputs):
        self.graphs.append(graph)
        return lambda *inputs: interpret(graph, *inputs, check_types=True)


@pytest.fixture
def backend():
    return Counting()


@pytest.fixture
def compile_with(backend):
    def make(fn, **options):
        return capture(fn, backend, **options)

    return make


__all__ = ["CaptureSession", "torch"]
