"""Row and column reductions of one input in one read on the GPU (triton/cross.py): the column
reduction is cut into row-block partials computed by the row reductions' kernel, and a small
kernel reduces the partials. Run in Triton's interpreter without a GPU."""

import logging
import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"
pytest.importorskip("triton", reason="triton is not installed (pip install triton==3.6.0)")

from torchsmith.inductor.gpu_pipeline import compile_graph_triton  # noqa: E402
from torchsmith.inductor.loop_ir.program import Reduction  # noqa: E402
from torchsmith.inductor.testing import assert_matches_eager, make_graph  # noqa: E402
from torchsmith.inductor.triton import reduction  # noqa: E402
from torchsmith.inductor.triton.cross import MIN_BLOCK, ROW_BLOCK, row_block, row_block_configs  # noqa: E402
from torchsmith.ir import TensorType  # noqa: E402

F32, BF16, F16 = torch.float32, torch.bfloat16, torch.float16
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
HALF = dict(atol=2e-2, rtol=2e-2)
TOLERANCE = {F32: dict(atol=1e-4, rtol=1e-4), BF16: HALF, F16: HALF}

ROW_SIDE = {
    "var_mean": lambda b, x, d: b.op("aten.var_mean.correction", x, d, correction=1),
    "sum": lambda b, x, d: (b.op("aten.sum.dim_IntList", x, d),),
    "amax": lambda b, x, d: (b.op("aten.amax.default", x, d),),
    "norm": lambda b, x, d: (b.op("aten.linalg_vector_norm.default", x, 2, d),),
}
COLUMN_SIDE = {
    "norm": lambda b, x, d: b.op("aten.linalg_vector_norm.default", x, 2, d),
    "sum": lambda b, x, d: b.op("aten.sum.dim_IntList", x, d),
    "mean": lambda b, x, d: b.op("aten.mean.dim", x, d),
    "amax": lambda b, x, d: b.op("aten.amax.default", x, d),
    "amin": lambda b, x, d: b.op("aten.amin.default", x, d),
}


def stats_graph(shape, dtype, row="var_mean", column="norm", produce=None):
    """Row statistic over the last dim(s) and column statistic over dim 0 of `x` (or of
    `produce(b, x)`); the row side reduces every dim but 0."""
    rest = list(range(1, len(shape)))

    def body(b, x):
        if produce is not None:
            x = produce(b, x)
        rows = ROW_SIDE[row](b, x, rest)
        return (*rows, COLUMN_SIDE[column](b, x, [0]))

    return make_graph("row_column", {"x": TensorType.make(shape, dtype, device=DEVICE)}, body)


def reductions_of(compiled):
    return [k for k in compiled.kernels if k.kind == "reduction"]


def source_of(compiled, name: str) -> str:
    start = compiled.source.index(f"def {name}(")
    end = compiled.source.find("\n\n\n", start)
    return compiled.source[start : end if end >= 0 else None]


def assert_one_read(compiled, graph):
    """One kernel reads x (once: one load in its code) and writes the row results and the column
    partials; one more kernel reduces the partials."""
    readers = [k for k in compiled.kernels if "x" in k.reads]
    assert len(readers) == 1, [k.name for k in compiled.kernels]
    (fused,) = readers
    assert source_of(compiled, fused.name).count(f"tl.load(in_{fused.reads.index('x')} ") == 1
    partials = [b for b in compiled.program.buffers if b.name in fused.writes and len(b.layout.shape) >= 2]
    assert len(partials) == 1 and isinstance(partials[0].body, Reduction)
    finals = [k for k in compiled.kernels if partials[0].name in k.reads]
    assert len(finals) == 1 and len(compiled.kernels) == 2
    block = partials[0].body.reduction_ranges[0]
    assert {dict(c)["XBLOCK"] for c in fused.configs} == {block}


# Few rows (16, the fewest that are cut, and just past): the interpreter runs Welford's combine
# element by element, tens of seconds at 20K elements.
@pytest.mark.parametrize("shape", [(16, 300), (17, 513), (20, 256)])
def test_var_mean_and_column_norm_read_x_once(shape):
    # 17, 20 rows: the last block of rows is partly past the end (masked, guarded in the loop IR);
    # 513 columns: a row tile past a power of two; 256: the fewest columns that are cut.
    graph = stats_graph(shape, F32)
    compiled = compile_graph_triton(graph)
    assert_one_read(compiled, graph)
    assert_matches_eager(compiled, graph, torch.randn(shape, device=DEVICE) * 3 + 1, **TOLERANCE[F32])


@pytest.mark.parametrize("column", sorted(COLUMN_SIDE))
@pytest.mark.parametrize("row", sorted(ROW_SIDE))
def test_every_reduction_pair(row, column):
    graph = stats_graph((17, 260), F32, row=row, column=column)
    compiled = compile_graph_triton(graph)
    assert_one_read(compiled, graph)
    x = torch.randn(17, 260, device=DEVICE)
    x[7, 11] = -40.0  # a column minimum and a row maximum that one block alone holds
    x[16, 259] = 50.0  # in the ragged last block
    assert_matches_eager(compiled, graph, x, **TOLERANCE[F32])


@pytest.mark.parametrize("dtype", [BF16, F16])
def test_half_inputs_accumulate_in_float32(dtype):
    graph = stats_graph((16, 384), dtype)
    compiled = compile_graph_triton(graph)
    assert_one_read(compiled, graph)
    partial = next(b for b in compiled.program.buffers if b.name.endswith("_rows"))
    assert partial.layout.dtype == F32
    x = (torch.randn(16, 384, device=DEVICE) * 2 + 1).to(dtype)
    assert_matches_eager(compiled, graph, x, **TOLERANCE[dtype])


