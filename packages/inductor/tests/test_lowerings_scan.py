"""cumsum as loops (lowerings_scan): every dim, float and integer dtypes (ints and bools accumulate
in int64, as GPT-2's position ids `mask.long().cumsum(-1)`), fused with its producer and consumers,
and the extern call kept for scans too long for the masked-reduction form. C++ here; the same
loop IR through Triton in its interpreter (TRITON_INTERPRET=1) when triton is installed."""

import os

import pytest
import torch

# As test_triton_kernels: without a GPU, Triton kernels run in its interpreter, chosen before import.
if not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"

from torchsmith.inductor import compile_graph, lower, to_prims
from torchsmith.inductor.loop_ir.program import ComputedBuffer, ExternCall, Reduction
from torchsmith.inductor.lowering.scan import MAX_SCAN_LENGTH
from torchsmith.inductor.testing import assert_matches_eager, make_graph
from torchsmith.ir import TensorType, interpret

F32, F64, F16, I64, I32, B8 = (
    torch.float32,
    torch.float64,
    torch.float16,
    torch.int64,
    torch.int32,
    torch.bool,
)


def _input(shape, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    if dtype == B8:
        return torch.rand(shape, generator=g) < 0.5
    if dtype.is_floating_point:
        return torch.randn(shape, generator=g).to(dtype)
    return torch.randint(-50, 50, shape, generator=g).to(dtype)


def _cumsum_body(dim, out_dtype=None):
    def body(b, x):
        kwargs = {"dtype": out_dtype} if out_dtype is not None else {}
        return b.op("aten.cumsum.default", x, dim, **kwargs)

    return body


def _cumsum_graph(shape, dtype, dim, out_dtype=None):
    return make_graph("cumsum", {"x": (shape, dtype)}, _cumsum_body(dim, out_dtype))


def _is_loop(compiled) -> bool:
    program = compiled.program
    return not program.fallbacks and not any(isinstance(b, ExternCall) for b in program.buffers)


@pytest.mark.parametrize("dim", [0, 1, 2, -1])
def test_cumsum_along_every_dim_matches_eager(dim):
    graph = _cumsum_graph((3, 5, 7), F32, dim)
    compiled = compile_graph(graph)
    assert _is_loop(compiled)
    assert_matches_eager(compiled, graph, _input((3, 5, 7), F32), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "dtype, out_dtype",
    [(F64, None), (F16, None), (I64, None), (I32, None), (B8, None), (I32, I64), (B8, F32), (F32, F64)],
)
def test_cumsum_dtypes_match_eager(dtype, out_dtype):
    graph = _cumsum_graph((4, 33), dtype, 1, out_dtype)
    compiled = compile_graph(graph)
    assert _is_loop(compiled)
    x = _input((4, 33), dtype, seed=1)
    got, expected = compiled(x)[0], interpret(graph, x)[0]
    assert got.dtype == expected.dtype == (out_dtype or (I64 if not dtype.is_floating_point else dtype))
    if got.dtype.is_floating_point:
        tolerance = dict(rtol=2e-3, atol=2e-2) if dtype == F16 else dict(rtol=1e-6, atol=1e-6)
        torch.testing.assert_close(got, expected, **tolerance)
    else:
        assert torch.equal(got, expected)  # integer sums are exact


def test_integer_cumsum_wraps_as_eager():
    graph = _cumsum_graph((2, 4), I64, 1)
    x = torch.tensor([[2**62, 2**62, 2**62, -5], [1, 2, 3, 4]])
    assert torch.equal(compile_graph(graph)(x)[0], interpret(graph, x)[0])


def test_position_ids_from_an_attention_mask_are_one_fused_loop():
    # GPT-2 / BERT style: (mask.long().cumsum(-1) - 1) * mask, from a padding mask with zeros.
    def body(b, mask):
        ones = b.op("aten.ne.Scalar", mask, 0)
        positions = b.op("aten.cumsum.default", ones, -1)
        return b.op("aten.mul.Tensor", b.op("aten.sub.Tensor", positions, 1), mask)

    graph = make_graph("position_ids", {"mask": ((4, 128), I64)}, body)
    compiled = compile_graph(graph)
    assert _is_loop(compiled)
    reductions = [b for b in compiled.program.buffers if isinstance(b.body, Reduction)]
    assert len(reductions) == 1  # the ne() is computed inside the scan's loop, not stored first
    mask = torch.ones(4, 128, dtype=I64)
    mask[0, 100:] = 0
    mask[2, :7] = 0
    assert_matches_eager(compiled, graph, mask)


def test_scan_of_a_noncontiguous_view():
    def body(b, x):
        return b.op("aten.cumsum.default", b.op("aten.transpose.int", x, 0, 1), 1)

    graph = make_graph("transposed", {"x": ((6, 9), F32)}, body)
    compiled = compile_graph(graph)
    assert _is_loop(compiled)
    assert_matches_eager(compiled, graph, _input((6, 9), F32), rtol=1e-5, atol=1e-5)


def test_zero_d_and_empty_scans():
    zero_d = _cumsum_graph((), F32, 0)
    assert_matches_eager(compile_graph(zero_d), zero_d, torch.tensor(2.5))
    empty = _cumsum_graph((0, 4), F32, 1)
    got = compile_graph(empty)(torch.empty(0, 4))[0]
    assert got.shape == (0, 4)


def test_long_scans_stay_extern_calls_with_a_reason():
    graph = _cumsum_graph((2, MAX_SCAN_LENGTH + 1), F32, 1)
    program = lower(to_prims(graph))
    assert [op for op, _ in program.fallbacks] == ["prims.cumsum"]
    assert "scan of length" in program.fallbacks[0][1]
    x = _input((2, MAX_SCAN_LENGTH + 1), F32)
    assert_matches_eager(compile_graph(graph), graph, x, rtol=1e-4, atol=1e-4)


def test_scan_lowers_to_a_masked_sum_reduction():
    program = lower(to_prims(_cumsum_graph((3, 8), I64, 1)))
    (buffer,) = [b for b in program.buffers if isinstance(b, ComputedBuffer)]
    assert isinstance(buffer.body, Reduction) and buffer.body.reduction_type == "sum"
    assert buffer.body.reduction_ranges == (8,) and buffer.layout.dtype == I64


@pytest.mark.parametrize("dtype", [F32, I64])
def test_cumsum_runs_through_triton(dtype):
    pytest.importorskip("triton")
    from torchsmith.inductor.gpu_pipeline import compile_graph_triton

    device = "cuda" if torch.cuda.is_available() else "cpu"
    graph = make_graph("cumsum", {"x": TensorType.make((5, 20), dtype, device=device)}, _cumsum_body(1))
    x = _input((5, 20), dtype).to(device)
    assert_matches_eager(compile_graph_triton(graph), graph, x, rtol=1e-5, atol=1e-5)
