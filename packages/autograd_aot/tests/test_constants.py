"""Tensors made from Python data inside a traced program (`torch.tensor([...])`, list indices) are
recorded as `torch.tensor` constant nodes, so the lowered graph rebuilds them on its own device."""

import torch

from torchsmith.autograd_aot import aot_eager, trace
from torchsmith.ir import GraphBuilder, Slice, TensorType, interpret


def _graph():
    b = GraphBuilder("constants")
    x = b.input("x", TensorType.make([3, 4], torch.float32))
    picked = b.op("torch.Tensor.__getitem__", x, (Slice(None, None, None), [0, 2]))
    rows = b.op("torch.Tensor.__getitem__", x, [2, 0])
    shift = b.op("torch.tensor", [1.0, 2.0, 3.0, 4.0])
    return b.build(picked, rows, b.op("torch.add", x, shift))


def test_constants_become_torch_tensor_nodes():
    traced = trace(_graph(), [torch.randn(3, 4)], training=False)
    constants = [n for n in traced.graph.nodes if n.op == "torch.tensor"]
    assert [list(n.args[0]) for n in constants] == [[0, 2], [2, 0], [1.0, 2.0, 3.0, 4.0]]


def test_constants_match_eager_forward_and_backward():
    graph = _graph()
    x = torch.randn(3, 4, requires_grad=True)
    expected = interpret(graph, x)
    got = aot_eager(graph, [x])(x)
    for g, e in zip(got, expected):
        torch.testing.assert_close(g, e)
    sum(o.sum() for o in expected).backward()
    expected_grad, x.grad = x.grad, None
    sum(o.sum() for o in got).backward()
    torch.testing.assert_close(x.grad, expected_grad)


def test_tensors_a_python_torch_function_makes_on_its_inputs_device_are_constants():
    # torch.unravel_index builds its coefficients with torch.tensor(data, device=indices.device):
    # on the tracer's meta inputs the data would be lost (data_constants.py)
    b = GraphBuilder("unravel")
    x = b.input("x", TensorType.make([2, 3], torch.int64))
    rows, cols = b.op("torch.unravel_index", x, (4, 5))
    graph = b.build(rows, cols)
    traced = trace(graph, [torch.zeros(2, 3, dtype=torch.int64)], training=False)
    constants = [list(n.args[0]) for n in traced.graph.nodes if n.op == "torch.tensor"]
    assert [5, 1] in constants and [4, 5] in constants
    x = torch.randint(0, 20, (2, 3))
    for got, expected in zip(aot_eager(graph, [x])(x), torch.unravel_index(x, (4, 5))):
        assert torch.equal(got, expected)


def test_a_python_torch_function_calling_itself_in_its_body_is_traced_once():
    # Tensor.unflatten's body calls the C method, which dispatches under the Python name again
    b = GraphBuilder("unflatten")
    x = b.input("x", TensorType.make([2, 6], torch.float32))
    graph = b.build(b.op("torch.Tensor.unflatten", x, 1, (2, 3)))
    x = torch.randn(2, 6)
    torch.testing.assert_close(aot_eager(graph, [x])(x)[0], x.unflatten(1, (2, 3)))
