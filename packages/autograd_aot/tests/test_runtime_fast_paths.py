"""The runtime's per-program plans keep every check: saving inputs once, outputs returned as they are."""

import pytest
import torch

from torchsmith.autograd_aot import AotAutogradError, aot_compile, aot_eager
from torchsmith.autograd_aot.runtime import python_compiler
from torchsmith.ir import GraphBuilder, TensorType


def f32(*shape, grad=False):
    return TensorType.make(shape, torch.float32, requires_grad=grad)


def cube_graph():
    b = GraphBuilder("cube")
    x = b.input("x", f32(3, grad=True))
    return b.build(b.op("torch.mul", b.op("torch.mul", x, x), x))


def linear_graph():
    b = GraphBuilder("linear")
    x, w, b_ = b.input("x", f32(4, 3)), b.input("w", f32(2, 3, grad=True)), b.input("b", f32(2, grad=True))
    return b.build(b.op("torch.nn.functional.linear", x, w, b_))


def test_an_input_the_forward_saves_is_saved_once():
    x, w, b = torch.randn(4, 3), torch.randn(2, 3, requires_grad=True), torch.randn(2, requires_grad=True)
    fn = aot_eager(linear_graph(), [x, w, b])
    (y,) = fn(x, w, b)
    program = fn.last_program
    plan = program.save_plan([x, w, b])
    assert plan.shared, "the linear forward saves its input x: the plan should share it"
    saved = y.grad_fn.saved_tensors
    assert len(saved) == program.num_saved + len(plan.unshared)
    for i in plan.kept.saved:  # every kept input is saved exactly once, as itself
        assert sum(s is (x, w, b)[i] for s in saved) == 1
    y.sum().backward()
    torch.testing.assert_close(w.grad, x.sum(0).expand(2, 3))


def test_a_shared_input_changed_in_place_after_the_forward_still_fails_the_backward():
    x = torch.randn(3, requires_grad=True)
    fn = aot_eager(cube_graph(), [x])
    (y,) = fn(x)
    assert fn.last_program.save_plan([x]).shared
    with torch.no_grad():
        x.add_(1)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()


@pytest.mark.filterwarnings("ignore:.*create_graph=True")
def test_double_backward_reads_inputs_from_the_shared_and_the_separate_layout():
    def copying_compiler(graph, example_inputs):
        # a forward that returns a copy of an input it saves: the runtime must not take it for the input
        run = python_compiler(graph, example_inputs)
        return lambda *args: [r.clone() if any(r is a for a in args) else r for r in run(*args)]

    for fw in (python_compiler, copying_compiler):
        x = torch.randn(3, requires_grad=True)
        fn = aot_compile(cube_graph(), [x], fw, python_compiler)
        (y,) = fn(x)
        shared = y.grad_fn.input_positions == fn.last_program.save_plan([x]).shared_positions
        assert shared == (fw is python_compiler)
        (grad,) = torch.autograd.grad(y.sum(), x, create_graph=True)
        torch.testing.assert_close(grad, 3 * x.detach() ** 2)
        grad.sum().backward()
        torch.testing.assert_close(x.grad, 6 * x.detach())


def test_outputs_returned_as_they_are_still_refuse_a_meta_tensor():
    b = GraphBuilder("sin")
    x = b.input("x", f32(3))
    graph = b.build(b.op("torch.sin", x))

    def meta_compiler(graph, example_inputs):
        return lambda *args: [torch.empty(3, device="meta")]

    fn = aot_compile(graph, [torch.randn(3)], meta_compiler)
    assert fn.last_program.direct_outputs == (0,)
    with pytest.raises(AotAutogradError, match="meta tensor while its inputs are real"):
        fn(torch.randn(3))
    (out,) = fn(torch.empty(3, device="meta"))  # a caller computing on meta tensors gets them
    assert out.is_meta


def test_outputs_returned_as_they_are_still_write_mutated_inputs_back():
    b = GraphBuilder("bump")
    x = b.input("x", f32(3))
    b.op("torch.Tensor.add_", x, 1.0)
    graph = b.build(b.op("torch.sin", x))
    value = torch.zeros(3)
    fn = aot_eager(graph, [value.clone()])
    assert fn.last_program.direct_outputs == (0,) and fn.last_program.mutated_inputs == (0,)
    (out,) = fn(value)
    torch.testing.assert_close(value, torch.ones(3))
    torch.testing.assert_close(out, torch.ones(3).sin())


def test_a_compiler_returning_any_iterable_still_runs():
    def generator_compiler(graph, example_inputs):
        run = python_compiler(graph, example_inputs)
        return lambda *args: (r for r in run(*args))

    x, w, b = torch.randn(4, 3), torch.randn(2, 3), torch.randn(2)
    (y,) = aot_compile(linear_graph(), [x, w, b], generator_compiler)(x, w, b)
    torch.testing.assert_close(y, torch.nn.functional.linear(x, w, b))
    w.requires_grad_()
    (y,) = aot_compile(linear_graph(), [x, w, b], generator_compiler, python_compiler)(x, w, b)
    y.sum().backward()
    torch.testing.assert_close(w.grad, x.sum(0).expand(2, 3))
