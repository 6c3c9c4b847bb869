"""triton/bias_matmul.py: a half-precision mm plus bias, as addmm decomposes, runs as one addmm call
on the GPU path (eager's nn.Linear kernel: the bias added before the one rounding)."""

import os

import pytest
import torch

if not torch.cuda.is_available():  # before triton's first import: see test_triton_kernels
    os.environ["TRITON_INTERPRET"] = "1"
pytest.importorskip("triton", reason="triton is not installed (pip install triton==3.6.0)")

from torchsmith.inductor.gpu_pipeline import compile_graph_triton  # noqa: E402
from torchsmith.inductor.lowering.decompose import to_prims  # noqa: E402
from torchsmith.inductor.lowering.lower import lower  # noqa: E402
from torchsmith.inductor.runtime.aligned_matmul import aligned_addmm  # noqa: E402
from torchsmith.inductor.testing import make_graph  # noqa: E402
from torchsmith.inductor.triton.bias_matmul import bias_matmuls  # noqa: E402
from torchsmith.ir import TensorType  # noqa: E402


def _linear(dtype, device="cuda:0", product_out=False):
    """relu(bias + x @ w^T), as nn.Linear traces; with `product_out` the addmm is an output too."""

    def body(b, x, w, bias):
        out = b.op("aten.addmm.default", bias, x, b.op("aten.t.default", w))
        relu = b.op("aten.relu.default", out)
        return (relu, out) if product_out else relu

    shapes = {"x": (16, 32), "w": (48, 32), "bias": (48,)}
    return make_graph("linear", {n: TensorType.make(s, dtype, device) for n, s in shapes.items()}, body)


def _externs(program):
    return [b.kernel for b in program.buffers if hasattr(b, "kernel")]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_linear_is_one_addmm_call(dtype):
    prims = bias_matmuls(to_prims(_linear(dtype)))
    assert "prims.mm" not in prims.ops() and "aten.addmm.default" in prims.ops()
    assert _externs(lower(prims)) == ["extern.addmm"]


def test_float32_linear_is_left_alone():
    prims = to_prims(_linear(torch.float32))
    assert bias_matmuls(prims) is prims


def test_addmm_value_read_twice_is_still_one_call():
    # the addmm's own value (the final conversion) may be read anywhere: only the inner ones may not
    prims = bias_matmuls(to_prims(_linear(torch.bfloat16, product_out=True)))
    assert _externs(lower(prims)) == ["extern.addmm"]


def test_compiled_half_linear_equals_eagers_addmm():
    """Through the GPU pipeline (on the CPU, Triton's interpreter): eager's rounding exactly."""
    device = "cuda" if torch.cuda.is_available() else "cpu"
    graph = _linear(torch.bfloat16, device)
    torch.manual_seed(0)
    x, w, bias = (torch.randn(*shape, device=device).bfloat16() for shape in ((16, 32), (48, 32), (48,)))
    compiled = compile_graph_triton(graph, [x, w, bias])
    assert _externs(compiled.program) == ["extern.addmm"]
    assert torch.equal(compiled(x, w, bias)[0], torch.relu(torch.addmm(bias, x, w.t())))


def test_aligned_addmm_is_addmm_with_padded_rows():
    a, b = torch.randn(16, 32).bfloat16(), torch.randn(1030, 32).bfloat16().t()
    bias = torch.randn(1030).bfloat16()
    got = aligned_addmm(bias, a, b)
    assert got.stride() == (1032, 1)
    torch.testing.assert_close(got, torch.addmm(bias, a, b))
