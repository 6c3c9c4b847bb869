"""Mutations and aliasing: compiled programs mutate inputs and alias outputs exactly as eager does."""

import pytest
import torch

from torchsmith.autograd_aot import (
    AliasingError,
    TraceError,
    aot_eager,
    functionalize,
    is_functional,
    trace,
)
from torchsmith.autograd_aot.runtime import run_program
from torchsmith.ir import GraphBuilder, TensorType, interpret, symbol


def f32(*shape, grad=False):
    return TensorType.make(shape, torch.float32, requires_grad=grad)


def build(fn, *types):
    """A torch-level graph from `fn(builder, *inputs) -> outputs`."""
    b = GraphBuilder("program")
    inputs = [b.input(f"a{i}", t) for i, t in enumerate(types)]
    outputs = fn(b, *inputs)
    return b.build(*(outputs if isinstance(outputs, tuple) else (outputs,)))


def test_in_place_on_input_becomes_an_output_copied_back(compare):
    program = lambda b, x, y: b.op("torch.Tensor.add_", x, y) and b.op("torch.mul", x, 2.0)
    graph = build(program, f32(4), f32(4))
    result = compare(graph, [torch.randn(4), torch.randn(4)])
    assert result.program.mutated_inputs == (0,)
    assert is_functional(result.program.forward_graph)


def test_mutation_through_views_of_an_input(compare):
    def program(b, x):
        row = b.op("torch.Tensor.__getitem__", x, 1)             # select
        b.op("torch.Tensor.mul_", row, 10.0)
        col = b.op("torch.Tensor.__getitem__", b.op("torch.Tensor.t", x), slice(1, 3))  # t, then slice
        b.op("torch.Tensor.add_", col, 1.0)
        return b.op("torch.sin", x)

    result = compare(build(program, f32(3, 4)), [torch.randn(3, 4)])
    ops = result.program.forward_graph.ops()
    assert "aten.select_scatter.default" in ops and "aten.slice_scatter.default" in ops


def test_view_read_after_its_base_changes_sees_the_change(compare):
    def program(b, x):
        view = b.op("torch.Tensor.view", x, 2, 3)
        b.op("torch.Tensor.fill_", x, 3.0)
        return b.op("torch.exp", view)

    compare(build(program, f32(6)), [torch.randn(6)])


def test_mutation_of_intermediates_with_gradients(compare):
    def program(b, x, w):
        h = b.op("torch.mul", x, w)
        b.op("torch.Tensor.add_", h, 1.0)
        part = b.op("torch.Tensor.__getitem__", h, slice(0, 2))
        b.op("torch.Tensor.mul_", part, 3.0)
        return b.op("torch.Tensor.sum", b.op("torch.tanh", h))

    graph = build(program, f32(5, 3), f32(5, 3, grad=True))
    compare(graph, [torch.randn(5, 3), torch.randn(5, 3, requires_grad=True)])


def test_in_place_keeps_the_destination_dtype(compare):
    b = GraphBuilder("cast")
    x = b.input("x", TensorType.make((4,), torch.float32))
    y = b.input("y", TensorType.make((4,), torch.float64))
    b.op("torch.Tensor.add_", x, y)
    graph = b.build(b.op("torch.neg", x))
    result = compare(graph, [torch.randn(4), torch.randn(4, dtype=torch.float64)])
    assert result.compiled_inputs[0].dtype == torch.float32


def test_output_aliasing_an_input_is_a_view_of_it():
    graph = build(lambda b, x: (b.op("torch.Tensor.t", x), b.op("torch.Tensor.__getitem__", x, 0)), f32(3, 4))
    x = torch.randn(3, 4)
    t, row = aot_eager(graph, [x])(x)
    assert t._base is x and row._base is x
    assert torch.equal(t, x.t()) and torch.equal(row, x[0])


def test_output_views_are_planned_once_and_view_each_calls_tensors():
    def program(b, x):
        y = b.op("torch.mul", x, 2.0)
        return b.op("torch.Tensor.t", y), b.op("torch.Tensor.narrow", y, 1, 1, 2), b.op("torch.Tensor.t", x)

    graph = build(program, f32(3, 4))
    fn = aot_eager(graph, [torch.randn(3, 4)])
    planned = fn.last_program.output_views()
    assert all(steps is not None and len(steps) == 1 for steps in planned)
    for _ in range(2):  # each call's views are of that call's tensors, not of the first call's
        x = torch.randn(3, 4)
        t, part, xt = fn(x)
        assert torch.equal(t, (x * 2).t()) and torch.equal(part, (x * 2).narrow(1, 1, 2))
        assert t._base is part._base and xt._base is x and torch.equal(xt, x.t())
    assert fn.last_program.output_views() is planned


