"""Row reductions and column sums of one input in one pass over it (cpp/cross_reduction.py) against
eager: odd sizes on one thread and several, nan, empty dims, several reductions per side with their
epilogues, float64; the scheduler's decisions and where it keeps the two apart."""

import logging

import pytest
import torch

from torchsmith.inductor import compile_graph
from torchsmith.inductor.testing import assert_matches_eager, make_graph

F32, F64 = torch.float32, torch.float64
ONE_PASS = "in one pass over the rows (row work and column sums)"


def _workload(b, x):
    var, mean = b.op("aten.var_mean.correction", x, [1], correction=1)
    return var, mean, b.op("aten.linalg_vector_norm.default", x, 2, [0])


def _cross_kernels(compiled) -> int:
    return compiled.source.count("; rc += step) {")


@pytest.mark.parametrize("shape", [(301, 77), (700, 90), (1000, 1531)])
def test_var_mean_over_rows_and_norm_over_columns_share_one_kernel(shape, caplog):
    graph = make_graph("cross", {"x": (shape, F32)}, _workload)
    with caplog.at_level(logging.INFO, logger="torchsmith.inductor.fusion"):
        compiled = compile_graph(graph)
    assert _cross_kernels(compiled) == 1, compiled.source
    assert "cross kernel: var_mean_1, var_mean_m2 and linalg_vector_norm_acc share one read" in caplog.text
    taken = [str(d) for d in compiled.decisions if d.taken and ONE_PASS in d.reason]
    assert len(taken) == 2, [str(d) for d in compiled.decisions]  # the column sum and its sqrt
    x = torch.randn(*shape) * 2 + 3
    assert_matches_eager(compiled, graph, x, rtol=1e-5, atol=1e-5)
    # A nan spoils its row's variance and its column's norm, nothing else.
    x[shape[0] // 2, shape[1] // 3] = float("nan")
    got = compiled(x)
    assert got[0].isnan().sum() == 1 and got[2].isnan().sum() == 1
    assert_matches_eager(compiled, graph, x, rtol=1e-5, atol=1e-5)


def test_threads_each_keep_column_partials_added_after_the_rows():
    graph = make_graph("cross_threads", {"x": ((1111, 203), F32)}, _workload)
    compiled = compile_graph(graph)
    assert _cross_kernels(compiled) == 1 and "#pragma omp parallel num_threads(nt)" in compiled.source
    before = torch.get_num_threads()
    try:
        for threads in (1, 2, 3):
            torch.set_num_threads(threads)
            assert_matches_eager(compiled, graph, torch.randn(1111, 203), rtol=1e-5, atol=1e-5)
    finally:
        torch.set_num_threads(before)


def test_several_row_reductions_and_column_sums_with_epilogues():
    def body(b, x):
        square = b.op("aten.mul.Tensor", x, x)
        return (
            b.op("aten.amax.default", x, [1]),
            b.op("aten.argmax.default", x, 1),
            b.op("aten.mean.dim", x, [1]),
            b.op("aten.mean.dim", x, [0]),
            b.op("aten.sum.dim_IntList", square, [0]),
            b.op("aten.sum.dim_IntList", x, [0], True),
        )

    graph = make_graph("cross_many", {"x": ((257, 131), F32)}, body)
    compiled = compile_graph(graph)
    assert _cross_kernels(compiled) == 1, compiled.source
    x = torch.randn(257, 131)
    x[3, :] = 7.0  # ties: argmax takes the first
    x[10, 20] = float("nan")
    assert_matches_eager(compiled, graph, x, rtol=1e-5, atol=1e-5)


def test_float64_and_empty_dims():
    graph = make_graph("cross_f64", {"x": ((123, 45), F64)}, _workload)
    compiled = compile_graph(graph)
    assert _cross_kernels(compiled) == 1
    assert_matches_eager(compiled, graph, torch.randn(123, 45, dtype=F64))
    for shape in [(0, 40), (40, 0), (1, 40)]:
        graph = make_graph("cross_empty", {"x": (shape, F32)}, _workload)
        assert_matches_eager(compile_graph(graph), graph, torch.randn(*shape), rtol=1e-5, atol=1e-5)


def test_transposed_and_channels_last_inputs_keep_their_own_kernels():
    # x.t(): the variance reduces the strided dim (a column welford) and the norm the contiguous one;
    # only column sums share a row pass, so each stays in its own kernel.
    def transposed(b, x):
        return _workload(b, b.op("aten.permute.default", x, [1, 0]))

    graph = make_graph("cross_t", {"x": ((90, 70), F32)}, transposed)
    compiled = compile_graph(graph)
    assert _cross_kernels(compiled) == 0
    assert_matches_eager(compiled, graph, torch.randn(90, 70), rtol=1e-5, atol=1e-5)

    # Channels-last storage viewed as NCHW: a sum over C (a column sum, C innermost) beside a mean
    # over H and W (strided): more than one kept dim, the groups stay as they were.
    def nchw(b, y):
        v = b.op("aten.permute.default", y, [0, 3, 1, 2])
        return b.op("aten.sum.dim_IntList", v, [1]), b.op("aten.mean.dim", v, [2, 3])

    graph = make_graph("cross_cl", {"y": ((2, 5, 6, 32), F32)}, nchw)
    compiled = compile_graph(graph)
    assert _cross_kernels(compiled) == 0
    assert_matches_eager(compiled, graph, torch.randn(2, 5, 6, 32), rtol=1e-5, atol=1e-5)


def _bias_grad(b, grad, h):
    # A training backward's bias gradient: the column sum of grad * gelu'(h), whose elements the
    # weight gradient's matmul reads too (so they are stored).
    dgelu = b.op("aten.gelu_backward.default", grad, h)
    return dgelu, b.op("aten.sum.dim_IntList", dgelu, [0])


@pytest.mark.parametrize("shape", [(64, 512), (37, 101), (300, 130)])
def test_column_sum_joins_its_stored_pointwise_producer(shape, caplog):
    graph = make_graph("bias_grad", {"grad": (shape, F32), "h": (shape, F32)}, _bias_grad)
    with caplog.at_level(logging.INFO, logger="torchsmith.inductor.fusion"):
        compiled = compile_graph(graph)
    assert _cross_kernels(compiled) == 1, compiled.source
    assert not [d for d in compiled.decisions if not d.taken and "do not extend" in d.reason]
    assert any(d.taken and d.kind == "vertical" and ONE_PASS in d.reason for d in compiled.decisions)
    grad, h = torch.randn(*shape), torch.randn(*shape)
    assert_matches_eager(compiled, graph, grad, h, rtol=1e-5, atol=1e-5)
    grad[shape[0] // 2, 7] = float("nan")
    assert_matches_eager(compiled, graph, grad, h, rtol=1e-5, atol=1e-5)


def test_producer_of_transposed_and_channels_last_inputs():
    def transposed(b, grad, h):
        return _bias_grad(b, b.op("aten.permute.default", grad, [1, 0]), h)

    graph = make_graph("bias_t", {"grad": ((70, 45), F32), "h": ((45, 70), F32)}, transposed)
    compiled = compile_graph(graph)
    assert _cross_kernels(compiled) == 1, compiled.source
    assert_matches_eager(compiled, graph, torch.randn(70, 45), torch.randn(45, 70), rtol=1e-5, atol=1e-5)

    def nhwc(b, y):
        # A channels-last activation flattened to [N*H*W, C]: the column sum over rows is a
        # per-channel sum (a bias gradient of a 1x1 convolution).
        rows = b.op("aten.reshape.default", y, [60, 32])
        act = b.op("aten.mul.Tensor", rows, rows)
        return act, b.op("aten.sum.dim_IntList", act, [0])

    graph = make_graph("bias_cl", {"y": ((2, 5, 6, 32), F32)}, nhwc)
    compiled = compile_graph(graph)
    assert_matches_eager(compiled, graph, torch.randn(2, 5, 6, 32), rtol=1e-5, atol=1e-5)
    for shape in [(0, 40), (40, 0)]:
        graph = make_graph("bias_empty", {"grad": (shape, F32), "h": (shape, F32)}, _bias_grad)
        assert_matches_eager(compile_graph(graph), graph, torch.randn(*shape), torch.randn(*shape))


def test_layer_norm_backward_rows_and_parameter_gradients_in_one_pass():
    def body(b, grad, x, w, bias):
        out, mean, rstd = b.op("aten.native_layer_norm.default", x, [96], w, bias, 1e-5)
        return b.op("aten.native_layer_norm_backward.default", grad, x, [96], mean, rstd, w, bias,
                    [True, True, True])  # fmt: skip

    types = {"grad": ((200, 96), F32), "x": ((200, 96), F32), "w": ((96,), F32), "bias": ((96,), F32)}
    graph = make_graph("ln_backward", types, body)
    compiled = compile_graph(graph)
    inputs = (torch.randn(200, 96), torch.randn(200, 96) * 3 + 1, torch.randn(96), torch.randn(96))
    assert_matches_eager(compiled, graph, *inputs, rtol=1e-4, atol=1e-5)
