"""Triton kernels generated from the loop IR, against eager: pointwise (1-D and tiled), every
reduction type (persistent and looped), fused softmax and layer norm, masks, half precision,
symbolic sizes, gathers. On a GPU they run on CUDA tensors; here in Triton's interpreter
(TRITON_INTERPRET=1) on CPU tensors, so shapes stay small."""

import os

import pytest
import torch

# Without a GPU, kernels run in Triton's interpreter on CPU tensors. It must be chosen before triton
# is first imported: triton's own helpers (tl.cdiv, ...) are jitted at import.
if not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"
pytest.importorskip("triton", reason="triton is not installed (pip install triton==3.6.0)")

from torchsmith.inductor import (
    lower,
    to_prims,  # noqa: E402
)
from torchsmith.inductor.gpu_pipeline import compile_graph_triton  # noqa: E402
from torchsmith.inductor.loop_ir.program import ComputedBuffer, Reduction  # noqa: E402
from torchsmith.inductor.testing import assert_matches_eager, make_graph, rotary_cat  # noqa: E402
from torchsmith.inductor.triton.codegen import generate_triton  # noqa: E402
from torchsmith.inductor.triton.reduction import PERSISTENT_MAX  # noqa: E402
from torchsmith.ir import TensorType  # noqa: E402
from torchsmith.ir.symbolic import symbol  # noqa: E402

F32, F16, BF16, I64 = torch.float32, torch.float16, torch.bfloat16, torch.int64
ON_GPU = torch.cuda.is_available()
DEVICE = "cuda" if ON_GPU else "cpu"
HALF_TOLERANCE = {F16: dict(atol=2e-2, rtol=2e-2), BF16: dict(atol=6e-2, rtol=2e-2), F32: {}}


def t(*shape, dtype=F32):
    return TensorType.make(shape, dtype, device=DEVICE)


def randn(*shape, dtype=F32):
    return torch.randn(*shape, dtype=dtype, device=DEVICE)


def softmax(b, x):
    m = b.op("aten.amax.default", x, [1], True)
    e = b.op("aten.exp.default", b.op("aten.sub.Tensor", x, m))
    return b.op("aten.div.Tensor", e, b.op("aten.sum.dim_IntList", e, [1], True))


def layer_norm(b, x, w, bias):
    m = b.op("aten.mean.dim", x, [1], True)
    centered = b.op("aten.sub.Tensor", x, m)
    var = b.op("aten.mean.dim", b.op("aten.mul.Tensor", centered, centered), [1], True)
    scale = b.op("aten.rsqrt.default", b.op("aten.add.Tensor", var, 1e-5))
    normed = b.op("aten.mul.Tensor", b.op("aten.mul.Tensor", centered, scale), w)
    return b.op("aten.add.Tensor", normed, bias)


def row_groups(graph):
    """One group for every buffer over the rows of the first reduction (softmax, layer norm as
    one kernel); the rest alone. The fusion a GPU scheduler would choose for these graphs."""
    program = lower(to_prims(graph))
    buffers = [b for b in program.buffers if isinstance(b, ComputedBuffer)]
    outer = next(b.body.ranges for b in buffers if isinstance(b.body, Reduction))
    rows = tuple(b for b in buffers if tuple(b.body.ranges[: len(outer)]) == tuple(outer))
    return [(b,) for b in buffers if b not in rows] + [rows]


def test_pointwise_chain_with_broadcast_is_one_kernel():
    def body(b, x, y):
        return b.op("aten.mul.Tensor", b.op("aten.exp.default", b.op("aten.add.Tensor", x, y)), 2.0)

    graph = make_graph("chain", {"x": t(5, 7), "y": t(7)}, body)
    compiled = compile_graph_triton(graph)
    assert [k.kind for k in compiled.kernels] == ["pointwise"]
    # golden/pointwise.txt shows such a kernel's source (`@triton.jit`, `xmask`).
    assert_matches_eager(compiled, graph, randn(5, 7), randn(7))


