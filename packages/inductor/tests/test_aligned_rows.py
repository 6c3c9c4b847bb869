"""Half-precision CUDA matmuls whose rows are not a multiple of 8 long (vocabulary heads) store
their result with padded rows, so the library writes with an aligned leading dimension; readers
and graph outputs see the values eager computes."""

import os

import pytest
import torch

if not torch.cuda.is_available():  # before triton's first import: see test_triton_kernels
    os.environ["TRITON_INTERPRET"] = "1"
pytest.importorskip("triton", reason="triton is not installed (pip install triton==3.6.0)")

from torchsmith.inductor import compile_graph  # noqa: E402
from torchsmith.inductor.gpu_pipeline import compile_graph_triton  # noqa: E402
from torchsmith.inductor.lowering import library  # noqa: E402
from torchsmith.inductor.lowering.decompose import to_prims  # noqa: E402
from torchsmith.inductor.lowering.lower import lower  # noqa: E402
from torchsmith.inductor.testing import assert_matches_eager, make_graph  # noqa: E402
from torchsmith.ir import TensorType  # noqa: E402


def _head(dtype, device, vocab=101, rows=64, width=32, batched=False):
    """relu(x @ w^T) and x @ w^T: the product read by a kernel and returned as an output."""
    x_shape = (2, rows, width) if batched else (rows, width)
    w_shape = (2, vocab, width) if batched else (vocab, width)

    def body(b, x, w):
        if batched:
            product = b.op("aten.bmm.default", x, b.op("aten.transpose.int", w, 1, 2))
        else:
            product = b.op("aten.mm.default", x, b.op("aten.t.default", w))
        return b.op("aten.relu.default", product), product

    types = {n: TensorType.make(s, dtype, device) for n, s in (("x", x_shape), ("w", w_shape))}
    return make_graph("head", types, body)


def _matmul_strides(program):
    matmuls = ("prims.mm", "prims.bmm")
    return [b.layout.strides for b in program.buffers if getattr(b, "kernel", "") in matmuls]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_cuda_vocabulary_head_rows_are_padded(dtype):
    assert _matmul_strides(lower(to_prims(_head(dtype, "cuda:0")))) == [(104, 1)]
    assert _matmul_strides(lower(to_prims(_head(dtype, "cuda:0", batched=True)))) == [(64 * 104, 104, 1)]


@pytest.mark.parametrize(
    "dtype, device, vocab", [(torch.float32, "cuda:0", 101), (torch.bfloat16, "cpu", 101),
                             (torch.bfloat16, "cuda:0", 104)],
)
def test_other_matmuls_keep_dense_rows(dtype, device, vocab):
    (strides,) = _matmul_strides(lower(to_prims(_head(dtype, device, vocab))))
    assert strides == (vocab, 1)


def _pad_every_row(t):
    return t.rank >= 2 and isinstance(t.shape[-1], int) and t.shape[-1] % library.ROW_ALIGNMENT != 0


@pytest.mark.parametrize("batched", [False, True])
@pytest.mark.parametrize("rows", [8, 1024])  # a result below and above the extern pool's size
def test_padded_results_compute_eagers_values(monkeypatch, batched, rows):
    """The padded layout on the CPU (C++ and the Triton interpreter), where the condition is forced:
    the library writes into the padded buffer (`out=`), the kernel reads it, the output is dense."""
    monkeypatch.setattr(library, "needs_aligned_rows", _pad_every_row)
    graph = _head(torch.float32, "cpu", rows=rows, batched=batched)
    x_shape = (2, rows, 32) if batched else (rows, 32)
    inputs = [torch.randn(x_shape), torch.randn(((2,) if batched else ()) + (101, 32))]
    for compiled in (compile_graph(graph, inputs), compile_graph_triton(graph, inputs)):
        assert _matmul_strides(compiled.program)[0][-2] == 104
        assert_matches_eager(compiled, graph, *inputs, rtol=1e-4, atol=1e-4)
        outputs = compiled(*inputs)
        assert outputs[1].is_contiguous()  # a graph output has eager's layout
