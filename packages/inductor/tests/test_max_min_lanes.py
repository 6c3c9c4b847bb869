"""amax / amin (and the sums beside them) over the explicit-lane loops of cpp/reductions.py against
eager: a nan anywhere in the reduced slice gives nan (in each of the vector accumulators, the
one-vector loop, the scalar tail, first and last element), infinities, float64 (4 lanes a vector),
integers and half floats, odd row lengths, transposed and channels-last inputs, whole-tensor
reductions split among threads, empty dims, and the prefetch of the next run of a reduction over
several dims whose runs lie pages apart."""

import pytest
import torch

from torchsmith.inductor import compile_graph
from torchsmith.inductor.cpp.reductions import LANE_VECTORS
from torchsmith.inductor.testing import assert_matches_eager, make_graph
from torchsmith.ir.errors import GraphBuildError
from torchsmith.ir.types import TensorType

NAN, INF = float("nan"), float("inf")


# Op name -> its overload taking a dim list.
_OVERLOADS = {"amax": "aten.amax.default", "amin": "aten.amin.default", "sum": "aten.sum.dim_IntList",
              "mean": "aten.mean.dim"}  # fmt: skip


def _graph(name: str, x: torch.Tensor, dims, ops=("amax", "amin")):
    def body(b, v):
        return tuple(b.op(_OVERLOADS[op], v, list(dims)) for op in ops)

    return make_graph(name, {"x": TensorType.of(x)}, body)


def _check(x: torch.Tensor, dims, ops=("amax", "amin")) -> None:
    graph = _graph("max_min", x, dims, ops)
    assert_matches_eager(compile_graph(graph), graph, x)


def _positions(n: int) -> list[int]:
    """Positions that land in each part of a row of `n` float lanes (LANE_VECTORS vectors of 8 a
    step, then one vector at a time, then the tail): first, last, each accumulator, the one-vector
    loop, the tail."""
    step = LANE_VECTORS * 8
    steps = n // step * step
    vector_end = steps + (n - steps) // 8 * 8
    accumulators = [k * 8 + 3 for k in range(LANE_VECTORS)] + [step + k * 8 + 5 for k in range(LANE_VECTORS)]
    candidates = [0, n - 1, *accumulators, steps, vector_end - 1, vector_end, n // 2]
    return sorted({p for p in candidates if 0 <= p < n})


@pytest.mark.parametrize("n", [1, 7, 8, 9, 31, 32, 33, 45, 257, 300, 2053, 4096 + 37])
def test_a_nan_anywhere_in_a_row_gives_nan(n):
    rows = _positions(n)
    x = torch.randn(len(rows) + 1, n)  # the last row keeps no nan
    for row, at in enumerate(rows):
        x[row, at] = NAN
    graph = _graph("nan_rows", x, [1])
    got = compile_graph(graph)(x)
    for result in got:
        assert result[:-1].isnan().all() and not result[-1].isnan(), (n, rows, result)
    assert_matches_eager(compile_graph(graph), graph, x)


@pytest.mark.parametrize("n", [5, 40, 257, 2053])
def test_infinities_and_nan_beside_them(n):
    x = torch.randn(6, n)
    x[0] = -INF  # amax of all -inf is -inf
    x[1] = INF  # amin of all +inf is +inf
    x[2, n // 2] = INF
    x[2, n - 1] = -INF
    x[3] = -INF
    x[3, n - 1] = NAN  # nan beats -inf
    x[4, 0] = NAN
    x[4, n - 1] = INF
    _check(x, [1])


def test_odd_three_d_rows_and_outer_dims():
    x = torch.randn(5, 7, 257)
    x[1, 3, 256] = NAN  # the tail of a 257-long row
    x[4, 6, 0] = NAN
    x[2, 2, 100] = INF
    for dims in ([2], [1, 2], [0, 2]):
        _check(x, dims)


def test_transposed_and_channels_last_inputs():
    t = torch.randn(300, 77).t()  # a [77, 300] view: dim 0 is the contiguous one
    t[5, 299] = NAN  # over dim 0: the first accumulators; over dim 1: a tail
    t[9, 0] = NAN
    t[70, 20] = NAN  # over dim 0 (rows of 77): the one-vector loop
    t[76, 40] = NAN  # and the tail
    _check(t, [1])
    _check(t, [0])
    cl = torch.randn(3, 67, 5, 7).contiguous(memory_format=torch.channels_last)
    cl[1, 66, 2, 3] = NAN  # the last channel: the tail of its (contiguous) row of 67
    cl[2, 0, 4, 6] = NAN
    cl[0, 33, 0, 0] = -INF
    for dims in ([1], [2, 3], [0, 2, 3]):
        _check(cl, dims)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float16, torch.bfloat16])
