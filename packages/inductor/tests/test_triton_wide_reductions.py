"""The bandwidth-bound reduction paths of the Triton backend: wide rows kept in registers (layer
norm reads its row once), half-precision layer norm computed in float32 and fused, Welford state
shared by mean and variance in looped rows, and column walks (sums over a leading dim) with wide
blocks of output columns and a split over row pieces. Run in Triton's interpreter without a GPU."""

import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"
pytest.importorskip("triton", reason="triton is not installed (pip install triton==3.6.0)")

from torchsmith.inductor.gpu_pipeline import compile_graph_triton  # noqa: E402
from torchsmith.inductor.loop_ir.program import ExternCall  # noqa: E402
from torchsmith.inductor.testing import assert_matches_eager, make_graph  # noqa: E402
from torchsmith.inductor.triton.index import kernel_symbol, walks_columns  # noqa: E402
from torchsmith.inductor.triton.reduction import COLUMN_CONFIGS, PERSISTENT_MAX  # noqa: E402
from torchsmith.inductor.triton.split import choose_split  # noqa: E402
from torchsmith.ir import TensorType  # noqa: E402

F32, BF16, F16 = torch.float32, torch.bfloat16, torch.float16
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
HALF = {BF16: dict(atol=6e-2, rtol=2e-2), F16: dict(atol=2e-2, rtol=2e-2), F32: dict(atol=1e-4, rtol=1e-4)}


def t(*shape, dtype=F32):
    return TensorType.make(shape, dtype, device=DEVICE)


def randn(*shape, dtype=F32):
    return torch.randn(*shape, device=DEVICE).to(dtype)


def layer_norm_graph(rows, width, dtype):
    def body(b, x, w, bias):
        out, mean, rstd = b.op("aten.native_layer_norm.default", x, [width], w, bias, 1e-5)
        return out, mean, rstd

    inputs = {"x": t(rows, width, dtype=dtype), "w": t(width, dtype=dtype), "bias": t(width, dtype=dtype)}
    return make_graph("layer_norm", inputs, body)


def kernel_source(compiled, name: str) -> str:
    start = compiled.source.index(f"def {name}(")
    end = compiled.source.find("\n\n\n", start)
    return compiled.source[start : end if end >= 0 else None]


