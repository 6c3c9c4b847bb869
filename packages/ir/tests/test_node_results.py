"""A node's outputs from its op's raw result: one-element tuples, nested results and count mismatches,
the same in `interpret`, `compile_to_python` and `node_results`."""

import pytest
import torch

from torchsmith.ir import GraphBuilder, InterpretError, interpret, verify
from torchsmith.ir.interpreter import node_results
from torchsmith.ir.pycodegen import compile_to_python


def _both(graph, *inputs):
    return interpret(graph, *inputs), compile_to_python(graph)(*inputs)


def test_one_element_tuple_of_a_torch_function_is_its_single_output():
    b = GraphBuilder("gradient")
    x = b.input("x", "f32[7] cpu")
    g = b.op("torch.gradient", x, out_type="f32[7] cpu")  # torch.gradient returns (tensor,)
    graph = verify(b.build(b.op("torch.mul", g, 2.0)))
    x_value = torch.randn(7)
    for result in _both(graph, x_value):
        assert isinstance(result[0], torch.Tensor)
        torch.testing.assert_close(result[0], torch.gradient(x_value)[0] * 2)


def test_nested_result_is_flattened_in_order():
    b = GraphBuilder("histogramdd")
    x = b.input("x", "f32[6, 2] cpu")
    hist, e0, e1 = b.op("torch.histogramdd", x, bins=[3, 4],
                        out_type=["f32[3, 4] cpu", "f32[4] cpu", "f32[5] cpu"])
    graph = verify(b.build(hist, e0, e1))
    x_value = torch.randn(6, 2)
    want_hist, (want_e0, want_e1) = torch.histogramdd(x_value, bins=[3, 4])
    for got in _both(graph, x_value):
        for g, w in zip(got, (want_hist, want_e0, want_e1), strict=True):
            torch.testing.assert_close(g, w)


def test_count_mismatch_is_an_interpret_error_naming_the_node():
    b = GraphBuilder("mismatch")
    x = b.input("x", "f32[6] cpu")
    a, c = b.op("torch.split", x, 2, out_type=["f32[2] cpu", "f32[2] cpu"])  # really 3 parts
    graph = b.build(a, c)
    for run in (lambda: interpret(graph, torch.randn(6)), lambda: compile_to_python(graph)(torch.randn(6))):
        with pytest.raises(InterpretError, match=r"torch\.split.*3 values for 2 outputs"):
            run()


@pytest.mark.parametrize(
    ("result", "count", "expected"),
    [
        (1, 1, [1]), ((1,), 1, [1]), ([1, 2], 2, [1, 2]), ((1, [2, (3,)]), 3, [1, 2, 3]),
        ((1, None), 2, [1, None]),
    ],
)
def test_node_results(result, count, expected):
    assert node_results(result, count) == expected


@pytest.mark.parametrize(("result", "count"), [(1, 2), ((1, 2), 1), ((1, [2, 3]), 2)])
def test_node_results_refuses_other_counts(result, count):
    with pytest.raises(ValueError, match="outputs"):
        node_results(result, count)