def _launchers(compiled) -> dict:
    return {launch.spec.name: launch for kind, launch, _ in compiled._steps if kind == "kernel"}


def test_rows_that_fit_a_block_step_through_it_in_every_config():
    # Whole rows in registers, SBLOCK rows a step, the column accumulators stored once per block.
    graph = stats_graph((20, 260), F32, row="var_mean", column="amax")
    compiled = compile_graph_triton(graph)
    (fused,) = [k for k in compiled.kernels if "x" in k.reads]
    source = source_of(compiled, fused.name)
    assert "SBLOCK: tl.constexpr" in source and "xstep" in source
    steps = {dict(c)["SBLOCK"] for c in fused.configs}
    assert steps == {1, 2, 4}
    x = torch.randn(20, 260, device=DEVICE)
    x[19, 3] = 60.0  # the ragged last block's column maximum
    launcher = _launchers(compiled)[fused.name]
    for config in fused.configs:
        launcher.chosen.clear()
        launcher.chosen[(20, 260)] = config
        launcher.direct = None
        assert_matches_eager(compiled, graph, x, **TOLERANCE[F32])


def test_rows_longer_than_a_block_loop_over_column_tiles(monkeypatch):
    # Rows past PERSISTENT_MAX (made short here: the interpreter runs Welford element by element).
    monkeypatch.setattr(reduction, "PERSISTENT_MAX", 256)
    graph = stats_graph((17, 300), F32)
    compiled = compile_graph_triton(graph)
    assert_one_read(compiled, graph)
    (fused,) = [k for k in compiled.kernels if "x" in k.reads]
    source = source_of(compiled, fused.name)
    assert "SBLOCK" not in source and "roffset" in source  # column tiles of the looped schedule
    assert_matches_eager(compiled, graph, torch.randn(17, 300, device=DEVICE) * 3 + 1, **TOLERANCE[F32])


def test_pointwise_producer_is_inlined_into_both_sides():
    graph = stats_graph(
        (24, 300), F32, row="sum", column="amax",
        produce=lambda b, x: b.op("aten.relu.default", b.op("aten.mul.Tensor", x, 2.0)),
    )  # fmt: skip
    compiled = compile_graph_triton(graph)
    assert_one_read(compiled, graph)
    assert_matches_eager(compiled, graph, torch.randn(24, 300, device=DEVICE))


def test_two_dim_columns_of_a_three_dim_input():
    # Rows: dim 0; columns: dims 1 and 2 (a 2-D view [40, 6 * 50]).
    graph = stats_graph((20, 6, 50), F32, row="var_mean", column="sum")
    compiled = compile_graph_triton(graph)
    assert_one_read(compiled, graph)
    assert_matches_eager(compiled, graph, torch.randn(20, 6, 50, device=DEVICE), **TOLERANCE[F32])


def test_fusion_log_names_the_cut_and_the_shared_read(caplog):
    graph = stats_graph((64, 256), F32)
    with caplog.at_level(logging.INFO, logger="torchsmith.inductor.fusion"):
        compile_graph_triton(graph)
    text = caplog.text
    assert "cut into 8 partials of 8 rows" in text
    assert "in one pass over blocks of rows (row reductions and column partials)" in text
    assert "reads column partials that every program of the kernel writes a part of" in text


def test_transposed_input_keeps_two_kernels():
    # Rows of x^T are columns of x: a tile of row blocks would load strided columns.
    def body(b, x):
        xt = b.op("aten.t.default", x)
        var, mean = b.op("aten.var_mean.correction", xt, [1], correction=1)
        return var, mean, b.op("aten.sum.dim_IntList", xt, [0])

    graph = make_graph("transposed", {"x": TensorType.make((40, 256), F32, device=DEVICE)}, body)
    compiled = compile_graph_triton(graph)
    assert not any(b.name.endswith("_rows") for b in compiled.program.buffers)
    assert_matches_eager(compiled, graph, torch.randn(40, 256, device=DEVICE), **TOLERANCE[F32])


def test_column_variance_and_short_rows_keep_their_kernels():
    def body(b, x):
        var, mean = b.op("aten.var_mean.correction", x, [1], correction=1)
        return var, mean, b.op("aten.var.correction", x, [0], correction=1)

    graph = make_graph("column_var", {"x": TensorType.make((24, 300), F32, device=DEVICE)}, body)
    compiled = compile_graph_triton(graph)
    assert not any(b.name.endswith("_rows") for b in compiled.program.buffers)  # Welford: not cut
    assert_matches_eager(compiled, graph, torch.randn(24, 300, device=DEVICE), **TOLERANCE[F32])
    short = stats_graph((64, 100), F32)  # 100 columns: the row kernel packs many short rows a block
    compiled = compile_graph_triton(short)
    assert not any(b.name.endswith("_rows") for b in compiled.program.buffers)


def test_row_block_sizes():
    assert row_block(65536) == ROW_BLOCK == 64  # 1024 programs; partials 1/64 of x
    assert row_block(16384) == 16
    assert row_block(300) == MIN_BLOCK
    # Tiles of 2K-8K elements, XBLOCK the row block, RBLOCK no wider than the row.
    assert row_block_configs(64, 8192)[0] == (64, 64, 8)
    assert all(c[0] == 64 and 2048 <= c[0] * c[1] <= 8192 for c in row_block_configs(64, 8192))
    assert max(c[1] for c in row_block_configs(8, 300)) == 512