def check_layer_norm(compiled, graph, x, w, bias, width, **tolerance):
    """Output vs eager; statistics in the dtypes the graph declares (float32 for half inputs, as on
    CUDA; eager's CPU kernel returns them in the input dtype) and close to float64's."""
    out, mean, rstd = compiled(x, w, bias)
    torch.testing.assert_close(
        out, torch.ops.aten.native_layer_norm(x, [width], w, bias, 1e-5)[0], **tolerance
    )
    assert [mean.dtype, rstd.dtype] == [v.type.dtype for v in graph.outputs[1:]]
    _, e_mean, e_rstd = torch.ops.aten.native_layer_norm(x.double(), [width], w.double(), bias.double(), 1e-5)
    torch.testing.assert_close(mean.double(), e_mean, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(rstd.double(), e_rstd, atol=1e-4, rtol=1e-4)


def reduction_kernels(compiled):
    return [k for k in compiled.kernels if k.kind == "reduction"]


@pytest.mark.parametrize("dtype", [F32, BF16])
def test_wide_layer_norm_reads_its_row_once(dtype):
    # 3000: wider than the old 1024-element limit, not a power of two (masked tail of the block).
    graph = layer_norm_graph(5, 3000, dtype)
    compiled = compile_graph_triton(graph)
    assert not any(isinstance(b, ExternCall) for b in compiled.program.buffers)  # bf16 too: no eager kernel
    (kernel,) = compiled.kernels  # bf16: the weight and bias casts are read in place, no kernels
    code = kernel_source(compiled, kernel.name)
    # Persistent: no loop (golden/wide_layer_norm.txt shows float32's kernel), one load of x.
    assert code.count(f"tl.load(in_{kernel.reads.index('x')} ") == 1
    assert dict(kernel.configs[0])["RBLOCK"] == 4096
    x, w, bias = randn(5, 3000, dtype=dtype) * 3 + 1, randn(3000, dtype=dtype), randn(3000, dtype=dtype)
    check_layer_norm(compiled, graph, x, w, bias, 3000, **HALF[dtype])


def test_widening_casts_are_read_in_place_unless_returned():
    def body(b, x, w):
        wide = b.op("prims.convert_element_type", w, F32)
        return b.op("aten.mul.Tensor", b.op("prims.convert_element_type", x, F32), wide), wide

    graph = make_graph("casts", {"x": t(4, 32, dtype=BF16), "w": t(32, dtype=BF16)}, body)
    compiled = compile_graph_triton(graph)
    names = {b.name for b in compiled.program.buffers}
    assert any("convert" in n for n in names)  # returned: stays a buffer
    assert_matches_eager(compiled, graph, randn(4, 32, dtype=BF16), randn(32, dtype=BF16))

    graph = make_graph(
        "casts", {"x": t(4, 32, dtype=BF16), "w": t(32, dtype=BF16)}, lambda b, x, w: body(b, x, w)[0]
    )
    compiled = compile_graph_triton(graph)
    assert len(compiled.kernels) == 1  # the broadcast cast of w is read in place
    assert_matches_eager(compiled, graph, randn(4, 32, dtype=BF16), randn(32, dtype=BF16))


def test_half_layer_norm_matches_eager_rounding():
    # Eager computes in float32 and rounds the output once; so do we (not one rounding per prim).
    graph = layer_norm_graph(4, 200, BF16)
    compiled = compile_graph_triton(graph)
    x, w, bias = randn(4, 200, dtype=BF16) * 4, randn(200, dtype=BF16), randn(200, dtype=BF16)
    out = compiled(x, w, bias)[0]
    e_out = torch.ops.aten.native_layer_norm(x, [200], w, bias, 1e-5)[0]
    assert out.dtype == e_out.dtype == BF16
    reference = torch.nn.functional.layer_norm(x.double(), [200], w.double(), bias.double(), 1e-5)
    # Within one bf16 ulp of float64 everywhere: one rounding at the end (Triton's interpreter
    # truncates where the GPU rounds to nearest, hence one ulp, not half).
    ulp = torch.finfo(BF16).eps * 2 ** torch.floor(torch.log2(reference.abs().clamp_min(1e-3)))
    assert ((out.double() - reference).abs() <= 1.05 * ulp).all()
    assert ((e_out.double() - reference).abs() <= 1.05 * ulp).all()


def test_half_layer_norm_backward_is_fused():
    def body(b, g, x, mean, rstd, w, bias):
        return b.op(
            "aten.native_layer_norm_backward.default", g, x, [96], mean, rstd, w, bias, [True, True, True]
        )

    x, w, bias = randn(6, 96, dtype=BF16) * 2, randn(96, dtype=BF16), randn(96, dtype=BF16)
    _, mean, rstd = torch.ops.aten.native_layer_norm(x, [96], w, bias, 1e-5)
    g = randn(6, 96, dtype=BF16)
    types = {
        "g": t(6, 96, dtype=BF16),
        "x": t(6, 96, dtype=BF16),
        "mean": t(6, 1, dtype=mean.dtype),
        "rstd": t(6, 1, dtype=rstd.dtype),
        "w": t(96, dtype=BF16),
        "bias": t(96, dtype=BF16),
    }
    graph = make_graph("layer_norm_backward", types, body)
    compiled = compile_graph_triton(graph)
    assert not any(isinstance(b, ExternCall) for b in compiled.program.buffers)
    assert_matches_eager(compiled, graph, g, x, mean, rstd, w, bias, atol=0.15, rtol=3e-2)


def test_looped_layer_norm_updates_one_welford_state():
    width = PERSISTENT_MAX + 77
    graph = layer_norm_graph(2, width, F32)
    compiled = compile_graph_triton(graph)
    # golden/looped_layer_norm.txt shows this graph's `roffset` loop.
    assert compiled.source.count("_m2 = tl.where") == 1  # mean and variance share the running state
    x = randn(2, width) * 2 + 3
    check_layer_norm(compiled, graph, x, randn(width), randn(width), width, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize(("rows", "cols", "dtype"), [(600, 70, F32), (700, 33, BF16), (2500, 130, F32)])
def test_column_sum_walks_wide_blocks_of_columns(rows, cols, dtype):
    graph = make_graph(
        "columns", {"x": t(rows, cols, dtype=dtype)}, lambda b, x: b.op("aten.sum.dim_IntList", x, [0])
    )
    compiled = compile_graph_triton(graph)
    first = reduction_kernels(compiled)[0]
    assert {dict(c)["RBLOCK"] for c in first.configs} == {rb for _, rb, _ in COLUMN_CONFIGS}
    # Never a persistent column (one lane a column, strided): golden/reductions.txt's column sum loops.
    x = randn(rows, cols, dtype=dtype)
    got = compiled(x)[0]
    expected = x.float().sum(0).to(dtype)  # float32 accumulation, one rounding
    torch.testing.assert_close(got, expected, **HALF[dtype])


def test_reduction_over_a_middle_dim_walks_columns():
    graph = make_graph("middle", {"x": t(3, 900, 20)}, lambda b, x: b.op("aten.sum.dim_IntList", x, [1]))
    compiled = compile_graph_triton(graph)
    assert_matches_eager(compiled, graph, randn(3, 900, 20), atol=1e-3, rtol=1e-4)


def test_long_column_sum_splits_into_pieces_of_rows():
    graph = make_graph("columns", {"x": t(4096, 48)}, lambda b, x: b.op("aten.amax.default", x, [0]))
    compiled = compile_graph_triton(graph)
    assert any(b.name.endswith("_partial") for b in compiled.program.buffers)
    x = randn(4096, 48)
    x[4000, 7] = float("nan")
    assert_matches_eager(compiled, graph, x)


def test_split_choices():
    # Column walks: ~32768 (piece, column) pairs; rows: ~2048 programs of long pieces.
    assert choose_split(4096, 32768, columns=True) == 8
    assert choose_split(32768, 4096, columns=True) == 1
    assert choose_split(1024, 262144, columns=True) == 32
    assert choose_split(8192, 8192) == 1  # softmax over 8192 rows: already one program a row
    assert choose_split(1, 2**20) == 256
    assert choose_split(64, 4096) == 1  # short rows stay whole


def test_walks_columns():
    x, r = kernel_symbol("xindex"), kernel_symbol("rindex")
    assert walks_columns([x + 4096 * r], (x,), (r,))
    assert not walks_columns([r + 4096 * x], (x,), (r,))
    assert not walks_columns([r + 4096 * x, x + 64 * r], (x,), (r,))  # some read is contiguous along r
    assert not walks_columns([], (x,), (r,))