def test_other_float_dtypes(dtype):
    x = torch.randn(9, 301).to(dtype)
    x[2, 300] = NAN
    x[3, 3] = NAN
    x[4, 150] = INF
    x[5] = -INF
    _check(x, [1])


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.int8, torch.uint8])
def test_integers(dtype):
    info = torch.iinfo(dtype)
    x = torch.randint(info.min, info.max, (7, 261), dtype=dtype)
    x[1, 260] = info.max
    x[2, 0] = info.min
    x[3] = info.min
    x[4] = info.max
    _check(x, [1])


def test_sums_beside_max_and_min_in_one_row_kernel():
    x = torch.randn(11, 1000) + 3
    x[4, 999] = NAN
    _check(x, [1], ops=("amax", "amin", "sum", "mean"))


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_whole_tensor_split_among_threads(threads):
    # One output: the chunks are divided among threads, each keeping its own lanes and nan flag.
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(threads)
        x = torch.randn(4096 * 5 + 13)
        for at in (0, 4095, 4096 * 3 + 7, 4096 * 5 + 12):
            y = x.clone()
            y[at] = NAN
            _check(y, [0])
        y = x.clone()
        y[4096 * 2 + 100] = INF
        y[17] = -INF
        _check(y, [0])
    finally:
        torch.set_num_threads(before)


def test_empty_dims():
    # Kept dims of size 0: empty results. A reduced dim of size 0: no identity, eager raises, and so
    # does building the graph (with eager's message).
    _check(torch.randn(0, 37), [1])
    _check(torch.randn(3, 0, 37), [2])
    for shape, dims in [((4, 0), [1]), ((0, 4), [0]), ((2, 0, 3), [1, 2])]:
        x = torch.randn(*shape)
        with pytest.raises(IndexError, match="non-zero size"):
            x.amax(dims)
        with pytest.raises(GraphBuildError, match="zero-size dimension"):
            _graph("empty", x, dims)


def test_runs_far_apart_prefetch_the_next_one():
    # x.var((0, 2)) / x.amax((0, 2)) of [6, 5, 1100]: runs of 1100 floats 22 KB apart, the next run's
    # lines prefetched (its position clamped on the last run); [6, 5, 9] runs sit on one page: none.
    def body(b, x):
        var, mean = b.op("aten.var_mean.correction", x, [0, 2], correction=1)
        return var, mean, b.op("aten.amax.default", x, [0, 2])

    graph = make_graph("far_runs", {"x": ((6, 5, 1100), torch.float32)}, body)
    compiled = compile_graph(graph)
    assert "__builtin_prefetch(&in_x[" in compiled.source and "ts::imin(5, (1 + r0))" in compiled.source
    x = torch.randn(6, 5, 1100) * 3 + 1
    x[5, 4, 1099] = NAN  # the last run's last element
    assert_matches_eager(compiled, graph, x, rtol=1e-5, atol=1e-5)
    near = make_graph("near_runs", {"x": ((6, 5, 9), torch.float32)}, body)
    compiled = compile_graph(near)
    assert "__builtin_prefetch" not in compiled.source
    assert_matches_eager(compiled, near, torch.randn(6, 5, 9), rtol=1e-5, atol=1e-5)
