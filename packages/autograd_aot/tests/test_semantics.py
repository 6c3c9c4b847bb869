"""Semantics at the edges of autograd: grad mode switched inside a graph, in-place shape changes of
inputs, double backward, and inputs that share memory, each compared with eager PyTorch."""

import pytest
import torch

from torchsmith.autograd_aot import aot_eager, trace
from torchsmith.ir import GraphBuilder, TensorType, interpret


def f32(*shape, grad=False):
    return TensorType.make(shape, torch.float32, requires_grad=grad)


def build(fn, *types, name="program"):
    b = GraphBuilder(name)
    inputs = [b.input(f"a{i}", t) for i, t in enumerate(types)]
    outputs = fn(b, *inputs)
    return b.build(*(outputs if isinstance(outputs, tuple) else (outputs,)))


def set_grad(b, enabled):
    b.op("torch._C._set_grad_enabled", enabled, out_type=[])


def enable_grad_region(b, x):
    """`with torch.enable_grad(): y = x * 2` followed by `z = x * 3` outside it (called under no_grad)."""
    set_grad(b, True)
    y = b.op("torch.mul", x, 2.0)
    set_grad(b, False)
    return y, b.op("torch.mul", x, 3.0)


# --- grad mode ------------------------------------------------------------------------------------


def test_enable_grad_inside_a_graph_called_under_no_grad():
    graph = build(enable_grad_region, f32(3, grad=True))
    x = torch.randn(3, requires_grad=True)
    with torch.no_grad():
        fn = aot_eager(graph, [x])
        y, z = fn(x)
        expected = interpret(graph, x)
    assert (y.requires_grad, z.requires_grad) == (True, False) == tuple(e.requires_grad for e in expected)
    assert fn.last_program.is_training
    y.sum().backward()
    torch.testing.assert_close(x.grad, torch.full((3,), 2.0))


def test_no_grad_graph_without_enable_grad_stays_inference():
    graph = build(lambda b, x: b.op("torch.mul", x, 2.0), f32(3, grad=True))
    x = torch.randn(3, requires_grad=True)
    with torch.no_grad():
        fn = aot_eager(graph, [x])
        (y,) = fn(x)
    assert not y.requires_grad and not fn.last_program.is_training


def test_view_taken_under_no_grad_has_no_history():
    def program(b, x):
        set_grad(b, False)
        frozen = b.op("torch.Tensor.__getitem__", x, 0)
        set_grad(b, True)
        return frozen, b.op("torch.Tensor.__getitem__", x, 1), b.op("torch.mul", x, 2.0)

    graph = build(program, f32(3, 2, grad=True))
    x, x_eager = torch.randn(3, 2, requires_grad=True), None
    x_eager = x.detach().clone().requires_grad_()
    outs, expected = aot_eager(graph, [x])(x), interpret(graph, x_eager)
    assert [o.grad_fn is None for o in outs] == [e.grad_fn is None for e in expected] == [True, False, False]
    sum(o.sum() for o in outs).backward()
    sum(e.sum() for e in expected).backward()
    torch.testing.assert_close(x.grad, x_eager.grad)


# --- in-place shape changes -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "args", "shape"),
    [("torch.Tensor.unsqueeze_", (0,), (2, 3)), ("torch.Tensor.t_", (), (2, 3)),
     ("torch.Tensor.transpose_", (0, 1), (2, 3)), ("torch.Tensor.squeeze_", (1,), (3, 1, 2)),
     ("torch.Tensor.as_strided_", ((3, 2), (1, 3)), (2, 3)), ("torch.Tensor.resize_", ((3, 2),), (6,))],
)
def test_shape_change_then_write_matches_eager(method, args, shape):
    def program(b, x):
        b.op(method, x, *args)
        b.op("torch.Tensor.add_", x, 1.0)
        return b.op("torch.mul", x, 2.0)

    graph = build(program, f32(*shape))
    x = torch.randn(*shape)
    x_eager = x.clone()
    (out,) = aot_eager(graph, [x.clone()])(x)
    (expected,) = interpret(graph, x_eager)
    torch.testing.assert_close(out, expected)
    assert (x.shape, x.stride(), x.storage_offset()) == (
        x_eager.shape,
        x_eager.stride(),
        x_eager.storage_offset(),
    )
    torch.testing.assert_close(x, x_eager)


def test_shape_change_of_a_view_input_writes_its_base():
    def program(b, x):
        b.op("torch.Tensor.t_", x)
        b.op("torch.Tensor.mul_", b.op("torch.Tensor.__getitem__", x, 0), 10.0)
        return b.op("torch.Tensor.sum", x)

    graph = build(program, f32(3, 3))
    base, base_eager = torch.randn(4, 3), None
    base_eager = base.clone()
    (out,) = aot_eager(graph, [torch.randn(3, 3)])(base[1:])
    view_eager = base_eager[1:]
    (expected,) = interpret(graph, view_eager)
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(base, base_eager)


