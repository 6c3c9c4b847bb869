"""Half-precision CUDA matmuls with an unaligned column count (vocabulary heads) run as
`extern.aligned_mm`: the right operand padded per call, the result a view of the padded product
with padded rows; readers and graph outputs see the values eager computes."""

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
from torchsmith.inductor.runtime.aligned_matmul import aligned_mm  # noqa: E402
from torchsmith.inductor.testing import assert_matches_eager, make_graph  # noqa: E402
from torchsmith.ir import TensorType  # noqa: E402

VOCAB = 1030  # past MIN_ALIGNED_COLUMNS, 6 past a multiple of 8


def _head(dtype, device, vocab=VOCAB, rows=16, width=32):
    """relu(x @ w^T) and x @ w^T: the product read by a kernel and returned as an output."""

    def body(b, x, w):
        product = b.op("aten.mm.default", x, b.op("aten.t.default", w))
        return b.op("aten.relu.default", product), product

    types = {n: TensorType.make(s, dtype, device) for n, s in (("x", (rows, width)), ("w", (vocab, width)))}
    return make_graph("head", types, body)


def _matmuls(program):
    return [(b.kernel, b.layout.strides) for b in program.buffers if "mm" in getattr(b, "kernel", "")]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_cuda_vocabulary_head_runs_padded(dtype):
    assert _matmuls(lower(to_prims(_head(dtype, "cuda:0")))) == [("extern.aligned_mm", (1032, 1))]


@pytest.mark.parametrize(
    "dtype, device, vocab", [(torch.float32, "cuda:0", VOCAB), (torch.bfloat16, "cpu", VOCAB),
                             (torch.bfloat16, "cuda:0", 1032), (torch.bfloat16, "cuda:0", 101)],
)
def test_other_matmuls_stay_plain(dtype, device, vocab):
    assert _matmuls(lower(to_prims(_head(dtype, device, vocab)))) == [("prims.mm", (vocab, 1))]


@pytest.mark.parametrize("transposed", [True, False])
def test_aligned_mm_is_the_product_with_padded_rows(transposed):
    a = torch.randn(16, 32, dtype=torch.bfloat16)
    b = torch.randn(VOCAB, 32, dtype=torch.bfloat16).t() if transposed else torch.randn(32, VOCAB).bfloat16()
    got = aligned_mm(a, b)
    assert got.shape == (16, VOCAB) and got.stride() == (1032, 1)
    torch.testing.assert_close(got, torch.mm(a, b))


def test_padded_results_compute_eagers_values(monkeypatch):
    """The padded call on the CPU (C++ and the Triton interpreter), where the condition is forced:
    kernels read the padded rows, the graph output is dense."""
    monkeypatch.setattr(library, "needs_aligned_columns", lambda t: t.rank == 2 and t.shape[1] == VOCAB)
    graph = _head(torch.float32, "cpu")
    inputs = [torch.randn(16, 32), torch.randn(VOCAB, 32)]
    for compiled in (compile_graph(graph, inputs), compile_graph_triton(graph, inputs)):
        assert _matmuls(compiled.program) == [("extern.aligned_mm", (1032, 1))]
        assert_matches_eager(compiled, graph, *inputs, rtol=1e-4, atol=1e-4)
        assert compiled(*inputs)[1].is_contiguous()  # a graph output has eager's layout
