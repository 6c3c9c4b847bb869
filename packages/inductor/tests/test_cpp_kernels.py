"""Compiled graphs against eager PyTorch: each test builds one graph (one C++ translation unit)."""

import pytest
import torch

from torchsmith.inductor import BUILD_STATS, compile_graph
from torchsmith.inductor.testing import assert_matches_eager, make_graph
from torchsmith.ir import TensorType
from torchsmith.ir.symbolic import symbol

F32, F64, I64 = torch.float32, torch.float64, torch.int64


def test_elementwise_chain():
    def body(b, x, y):
        t = b.op("aten.mul.Tensor", b.op("aten.sin.default", x), b.op("aten.exp.default", y))
        t = b.op("aten.add.Tensor", t, b.op("aten.tanh.default", x), alpha=2)
        t = b.op("aten.sqrt.default", b.op("aten.abs.default", t))
        t = b.op("aten.sigmoid.default", b.op("aten.rsub.Scalar", t, 1.5))
        t = b.op("aten.clamp.default", t, 0.1, 0.7)
        t = b.op("aten.maximum.default", t, b.op("aten.erf.default", y))
        return t, b.op("aten.floor.default", b.op("aten.mul.Tensor", x, 3.3))

    graph = make_graph("chain", {"x": ((5, 7), F32), "y": ((5, 7), F32)}, body)
    x, y = torch.randn(5, 7), torch.randn(5, 7)
    x[0, 0] = float("nan")  # maximum propagates nan as eager does
    assert_matches_eager(compile_graph(graph), graph, x, y)


def test_broadcasting_and_scalars():
    def body(b, x, row, col):
        t = b.op("aten.add.Tensor", x, row)
        t = b.op("aten.mul.Tensor", t, col)
        return b.op("aten.div.Tensor", t, 7.0), b.op("aten.sub.Tensor", col, row)

    graph = make_graph("bcast", {"x": ((3, 4, 5), F32), "row": ((5,), F32), "col": ((4, 1), F32)}, body)
    inputs = torch.randn(3, 4, 5), torch.randn(5), torch.randn(4, 1)
    assert_matches_eager(compile_graph(graph), graph, *inputs)


def test_softmax_and_reductions():
    def body(b, x):
        m = b.op("aten.amax.default", x, [-1], True)
        e = b.op("aten.exp.default", b.op("aten.sub.Tensor", x, m))
        soft = b.op("aten.div.Tensor", e, b.op("aten.sum.dim_IntList", e, [-1], True))
        return soft, b.op("aten.amin.default", x, [0, 2]), b.op("aten.sum.default", x)

    graph = make_graph("softmax", {"x": ((6, 5, 40), F32)}, body)
    # A 1200-element float32 sum: eager's own rounding error is ~1e-5; ours (double accumulator) is less.
    assert_matches_eager(compile_graph(graph), graph, torch.randn(6, 5, 40) * 4, rtol=1e-5, atol=1e-4)


def test_layer_norm_like_in_float64():
    def body(b, x, w, bias):
        out, mean, rstd = b.op("aten.native_layer_norm.default", x, [16], w, bias, 1e-5)
        var = b.op("aten.var.correction", x, [1], correction=1, keepdim=False)
        return out, mean, rstd, var

    graph = make_graph("layer_norm", {"x": ((8, 16), F64), "w": ((16,), F64), "bias": ((16,), F64)}, body)
    inputs = torch.randn(8, 16, dtype=F64) * 3 + 1, torch.randn(16, dtype=F64), torch.randn(16, dtype=F64)
    assert_matches_eager(compile_graph(graph), graph, *inputs)


def test_mm_bias_relu():
    def body(b, x, w, bias):
        y = b.op("aten.addmm.default", bias, x, b.op("aten.t.default", w))
        return b.op("aten.relu.default", y)

    types = {"x": ((64, 32), F32), "w": ((48, 32), F32), "bias": ((48,), F32)}
    graph = make_graph("linear_relu", types, body)
    inputs = torch.randn(64, 32), torch.randn(48, 32), torch.randn(48)
    assert_matches_eager(compile_graph(graph), graph, *inputs)


def test_transposed_inputs_and_view_outputs():
    x = torch.randn(6, 10).t()  # non-contiguous: strides (1, 10)

    def body(b, x):
        flat = b.op("aten.reshape.default", x, [60])  # needs a copy: x is transposed
        return b.op("aten.cos.default", x), flat, b.op("aten.permute.default", x, [1, 0])

    graph = make_graph("transposed", {"x": TensorType.of(x)}, body)
    compiled = compile_graph(graph)
    assert_matches_eager(compiled, graph, x)
    assert compiled(x)[2].data_ptr() == x.data_ptr()  # a view output aliases its input, as in eager


def test_integer_and_bool_ops():
    def body(b, a, c):
        q = b.op("aten.div.Tensor_mode", a, c, rounding_mode="trunc")
        f = b.op("aten.floor_divide.default", a, c)
        r = b.op("aten.remainder.Tensor", a, c)
        bits = b.op("aten.bitwise_xor.Tensor", b.op("aten.bitwise_and.Scalar", a, 6), c)
        # Shifts have no aten decomposition yet; a prims node in an aten graph passes through decompose.
        shifted = b.op("prims.shift_right", b.op("prims.shift_left", a, 3), 1)
        cmp = b.op("aten.logical_and.default", b.op("aten.gt.Tensor", a, c), b.op("aten.ne.Scalar", a, 0))
        sel = b.op("aten.where.self", cmp, a, b.op("aten.neg.default", c))
        total = b.op("aten.sum.dim_IntList", b.op("aten.mul.Tensor", a, c), [1])
        return q, f, r, bits, shifted, cmp, sel, total, b.op("aten.pow.Tensor_Scalar", a, 3)

    graph = make_graph("ints", {"a": ((4, 9), I64), "c": ((4, 9), I64)}, body)
    a = torch.randint(-20, 20, (4, 9))
    c = torch.randint(1, 7, (4, 9)) * torch.where(torch.rand(4, 9) > 0.5, 1, -1)
    assert_matches_eager(compile_graph(graph), graph, a, c)