def test_shape_change_of_an_input_saved_for_backward():
    def program(b, x, w):
        b.op("torch.Tensor.squeeze_", x, 1)
        return b.op("torch.matmul", x, w)

    graph = build(program, f32(3, 1, 4), f32(4, 2, grad=True))
    x, w = torch.randn(3, 1, 4), torch.randn(4, 2, requires_grad=True)
    (y,) = aot_eager(graph, [x.clone(), w])(x, w)
    y.sum().backward()  # the saved x has the version its squeeze_ gave it, as in eager
    assert x.shape == (3, 4)
    torch.testing.assert_close(w.grad, x.sum(0)[:, None].expand(4, 2))


def test_shape_change_on_a_leaf_that_requires_grad_raises_like_eager():
    graph = build(lambda b, x: b.op("torch.Tensor.t_", x), f32(2, 3, grad=True))
    x = torch.randn(2, 3, requires_grad=True)
    with pytest.raises(Exception, match="leaf Variable that requires grad"):
        aot_eager(graph, [x])(x)


def test_shape_change_is_traced_as_its_view_twin():
    def program(b, x):
        return b.op("torch.Tensor.transpose_", b.op("torch.Tensor.unsqueeze_", x, 0), 0, 1)

    traced = trace(build(program, f32(3)), [torch.randn(3)], training=False)
    assert traced.graph.ops() == ["aten.unsqueeze.default", "aten.transpose.int"]
    (change,) = traced.metadata_mutations
    assert [node.op for node, _ in change.ops] == ["aten.unsqueeze_.default", "aten.transpose_.default"]
    assert traced.output_specs[0].chain == change.chain  # the output is the changed input itself


# --- double backward ------------------------------------------------------------------------------


def test_double_backward_through_an_input_that_depends_on_another():
    # g depends on x, and the graph reads both: each input's gradient counts the graph's own uses only
    graph = build(lambda b, x, g: b.op("torch.Tensor.sum", b.op("torch.mul", g, g)), f32(2, grad=True),
                  f32(2, grad=True))
    x = torch.tensor([1.0, 2.0], requires_grad=True)
    g = x ** 3
    (out,) = aot_eager(graph, [x, g])(x, g)
    with pytest.warns(UserWarning, match="differentiable backward") as record:
        (first,) = torch.autograd.grad(out, x, create_graph=True)
    assert record[0].filename == __file__
    (second,) = torch.autograd.grad(first.sum(), x)
    x_eager = x.detach().requires_grad_()
    (first_eager,) = torch.autograd.grad(((x_eager ** 3) ** 2).sum(), x_eager, create_graph=True)
    (second_eager,) = torch.autograd.grad(first_eager.sum(), x_eager)
    torch.testing.assert_close(first, first_eager)
    torch.testing.assert_close(second, second_eager)


def test_hessian_vector_product_through_a_view_output():
    def program(b, x, w):
        y = b.op("torch.tanh", b.op("torch.matmul", x, w))
        return b.op("torch.Tensor.__getitem__", y, 0)

    graph = build(program, f32(3, 4, grad=True), f32(4, 2))
    x, w, v = torch.randn(3, 4, requires_grad=True), torch.randn(4, 2), torch.randn(3, 4)
    (row,) = aot_eager(graph, [x, w])(x, w)
    (g,) = torch.autograd.grad(row.pow(2).sum(), x, create_graph=True)
    (hv,) = torch.autograd.grad((g * v).sum(), x)
    x_eager = x.detach().requires_grad_()
    (g_eager,) = torch.autograd.grad(torch.tanh(x_eager @ w)[0].pow(2).sum(), x_eager, create_graph=True)
    (hv_eager,) = torch.autograd.grad((g_eager * v).sum(), x_eager)
    torch.testing.assert_close(hv, hv_eager)


def test_double_backward_keeps_mutated_inputs_as_they_were():
    def program(b, x, count):
        b.op("torch.Tensor.add_", count, 1.0)
        return b.op("torch.Tensor.sum", b.op("torch.mul", b.op("torch.sin", x), count))

    graph = build(program, f32(3, grad=True), f32(3))
    x, count = torch.randn(3, requires_grad=True), torch.ones(3)
    (out,) = aot_eager(graph, [x, count.clone()])(x, count)
    (g,) = torch.autograd.grad(out, x, create_graph=True)
    (gg,) = torch.autograd.grad(g.sum(), x)
    torch.testing.assert_close(count, torch.full((3,), 2.0))  # mutated once, not again by the recompute
    torch.testing.assert_close(g, 2 * x.detach().cos())
    torch.testing.assert_close(gg, -2 * x.detach().sin())


# --- inputs that share memory ---------------------------------------------------------------------


def test_same_tensor_passed_twice_with_one_mutated_runs_eagerly():
    program = lambda b, x, y: b.op("torch.Tensor.mul_", x, 2.0) and b.op("torch.add", y, 1.0)
    graph = build(program, f32(4), f32(4))
    fn = aot_eager(graph, [torch.randn(4), torch.randn(4)])
    t = torch.randn(4)
    t_eager = t.clone()
    (expected,) = interpret(graph, t_eager, t_eager)
    with pytest.warns(UserWarning, match="eagerly for this call") as record:
        (out,) = fn(t, t)
    assert record[0].filename == __file__  # the warning names the caller's line
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(t, t_eager)
    a, b = torch.randn(4), torch.randn(4)
    (out,) = fn(a, b)  # separate tensors: the compiled program again
    torch.testing.assert_close(out, b + 1)
