"""The runtime: lazy backward, non-differentiable outputs, None grads, specialization, backends."""

import pytest
import torch

from torchsmith.autograd_aot import (
    TraceError,
    aot_compile,
    aot_eager,
    aot_eager_backend,
    interpreter_compiler,
)
from torchsmith.ir import GraphBuilder, TensorType, interpret


def f32(*shape, grad=False):
    return TensorType.make(shape, torch.float32, requires_grad=grad)


def linear_graph():
    b = GraphBuilder("linear")
    x, w, b_ = b.input("x", f32(4, 3)), b.input("w", f32(2, 3, grad=True)), b.input("b", f32(2, grad=True))
    return b.build(b.op("torch.nn.functional.linear", x, w, b_))


class CountingCompiler:
    def __init__(self):
        self.graphs = []

    def __call__(self, graph, example_inputs):
        self.graphs.append(graph)
        return interpreter_compiler(graph, example_inputs)


def test_backward_is_compiled_lazily_once():
    fw, bw = CountingCompiler(), CountingCompiler()
    x, w, b = torch.randn(4, 3), torch.randn(2, 3, requires_grad=True), torch.randn(2, requires_grad=True)
    fn = aot_compile(linear_graph(), [x, w, b], fw, bw)
    assert len(fw.graphs) == 1 and bw.graphs == []
    for _ in range(2):
        (y,) = fn(x, w, b)
        y.sum().backward()
    assert len(fw.graphs) == 1 and len(bw.graphs) == 1
    assert bw.graphs[0].name == "linear_backward"
    torch.testing.assert_close(w.grad, 2 * torch.ones(4, 2).t() @ x)


def test_non_differentiable_outputs_and_unused_inputs():
    b = GraphBuilder("mixed")
    x = b.input("x", f32(5, grad=True))
    b.input("unused", f32(5, grad=True))
    graph = b.build(b.op("torch.mul", x, 3.0), b.op("torch.argmax", x))
    x_value, unused_value = torch.randn(5, requires_grad=True), torch.randn(5, requires_grad=True)
    fn = aot_eager(graph, [x_value, unused_value])
    y, index = fn(x_value, unused_value)
    assert not index.requires_grad and index.dtype == torch.int64
    assert index.item() == x_value.argmax().item()
    y.sum().backward()
    torch.testing.assert_close(x_value.grad, torch.full((5,), 3.0))
    assert unused_value.grad is None


def test_output_with_no_gradient_flowing_gets_zeros():
    b = GraphBuilder("two")
    x = b.input("x", f32(3, grad=True))
    graph = b.build(b.op("torch.sin", x), b.op("torch.cos", x))
    x_value = torch.randn(3, requires_grad=True)
    sin, _ = aot_eager(graph, [x_value])(x_value)
    sin.sum().backward()  # the second output takes no part: its grad arrives as None
    torch.testing.assert_close(x_value.grad, x_value.detach().cos())


def test_double_backward_differentiates_the_recomputed_graph():
    b = GraphBuilder("cube")
    x = b.input("x", f32(3, grad=True))
    graph = b.build(b.op("torch.mul", b.op("torch.mul", x, x), x))
    x_value = torch.randn(3, requires_grad=True)
    (y,) = aot_eager(graph, [x_value])(x_value)
    with pytest.warns(UserWarning, match="backward of graph cube as eager ops .*create_graph=True"):
        (grad,) = torch.autograd.grad(y.sum(), x_value, create_graph=True)
    torch.testing.assert_close(grad, 3 * x_value.detach() ** 2)
    grad.sum().backward()
    torch.testing.assert_close(x_value.grad, 6 * x_value.detach())


def test_double_backward_with_random_ops_replays_the_forwards_numbers():
    b = GraphBuilder("noisy")
    x = b.input("x", f32(3, grad=True))
    graph = b.build(b.op("torch.nn.functional.dropout", b.op("torch.mul", x, x), 0.5, True))
    x_value = torch.randn(3, requires_grad=True)
    torch.manual_seed(0)
    (y,) = aot_eager(graph, [x_value])(x_value)
    (grad,) = torch.autograd.grad(y.sum(), x_value, create_graph=True)
    torch.manual_seed(0)
    mask = torch.nn.functional.dropout(torch.ones(3), 0.5, True)
    torch.testing.assert_close(grad, 2 * x_value.detach() * mask)


def test_new_shapes_and_grad_modes_get_their_own_program():
    fn = aot_eager(linear_graph(), [torch.randn(4, 3), torch.randn(2, 3, requires_grad=True),
                                    torch.randn(2, requires_grad=True)])
    x, w, b = torch.randn(7, 3), torch.randn(2, 3, requires_grad=True), torch.randn(2, requires_grad=True)
    (y,) = fn(x, w, b)
    torch.testing.assert_close(y, interpret(linear_graph(), x, w, b)[0])
    with torch.no_grad():
        (z,) = fn(x, w, b)
    assert not z.requires_grad
    assert len(fn.programs) == 3
    assert fn.last_program.backward_graph is None


def test_inference_when_no_input_requires_grad():
    fn = aot_eager(linear_graph(), [torch.randn(4, 3), torch.randn(2, 3), torch.randn(2)])
    program = fn.last_program
    assert program.backward_graph is None and program.report is None
    assert not any("backward" in op for op in program.forward_graph.ops())


def test_backend_signature():
    x, w, b = torch.randn(4, 3), torch.randn(2, 3), torch.randn(2)
    compiled = aot_eager_backend(linear_graph(), [x, w, b])
    torch.testing.assert_close(compiled(x, w, b)[0], torch.nn.functional.linear(x, w, b))


def test_data_dependent_ops_name_the_node():
    b = GraphBuilder("item")
    x = b.input("x", f32(3))
    n = b.op("torch.Tensor.item", b.op("torch.Tensor.sum", x), out_type="float")
    graph = b.build(b.op("torch.mul", x, n, out_type=f32(3)))
    with pytest.raises(TraceError, match="torch.Tensor.item"):
        aot_eager(graph, [torch.randn(3)])
