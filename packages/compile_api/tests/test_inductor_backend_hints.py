"""The hints the inductor backend gives a compiled forward after compiling it."""

import torch

import torchsmith
from torchsmith.inductor_backend import inductor_backend, lend_saved_outputs


class _Lending:
    """A compiled forward that takes the lending hint (as CUDA graphs do) and records it."""

    def __init__(self, forward):
        self.forward, self.lent = forward, None

    def __call__(self, *args):
        return self.forward(*args)

    def lend_outputs(self, positions):
        self.lent = list(positions)


def test_training_forwards_lend_exactly_their_saved_values():
    functions = []

    def backend(graph, example_inputs, options=None):
        functions.append(inductor_backend(graph, example_inputs, options))
        return functions[-1]

    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 2))
    torchsmith.compile(model, backend=backend)(torch.randn(4, 8)).sum().backward()
    (program,) = functions[0].programs.values()
    program.forward_fn = _Lending(program.forward_fn)
    lend_saved_outputs(functions[0])
    outputs = program.forward_graph.outputs
    assert program.forward_fn.lent == list(range(len(outputs) - program.num_saved, len(outputs)))
    assert program.num_saved > 0 and program.traced.num_outputs == 1


def test_inference_forwards_lend_nothing():
    functions = []

    def backend(graph, example_inputs, options=None):
        functions.append(inductor_backend(graph, example_inputs, options))
        return functions[-1]

    model = torch.nn.Linear(8, 2)
    with torch.no_grad():
        torchsmith.compile(model, backend=backend)(torch.randn(4, 8))
    (program,) = functions[0].programs.values()
    program.forward_fn = _Lending(program.forward_fn)
    lend_saved_outputs(functions[0])
    assert program.forward_fn.lent is None
