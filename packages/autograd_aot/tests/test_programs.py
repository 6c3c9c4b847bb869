"""A spread of small training programs (ops a model zoo uses, mutation and aliasing patterns),
each compared with eager: outputs, gradients and inputs after the call."""

import pytest
import torch

from torchsmith.autograd_aot import aot_eager
from torchsmith.ir import GraphBuilder, TensorType

CPU = torch.device("cpu")


def f32(*shape, grad=False):
    return TensorType.make(shape, torch.float32, requires_grad=grad)


def i64(*shape):
    return TensorType.make(shape, torch.int64)


def randn(*shape, grad=False):
    return torch.randn(*shape).requires_grad_(grad)


def embedding_cross_entropy():
    b = GraphBuilder("lm_head")
    ids, emb = b.input("ids", i64(4, 6)), b.input("emb", f32(10, 8, grad=True))
    target, w = b.input("target", i64(24)), b.input("w", f32(10, 8, grad=True))
    logits = b.op("torch.nn.functional.linear", b.op("torch.nn.functional.embedding", ids, emb), w)
    loss = b.op("torch.nn.functional.cross_entropy", b.op("torch.Tensor.view", logits, -1, 10), target)
    return b.build(loss), [torch.randint(0, 10, (4, 6)), randn(10, 8, grad=True), torch.randint(0, 10, (24,)),
                           randn(10, 8, grad=True)]


def causal_attention():
    b = GraphBuilder("sdpa")
    q, k, v = (b.input(n, f32(2, 2, 8, 4, grad=True)) for n in "qkv")
    out = b.op("torch.nn.functional.scaled_dot_product_attention", q, k, v, is_causal=True)
    return b.build(out), [randn(2, 2, 8, 4, grad=True) for _ in range(3)]


def setitem():
    b = GraphBuilder("setitem")
    x, index, v = b.input("x", f32(5, 3)), b.input("index", i64(2)), b.input("v", f32(2, 3, grad=True))
    y = b.op("torch.mul", x, 1.0)
    b.op("torch.Tensor.__setitem__", y, index, v, out_type="none")
    b.op("torch.Tensor.__setitem__", x, 0, 7.0, out_type="none")
    return b.build(b.op("torch.sin", y)), [randn(5, 3), torch.tensor([1, 3]), randn(2, 3, grad=True)]


def masked_softmax_cat_stack():
    b = GraphBuilder("masked")
    x, mask = b.input("x", f32(4, 4, grad=True)), b.input("mask", TensorType.make((4, 4), torch.bool))
    s = b.op("torch.softmax", b.op("torch.Tensor.masked_fill", x, mask, float("-inf")), -1)
    return b.build(b.op("torch.cat", [s, x], 0), b.op("torch.stack", [s, x])), [randn(4, 4, grad=True),
                                                                                torch.eye(4) > 0]


def unbind_and_split_mutations():
    b = GraphBuilder("unbind")
    x = b.input("x", f32(3, 4))
    first, middle, last = b.op("torch.Tensor.unbind", x, 0)
    b.op("torch.Tensor.mul_", middle, 5.0)
    _, right = b.op("torch.Tensor.split", x, 2, 1)
    b.op("torch.Tensor.add_", right, 1.0)
    return b.build(b.op("torch.add", first, last)), [randn(3, 4)]


def group_norm_silu_conv_transpose():
    b = GraphBuilder("decoder")
    x, w = b.input("x", f32(2, 4, 6, 6, grad=True)), b.input("w", f32(4, 4, 3, 3, grad=True))
    h = b.op("torch.nn.functional.silu", b.op("torch.nn.functional.group_norm", x, 2))
    h = b.op("torch.nn.functional.conv_transpose2d", h, w)
    return b.build(b.op("torch.nn.functional.adaptive_avg_pool2d", h, 1)), [randn(2, 4, 6, 6, grad=True),
                                                                             randn(4, 4, 3, 3, grad=True)]


def rms_norm_with_casts():
    b = GraphBuilder("rms_norm")
    x, w = b.input("x", f32(2, 5, 8, grad=True)), b.input("w", f32(8, grad=True))
    var = b.op("torch.Tensor.mean", b.op("torch.Tensor.pow", x, 2), -1, keepdim=True)
    h = b.op("operator.mul", w, b.op("operator.mul", x, b.op("torch.rsqrt", b.op("operator.add", var, 1e-6))))
    return b.build(b.op("torch.Tensor.float", b.op("torch.Tensor.to", h, torch.float16))), [
        randn(2, 5, 8, grad=True), randn(8, grad=True)]


def mutated_views_of_an_output():
    b = GraphBuilder("views")
    x = b.input("x", f32(4, 4, grad=True))
    y = b.op("torch.mul", x, 2.0)
    t = b.op("torch.Tensor.t", y)
    b.op("torch.Tensor.add_", t, 1.0)
    b.op("torch.Tensor.zero_", b.op("torch.Tensor.diagonal", y))
    return b.build(t, y), [randn(4, 4, grad=True)]


def factories_where_cumsum():
    b = GraphBuilder("factories")
    x = b.input("x", f32(6, 6, grad=True))
    mask = b.op("operator.gt", b.op("torch.tril", b.op("torch.ones", 6, 6, device=CPU)), 0)
    y = b.op("torch.where", mask, x, b.op("torch.zeros_like", x))
    total = b.op("operator.add", b.op("torch.Tensor.sum", y, 0), b.op("torch.arange", 6, device=CPU))
    return b.build(b.op("torch.cumsum", y, 1), total), [randn(6, 6, grad=True)]


