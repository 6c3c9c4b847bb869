"""Reductions in generated C++ against eager: every reduction type, nan and tie semantics, Welford
variance on awkward data, split (multi-threaded) reductions and symbolic sizes."""

import re

import pytest
import torch

from torchsmith.inductor import compile_graph
from torchsmith.inductor.testing import assert_matches_eager, make_graph
from torchsmith.ir import TensorType
from torchsmith.ir.symbolic import symbol

F32, F64, I64 = torch.float32, torch.float64, torch.int64


def test_every_reduction_type_over_several_dims():
    def body(b, x, k):
        return (
            b.op("aten.sum.dim_IntList", x, [0, 2]),
            b.op("aten.prod.dim_int", x, 1),
            b.op("aten.amax.default", x, [1]),
            b.op("aten.amin.default", x, [0, 1, 2]),
            b.op("aten.argmax.default", x, 2),
            b.op("aten.argmin.default", x, 0),
            b.op("aten.argmax.default", x),  # over the flattened tensor
            b.op("aten.sum.dim_IntList", k, [1]),
            b.op("aten.amax.default", k, [0]),
            b.op("aten.argmin.default", k, 1),
        )

    graph = make_graph("reductions", {"x": ((5, 6, 7), F32), "k": ((9, 11), I64)}, body)
    x = torch.randn(5, 6, 7)
    k = torch.randint(-3, 3, (9, 11))  # many ties: the first index must win
    assert_matches_eager(compile_graph(graph), graph, x, k, rtol=1e-5, atol=1e-5)


def test_nan_propagates_and_first_nan_wins():
    def body(b, x):
        return (
            b.op("aten.amax.default", x, [1]),
            b.op("aten.amin.default", x, [1]),
            b.op("aten.argmax.default", x, 1),
            b.op("aten.argmin.default", x, 1),
            b.op("aten.sum.dim_IntList", x, [1]),
        )

    graph = make_graph("nans", {"x": ((4, 50), F32)}, body)
    x = torch.randn(4, 50)
    x[0, 7] = x[0, 30] = float("nan")
    x[1, 49] = float("nan")
    x[2, :] = float("-inf")  # all equal: index 0
    x[3, 10] = x[3, 20] = 100.0  # a tie for the max: the first
    assert_matches_eager(compile_graph(graph), graph, x)


def test_full_sum_of_4m_floats_is_split_among_threads_and_accurate():
    def body(b, x):
        return b.op("aten.sum.default", x), b.op("aten.amax.default", x, [0]), b.op("aten.argmin.default", x)

    n = 4 << 20
    graph = make_graph("big_sum", {"x": ((n,), F32)}, body)
    compiled = compile_graph(graph)
    # golden/threaded_full_sum.txt: the reduction itself is threaded (`omp parallel num_threads`), float
    # lanes per chunk, one double per 4096 elements (`double a0_s = 0;`).
    x = torch.rand(n) + 0.5  # all positive: a naive float sum would be off by ~1e-3 relative
    total, biggest, where = compiled(x)
    exact = x.double().sum()
    assert abs(total.double() - exact) / exact < 1e-6
    assert biggest == x.max() and where == x.argmin()