def test_masked_tail_past_the_last_block():
    # 1500 elements: a block of 1024 and a tail of 476 whose masked lanes must not be stored.
    graph = make_graph("tail", {"x": t(1500)}, lambda b, x: b.op("aten.sin.default", x))
    compiled = compile_graph_triton(graph)
    assert dict(compiled.kernels[0].configs[0])["XBLOCK"] < 1500
    assert_matches_eager(compiled, graph, randn(1500))


def test_transposed_read_is_tiled():
    graph = make_graph(
        "transpose", {"x": t(33, 17)}, lambda b, x: b.op("aten.mul.Tensor", b.op("aten.t.default", x), 2)
    )
    compiled = compile_graph_triton(graph)
    assert [k.kind for k in compiled.kernels] == ["tiled"]
    # golden/transpose_tiles.txt shows this graph's tile (`yindex`).
    assert_matches_eager(compiled, graph, randn(33, 17))


def test_channels_last_to_contiguous_tiles_channels_by_flat_pixels():
    # NHWC storage read as NCHW and written contiguous: tiles of (channels, h*w) a batch index each
    # (zindex), so the load walks channels and the store walks pixels contiguously.
    def body(b, x):
        return b.op("aten.relu.default", b.op("aten.permute.default", x, [0, 3, 1, 2]))

    graph = make_graph("nhwc", {"x": t(3, 5, 7, 40)}, body)
    compiled = compile_graph_triton(graph)
    assert [k.kind for k in compiled.kernels] == ["tiled"]
    assert [int(n) for n in compiled.kernels[0].numels] == [3, 40, 35]
    # golden/channels_last_tiles.txt shows this graph's tiles, a batch index each (`zindex`).
    assert_matches_eager(compiled, graph, randn(3, 5, 7, 40))


def test_channels_last_tiles_with_a_symbolic_batch():
    # The outer (batch) dim is a kernel argument: the grid and zindex follow it.
    s0 = symbol("s0")

    def body(b, x):
        strides = (360, 1, 120, 24)  # the NHWC input's, permuted
        nchw_type = TensorType.make((s0, 24, 3, 5), F32, device=DEVICE, strides=strides)
        nchw = b.op("aten.permute.default", x, [0, 3, 1, 2], out_type=nchw_type)
        return b.op("aten.relu.default", nchw, out_type=t(s0, 24, 3, 5))

    graph = make_graph("nhwc_dynamic", {"x": t(s0, 3, 5, 24)}, body)
    compiled = compile_graph_triton(graph)
    assert [k.kind for k in compiled.kernels] == ["tiled"]  # zindex: golden/channels_last_tiles.txt
    for batch in (1, 4):
        assert_matches_eager(compiled, graph, randn(batch, 3, 5, 24))


def test_short_transposed_dim_tiles_the_leading_dims():
    # 3 channels: a tile of them would be mostly masked; tiles run over (n c h, w) instead.
    def body(b, x):
        return b.op("aten.mul.Tensor", b.op("aten.permute.default", x, [0, 3, 1, 2]), 3)

    graph = make_graph("nhwc3", {"x": t(2, 5, 7, 3)}, body)
    compiled = compile_graph_triton(graph)
    assert [int(n) for n in compiled.kernels[0].numels] == [30, 7]
    assert_matches_eager(compiled, graph, randn(2, 5, 7, 3))


@pytest.mark.parametrize("dtype", [F16, BF16])
def test_half_precision_computes_in_float32(dtype):
    def body(b, x, y):
        return b.op("aten.tanh.default", b.op("aten.add.Tensor", b.op("aten.mul.Tensor", x, y), 1))

    graph = make_graph("half", {"x": t(9, 31, dtype=dtype), "y": t(9, 31, dtype=dtype)}, body)
    compiled = compile_graph_triton(graph)
    # golden/half_pointwise.txt shows the float16 form (loads `.to(tl.float32)`).
    x, y = randn(9, 31, dtype=dtype), randn(9, 31, dtype=dtype)
    assert_matches_eager(compiled, graph, x, y, **HALF_TOLERANCE[dtype])