def test_type_promotion_and_conversion():
    def body(b, a, x):
        mixed = b.op("aten.add.Tensor", a, x)  # int64 + float32 -> float32
        back = b.op("aten._to_copy.default", b.op("aten.mul.Tensor", x, 10.0), dtype=torch.int32)
        return mixed, back, b.op("aten.mean.dim", x, [0])

    graph = make_graph("promote", {"a": ((3, 5), I64), "x": ((3, 5), F32)}, body)
    inputs = torch.randint(-5, 5, (3, 5)), torch.randn(3, 5)
    assert_matches_eager(compile_graph(graph), graph, *inputs)


def test_large_work_runs_in_parallel_and_matches():
    def body(b, x):
        return b.op("aten.sum.dim_IntList", b.op("aten.gelu.default", x), [1])

    graph = make_graph("big", {"x": ((256, 512), F32)}, body)
    compiled = compile_graph(graph)
    # golden/parallel_rows.txt shows this graph's row loop as an `omp parallel for`.
    assert_matches_eager(compiled, graph, torch.randn(256, 512), rtol=1e-4, atol=1e-4)


def test_symbolic_batch_size():
    s0 = symbol("s0")

    def body(b, x, w):
        # prims graphs: their shape rules work on symbolic sizes (aten meta inference does not).
        m = b.op("prims.amax", x, [1])
        shifted = b.op("prims.sub", x, b.op("prims.broadcast_in_dim", m, [s0, 16], [0]))
        e = b.op("prims.exp", shifted)
        total = b.op("prims.sum", e, [1])
        soft = b.op("prims.div", e, b.op("prims.broadcast_in_dim", total, [s0, 16], [0]))
        return soft, b.op("prims.mm", soft, w)

    x_type = TensorType.make((s0, 16), F32)
    graph = make_graph("dynamic", {"x": x_type, "w": ((16, 3), F32)}, body)
    compiled = compile_graph(graph)
    # golden/dynamic.txt shows the size symbol as a kernel argument (`int64_t s0`).
    w = torch.randn(16, 3)
    for batch in (1, 5, 300):
        assert_matches_eager(compiled, graph, torch.randn(batch, 16), w)


def test_same_graph_twice_is_built_once():
    def body(b, x):
        return b.op("aten.neg.default", x)

    graph = make_graph("neg", {"x": ((3,), F32)}, body)
    compile_graph(graph)
    before = BUILD_STATS.compiled
    compile_graph(graph)
    assert BUILD_STATS.compiled == before


def test_wrong_input_shape_is_a_clear_error():
    from torchsmith.inductor import RuntimeCallError

    graph = make_graph("neg", {"x": ((3,), F32)}, lambda b, x: b.op("aten.neg.default", x))
    with pytest.raises(RuntimeCallError, match="recompile"):
        compile_graph(graph)(torch.randn(4))


def test_creation_ops():
    def body(b, x):
        steps = b.op("aten.arange.start_step", 1, 31, 3, dtype=F32, device=torch.device("cpu"))
        ones = b.op("aten.full.default", [4, 10], 2.5, dtype=F32, device=torch.device("cpu"))
        return b.op("aten.add.Tensor", b.op("aten.mul.Tensor", x, steps), ones)

    graph = make_graph("creation", {"x": ((4, 10), F32)}, body)
    assert_matches_eager(compile_graph(graph), graph, torch.randn(4, 10))


def test_zero_dim_and_empty_tensors():
    def body(b, x, s, e):
        return (
            b.op("aten.mul.Tensor", x, s),
            b.op("aten.exp.default", s),
            b.op("aten.sum.dim_IntList", e, [0]),  # sums over an empty dim are 0
            b.op("aten.neg.default", e),
            b.op("aten.sum.default", x),
        )

    graph = make_graph("edges", {"x": ((3, 4), F32), "s": ((), F32), "e": ((0, 5), F32)}, body)
    assert_matches_eager(compile_graph(graph), graph, torch.randn(3, 4), torch.tensor(2.0), torch.randn(0, 5))


def test_reductions_propagate_nan_and_size_one_strides_are_ignored():
    def body(b, x):
        return (
            b.op("aten.amax.default", x, [2]),
            b.op("aten.amin.default", x, [2]),
            b.op("aten.sum.dim_IntList", x, [1]),
        )

    graph = make_graph("nan_rows", {"x": ((3, 1, 5), F32)}, body)
    x = torch.randn(3, 1, 5)
    x[1, 0, 2] = float("nan")
    compiled = compile_graph(graph)
    assert_matches_eager(compiled, graph, x)
    # The same values with another (irrelevant) stride on the size-1 dim.
    assert_matches_eager(compiled, graph, torch.randn(3, 5).unsqueeze(1).as_strided((3, 1, 5), (5, 99, 1)))