def non_contiguous_input():
    b = GraphBuilder("strided")
    x = b.input("x", TensorType.make((4, 3), torch.float32, strides=(1, 4), requires_grad=True))
    return b.build(b.op("torch.Tensor.sum", b.op("torch.exp", x), 0)), [randn(3, 4).t().requires_grad_()]


def mutated_input_read_by_the_backward():
    b = GraphBuilder("mutated")
    x, w = b.input("x", f32(3)), b.input("w", f32(3, grad=True))
    b.op("torch.Tensor.add_", x, 1.0)
    return b.build(x, b.op("torch.mul", x, w), b.op("torch.Tensor.__getitem__", x, slice(0, 2))), [
        randn(3), randn(3, grad=True)]


def broadcast_copy_into_input():
    b = GraphBuilder("copy")
    x, s = b.input("x", f32(4, 3)), b.input("s", f32(3, grad=True))
    b.op("torch.Tensor.copy_", x, b.op("torch.Tensor.detach", s))
    return b.build(b.op("torch.mul", x, s)), [randn(4, 3), randn(3, grad=True)]


def batch_norm_eval():
    b = GraphBuilder("bn_eval")
    x, mean, var = b.input("x", f32(4, 3, grad=True)), b.input("mean", f32(3)), b.input("var", f32(3))
    return b.build(b.op("torch.nn.functional.batch_norm", x, mean, var, training=False)), [
        randn(4, 3, grad=True), randn(3), torch.rand(3) + 0.5]


def scalar_inputs():
    b = GraphBuilder("scalars")
    x, n, f = b.input("x", f32(3, grad=True)), b.input("n", "int"), b.input("f", "float")
    y = b.op("torch.mul", b.op("torch.pow", x, n, out_type=f32(3)), f, out_type=f32(3))
    return b.build(y), [randn(3, grad=True), 3, 0.5]


def index_add_out_of_place_and_in_place():
    b = GraphBuilder("index_add")
    x, index, v = b.input("x", f32(5, 3)), b.input("index", i64(2)), b.input("v", f32(2, 3, grad=True))
    y = b.op("torch.index_add", x, 0, index, v)
    b.op("torch.Tensor.index_add_", x, 0, index, b.op("torch.Tensor.detach", v))
    return b.build(y), [randn(5, 3), torch.tensor([0, 2]), randn(2, 3, grad=True)]


def bfloat16_matmul_gelu():
    b = GraphBuilder("bf16")
    bf16 = TensorType.make((8, 8), torch.bfloat16, requires_grad=True)
    x, w = b.input("x", bf16), b.input("w", bf16)
    inputs = [torch.randn(8, 8, dtype=torch.bfloat16, requires_grad=True) for _ in range(2)]
    return b.build(b.op("torch.nn.functional.gelu", b.op("torch.matmul", x, w))), inputs


PROGRAMS = [
    embedding_cross_entropy, causal_attention, setitem, masked_softmax_cat_stack, unbind_and_split_mutations,
    group_norm_silu_conv_transpose, rms_norm_with_casts, mutated_views_of_an_output, factories_where_cumsum,
    non_contiguous_input, mutated_input_read_by_the_backward, broadcast_copy_into_input, batch_norm_eval,
    scalar_inputs, index_add_out_of_place_and_in_place,
]


@pytest.mark.parametrize("make", PROGRAMS, ids=lambda f: f.__name__)
def test_program_matches_eager(make, compare):
    torch.manual_seed(0)
    graph, inputs = make()
    compare(graph, inputs, atol=1e-4)


def test_bfloat16_program_matches_eager(compare):
    torch.manual_seed(0)
    graph, inputs = bfloat16_matmul_gelu()
    compare(graph, inputs, atol=1e-2, rtol=1e-2)


def test_mutated_input_saved_for_backward_is_a_copy(compare):
    # The backward needs sin(x) and cos(x) of the old x: cheapest is to keep one copy of old x.
    b = GraphBuilder("old_value")
    x, w1, w2 = b.input("x", f32(3)), b.input("w1", f32(3, grad=True)), b.input("w2", f32(3, grad=True))
    sin_part = b.op("torch.mul", b.op("torch.sin", x), w1)
    y = b.op("torch.add", sin_part, b.op("torch.mul", b.op("torch.cos", x), w2))
    b.op("torch.Tensor.add_", x, 1.0)
    result = compare(b.build(y), [randn(3), randn(3, grad=True), randn(3, grad=True)])
    program = result.program
    assert program.mutated_inputs == (0,)
    assert "aten.clone.default" in program.forward_graph.ops()
    assert program.report.saved_bytes == 3 * 4  # the copy counts: it is not the caller's tensor


def test_same_tensor_for_two_inputs_that_are_not_mutated():
    b = GraphBuilder("square")
    graph = b.build(b.op("torch.mul", b.input("x", f32(3, grad=True)), b.input("y", f32(3, grad=True))))
    t = randn(3, grad=True)
    (out,) = aot_eager(graph, [t, t])(t, t)
    out.sum().backward()
    torch.testing.assert_close(t.grad, 2 * t.detach())