def test_small_outer_reduction_splits_a_strided_reduction():
    def body(b, x):
        return b.op("aten.sum.dim_IntList", x, [0]), b.op("aten.argmax.default", x, 0)

    graph = make_graph("columns", {"x": ((40000, 3), F32)}, body)
    compiled = compile_graph(graph)  # threaded: golden/split_columns.txt
    assert_matches_eager(compiled, graph, torch.randn(40000, 3), rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("dtype", [F32, F64])
def test_welford_var_mean_on_large_mean_small_spread(dtype):
    def body(b, x):
        var, mean = b.op("aten.var_mean.correction", x, [1], correction=1)
        return var, mean, b.op("aten.var.correction", x, [0], correction=0)

    graph = make_graph("welford", {"x": ((6, 10000), dtype)}, body)
    compiled = compile_graph(graph)
    # Two var_means, each one Welford state: mean and M2 come out of the same pass over the data (the
    # variance over dim 0 in the column kernel, blocked over the kept dim).
    assert len(re.findall(r"double a\d+_n = 0;", compiled.source)) == 1
    assert len(re.findall(r"double n\d+ = 0;", compiled.source)) == 1
    x = (1e4 + torch.randn(6, 10000, dtype=F64) * 1e-2).to(dtype)
    var, mean, var0 = compiled(x)
    exact_var, exact_mean = torch.var_mean(x.double(), 1, correction=1)
    # A one-pass sum-of-squares would lose every digit here; Welford keeps them.
    torch.testing.assert_close(var.double(), exact_var, rtol=1e-4, atol=0)
    torch.testing.assert_close(mean.double(), exact_mean, rtol=1e-7, atol=0)
    torch.testing.assert_close(var0.double(), torch.var(x.double(), 0, correction=0), rtol=1e-3, atol=1e-9)


def test_welford_across_chunks_and_threads_and_edge_counts():
    def body(b, x, y):
        var, mean = b.op("aten.var_mean.correction", x, [0], correction=1)
        one_var, one_mean = b.op("aten.var_mean.correction", y, [1], correction=1)  # n - 1 = 0: nan/inf
        return var, mean, one_var, one_mean

    graph = make_graph("welford_big", {"x": ((100003,), F32), "y": ((3, 1), F32)}, body)
    compiled = compile_graph(graph)  # threaded: golden/threaded_welford.txt
    x = torch.randn(100003) * 3 + 7
    assert_matches_eager(compiled, graph, x, torch.randn(3, 1), rtol=1e-5, atol=1e-5)


def test_symbolic_reductions():
    s0, s1 = symbol("s0"), symbol("s1")

    def body(b, x):
        var, mean = b.op("prims.var_mean", x, [1], 1)
        return var, mean, b.op("prims.sum", x, [0, 1]), b.op("prims.argmax", x, 1), b.op("prims.amin", x, [0])

    graph = make_graph("dynamic", {"x": TensorType.make((s0, s1), F32)}, body)
    compiled = compile_graph(graph)
    for shape in [(3, 5), (2, 70000), (1, 1)]:
        x = torch.randn(*shape) * 2 + 1
        assert_matches_eager(compiled, graph, x, rtol=1e-5, atol=1e-4)


def test_column_sums_vectorize_across_the_kept_dim():
    def body(b, x, y, z, h):
        return (
            b.op("aten.sum.dim_IntList", b.op("aten.mul.Tensor", x, x), [0]),  # [N, C]: bias-gradient shape
            b.op("aten.sum.dim_IntList", y, [1]),  # the middle dim of [A, N, C]
            b.op("aten.sum.dim_IntList", z, [0]),  # 5 columns: too narrow, strided path
            b.op("aten.sum.dim_IntList", h, [0]),  # bf16: a sum in float, then a conversion epilogue
            b.op("aten.mean.dim", x, [0]),  # sum, then an epilogue dividing by N
        )

    types = {
        "x": ((3000, 100), F32),
        "y": ((3, 700, 40), F64),
        "z": ((900, 5), F32),
        "h": ((300, 33), torch.bfloat16),
    }
    graph = make_graph("columns", types, body)
    compiled = compile_graph(graph)
    # Blocked: the sums of x*x and x (one kernel: sibling fusion) with the mean's epilogue, of y, and of
    # h (bf16, with its conversion epilogue); z is too narrow.
    assert compiled.source.count("for (int64_t jb = 0;") == 3
    inputs = (
        torch.randn(3000, 100),
        torch.randn(3, 700, 40, dtype=F64),
        torch.randn(900, 5),
        torch.randn(300, 33),
    )
    inputs = (*inputs[:3], inputs[3].to(torch.bfloat16))
    assert_matches_eager(compiled, graph, *inputs, rtol=1e-4, atol=1e-3)


def test_column_sum_with_symbolic_sizes():
    s0, s1 = symbol("s0"), symbol("s1")
    graph = make_graph(
        "columns_dynamic", {"x": TensorType.make((s0, s1), F32)}, lambda b, x: b.op("prims.sum", x, [0])
    )
    compiled = compile_graph(graph)
    # golden/column_sum_dynamic.txt shows the column kernel blocked over the kept dim (`jb`).
    for shape in [(1, 1), (5, 130), (2000, 64)]:
        assert_matches_eager(compiled, graph, torch.randn(*shape), rtol=1e-5, atol=1e-4)
