import dataclasses

import pytest
import torch

from torchsmith.ir import (
    Graph,
    GraphBuilder,
    IRKind,
    Pipeline,
    Step,
    VerifyError,
    events,
    interpret,
    register_ir_kind,
)
from torchsmith.ir.graph import Value
from torchsmith.ir.passes import as_step, dead_code_elimination, graph_pass, has_side_effects, run_pipeline


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


# ---- the pass runner ---------------------------------------------------------------------------

def _rename(graph):
    return graph.replace(name="renamed")


def _pipeline():
    return Pipeline("demo", (
        Step("dce", dead_code_elimination, "graph without dead nodes"),
        Step("rename", _rename, "the same graph, renamed"),
    ))


def test_pipeline_prints_its_steps_in_order_with_what_each_produces():
    assert str(_pipeline()) == (
        "demo pipeline:\n"
        "  dce     -> graph without dead nodes\n"
        "  rename  -> the same graph, renamed"
    )
    assert _pipeline().names() == ["dce", "rename"]


def test_a_graph_pass_as_a_step_is_timed_once():
    result = _pipeline().run(_graph_with_dead_code(), verify=False)
    assert [s.pass_name for s in result.stamps] == ["dce", "rename"]
    assert as_step(dead_code_elimination).run is not dead_code_elimination


def test_iterate_yields_each_state_and_its_stamp_and_emits_time_events():
    with events.observe() as seen:
        runs = list(_pipeline().iterate(_graph_with_dead_code(), verify=False))
    assert [r.step for r in runs] == ["dce", "rename"]
    assert runs[0].state.name == "g" and runs[1].state.name == "renamed"
    assert [r.stamp.pass_name for r in runs] == ["dce", "rename"]
    assert runs[1].state.stamps[-1] == runs[1].stamp
    times = [(e.stage, e.payload["step"]) for e in seen if e.kind == "time"]
    assert times == [("demo", "dce"), ("demo", "rename")]


def test_a_step_returning_its_state_unchanged_leaves_no_stamp():
    graph = _graph_with_dead_code()
    runs = list(Pipeline("demo", (Step("nothing", lambda g: g),)).iterate(graph, verify=False))
    assert runs[0].state is graph and runs[0].stamp is None and graph.stamps == ()


def _broken(graph):
    """`graph` with its output renamed to a value nothing defines."""
    (out,) = graph.outputs
    return graph.replace(outputs=(Value("nowhere", out.type),))


def test_verify_flag_checks_between_steps_and_names_the_step(monkeypatch):
    monkeypatch.delenv("TORCHSMITH_VERIFY", raising=False)
    pipeline = Pipeline("demo", (Step("break_it", _broken), Step("rename", _rename)))
    assert pipeline.run(_graph_with_dead_code()).outputs[0].name == "nowhere"  # not asked: no check
    with pytest.raises(VerifyError) as caught:
        pipeline.run(_graph_with_dead_code(), verify=True)
    assert "nowhere" in str(caught.value)
    assert any("after step 'break_it' of the demo pipeline" in n for n in caught.value.__notes__)
    monkeypatch.setenv("TORCHSMITH_VERIFY", "1")
    with pytest.raises(VerifyError):
        pipeline.run(_graph_with_dead_code())
    assert pipeline.run(_graph_with_dead_code(), verify=False).name == "renamed"  # the flag wins


def test_an_error_in_a_step_keeps_its_type_and_gains_a_note():
    def fail(graph):
        raise KeyError("boom")

    with pytest.raises(KeyError) as caught:
        Pipeline("demo", (Step("fail", fail),)).run(_graph_with_dead_code(), verify=False)
    assert caught.value.__notes__ == ["in step 'fail' of the demo pipeline"]


@dataclasses.dataclass(frozen=True)
class _Counter:
    """A second kind of IR, for the hook: valid when its count is not negative."""

    count: int


class _BadCounter(Exception):
    pass


def _check_counter(c):
    if c.count < 0:
        raise _BadCounter(f"negative count {c.count}")


register_ir_kind(_Counter, IRKind("counter", verify=_check_counter, format=lambda c: f"count {c.count}"))


@dataclasses.dataclass(frozen=True)
class _State:
    """A stage's state: a graph, a second IR and a value threaded through; stamps its graph."""

    graph: Graph
    counter: _Counter
    note: str = ""

    def stamped(self, name, seconds):
        return dataclasses.replace(self, graph=self.graph.stamped(name, seconds))


def test_a_dataclass_state_is_stamped_checked_and_dumped_field_by_field(tmp_path):
    state = _State(_graph_with_dead_code(), _Counter(1))
    pipeline = Pipeline("stage", (
        Step("count", lambda s: dataclasses.replace(s, counter=_Counter(s.counter.count - 1)), "counter - 1"),
        Step("note", lambda s: dataclasses.replace(s, note="seen"), "a note"),
        Step("dce", lambda s: dataclasses.replace(s, graph=dead_code_elimination.step.run(s.graph)), "graph"),
    ))
    final = pipeline.run(state, verify=True, dump=tmp_path)
    assert [s.pass_name for s in final.graph.stamps] == ["count", "note", "dce"]
    assert final.note == "seen" and final.counter == _Counter(0)
    # only what a step changed is written (a new stamp is no change): the counter after `count`,
    # the graph after `dce`, nothing after `note`
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["001-stage-count.counter.txt", "002-stage-dce.graph.txt"]
    assert (tmp_path / "001-stage-count.counter.txt").read_text() == "count 0\n"
    dumped = Graph.parse((tmp_path / "002-stage-dce.graph.txt").read_text())
    assert dumped == final.graph
    with pytest.raises(_BadCounter) as caught:
        pipeline.run(final, verify=True)
    assert "field 'counter'" in caught.value.__notes__[-1]


def test_environment_dumps_steps_only_when_asked(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCHSMITH_DUMP_IR", str(tmp_path))
    monkeypatch.delenv("TORCHSMITH_DUMP_IR_STEPS", raising=False)
    _pipeline().run(_graph_with_dead_code(), verify=False)
    assert list(tmp_path.iterdir()) == []
    (tmp_path / "007-capture-f.json").write_text("{}")  # numbering continues after what is there
    monkeypatch.setenv("TORCHSMITH_DUMP_IR_STEPS", "1")
    result = _pipeline().run(_graph_with_dead_code(), verify=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "007-capture-f.json", "008-demo-dce.txt", "009-demo-rename.txt"]
    assert Graph.parse((tmp_path / "009-demo-rename.txt").read_text()) == result


def test_dump_names_are_safe_file_names(tmp_path):
    graph = _graph_with_dead_code()
    Pipeline("a/b", (Step("../up", _rename),)).run(graph, verify=False, dump=tmp_path)
    assert [p.name for p in tmp_path.iterdir()] == ["001-a_b-.._up.txt"]


def test_undecorated_gives_a_graph_pass_s_own_function():
    from torchsmith.ir.passes import undecorated

    raw = undecorated(dead_code_elimination)
    assert raw is not dead_code_elimination and raw is dead_code_elimination.step.run
    assert raw(_graph_with_dead_code()).stamps == ()  # the bare pass does not time itself
    assert undecorated(_rename) is _rename
