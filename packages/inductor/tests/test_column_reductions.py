"""Reductions over a non-innermost dim (cpp/column_reduction.py) against eager: every reduction type
blocked across the kept dim, nan and tie semantics, empty dims, symbolic sizes; vector norms lowered to
reductions; the scheduler keeping row and column reductions apart."""

import logging

import pytest
import torch

from torchsmith.inductor import compile_graph
from torchsmith.inductor.testing import assert_matches_eager, make_graph
from torchsmith.ir import TensorType
from torchsmith.ir.symbolic import symbol

F32, I64 = torch.float32, torch.int64
BLOCKED = "for (int64_t jb = 0;"


def test_every_column_reduction_type_on_odd_sizes_in_one_pass():
    def body(b, x, y, k):
        var, mean = b.op("aten.var_mean.correction", x, [0], correction=1)
        nhwc = b.op("aten.permute.default", y, [0, 3, 1, 2])  # an NCHW view of channels-last storage
        return (
            b.op("aten.sum.dim_IntList", x, [0]),
            b.op("aten.amax.default", x, [0]),
            b.op("aten.amin.default", x, [0]),
            b.op("aten.argmax.default", x, 0),
            b.op("aten.argmin.default", x, 0),
            var,
            mean,
            b.op("aten.var.correction", nhwc, [0, 2, 3], correction=0),  # batch-norm statistics
            b.op("aten.amax.default", nhwc, [0, 2, 3]),
            b.op("aten.argmax.default", y, 1),  # the middle dim of [A, N, C]
            b.op("aten.amax.default", k, [0]),
            b.op("aten.argmin.default", k, 0),
        )

    types = {"x": ((300, 77), F32), "y": ((3, 13, 7, 40), F32), "k": ((50, 19), I64)}
    graph = make_graph("columns", types, body)
    compiled = compile_graph(graph)
    # x's seven reductions share one blocked kernel (one read of x); y's two and the middle-dim argmax,
    # and k's two, block as well.
    assert compiled.source.count(BLOCKED) == 4, compiled.source
    x = torch.randn(300, 77) * 3 + 5
    y = torch.randn(3, 13, 7, 40)
    k = torch.randint(-2, 2, (50, 19))  # many ties: the first index must win
    assert_matches_eager(compiled, graph, x, y, k, rtol=1e-5, atol=1e-5)


def test_column_nan_propagates_and_first_index_wins():
    def body(b, x):
        return (
            b.op("aten.amax.default", x, [0]),
            b.op("aten.amin.default", x, [0]),
            b.op("aten.argmax.default", x, 0),
            b.op("aten.argmin.default", x, 0),
        )

    # 203 rows: chunks of 128 rows read 4 at a time, then a tail of 3 read one at a time.
    graph = make_graph("column_nans", {"x": ((203, 20), F32)}, body)
    compiled = compile_graph(graph)
    assert BLOCKED in compiled.source
    x = torch.randn(203, 20)
    x[201, 7] = float("nan")  # in the tail
    x[129, 8] = x[130, 8] = x[202, 8] = 77.0  # a tie inside one step of 4 rows and in the tail
    x[7, 0] = x[150, 0] = float("nan")  # the first nan wins, across the 128-row chunks too
    x[199, 1] = float("nan")
    x[:, 2] = float("-inf")  # all equal: index 0
    x[:, 3] = float("inf")
    x[10, 4] = x[140, 4] = 100.0  # a tie for the max: the first
    x[3, 5] = x[190, 5] = -100.0  # a tie for the min: the first
    x[0, 6] = float("nan")
    assert_matches_eager(compiled, graph, x)


def test_column_welford_on_large_mean_small_spread_and_empty_rows():
    def body(b, x, e):
        var, mean = b.op("aten.var_mean.correction", x, [0], correction=1)
        empty_var, empty_mean = b.op("aten.var_mean.correction", e, [0], correction=1)
        return var, mean, empty_var, empty_mean, b.op("aten.sum.dim_IntList", e, [0])

    graph = make_graph("column_welford", {"x": ((1000, 33), F32), "e": ((0, 40), F32)}, body)
    compiled = compile_graph(graph)
    x = (1e4 + torch.randn(1000, 33, dtype=torch.float64) * 1e-2).float()
    var, mean, empty_var, empty_mean, empty_sum = compiled(x, torch.randn(0, 40))
    exact_var, exact_mean = torch.var_mean(x.double(), 0, correction=1)
    # A one-pass sum of squares would lose every digit here; per-chunk shifted sums keep them.
    torch.testing.assert_close(var.double(), exact_var, rtol=1e-3, atol=0)
    torch.testing.assert_close(mean.double(), exact_mean, rtol=1e-7, atol=0)
    assert empty_var.isnan().all() and empty_mean.isnan().all() and (empty_sum == 0).all()


