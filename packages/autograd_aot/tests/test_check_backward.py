"""`aot_compile(check_backward=...)`: a backend refuses a backward graph when the forward compiles,
not later inside `.backward()`."""

import pytest
import torch

from torchsmith.autograd_aot import aot_compile, interpreter_compiler
from torchsmith.ir import GraphBuilder, TensorType


def _graph():
    b = GraphBuilder("sin_mul")
    x = b.input("x", TensorType.make([4], torch.float32))
    w = b.input("w", TensorType.make([4], torch.float32))
    return b.build(b.op("torch.mul", b.op("torch.sin", x), w))


def test_check_backward_sees_the_backward_graph_at_compile_time():
    seen = []
    x, w = torch.randn(4), torch.randn(4, requires_grad=True)
    aot_compile(_graph(), [x, w], interpreter_compiler, check_backward=seen.append)
    assert len(seen) == 1 and any(n.op.startswith("aten.") for n in seen[0].nodes)


def test_check_backward_refusal_propagates_and_inference_skips_it():
    def refuse(graph):
        raise RuntimeError("no backward here")

    x, w = torch.randn(4), torch.randn(4, requires_grad=True)
    with pytest.raises(RuntimeError, match="no backward here"):
        aot_compile(_graph(), [x, w], interpreter_compiler, check_backward=refuse)
    (y,) = aot_compile(_graph(), [x, w.detach()], interpreter_compiler, check_backward=refuse)(x, w.detach())
    torch.testing.assert_close(y, x.sin() * w.detach())
