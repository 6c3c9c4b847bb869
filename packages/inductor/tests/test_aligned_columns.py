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


def _cases(make, inputs):
    """(compiled, graph, inputs, tolerance) for the C++ backend on the CPU in float32, and for the Triton
    backend: its interpreter on the CPU, or on a GPU its kernels in bfloat16 (the dtype that takes
    the padded path there, the forced condition then agreeing with the real one)."""
    graph = make(torch.float32, "cpu")
    cases = [(compile_graph(graph, inputs), graph, inputs, 1e-4)]
    if torch.cuda.is_available():
        graph, inputs = make(torch.bfloat16, "cuda:0"), [x.to("cuda", torch.bfloat16) for x in inputs]
        cases.append((compile_graph_triton(graph, inputs), graph, inputs, 3e-2))
    else:
        cases.append((compile_graph_triton(graph, inputs), graph, inputs, 1e-4))
    return cases


def test_padded_results_compute_eagers_values(monkeypatch):
    """The padded call, with the condition forced on the CPU: kernels read the padded rows, the
    graph output is dense."""
    monkeypatch.setattr(library, "needs_aligned_columns", lambda t: t.rank == 2 and t.shape[1] == VOCAB)
    inputs = [torch.randn(16, 32), torch.randn(VOCAB, 32)]
    for compiled, graph, args, tolerance in _cases(_head, inputs):
        assert _matmuls(compiled.program) == [("extern.aligned_mm", (1032, 1))]
        assert_matches_eager(compiled, graph, *args, rtol=tolerance, atol=tolerance)
        assert compiled(*args)[1].is_contiguous()  # a graph output has eager's layout


def _logits(dtype, device, bias: bool, rows=library.MIN_DENSE_ROWS, vocab=VOCAB, width=32):
    """A vocabulary head whose product only the graph output reads, through a reshape to
    [2, rows / 2, vocab] (transformers' logits)."""

    def body(b, x, w, c):
        wt = b.op("aten.t.default", w)
        product = b.op("aten.addmm.default", c, x, wt) if bias else b.op("aten.mm.default", x, wt)
        return b.op("aten.view.default", product, [2, rows // 2, vocab])

    shapes = (("x", (rows, width)), ("w", (vocab, width)), ("c", (vocab,)))
    return make_graph("logits", {n: TensorType.make(s, dtype, device) for n, s in shapes}, body)


def _kernels(program):
    return [getattr(b, "kernel", "loop") for b in program.buffers]


def test_padded_product_only_an_output_reads_is_written_dense():
    kernels = _kernels(lower(to_prims(_logits(torch.bfloat16, "cuda:0", False))))
    assert kernels == ["extern.dense_mm"]  # no copy into a dense output


def test_padded_product_a_kernel_reads_stays_padded():
    graph = _head(torch.bfloat16, "cuda:0", rows=library.MIN_DENSE_ROWS)
    assert _matmuls(lower(to_prims(graph))) == [("extern.aligned_mm", (1032, 1))]


def test_few_rows_keep_the_library_product_and_a_copy():
    kernels = _kernels(lower(to_prims(_logits(torch.bfloat16, "cuda:0", False, rows=16))))
    assert kernels[0] == "extern.aligned_mm" and len(kernels) == 2


@pytest.mark.parametrize("bias", [False, True])
def test_dense_outputs_compute_eagers_values(monkeypatch, bias):
    """Forced on the CPU as above: the product written dense is the graph output itself."""
    monkeypatch.setattr(library, "needs_aligned_columns", lambda t: t.rank == 2 and t.shape[1] == VOCAB)
    inputs = [torch.randn(library.MIN_DENSE_ROWS, 32), torch.randn(VOCAB, 32), torch.randn(VOCAB)]
    make = lambda dtype, device: _logits(dtype, device, bias)  # noqa: E731
    for compiled, graph, args, tolerance in _cases(make, inputs):
        if not bias:  # (a bias add stays a loop writing the output: it needs no copy either)
            assert _kernels(compiled.program) == ["extern.dense_mm"]
        assert_matches_eager(compiled, graph, *args, rtol=tolerance, atol=tolerance)
        assert compiled(*args)[0].is_contiguous()


@pytest.mark.parametrize("bias", [False, True])
def test_triton_matmul_writes_unaligned_rows_dense(bias):
    """The kernel `dense_mm` runs on a GPU (in half precision, the only products given it; its
    tiles do not fit a GPU's shared memory in float32), elsewhere under the interpreter: rows of
    300 columns."""
    from torchsmith.inductor.runtime.aligned_matmul import DENSE_CONFIG
    from torchsmith.inductor.triton.matmul import matmul_epilogue

    gpu = torch.cuda.is_available()
    like = {"device": "cuda", "dtype": torch.bfloat16} if gpu else {}
    a, b, c = torch.randn(130, 70, **like), torch.randn(300, 70, **like).t(), torch.randn(300, **like)
    got = matmul_epilogue(a, b, c if bias else None, config=DENSE_CONFIG)
    assert got.shape == (130, 300) and got.is_contiguous()
    a, b, c = a.double(), b.double(), c.double()
    tolerance = {"rtol": 2e-2, "atol": 0.1} if gpu else {"rtol": 1e-4, "atol": 1e-4}
    torch.testing.assert_close(got.double(), torch.addmm(c, a, b) if bias else a @ b, **tolerance)
