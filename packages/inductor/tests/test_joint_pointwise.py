"""Pointwise siblings over equal ranges share one vectorized loop: a GELU forward that also saves its
derivative for the backward computes `erf(x / sqrt(2))` once for both outputs, in one kernel."""

import math

import pytest
import torch

from torchsmith.inductor import compile_graph
from torchsmith.inductor.loop_ir.program import ComputedBuffer
from torchsmith.inductor.testing import assert_matches_eager, make_graph


def gelu_and_derivative_graph(shape, transposed_second: bool = False):
    """gelu(x) + residual, and gelu'(x) (what a training forward saves): two outputs of x's shape
    sharing the erf. With `transposed_second`, the derivative is returned transposed and made
    contiguous, so the two stores walk memory in different orders."""

    def body(b, x, residual):
        gelu = b.op("aten.gelu.default", x)
        out = b.op("aten.add.Tensor", gelu, residual)
        cdf = b.op(
            "aten.mul.Tensor",
            b.op(
                "aten.add.Tensor", b.op("aten.erf.default", b.op("aten.mul.Tensor", x, 1 / math.sqrt(2))), 1.0
            ),
            0.5,
        )
        pdf = b.op(
            "aten.mul.Tensor",
            b.op("aten.exp.default", b.op("aten.mul.Tensor", b.op("aten.mul.Tensor", x, x), -0.5)),
            1 / math.sqrt(2 * math.pi),
        )
        derivative = b.op("aten.add.Tensor", cdf, b.op("aten.mul.Tensor", x, pdf))
        if transposed_second:
            derivative = b.op(
                "aten.clone.default",
                b.op("aten.t.default", derivative),
                memory_format=torch.contiguous_format,
            )
        return out, derivative

    types = {"x": (shape, torch.float32), "residual": (shape, torch.float32)}
    return make_graph("gelu_and_derivative", types, body)


def _kernels(compiled):
    return [step for step in compiled.steps if isinstance(step[0], ComputedBuffer)]


@pytest.mark.parametrize("shape", [(64, 512), (7, 13), (3, 5, 33), (1000,), (70000,)])
def test_siblings_share_one_kernel_and_match_eager(shape):
    graph = gelu_and_derivative_graph(shape)
    inputs = [torch.randn(shape) * 3, torch.randn(shape)]
    compiled = compile_graph(graph, inputs)
    assert len(_kernels(compiled)) == 1
    kernel = compiled.source.split('extern "C" void kernel', 1)[1]
    assert kernel.count("erff(") == 1  # one erf for both outputs
    assert_matches_eager(compiled, graph, *inputs, atol=1e-6, rtol=1e-5)


def test_siblings_storing_in_different_orders_match_eager():
    graph = gelu_and_derivative_graph((37, 41), transposed_second=True)
    inputs = [torch.randn(37, 41) * 3, torch.randn(37, 41)]
    compiled = compile_graph(graph, inputs)
    assert_matches_eager(compiled, graph, *inputs, atol=1e-6, rtol=1e-5)


def test_a_member_reading_another_is_not_joint():
    """The second reads the first one element to the right: in one shared loop that element would not
    be stored yet, so the pair must not share the vectorized loop."""

    def body(b, x):
        first = b.op("aten.exp.default", x)
        shifted = b.op("aten.slice.Tensor", b.op("aten.constant_pad_nd.default", first, [0, 1]), 1, 1)
        return first, b.op("aten.mul.Tensor", shifted, x)

    graph = make_graph("neighbour", {"x": ((16, 40), torch.float32)}, body)
    inputs = [torch.randn(16, 40)]
    compiled = compile_graph(graph, inputs)
    assert_matches_eager(compiled, graph, *inputs)
