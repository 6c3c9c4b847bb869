"""Decompositions on integer tensors and the argument spellings eager's own decompositions use,
each decomposed graph compared with the ATen graph run eagerly (exactly, for integers)."""

import pytest
import torch

from torchsmith.ir import GraphBuilder, interpret
from torchsmith.prims import decompose


def _check(graph, inputs):
    decomposed = decompose(graph)
    assert all(node.dialect == "prims" for node in decomposed.nodes), decomposed.ops()
    for got, expected in zip(interpret(decomposed, *inputs), interpret(graph, *inputs)):
        assert got.dtype == expected.dtype
        exact = not got.dtype.is_floating_point  # floats may round once more or less than eager
        torch.testing.assert_close(got, expected, **({"rtol": 0, "atol": 0} if exact else {}))
    return decomposed


@pytest.mark.parametrize("transposed", [False, True])
def test_int64_convolution_is_the_library_prim(transposed):
    b = GraphBuilder("g")
    weight = (4, 3, 3) if transposed else (3, 4, 3)  # (in, out, k) transposed, (out, in, k) not
    x = b.input("x", "i64[2, 4, 7] cpu")
    w = b.input("w", f"i64[{', '.join(map(str, weight))}] cpu")
    bias = b.input("bias", "i64[3] cpu")
    graph = b.build(b.op("aten.convolution.default", x, w, bias, [2], [1], [1], transposed, [0], 1))
    inputs = [torch.randint(-9, 9, (2, 4, 7)), torch.randint(-9, 9, weight), torch.randint(-9, 9, (3,))]
    assert "prims.convolution" in _check(graph, inputs).ops()


def test_int64_hardtanh_truncates_float_bounds_and_keeps_the_dtype():
    b = GraphBuilder("g")
    x = b.input("x", "i64[9] cpu")
    graph = b.build(b.op("aten.hardtanh.default", x, -1.5, 2.5))
    _check(graph, [torch.arange(-4, 5)])


def test_int64_dropout_backward_promotes_with_the_float_scale():
    b = GraphBuilder("g")
    grad = b.input("grad", "i64[6] cpu")
    mask = b.input("mask", "b8[6] cpu")
    graph = b.build(b.op("aten.native_dropout_backward.default", grad, mask, 2.5))
    assert graph.outputs[0].type.dtype == torch.float32
    _check(graph, [torch.arange(-3, 3), torch.tensor([True, False, True, True, False, True])])


@pytest.mark.parametrize("op", ["aten.add.Scalar", "aten.sub.Scalar", "aten.rsub.Scalar"])
def test_scalar_overloads_take_alpha_positionally(op):
    b = GraphBuilder("g")
    x = b.input("x", "f32[5] cpu")
    graph = b.build(b.op(op, x, 0.5, 3))
    _check(graph, [torch.randn(5)])
