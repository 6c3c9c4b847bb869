"""Min-cut partitioning: what is saved, what is recomputed, and that gradients stay right."""

import pytest
import torch

from torchsmith.autograd_aot import aot_eager, can_recompute, functionalize, partition, trace
from torchsmith.autograd_aot.partition import reads_from_memory
from torchsmith.ir import GraphBuilder, TensorType


def f32(*shape, grad=False):
    return TensorType.make(shape, torch.float32, requires_grad=grad)


@pytest.mark.parametrize(
    "op, expected",
    [
        ("aten.mm.default", False), ("aten.addmm.default", False), ("aten.convolution.default", False),
        ("aten.sum.dim_IntList", False), ("aten._softmax.default", False), ("aten.bernoulli.p", False),
        ("aten.native_dropout.default", False), ("aten.native_layer_norm.default", False),
        ("aten.add.Tensor", True), ("aten.gelu.default", True), ("aten.view.default", True),
        ("aten.t.default", True), ("aten._to_copy.default", True),
    ],
)
def test_recompute_policy(op, expected):
    assert can_recompute(op) is expected


def pointwise_chain():
    b = GraphBuilder("chain")
    x, w = b.input("x", f32(64, 64)), b.input("w", f32(64, 64, grad=True))
    y = b.op("torch.exp", b.op("torch.cos", b.op("torch.sin", b.op("torch.mul", x, w))))
    return b.build(y)


def test_pointwise_chain_is_recomputed_from_inputs(compare):
    inputs = [torch.randn(64, 64), torch.randn(64, 64, requires_grad=True)]
    result = compare(pointwise_chain(), inputs)
    report = result.program.report
    assert report.saved_bytes == 0  # only the inputs are kept; sin/cos/exp are recomputed
    assert report.save_all_bytes >= 3 * 64 * 64 * 4
    assert report.recomputed_nodes >= 3
    assert set(report.saved_values) <= {"x", "w"}
    assert "aten.sin.default" in result.program.backward_graph.ops()


def mlp_with_gelu():
    b = GraphBuilder("linear_gelu")
    x, w = b.input("x", f32(32, 64)), b.input("w", f32(128, 64, grad=True))
    h = b.op("torch.nn.functional.gelu", b.op("torch.nn.functional.linear", x, w))
    return b.build(b.op("torch.sin", b.op("torch.nn.functional.layer_norm", h, [128])))


def test_matmul_is_saved_and_cheap_ops_after_it_recomputed(compare):
    result = compare(mlp_with_gelu(), [torch.randn(32, 64), torch.randn(128, 64, requires_grad=True)])
    program = result.program
    forward_values = {v.name: n.op for n in program.forward_graph.nodes for v in n.outputs}
    saved_ops = {forward_values.get(name) for name in program.report.saved_values}
    assert "aten.mm.default" in saved_ops
    assert "aten.gelu.default" not in saved_ops
    assert "aten.gelu.default" in program.backward_graph.ops()  # recomputed from the saved matmul
    assert program.report.saved_bytes < program.report.save_all_bytes


def two_linear_layers():
    b = GraphBuilder("linear_gelu_linear")
    x = b.input("x", f32(32, 64))
    w1, w2 = b.input("w1", f32(128, 64, grad=True)), b.input("w2", f32(16, 128, grad=True))
    h = b.op("torch.nn.functional.gelu", b.op("torch.nn.functional.linear", x, w1))
    return b.build(b.op("torch.nn.functional.linear", h, w2))


@pytest.mark.parametrize("level", ["aten", "prims"])
def test_value_two_matmuls_read_is_saved_not_recomputed(compare, level):
    # The GELU's output is the second matmul's input in the forward and its weight gradient's in the
    # backward: the forward writes it anyway, so it is saved rather than recomputed by the backward.
    decompose = pytest.importorskip("torchsmith.prims").decompose if level == "prims" else None
    inputs = [torch.randn(32, 64), torch.randn(128, 64, requires_grad=True),
              torch.randn(16, 128, requires_grad=True)]
    program = compare(two_linear_layers(), inputs, decompose=decompose).program
    producer = {v.name: n.op for n in program.forward_graph.nodes for v in n.outputs}
    gelu_output = next(n.inputs[0] for n in program.forward_graph.nodes
                       if n.op in ("aten.mm.default", "prims.mm") and n.inputs[0].name != "x")
    while producer[gelu_output.name].startswith(("aten.view", "aten.t.", "prims.reshape")):
        gelu_output = next(n.inputs[0] for n in program.forward_graph.nodes if gelu_output in n.outputs)
    assert gelu_output.name in program.report.saved_values
    if level == "aten":
        assert "aten.gelu.default" not in program.backward_graph.ops()  # not recomputed
    else:
        assert "prims.erf" not in program.backward_graph.ops()


@pytest.mark.parametrize(
    "op, expected",
    [("aten.mm.default", True), ("aten.addmm.default", True), ("aten.convolution.default", True),
     ("prims.mm", True), ("prims.scaled_dot_product_attention", True), ("aten.add.Tensor", False),
     ("prims.add", False), ("aten.sum.dim_IntList", False)],
)
def test_library_ops_read_from_memory(op, expected):
    assert reads_from_memory(op) is expected


def test_partition_outputs_and_inputs_line_up():
    graph = mlp_with_gelu()
    inputs = [torch.randn(32, 64), torch.randn(128, 64, requires_grad=True)]
    traced = trace(graph, inputs, training=True)
    joint, mutated = functionalize(traced.graph, traced.num_outputs)
    parts = partition(joint, traced.num_inputs, traced.num_outputs)
    assert [v.name for v in parts.forward.inputs] == [v.name for v in graph.inputs]
    saved = parts.forward.outputs[traced.num_outputs:]
    assert len(saved) == parts.num_saved
    assert parts.backward.inputs[: parts.num_saved] == saved
    assert len(parts.backward.outputs) == len(traced.grad_inputs) == 1
    assert parts.forward.stamps[-1].pass_name == "partition"


def test_no_backward_nodes_in_the_forward():
    b = GraphBuilder("softmax")
    x = b.input("x", f32(8, 16, grad=True))
    graph = b.build(b.op("torch.softmax", b.op("torch.mul", x, x), -1))
    fn = aot_eager(graph, [torch.randn(8, 16, requires_grad=True)])
    program = fn.last_program
    assert not any("backward" in op for op in program.forward_graph.ops())
    assert "aten._softmax.default" not in program.backward_graph.ops()
