"""The straight-line form of a static GPU graph gives a kernel's output the tensor of an earlier
buffer of the same layout that nothing reads any more (triton_straight._Reuse): a stack of layers
allocates its first layer's buffers and reuses them, with the same results as eager; outputs and
buffers read by library calls whose result may alias them keep their own memory."""

import os
import re

import pytest
import torch

if not torch.cuda.is_available():  # before triton's first import: see test_triton_kernels
    os.environ["TRITON_INTERPRET"] = "1"
pytest.importorskip("triton", reason="triton is not installed (pip install triton==3.6.0)")

from torchsmith.inductor.gpu_pipeline import compile_graph_triton  # noqa: E402
from torchsmith.inductor.testing import assert_matches_eager, make_graph  # noqa: E402
from torchsmith.ir import TensorType  # noqa: E402

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
LAYERS = 4


def t(*shape):
    return TensorType.make(shape, torch.float32, device=DEVICE)


def _layers(returned: tuple = ()):
    """x -> x + gelu(x @ w_i) * 0.5 over LAYERS weights; also returns the hidden values of the
    layers in `returned`."""

    def body(b, x, *weights):
        extra = []
        for k, w in enumerate(weights):
            hidden = b.op("aten.gelu.default", b.op("aten.mm.default", x, w))
            if k in returned:
                extra.append(hidden)
            x = b.op("aten.add.Tensor", x, b.op("aten.mul.Tensor", hidden, 0.5))
        return (x, *extra)

    types = {"x": t(8, 32)} | {f"w{k}": t(32, 32) for k in range(LAYERS)}
    return make_graph("layers", types, body)


def _calls(graph, compiled, count: int = 4) -> list:
    """Calls with new inputs each time, each against eager; the allocations of the last call."""
    weights = [torch.randn(32, 32, device=DEVICE) / 6 for _ in range(LAYERS)]

    def call():
        x = torch.randn(8, 32, device=DEVICE)
        assert_matches_eager(compiled, graph, x, *weights, rtol=1e-5, atol=1e-5)

    for _ in range(count - 1):
        call()
    namespace = compiled._straight.__globals__
    allocate, allocations = namespace["empty_strided"], []
    namespace["empty_strided"] = lambda *a, **k: allocations.append(a[0]) or allocate(*a, **k)
    call()
    return allocations


def test_later_layers_reuse_the_first_layers_buffers():
    graph = _layers()
    compiled = compile_graph_triton(graph)
    allocations = _calls(graph, compiled)
    assert compiled._straight, "the straight-line form runs (it checked itself against the steps)"
    assert re.search(r"^ *x\d+ = T\[n\d+\] = x\d+$", compiled._straight.source, re.M)
    # each layer's kernel writes an 8x32 buffer: the first layers' are allocated, the rest reused
    assert 0 < len(allocations) < LAYERS, allocations


def test_returned_buffers_keep_their_memory():
    graph = _layers(returned=(0, 2))
    compiled = compile_graph_triton(graph)
    _calls(graph, compiled)  # eager's hidden values come back unchanged by later layers
    assert compiled._straight