@pytest.mark.parametrize("dtype", [F16, BF16])
def test_half_batch_norm_inference_fuses_in_float32(dtype):
    def body(b, x, w, bias, mean, var):
        out = b.op("aten._native_batch_norm_legit_no_training.default", x, w, bias, mean, var, 0.1, 1e-5)
        return b.op("aten.relu.default", out[0])

    c = 5
    vectors = {k: t(c, dtype=dtype) for k in ("w", "b", "mean", "var")}
    graph = make_graph("bn", {"x": t(2, c, 6, 7, dtype=dtype), **vectors}, body)
    compiled = compile_graph_triton(graph)
    assert not compiled.program.fallbacks  # decomposed, not eager's kernel whole
    args = [randn(2, c, 6, 7, dtype=dtype), *(randn(c, dtype=dtype) for _ in range(3))]
    args.append(torch.rand(c, dtype=dtype, device=DEVICE) + 0.5)
    assert_matches_eager(compiled, graph, *args, **HALF_TOLERANCE[dtype])


def test_identical_kernels_are_written_once_and_launched_for_each_group():
    def body(b, x, y):
        # the same layer norm on two inputs: two kernels with the same code
        nx = b.op("aten.native_layer_norm.default", x, [32], None, None, 1e-5)
        ny = b.op("aten.native_layer_norm.default", y, [32], None, None, 1e-5)
        return b.op("aten.mul.Tensor", nx[0], 2.0), b.op("aten.mul.Tensor", ny[0], 2.0)

    graph = make_graph("twice", {"x": t(8, 32), "y": t(8, 32)}, body)
    compiled = compile_graph_triton(graph)
    names = [spec.name for spec in compiled.kernels]
    assert len(names) > len(set(names))  # some groups launch a kernel written for another
    assert compiled.source.count("@triton.jit\ndef kernel") == len(set(names))
    # golden/shared_kernels.txt shows this graph's source (a launch names `the code of` another).
    assert_matches_eager(compiled, graph, randn(8, 32), randn(8, 32))


