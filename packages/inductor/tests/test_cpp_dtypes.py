"""16-bit floats, bool and integer dtypes in generated C++ against eager; complex nodes are extern calls."""

import pytest
import torch

from torchsmith.inductor import CodegenError, compile_graph, lower
from torchsmith.inductor.cpp.dtypes import cpp_type
from torchsmith.inductor.loop_ir.program import ExternCall
from torchsmith.inductor.testing import assert_matches_eager, make_graph

F32 = torch.float32


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_pointwise_chain_rounds_as_eager(dtype):
    def body(b, x, y):
        t = b.op("aten.mul.Tensor", x, y)
        t = b.op("aten.add.Tensor", b.op("aten.exp.default", t), b.op("aten.tanh.default", x))
        t = b.op("aten.gelu.default", b.op("aten.mul.Tensor", t, -0.7))  # no cancellation: 1 ulp stays 1 ulp
        mixed = b.op("aten.add.Tensor", x, b.op("aten._to_copy.default", y, dtype=F32))  # promotes to f32
        back = b.op("aten._to_copy.default", mixed, dtype=dtype)
        return (
            t,
            mixed,
            back,
            b.op("aten.gt.Tensor", x, y),
            b.op("aten.where.self", b.op("aten.lt.Scalar", x, 0), x, y),
        )

    graph = make_graph("half", {"x": ((33, 65), dtype), "y": ((33, 65), dtype)}, body)
    x, y = torch.randn(33, 65).to(dtype), torch.randn(33, 65).to(dtype)
    x[0, 0], y[1, 1] = float("nan"), float("inf")
    # Each op rounds to 16 bits as eager does; libm and eager's vector math differ by an ulp of float,
    # which can flip one 16-bit rounding: allow one 16-bit ulp.
    assert_matches_eager(
        compile_graph(graph), graph, x, y, rtol=1e-2 if dtype == torch.bfloat16 else 1e-3, atol=1e-3
    )


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_reductions_and_softmax(dtype):
    def body(b, x):
        var, mean = b.op("aten.var_mean.correction", x, [1], correction=1)
        return (
            b.op("aten.sum.dim_IntList", x, [1]),
            b.op("aten.amax.default", x, [0]),
            b.op("aten.argmax.default", x, 1),
            b.op("aten._softmax.default", x, -1, False),
            var,
            mean,
        )

    graph = make_graph("half_red", {"x": ((16, 300), dtype)}, body)
    x = (torch.randn(16, 300) * 3).to(dtype)
    assert_matches_eager(compile_graph(graph), graph, x, rtol=1e-2, atol=1e-2)


def test_half_stores_are_16_bit():
    def body(b, x, y):
        return b.op("aten.neg.default", x), b.op("aten.neg.default", y)

    graph = make_graph("store", {"x": ((8,), torch.bfloat16), "y": ((8,), torch.float16)}, body)
    # golden/half_stores.txt shows the kernels storing uint16_t (bfloat16) and _Float16.
    x = torch.tensor([1.0, -2.5, 3.0e38, float("inf"), float("nan"), 1e-40, 0.0, -0.0], dtype=torch.bfloat16)
    y = torch.tensor([1.0, -2.5, 65504.0, float("inf"), float("nan"), 1e-7, 0.0, -0.0], dtype=torch.float16)
    assert_matches_eager(compile_graph(graph), graph, x, y)


def test_bool_and_small_int_dtypes():
    def body(b, a, m, u):
        s = b.op("aten.add.Tensor", a, a)  # int8 wraps as in eager
        anyv = b.op("aten.any.dim", m, 1)
        allv = b.op("aten.all.dim", m, 1)
        total = b.op("aten.sum.dim_IntList", m, [1])
        return s, anyv, allv, total, b.op("aten.mul.Tensor", u, 3), b.op("aten.amax.default", a, [1])

    graph = make_graph(
        "ints", {"a": ((4, 9), torch.int8), "m": ((4, 9), torch.bool), "u": ((4, 9), torch.uint8)}, body
    )
    a = torch.randint(-128, 127, (4, 9), dtype=torch.int8)
    m = torch.rand(4, 9) > 0.7
    m[0], m[1] = True, False
    u = torch.randint(0, 255, (4, 9), dtype=torch.uint8)
    assert_matches_eager(compile_graph(graph), graph, a, m, u)


def test_complex_nodes_lower_to_extern_calls_and_loops_over_complex_are_refused():
    graph = make_graph("cplx", {"x": ((4,), torch.complex64)}, lambda b, x: b.op("prims.neg", x))
    program = lower(graph)
    (call,) = program.buffers
    assert isinstance(call, ExternCall) and call.kernel == "prims.neg" and "complex64" in call.fallback
    assert_matches_eager(compile_graph(graph), graph, torch.randn(4, dtype=torch.complex64))
    with pytest.raises(CodegenError, match="no loops over torch.complex64"):
        cpp_type(torch.complex64)
