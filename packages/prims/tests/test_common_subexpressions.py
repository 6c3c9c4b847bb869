"""common_subexpressions: a pure node repeating an earlier one (same op, arguments, result types)
is dropped and its readers read the earlier one; random draws, in-place updates, graph outputs
and constants that only compare equal in Python (0.0 and -0.0) are left alone."""

import torch

from torchsmith.ir import GraphBuilder, interpret
from torchsmith.ir.verifier import verify
from torchsmith.prims import prims_pipeline
from torchsmith.prims.common_subexpressions import common_subexpressions, is_pure


def _two_layer_attention():
    """Two sdpa calls with one boolean mask, as a model passes its mask to every layer: each
    call's decomposition converts the mask to an additive one."""
    b = GraphBuilder("layers")
    q = b.input("q", "f32[2, 3, 5, 4] cpu")
    keep = b.input("keep", "b8[5, 5] cpu")
    first = b.op("aten.scaled_dot_product_attention.default", q, q, q, keep)
    second = b.op("aten.scaled_dot_product_attention.default", first, q, q, keep)
    inputs = [torch.randn(2, 3, 5, 4), torch.rand(5, 5) > 0.3]
    inputs[1].fill_diagonal_(True)
    return b.build(second), inputs


def test_a_mask_converted_per_attention_call_is_converted_once():
    graph, inputs = _two_layer_attention()
    plain = prims_pipeline(on_missing="keep")
    decomposed = plain.steps[0].run(graph)
    merged = plain.run(graph, verify=True)
    assert decomposed.ops().count("prims.where") == 2
    assert merged.ops().count("prims.where") == 1
    assert merged.ops().count("prims.scaled_dot_product_attention") == 2
    assert [s.pass_name for s in merged.stamps] == ["decompose", "common_subexpressions"]
    expected = interpret(graph, *inputs)[0]
    torch.testing.assert_close(interpret(merged, *inputs)[0], expected)


def test_readers_of_a_dropped_node_read_the_kept_one():
    b = GraphBuilder("twice")
    x = b.input("x", "f32[4, 3] cpu")
    e1 = b.op("prims.exp", x)
    e2 = b.op("prims.exp", x)
    t1 = b.op("prims.mul", e1, 2.0)
    t2 = b.op("prims.mul", e2, 2.0)  # equal to t1 once e2 is e1
    out = b.op("prims.add", t1, t2)
    graph = b.build(out)
    merged = common_subexpressions(graph)
    verify(merged)
    assert merged.ops() == ["prims.exp", "prims.mul", "prims.add"]
    x0 = torch.randn(4, 3)
    torch.testing.assert_close(interpret(merged, x0)[0], 4 * torch.exp(x0))


def test_random_draws_and_in_place_updates_are_kept():
    b = GraphBuilder("impure")
    x = b.input("x", "f32[4, 3] cpu")
    r1 = b.op("aten.rand.default", [4, 3], dtype=torch.float32, device=torch.device("cpu"), pin_memory=False)
    r2 = b.op("aten.rand.default", [4, 3], dtype=torch.float32, device=torch.device("cpu"), pin_memory=False)
    a1 = b.op("aten.add_.Tensor", x, r1)
    a2 = b.op("aten.add_.Tensor", x, r1)
    graph = b.build(b.op("aten.sub.Tensor", r1, r2), a1, a2)
    assert common_subexpressions(graph) is graph
    assert not is_pure("aten.rand.default") and not is_pure("aten.add_.Tensor")
    assert not is_pure("prims.philox_rand") and not is_pure("prims.empty_strided")
    assert is_pure("aten.add.Tensor") and is_pure("prims.where")
    torch.manual_seed(0)
    x0 = torch.zeros(4, 3)
    difference = interpret(graph, x0.clone())[0]
    assert difference.abs().max() > 0  # two draws, not one


def test_graph_outputs_stay_distinct_tensors():
    b = GraphBuilder("outputs")
    x = b.input("x", "f32[4] cpu")
    graph = b.build(b.op("prims.neg", x), b.op("prims.neg", x))
    assert common_subexpressions(graph) is graph
    # read inside the graph only, the second one goes
    b = GraphBuilder("inner")
    x = b.input("x", "f32[4] cpu")
    first = b.op("prims.neg", x)
    graph = b.build(first, b.op("prims.abs", b.op("prims.neg", x)))
    assert common_subexpressions(graph).ops() == ["prims.neg", "prims.abs"]


def test_constants_equal_only_in_python_are_different_arguments():
    b = GraphBuilder("zeros")
    x = b.input("x", "f32[4] cpu")
    plus = b.op("prims.mul", x, 0.0)
    minus = b.op("prims.mul", x, -0.0)
    graph = b.build(b.op("prims.atan2", plus, minus))
    merged = common_subexpressions(graph)
    assert merged is graph
    x0 = torch.rand(4) + 1
    expected = torch.atan2(x0 * 0.0, x0 * -0.0)  # pi: the signs of the zeros matter
    torch.testing.assert_close(interpret(merged, x0)[0], expected)
    assert expected[0].item() > 3