def test_column_reductions_with_symbolic_sizes():
    s0, s1 = symbol("s0"), symbol("s1")

    def body(b, x):
        var, mean = b.op("prims.var_mean", x, [0], 0)
        return var, mean, b.op("prims.amax", x, [0]), b.op("prims.argmax", x, 0)

    graph = make_graph("columns_dynamic", {"x": TensorType.make((s0, s1), F32)}, body)
    compiled = compile_graph(graph)
    assert BLOCKED in compiled.source
    for shape in [(1, 1), (5, 130), (300, 64)]:
        assert_matches_eager(compiled, graph, torch.randn(*shape), rtol=1e-5, atol=1e-5)


def test_vector_norms_are_reductions_and_other_orders_run_eagerly():
    def body(b, x):
        return (
            b.op("aten.linalg_vector_norm.default", x, 2, [0]),
            b.op("aten.linalg_vector_norm.default", x, 2, [1], True),
            b.op("aten.linalg_vector_norm.default", x, 1),
            b.op("aten.linalg_vector_norm.default", x, float("inf"), [0]),
            b.op("aten.linalg_vector_norm.default", x, float("-inf"), [1], True),
            b.op("aten.linalg_vector_norm.default", x, 3, [0]),
        )

    graph = make_graph("norms", {"x": ((70, 45), F32)}, body)
    compiled = compile_graph(graph)
    # Only the 3-norm runs through torch's kernel.
    assert [kernel for kernel, _ in compiled.program.fallbacks] == ["aten.linalg_vector_norm.default"]
    assert BLOCKED in compiled.source
    assert_matches_eager(compiled, graph, torch.randn(70, 45), rtol=1e-5, atol=1e-5)


def test_row_and_column_reductions_of_one_input_stay_in_their_own_kernels(caplog):
    # A column variance beside a row norm: only column sums share a pass over the rows
    # (test_cross_reductions.py), so each reads x in its own kernel.
    def body(b, x):
        var, mean = b.op("aten.var_mean.correction", x, [0], correction=1)
        return var, mean, b.op("aten.linalg_vector_norm.default", x, 2, [1])

    graph = make_graph("row_and_column", {"x": ((64, 64), F32)}, body)
    with caplog.at_level(logging.INFO, logger="torchsmith.inductor.fusion"):
        compiled = compile_graph(graph)
    assert "column kernel var_mean_1, var_mean_m2: reduces a strided dim in one read" in caplog.text
    refused = [d for d in compiled.decisions if not d.taken and "cannot vectorize both" in d.reason]
    assert refused, [str(d) for d in compiled.decisions]
    assert BLOCKED in compiled.source
    assert_matches_eager(compiled, graph, torch.randn(64, 64), rtol=1e-5, atol=1e-5)


def test_row_argmax_across_chunks_ties_and_nans():
    # Rows of 9000: three 4096-element chunks, each found in two vectorized passes (best value, then
    # its first position, block by block).
    def body(b, x):
        return b.op("aten.argmax.default", x, 1), b.op("aten.argmin.default", x, 1)

    graph = make_graph("row_args", {"x": ((4, 9000), F32)}, body)
    x = torch.randn(4, 9000)
    x[0, 100] = x[0, 5000] = 50.0  # a tie across chunks: the first chunk's position
    x[0, 8999] = -50.0
    x[1, 70] = x[1, 4100] = x[1, 8000] = float("nan")  # a nan in every chunk: the first
    x[2, 8200] = float("nan")  # a nan only in the last chunk beats the earlier maximum
    x[3, :] = 1.0  # all equal: index 0
    x[3, 4095:4097] = 2.0  # the best value straddles a chunk boundary
    assert_matches_eager(compile_graph(graph), graph, x)


