"""Outputs of ours that eager makes fresh are no views: FSDP2 warns of a block output that is one (an
in-place write to it would drop the all-gather hook of the block's backward)."""

import torch

from torchsmith.inductor import compile_graph
from torchsmith.inductor.testing import assert_matches_eager, make_graph


def test_output_in_a_dead_buffers_storage_is_no_view():
    def body(b, x, w):
        a = b.op("aten.mm.default", x, w)  # dead once the kernel below has read it
        return (b.op("aten.add.Tensor", b.op("aten.relu.default", a), 1.0),)

    f32 = torch.float32
    graph = make_graph("reuse", {"x": ((8, 300), f32), "w": ((300, 40), f32)}, body)
    inputs = [torch.randn(8, 300), torch.randn(300, 40)]
    compiled = compile_graph(graph, inputs)
    assert compiled.memory_plan.reused >= 1  # the output is written over the matmul's result
    (out,) = compiled(*inputs)
    assert not out._is_view()
    assert_matches_eager(compiled, graph, *inputs, atol=1e-5, rtol=1e-5)


def test_linear_on_a_3d_input_returns_no_view():
    def body(b, x, w, bias):
        return (b.op("aten.linear.default", x, w, bias),)  # eager: addmm, then an untracked reshape

    f32 = torch.float32
    types = {"x": ((2, 16, 32), f32), "w": ((48, 32), f32), "bias": ((48,), f32)}
    graph = make_graph("linear3d", types, body)
    inputs = [torch.randn(2, 16, 32), torch.randn(48, 32), torch.randn(48)]
    compiled = compile_graph(graph, inputs)
    (out,) = compiled(*inputs)
    assert out.shape == (2, 16, 48) and not out._is_view()
    assert_matches_eager(compiled, graph, *inputs, atol=1e-5, rtol=1e-5)


def test_two_outputs_of_one_buffer_stay_views():
    """`y` and `y.t()` share storage in eager; detaching one would hide that from autograd."""

    def body(b, x):
        y = b.op("aten.mul.Tensor", x, 2.0)
        return y, b.op("aten.t.default", y)

    graph = make_graph("two_views", {"x": ((4, 6), torch.float32)}, body)
    x = torch.randn(4, 6)
    compiled = compile_graph(graph, [x])
    y, yt = compiled(x)
    assert yt.untyped_storage().data_ptr() == y.untyped_storage().data_ptr()
    assert yt._is_view()
    assert_matches_eager(compiled, graph, x)