@pytest.mark.parametrize(
    ("channels", "groups", "by_default"), [(3, 1, True), (6, 6, False)], ids=["dense", "depthwise"]
)
def test_channels_last_by_default_for_dense_convolutions_only(channels, groups, by_default):
    def body(b, x, w):
        conv = b.op("aten.convolution.default", x, w, None, [1, 1], [1, 1], [1, 1], False, [0, 0], groups)
        return b.op("aten.mul.Tensor", b.op("aten.relu.default", conv), 2.0)

    out = 4 if groups == 1 else channels
    shapes = {"x": (2, channels, 8, 8), "w": (out, channels // groups, 3, 3)}
    graph = make_graph("conv", {name: t(*shape) for name, shape in shapes.items()}, body)
    default = compile_graph_triton(graph)
    nhwc = compile_graph_triton(graph, options={"layout_optimization": True})
    plain = compile_graph_triton(graph, options={"layout_optimization": False})
    assert "nhwc" not in str(plain.program) and "nhwc" in str(nhwc.program)
    assert ("nhwc" in str(default.program)) == by_default
    args = [randn(*shape) for shape in shapes.values()]
    for compiled in (plain, nhwc):
        assert_matches_eager(compiled, graph, *args, rtol=1e-4, atol=1e-4)


def test_a_1d_convolution_beside_2d_ones_leaves_the_layout_default_on():
    def body(b, x, w, s, k):
        conv = b.op("aten.convolution.default", x, w, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1)
        seq = b.op("aten.convolution.default", s, k, None, [1], [1], [1], False, [0], 1)
        return b.op("aten.relu.default", conv), b.op("aten.relu.default", seq)

    shapes = {"x": (2, 3, 8, 8), "w": (4, 3, 3, 3), "s": (2, 3, 16), "k": (4, 3, 3)}
    graph = make_graph("mixed", {name: t(*shape) for name, shape in shapes.items()}, body)
    compiled = compile_graph_triton(graph)
    assert "nhwc" in str(compiled.program)
    assert_matches_eager(compiled, graph, *(randn(*shape) for shape in shapes.values()), rtol=1e-4, atol=1e-4)


def test_channels_last_result_written_nchw_is_tiled():
    """A graph output that reads a channels-last convolution result loops in NHWC order (contiguous
    loads) but stores into eager's NCHW layout: the store walks across the loops, so the kernel runs
    in tiles (channels by pixels) that load and store contiguously, not one store per channel apart."""
    def body(b, x, w):
        conv = b.op("aten.convolution.default", x, w, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1)
        return b.op("aten.relu.default", b.op("aten.mul.Tensor", conv, 2.0))

    graph = make_graph("conv_out", {"x": t(2, 16, 20, 20), "w": t(24, 16, 3, 3)}, body)
    compiled = compile_graph_triton(graph)
    (last,) = [k for k in compiled.kernels if "maximum" in k.name]
    assert last.kind == "tiled"
    # full float32 convolutions: the compiled (NHWC) and eager (NCHW) cuDNN calls round TF32 differently
    with torch.backends.cudnn.flags(enabled=True, allow_tf32=False):
        assert_matches_eager(compiled, graph, randn(2, 16, 20, 20), randn(24, 16, 3, 3), rtol=1e-4, atol=1e-4)


def test_every_reduction_type():
    def body(b, x, k):
        return (
            b.op("aten.sum.dim_IntList", x, [0, 2]),
            b.op("aten.prod.dim_int", x, 1),
            b.op("aten.amax.default", x, [1]),
            b.op("aten.amin.default", x, [0, 1, 2]),
            b.op("aten.argmax.default", x, 2),
            b.op("aten.argmin.default", x, 0),
            b.op("aten.sum.dim_IntList", k, [1]),
            b.op("aten.argmin.default", k, 1),
        )

    graph = make_graph("reductions", {"x": t(5, 6, 7), "k": t(9, 11, dtype=I64)}, body)
    compiled = compile_graph_triton(graph)
    k = torch.randint(-3, 3, (9, 11), device=DEVICE)  # ties: the first position must win
    assert_matches_eager(compiled, graph, randn(5, 6, 7), k, rtol=1e-5, atol=1e-5)


def test_nan_propagates_and_ties_pick_the_first():
    def body(b, x):
        return (
            b.op("aten.amax.default", x, [1]),
            b.op("aten.argmax.default", x, 1),
            b.op("aten.argmin.default", x, 1),
        )

    graph = make_graph("nan", {"x": t(4, 9)}, body)
    compiled = compile_graph_triton(graph)
    x = randn(4, 9)
    x[0, 5] = float("nan")
    x[1, :] = float("-inf")
    x[2, 3] = x[2, 6] = 50.0
    assert_matches_eager(compiled, graph, x)


def test_looped_reductions_over_long_rows():
    def body(b, x):
        var, mean = b.op("aten.var_mean.correction", x, [1], correction=1)
        return (
            b.op("aten.sum.dim_IntList", x, [1]),
            b.op("aten.amax.default", x, [1]),
            b.op("aten.argmax.default", x, 1),
            var,
            mean,
        )

    graph = make_graph("long", {"x": t(2, PERSISTENT_MAX + 100)}, body)
    compiled = compile_graph_triton(graph)
    # Rows longer than a block loop over it: golden/long_rows.txt shows this graph's `roffset` loops.
    x = randn(2, PERSISTENT_MAX + 100) * 2 + 5
    x[1, 1034] = float("nan")
    assert_matches_eager(compiled, graph, x, rtol=1e-4, atol=1e-4)


def test_reduction_over_the_outer_dim():
    graph = make_graph("columns", {"x": t(37, 5)}, lambda b, x: b.op("aten.sum.dim_IntList", x, [0]))
    compiled = compile_graph_triton(graph)
    assert_matches_eager(compiled, graph, randn(37, 5), rtol=1e-5, atol=1e-5)


def test_long_narrow_reductions_are_split_in_two():
    def body(b, x, y):
        return b.op("aten.sum.dim_IntList", x, [0]), b.op("aten.amax.default", y, [0])

    graph = make_graph("columns", {"x": t(16384, 3), "y": t(16384)}, body)
    compiled = compile_graph_triton(graph)
    # Each reduction: partial results over pieces of the column, then a short reduction of those.
    assert [k.kind for k in compiled.kernels] == ["reduction"] * 4
    assert any(b.name.endswith("_partial") for b in compiled.program.buffers)
    x, y = randn(16384, 3), randn(16384)
    y[9999] = float("nan")
    assert_matches_eager(compiled, graph, x, y, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("cols", [50, 1500, PERSISTENT_MAX + 3])
def test_softmax_is_one_kernel(cols):
    graph = make_graph("softmax", {"x": t(6, cols)}, softmax)
    compiled = compile_graph_triton(graph, groups=row_groups(graph))
    assert [k.kind for k in compiled.kernels] == ["reduction"]
    # Persistent when the row fits (golden/reductions.txt's softmax), else a loop (golden/long_rows.txt).
    assert_matches_eager(compiled, graph, randn(6, cols) * 3)


@pytest.mark.parametrize("dtype", [F32, F16, BF16])
def test_layer_norm_rows_in_one_kernel(dtype):
    graph = make_graph(
        "layer_norm",
        {"x": t(9, 40, dtype=dtype), "w": t(40, dtype=dtype), "bias": t(40, dtype=dtype)},
        layer_norm,
    )
    compiled = compile_graph_triton(graph, groups=row_groups(graph))
    assert [k.kind for k in compiled.kernels].count("reduction") == 1
    inputs = randn(9, 40, dtype=dtype), randn(40, dtype=dtype), randn(40, dtype=dtype)
    assert_matches_eager(compiled, graph, *inputs, **HALF_TOLERANCE[dtype])


def test_scheduler_groups_softmax_and_layer_norm():
    graph = make_graph("softmax", {"x": t(4, 30, dtype=BF16)}, softmax)
    compiled = compile_graph_triton(graph)
    assert [k.kind for k in compiled.kernels] == ["reduction"]
    assert_matches_eager(compiled, graph, randn(4, 30, dtype=BF16), **HALF_TOLERANCE[BF16])
    graph = make_graph("layer_norm", {"x": t(3, 24), "w": t(24), "bias": t(24)}, layer_norm)
    compiled = compile_graph_triton(graph)
    assert_matches_eager(compiled, graph, randn(3, 24), randn(24), randn(24), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("shape", [(1, 1, 64), (1, 64), (3, 1, 64)])
def test_rms_norm_of_single_rows_in_one_kernel(shape):
    """A decode step normalizes one row: its leading dims are all 1, the row variables only take 0,
    and the scale computed from the row's sum is still read in the same kernel."""

    def rms_norm(b, x, w):
        mean = b.op("aten.mean.dim", b.op("aten.mul.Tensor", x, x), [-1], True)
        scale = b.op("aten.rsqrt.default", b.op("aten.add.Tensor", mean, 1e-5))
        return b.op("aten.mul.Tensor", b.op("aten.mul.Tensor", x, scale), w)

    graph = make_graph("rms_norm", {"x": t(*shape), "w": t(shape[-1])}, rms_norm)
    compiled = compile_graph_triton(graph)
    assert [k.kind for k in compiled.kernels] == ["reduction"]
    assert_matches_eager(compiled, graph, randn(*shape), randn(shape[-1]), rtol=1e-5, atol=1e-5)


def test_symbolic_sizes_are_kernel_arguments():
    s0, s1 = symbol("s0"), symbol("s1")

    def softmax_rows(b, x):
        m = b.op("prims.amax", x, [1])
        e = b.op("prims.exp", b.op("prims.sub", x, b.op("prims.broadcast_in_dim", m, [s0, 12], [0])))
        total = b.op("prims.sum", e, [1])
        return b.op("prims.div", e, b.op("prims.broadcast_in_dim", total, [s0, 12], [0]))

    graph = make_graph("dynamic", {"x": t(s0, 12)}, softmax_rows)
    compiled = compile_graph_triton(graph)
    # golden/dynamic.txt shows s0 among kernel0's arguments.
    for batch in (1, 5, 37):
        assert_matches_eager(compiled, graph, randn(batch, 12))

    def sums(b, x):
        return b.op("prims.sum", x, [1]), b.op("prims.mul", x, 2.0)

    graph = make_graph("dynamic2", {"x": t(s0, s1)}, sums)
    compiled = compile_graph_triton(graph)
    for shape in [(3, 5), (2, 1100)]:
        assert_matches_eager(compiled, graph, randn(*shape), rtol=1e-5, atol=1e-5)


def test_gather_reads_through_an_index():
    def body(b, w, i):
        return b.op("aten.embedding.default", w, i)

    graph = make_graph("embedding", {"w": t(10, 8), "i": t(3, 4, dtype=I64)}, body)
    compiled = compile_graph_triton(graph)
    indices = torch.randint(0, 10, (3, 4), device=DEVICE)
    assert_matches_eager(compiled, graph, randn(10, 8), indices)


def test_group_reading_another_row_of_a_reduction_is_split():
    def body(b, x):
        return b.op("aten.add.Tensor", x, b.op("aten.sum.dim_IntList", x, [1]))  # sums broadcast along rows

    graph = make_graph("split", {"x": t(4, 4)}, body)
    program = lower(to_prims(graph))
    group = tuple(b for b in program.buffers if isinstance(b, ComputedBuffer))
    assert len(group) == 2
    _, kernels = generate_triton(program, [group])
    assert len(kernels) == 2  # row i0 needs the sums of every row: not in registers of one program
    compiled = compile_graph_triton(graph, groups=[group])
    assert_matches_eager(compiled, graph, randn(4, 4))


def test_elementwise_op_table():
    unary = ["exp", "expm1", "log1p", "tanh", "erf", "erfc", "sign", "floor", "ceil", "round", "trunc",
             "sigmoid", "abs", "neg", "rsqrt", "sin", "atan", "sinh", "reciprocal"]  # fmt: skip

    def body(b, x, y, k, j):
        outs = [b.op(f"aten.{name}.default", x) for name in unary]
        outs += [
            b.op("aten.atan2.default", x, y),
            b.op("aten.pow.Tensor_Tensor", b.op("aten.abs.default", x), y),
            b.op("aten.fmod.Tensor", x, y),
            b.op("aten.remainder.Tensor", x, y),
            b.op("aten.maximum.default", x, y),
            b.op("aten.where.self", b.op("aten.gt.Tensor", x, y), x, y),
            b.op("aten.logical_and.default", b.op("aten.gt.Scalar", x, 0), b.op("aten.lt.Scalar", y, 0)),
            b.op("aten.isnan.default", x),
            b.op("aten.remainder.Tensor", k, j),
            b.op("aten.fmod.Tensor", k, j),
            b.op("aten.bitwise_xor.Tensor", k, j),
        ]
        return tuple(outs)

    types = {"x": t(6, 7), "y": t(6, 7), "k": t(6, 7, dtype=I64), "j": t(6, 7, dtype=I64)}
    graph = make_graph("ops", types, body)
    compiled = compile_graph_triton(graph)
    x, y = randn(6, 7) * 2, randn(6, 7) + 0.1
    x[0, 0] = float("nan")
    k = torch.randint(-20, 20, (6, 7), device=DEVICE)
    j = torch.randint(1, 6, (6, 7), device=DEVICE) * (torch.randint(0, 2, (6, 7), device=DEVICE) * 2 - 1)
    assert_matches_eager(compiled, graph, x, y, k, j, rtol=1e-5, atol=1e-5)


def test_rotary_cat_of_computed_halves_is_one_kernel():
    # The cat reads each half at a clamped index; the halves' arithmetic runs in the cat's kernel.
    graph = make_graph("rotary", {"x": t(1, 4, 3, 16), "c": t(3, 8), "s": t(3, 8)}, rotary_cat)
    compiled = compile_graph_triton(graph)
    assert_matches_eager(compiled, graph, randn(1, 4, 3, 16), randn(3, 8), randn(3, 8), atol=1e-6, rtol=1e-6)
    assert compiled.source.count("\ndef kernel") == 1, compiled.source
