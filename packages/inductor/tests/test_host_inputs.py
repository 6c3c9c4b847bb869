"""Host inputs of a GPU graph (a 0-dim cpu tensor read as a scalar, a cpu tensor moved to the GPU):
which the inductor may move at the call, and which it must leave on the cpu."""

import pytest
import torch

from torchsmith.inductor.device_compilers import check_supported
from torchsmith.inductor.errors import UnsupportedGraphError
from torchsmith.inductor.host_inputs import move_host_inputs, moved
from torchsmith.ir import Graph

# What capture records for `c.n = c.n.to(x.device); pos = arange(3) + c.n; c.n.add_(3)` and
# `x * s` with `s = torch.tensor(2.0)`, plus a host input the graph keeps (and returns) on the cpu.
STEP = """graph step(%x: f32[3] cuda:0, %s: f32[] cpu, %n: i64[] cpu, %k: i64[] cpu, %idle: f32[] cpu):
  %to: i64[] cuda:0 = torch.Tensor.to(%n, device("cuda:0"))
  %arange: i64[3] cuda:0 = torch.arange(3, device=device("cuda:0"))
  %pos: i64[3] cuda:0 = torch.Tensor.__add__(%arange, %to)
  %add_: i64[] cuda:0 = torch.Tensor.add_(%to, 3)
  %mul: f32[3] cuda:0 = torch.Tensor.__mul__(%x, %s)
  %y: f32[3] cuda:0 = torch.Tensor.__add__(%mul, %pos)
  %k1: i64[] cpu = torch.Tensor.__add__(%k, 1)
  return (%to, %y, %k1)
"""


def test_inputs_every_reader_takes_to_the_gpu_are_moved():
    host = move_host_inputs(Graph.parse(STEP))
    assert host.positions == (1, 2, 4) and host.device == "cuda:0"
    types = {v.name: v.type.device for v in host.graph.inputs}
    assert types == {"x": "cuda:0", "s": "cuda:0", "n": "cuda:0", "k": "cpu", "idle": "cuda:0"}
    reader = next(node for node in host.graph.nodes if node.op == "torch.Tensor.__mul__")
    assert reader.args[1].type.device == "cuda:0"  # the nodes read the retyped value


def test_a_host_input_kept_on_the_cpu_still_refuses_the_graph():
    """`k + 1` stays on the cpu (its result is returned there): the graph mixes devices still, and
    the inductor says so, naming the input."""
    with pytest.raises(UnsupportedGraphError, match="%k uses device cpu"):
        check_supported(move_host_inputs(Graph.parse(STEP)).graph)


@pytest.mark.parametrize("returned, mutated", [(True, False), (False, True)])
def test_a_returned_or_mutated_host_input_stays(returned, mutated):
    body = "  %a: f32[] cpu = torch.Tensor.add_(%s, 1)\n" if mutated else ""
    out = "%s" if returned else "%x"
    text = (f"graph g(%x: f32[3] cuda:0, %s: f32[] cpu):\n{body}"
            f"  %y: f32[3] cuda:0 = torch.Tensor.__mul__(%x, %s)\n  return ({out}, %y)\n")
    assert move_host_inputs(Graph.parse(text)).positions == ()


def test_cpu_graphs_and_graphs_on_two_accelerators_are_left_alone():
    cpu = Graph.parse("graph g(%x: f32[3] cpu, %s: f32[] cpu):\n"
                      "  %y: f32[3] cpu = torch.Tensor.__mul__(%x, %s)\n  return (%y,)\n")
    assert move_host_inputs(cpu).positions == ()
    two = Graph.parse("graph g(%x: f32[3] cuda:0, %z: f32[3] cuda:1, %s: f32[] cpu):\n"
                      "  %y: f32[3] cuda:0 = torch.Tensor.__mul__(%x, %s)\n  return (%y, %z)\n")
    assert move_host_inputs(two).positions == ()


def test_moved_copies_only_the_named_tensors():
    s, x = torch.tensor(2.0), torch.ones(3)
    got = moved([x, s, 3], (1, 2), "cpu")
    assert got[0] is x and got[2] == 3 and torch.equal(got[1], s)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_compiled_gpu_function_reads_host_scalars_and_moved_tensors():
    """End to end on a GPU: a 0-dim cpu scale and a cpu counter moved to the GPU inside the
    compiled function, as eager runs them (the counter object ends up holding the GPU tensor)."""
    import torchsmith

    class Counter:
        def __init__(self):
            self.n = torch.tensor(0)

    def step(counter, x, scale):
        counter.n = counter.n.to(x.device)
        positions = torch.arange(x.shape[0], device=x.device) + counter.n
        counter.n.add_(x.shape[0])
        return x * scale + positions

    x, scale = torch.randn(5, device="cuda"), torch.tensor(3.0)
    ours, theirs = Counter(), Counter()
    compiled = torchsmith.compile(step, options={"fallback": "raise"})
    torch.testing.assert_close(compiled(ours, x, scale), step(theirs, x, scale))
    assert ours.n.device.type == "cuda" and int(ours.n) == int(theirs.n) == 5
    torch.testing.assert_close(compiled(ours, x, scale), step(theirs, x, scale))
    assert int(ours.n) == int(theirs.n) == 10
