"""Symbolic sizes: one lowering serves every size of the dynamic dimensions, or we specialize."""

import torch

from torchsmith.autograd_aot import aot_eager
from torchsmith.ir import GraphBuilder, TensorType, Value, interpret, symbol

S0 = symbol("s0")


def f32(*shape, grad=False):
    return TensorType.make(shape, torch.float32, requires_grad=grad)


def with_dynamic_batch(graph):
    """The graph with the first dim of its first input symbolic (the torch-level nodes run the same)."""
    x = graph.inputs[0]
    t = x.type.replace(shape=(S0,) + x.type.shape[1:])
    return graph.replace(inputs=(Value(x.name, t),) + graph.inputs[1:])


def run_both(graph, fn, inputs):
    eager = [x.detach().clone().requires_grad_(x.requires_grad) for x in inputs]
    compiled = [x.detach().clone().requires_grad_(x.requires_grad) for x in inputs]
    expected, actual = interpret(graph, *eager), fn(*compiled)
    for e, a in zip(expected, actual):
        torch.testing.assert_close(a, e, atol=1e-4, rtol=1e-4)
    if any(x.requires_grad for x in inputs):
        sum(e.pow(2).sum() for e in expected).backward()
        sum(a.pow(2).sum() for a in actual).backward()
    for e, a in zip(eager, compiled):
        torch.testing.assert_close(a.detach(), e.detach(), atol=1e-4, rtol=1e-4)
        if e.requires_grad:
            torch.testing.assert_close(a.grad, e.grad, atol=1e-3, rtol=1e-3)


def mlp():
    b = GraphBuilder("mlp")
    x, w = b.input("x", f32(S0, 16)), b.input("w", f32(32, 16, grad=True))
    h = b.op("torch.nn.functional.gelu", b.op("torch.nn.functional.linear", x, w, out_type=f32(S0, 32)),
             out_type=f32(S0, 32))
    flat = b.op("torch.Tensor.view", h, -1, out_type=f32(S0 * 32))
    return b.build(b.op("torch.mean", h, 0, out_type=f32(32)), flat)


def test_one_program_serves_every_batch_size():
    graph = mlp()
    w = torch.randn(32, 16, requires_grad=True)
    fn = aot_eager(graph, [torch.randn(4, 16), w])
    program = fn.last_program
    assert str(program.forward_graph.inputs[0].type) == "f32[s0, 16] cpu"
    assert "f32[s0, 32]" in str(program.backward_graph)
    for n in (4, 7, 12):
        run_both(graph, fn, [torch.randn(n, 16), w])
    assert len(fn.symbolic) == 1 and len(fn.programs) == 1


def test_backward_gets_sizes_it_cannot_read_from_its_inputs():
    b = GraphBuilder("total")
    x = b.input("x", f32(S0, 4, grad=True))
    graph = b.build(b.op("torch.Tensor.sum", b.op("torch.mul", x, 2.0, out_type=f32(S0, 4)), out_type=f32()))
    fn = aot_eager(graph, [torch.randn(3, 4, requires_grad=True)])
    backward = fn.last_program.backward_graph
    assert any(str(v.type) == "sym(s0)" for v in backward.inputs)
    for n in (3, 6):
        run_both(graph, fn, [torch.randn(n, 4, requires_grad=True)])
    assert len(fn.programs) == 1


def test_size_one_is_specialized_and_other_sizes_get_a_symbolic_program():
    graph = mlp()
    w = torch.randn(32, 16, requires_grad=True)
    fn = aot_eager(graph, [torch.randn(1, 16), w])
    assert fn.symbolic == []
    run_both(graph, fn, [torch.randn(1, 16), w])
    run_both(graph, fn, [torch.randn(5, 16), w])
    assert len(fn.symbolic) == 1 and len(fn.programs) == 2


def test_sizes_beyond_the_fitted_forms_fall_back_to_concrete_programs():
    b = GraphBuilder("cubic")
    x = b.input("x", f32(S0))
    outer = b.op("torch.outer", x, x, out_type=f32(S0, S0))
    square = b.op("torch.Tensor.reshape", outer, -1, out_type=f32(S0 * S0))
    power = square
    for k in (3, 4, 5):
        outer = b.op("torch.outer", power, x, out_type=f32(S0 ** (k - 1), S0))
        power = b.op("torch.Tensor.reshape", outer, -1, out_type=f32(S0 ** k))
    graph = b.build(b.op("torch.cos", power, out_type=f32(S0 ** 5)))
    fn = aot_eager(graph, [torch.randn(3)])
    assert fn.symbolic == []  # s0**5 is not fitted (monomials go up to degree 4): specialized, still right
    run_both(graph, fn, [torch.randn(3)])
    run_both(graph, fn, [torch.randn(4)])
    assert len(fn.programs) == 2


def test_channels_last_values_of_four_symbolic_dims_lower_once():
    # the batch stride of an (s0, s1, s2, s3) channels-last tensor is s1*s2*s3: a degree-3 monomial
    n, c, h, w = (symbol(f"s{k}") for k in range(4))
    b = GraphBuilder("nhwc")
    x = b.input("x", TensorType.make((n, c, h, w), torch.float32, requires_grad=True))
    nhwc = TensorType((n, c, h, w), torch.float32, "cpu", (c * h * w, 1, w * c, c), True)
    y = b.op("torch.Tensor.contiguous", x, memory_format=torch.channels_last, out_type=nhwc)
    graph = b.build(b.op("torch.sin", y, out_type=nhwc))
    fn = aot_eager(graph, [torch.randn(2, 3, 4, 5, requires_grad=True)])
    assert len(fn.symbolic) == 1
    for shape in ((2, 3, 4, 5), (3, 2, 5, 7), (4, 5, 3, 2)):
        x_value = torch.randn(*shape, requires_grad=True)
        (out,) = fn(x_value)
        expected = x_value.detach().contiguous(memory_format=torch.channels_last).sin()
        torch.testing.assert_close(out, expected)
        assert out.stride() == expected.stride()
    assert len(fn.programs) == 1