def test_output_views_with_symbolic_sizes_use_each_calls_sizes():
    s0 = symbol("s0")
    b = GraphBuilder("program")
    x = b.input("x", TensorType.make((s0, 4), torch.float32))
    y = b.op("torch.mul", x, 2.0, out_type=TensorType.make((s0, 4), torch.float32))
    view = b.op("torch.Tensor.view", y, s0, 2, 2, out_type=TensorType.make((s0, 2, 2), torch.float32))
    tail = b.op("torch.Tensor.narrow", y, 0, 1, s0 - 1, out_type=TensorType.make((s0 - 1, 4), torch.float32))
    graph = b.build(view, tail)
    fn = aot_eager(graph, [torch.randn(4, 4)])
    assert fn.last_program.output_views() == (None, None)  # sizes bound per call, not planned
    for n in (3, 5, 4):
        x = torch.randn(n, 4)
        out = fn(x)
        assert [o.shape for o in out] == [(n, 2, 2), (n - 1, 4)]
        for actual, expected in zip(out, interpret(graph, x)):
            assert torch.equal(actual, expected)
    assert len(fn.symbolic) == 1


def test_input_returned_as_is_is_the_same_object():
    graph = build(lambda b, x: (x, b.op("torch.cos", x)), f32(3))
    x = torch.randn(3)
    out, _ = aot_eager(graph, [x])(x)
    assert out is x


def test_outputs_aliasing_each_other_share_storage_and_grads(compare):
    def program(b, x):
        y = b.op("torch.mul", x, 2.0)
        return y, b.op("torch.Tensor.t", y), b.op("torch.Tensor.__getitem__", y, 1)

    result = compare(build(program, f32(3, 4, grad=True)), [torch.randn(3, 4, requires_grad=True)])
    y, t, row = result.compiled_outputs
    assert t._base is y and row._base is y
    assert result.program.traced.num_outputs == 1


def test_mutated_input_aliasing_another_input_runs_eagerly():
    program = lambda b, x, y: b.op("torch.Tensor.add_", x, 1.0) and b.op("torch.add", x, y)
    graph = build(program, f32(4), f32(4))
    base = torch.randn(6)
    expected_base = base.clone()
    expected = interpret(graph, expected_base[:4], expected_base[2:])
    fn = aot_eager(graph, [torch.randn(4), torch.randn(4)])
    with pytest.warns(UserWarning, match="eagerly for this call: input %a0 is mutated .* shares storage"):
        (out,) = fn(base[:4], base[2:])  # overlapping: the write to a0 changes what a1 reads
    torch.testing.assert_close(out, expected[0])
    torch.testing.assert_close(base, expected_base)
    with pytest.raises(AliasingError, match="shares storage"):  # the program alone refuses them
        run_program(fn.last_program, (base[:4], base[2:]))


def test_mutating_an_input_that_requires_grad_is_refused():
    def program(b, x):
        return b.op("torch.Tensor.mul_", b.op("torch.Tensor.__getitem__", x, 0), 2.0)

    with pytest.raises(TraceError, match="torch.Tensor.mul_.*leaf Variable"):
        aot_eager(build(program, f32(3, grad=True)), [torch.randn(3, requires_grad=True)])


def test_mutating_an_input_with_a_value_that_requires_grad_is_refused():
    graph = build(lambda b, buf, w: b.op("torch.Tensor.add_", buf, w), f32(3), f32(3, grad=True))
    with pytest.raises(TraceError, match="mutated in place with a value that"):
        aot_eager(graph, [torch.zeros(3), torch.randn(3, requires_grad=True)])


def test_shape_mutation_in_place_is_a_view_and_changes_the_callers_tensor():
    graph = build(lambda b, x: b.op("torch.Tensor.t_", x), f32(3, 4))
    traced = trace(graph, [torch.randn(3, 4)], training=False)
    assert traced.graph.ops() == ["aten.t.default"]
    assert [node.op for node, _ in traced.metadata_mutations[0].ops] == ["aten.t_.default"]
    x = torch.randn(3, 4)
    expected = x.clone().t_()
    (out,) = aot_eager(graph, [torch.randn(3, 4)])(x)
    assert out is x and x.shape == (4, 3) and x.stride() == expected.stride()
    torch.testing.assert_close(x, expected)


def test_resize_that_grows_the_storage_is_refused():
    graph = build(lambda b, x: b.op("torch.Tensor.resize_", x, [4, 4]), f32(6))
    with pytest.raises(TraceError, match="grows the tensor's storage"):
        aot_eager(graph, [torch.randn(6)])


def test_functionalize_output_order_and_text():
    graph = build(lambda b, x: b.op("torch.Tensor.add_", x, 1.0) and b.op("torch.mul", x, x), f32(2))
    traced = trace(graph, [torch.randn(2)], training=False)
    functional, mutated = functionalize(traced.graph, traced.num_outputs)
    assert mutated == (0,)
    assert functional.ops() == ["aten.add.Tensor", "aten.mul.Tensor"]
    add, mul = functional.nodes
    assert [v.name for v in functional.outputs] == [mul.outputs[0].name, add.outputs[0].name]
    assert functional.stamps[-1].pass_name == "functionalize"


def test_mutation_through_as_strided_of_a_contiguous_input(compare):
    def program(b, x):
        window = b.op("torch.as_strided", x, (2, 2), (4, 1), 1)
        b.op("torch.Tensor.mul_", window, 3.0)
        return b.op("torch.cos", x)

    result = compare(build(program, f32(4, 4)), [torch.randn(4, 4)])
    assert "aten.as_strided_scatter.default" in result.program.forward_graph.ops()