def test_contiguous_reduced_dims_merge_into_one_loop():
    def body(b, x, y):
        nhwc = b.op("aten.permute.default", y, [0, 3, 1, 2])  # NCHW view of channels-last storage
        return (
            b.op("aten.mean.dim", x, [2, 3]),  # H and W of NCHW: one run of 30 per (n, c)
            b.op("aten.sum.dim_IntList", x, [0, 2, 3]),
            b.op("aten.amax.default", nhwc, [1, 2, 3]),  # reordered by stride: one run of 5*6*7
            b.op("aten.argmax.default", b.op("aten.reshape.default", x, [2, 210]), 1),
        )

    graph = make_graph("merged", {"x": ((2, 7, 5, 6), F32), "y": ((2, 5, 6, 7), F32)}, body)
    compiled = compile_graph(graph)
    reduced = [
        b.body.reduction_ranges for b in compiled.program.buffers if hasattr(b.body, "reduction_ranges")
    ]
    assert sorted(map(tuple, reduced)) == [(2, 30), (30,), (210,), (210,)], reduced
    assert_matches_eager(
        compiled, graph, torch.randn(2, 7, 5, 6), torch.randn(2, 5, 6, 7), rtol=1e-5, atol=1e-5
    )


def test_kept_dims_read_as_one_run_are_one_column_range():
    def body(b, x, y):
        var, mean = b.op("aten.var_mean.correction", x, [0], correction=1)
        return var, mean, b.op("aten.sum.dim_IntList", y, [1]), b.op("aten.argmax.default", y, 1)

    graph = make_graph("kept_merge", {"x": ((9, 13, 17), F32), "y": ((3, 11, 7, 5), F32)}, body)
    compiled = compile_graph(graph)
    # x's kept [13, 17] is 221 columns; y's kept [7, 5] after its batch dim is 35.
    assert "jb < 221;" in compiled.source and "jb < 35;" in compiled.source, compiled.source
    x, y = torch.randn(9, 13, 17) + 3, torch.randn(3, 11, 7, 5)
    assert_matches_eager(compiled, graph, x, y, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("vector_bytes", [32, 64], ids=["avx2", "avx512"])
def test_short_rows_in_lanes_with_nans_tails_and_welford(vector_bytes, monkeypatch):
    # Rows of 300: reduction variables in 2 vectors of w explicit lanes (w = 8 floats on AVX2: 16
    # elements a step, 18 steps, then one vector (288..295) into the first, the vectors and lanes
    # folded in halves, then a tail of 4 elements one at a time; w = 16 on AVX-512).
    import torchsmith.inductor.cpp.build as build

    monkeypatch.setattr(build, "native_vector_bytes", lambda: vector_bytes)
    lanes = vector_bytes // 4
    def body(b, x):
        var, mean = b.op("aten.var_mean.correction", x, [1], correction=1)
        return (
            var,
            mean,
            b.op("aten.sum.dim_IntList", x, [1]),
            b.op("aten.amax.default", x, [1]),
            b.op("aten.amin.default", x, [1]),
        )

    graph = make_graph("short_rows", {"x": ((6, 300), F32)}, body)
    compiled = compile_graph(graph)
    assert f"_l0[{lanes}], " in compiled.source and f"_l1[{lanes}];" in compiled.source
    x = 1e3 + torch.randn(6, 300)
    x[1, 5] = float("nan")  # in a lane
    x[2, 298] = float("nan")  # in the tail
    x[5, 291] = float("nan")  # in the one-vector loop
    x[3, 290:] = 2e3  # the max in the one-vector loop and the tail
    x[4, 17] = -5.0  # the min in a lane
    assert_matches_eager(compiled, graph, x, rtol=1e-5, atol=1e-3)


def test_few_columns_choose_their_block_width_at_run_time():
    def body(b, x):
        var, mean = b.op("aten.var_mean.correction", x, [0], correction=1)
        return var, mean, b.op("aten.amax.default", x, [0]), b.op("aten.argmax.default", x, 0)

    graph = make_graph("few_columns", {"x": ((700, 64), F32)}, body)
    compiled = compile_graph(graph)
    # 64 columns, nothing else to thread over: narrower blocks on several threads, one on one.
    assert "const int64_t bw = ts::threads(2) > 1 ? 32 : 64;" in compiled.source
    assert_matches_eager(compiled, graph, torch.randn(700, 64) + 2, rtol=1e-5, atol=1e-5)
