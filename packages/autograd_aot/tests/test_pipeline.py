"""autograd_aot's lowering as a pipeline of the ir pass runner: its listing, one stamp and one time
event per step, the verifier naming the step, and every step's IR dumped when asked."""

import pytest
import torch

from torchsmith.autograd_aot import aot_pipeline, lower
from torchsmith.ir import GraphBuilder, Value, VerifyError, events, interpret


def _graph():
    b = GraphBuilder("block")
    x, w = b.input("x", "f32[4, 3] cpu"), b.input("w", "f32[5, 3] cpu grad")
    h = b.op("torch.nn.functional.linear", x, w, source="model.py:7")
    return b.build(b.op("torch.sigmoid", b.op("torch.relu", h)))


def _inputs():
    return [torch.randn(4, 3), torch.randn(5, 3, requires_grad=True)]


def test_the_pipeline_lists_its_steps():
    assert aot_pipeline().names() == ["trace", "functionalize", "partition"]
    assert aot_pipeline(lambda g: g).names() == ["trace", "functionalize", "decompose", "partition"]
    lines = str(aot_pipeline()).splitlines()
    assert lines[0] == "autograd_aot pipeline:"
    assert lines[1].split() == ["trace", "->", "ATen", "graph", "(joint", "forward+backward", "when",
                                "training)"]


def test_each_step_is_stamped_and_timed_once():
    with events.observe() as seen:
        lowered = lower(_graph(), _inputs(), training=True)
    steps = ["trace", "functionalize", "partition"]
    assert [s.pass_name for s in lowered.forward.stamps] == steps
    assert [s.pass_name for s in lowered.backward.stamps] == steps
    assert [s.pass_name for s in lowered.functional.stamps] == steps[:2]
    assert [s.pass_name for s in lowered.traced.graph.stamps] == ["trace"]
    times = [e.payload["step"] for e in seen if e.stage == "autograd_aot" and e.kind == "time"]
    assert times == steps


def test_inference_skips_the_partition_without_a_stamp():
    lowered = lower(_graph(), [torch.randn(4, 3), torch.randn(5, 3)], training=False)
    assert lowered.backward is None
    assert [s.pass_name for s in lowered.forward.stamps] == ["trace", "functionalize"]
    x, w = torch.randn(4, 3), torch.randn(5, 3)
    torch.testing.assert_close(interpret(lowered.forward, x, w)[0], torch.sigmoid(torch.relu(x @ w.T)))


def test_a_decompose_that_breaks_the_graph_is_named_by_the_verifier(monkeypatch):
    def broken(graph):
        return graph.replace(outputs=(Value("gone", graph.outputs[0].type),) + graph.outputs[1:])

    monkeypatch.setenv("TORCHSMITH_VERIFY", "1")
    with pytest.raises(VerifyError) as caught:
        lower(_graph(), _inputs(), training=True, decompose=broken)
    note = "found by the verifier after step 'decompose' of the autograd_aot pipeline"
    assert caught.value.__notes__[0].startswith(note)


def test_every_step_s_graphs_are_dumped_when_asked(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCHSMITH_DUMP_IR", str(tmp_path))
    monkeypatch.setenv("TORCHSMITH_DUMP_IR_STEPS", "1")
    lowered = lower(_graph(), _inputs(), training=True)
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["001-autograd_aot-trace.graph.txt", "002-autograd_aot-functionalize.graph.txt",
                     "003-autograd_aot-partition.graph.txt", "004-autograd_aot-partition.backward.txt"]
    assert (tmp_path / names[2]).read_text().rstrip() == str(lowered.forward).rstrip()
    assert (tmp_path / names[3]).read_text().rstrip() == str(lowered.backward).rstrip()
