"""ATen nodes that read or write complex tensors stay whole through `decompose` (their prims
formulas are real-valued); the real-valued nodes around them still decompose."""

import torch

from torchsmith.ir import GraphBuilder, interpret
from torchsmith.prims import decompose
from torchsmith.prims.decompose import touches_complex


def _graph():
    b = GraphBuilder("spectrum")
    x = b.input("x", "f32[4, 8] cpu")
    s = b.op("aten.sin.default", x)
    z = b.op("aten._fft_r2c.default", s, [1], 0, True)
    magnitude = b.op("aten.abs.default", z)  # a modulus: prims.abs refuses complex
    product = b.op("aten.mul.Tensor", z, z)  # crosses real and imaginary parts
    return b.build(b.op("aten.mul.Tensor", magnitude, 2), product)


def test_complex_nodes_stay_aten_and_real_ones_decompose():
    graph = _graph()
    out = decompose(graph)  # on_missing="error": a kept complex node is no missing decomposition
    ops = [n.op for n in out.nodes]
    assert ops == ["prims.sin", "aten._fft_r2c.default", "aten.abs.default", "aten.mul.Tensor", "prims.mul"]
    x = torch.randn(4, 8)
    for got, expected in zip(interpret(out, x), interpret(graph, x), strict=True):
        torch.testing.assert_close(got, expected)


def test_touches_complex_reads_outputs_and_nested_arguments():
    graph = _graph()
    fft, abs_, mul, scale = graph.nodes[1:]
    assert touches_complex(fft.outputs) and touches_complex((), [abs_.args[0]])
    assert touches_complex(mul.outputs, {"other": mul.args[1]})
    assert not touches_complex(scale.outputs, scale.args) and not touches_complex(graph.nodes[0].args)
