import torch

from torchsmith.ir import GraphBuilder, interpret
from torchsmith.ir.passes import dead_code_elimination, graph_pass, has_side_effects, run_pipeline


def _graph_with_dead_code():
    b = GraphBuilder("g")
    x = b.input("x", "f32[4] cpu")
    y = b.input("y", "f32[4] cpu")
    b.op("aten.mul.Tensor", x, x)  # dead
    b.op("torch.Tensor.add_", y, 1.0)  # dead result, but mutates y
    z = b.op("aten.add.Tensor", x, y)
    return b.build(z)


def test_dce_keeps_side_effects_and_drops_dead_nodes():
    graph = _graph_with_dead_code()
    pruned = dead_code_elimination(graph)
    assert pruned.ops() == ["torch.Tensor.add_", "aten.add.Tensor"]
    assert pruned.stamps[-1].pass_name == "dce"
    x, y = torch.randn(4), torch.randn(4)
    expected_y = y + 1
    (out,) = interpret(pruned, x, y)
    torch.testing.assert_close(y, expected_y)
    torch.testing.assert_close(out, x + expected_y)


def test_pipeline_stamps_each_pass_in_order():
    @graph_pass("rename")
    def rename(graph):
        return graph.replace(name="renamed")

    result = run_pipeline(_graph_with_dead_code(), [dead_code_elimination, rename], verify=False)
    assert [s.pass_name for s in result.stamps] == ["dce", "rename"]
    assert all(s.seconds >= 0 for s in result.stamps)
    assert result.name == "renamed"


def test_side_effect_names():
    assert has_side_effects("aten.add_.Tensor")
    assert has_side_effects("aten.add.out")
    assert has_side_effects("torch.Tensor.__iadd__")
    assert has_side_effects("torch.Tensor.__setitem__")
    assert not has_side_effects("aten.__and__.Tensor")
    assert not has_side_effects("torch.Tensor.__add__")
    assert not has_side_effects("aten.relu.default")
