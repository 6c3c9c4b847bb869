"""The prims stage as a pipeline of the ir pass runner: its listing, `decompose` as its first step
run alone, and the runner's timing, verification and per-step dumps on prims' steps."""

import pytest
import torch

from torchsmith.ir import GraphBuilder, Value, VerifyError, events, interpret
from torchsmith.ir.passes import Pipeline, Step
from torchsmith.prims import decompose, prims_pipeline
from torchsmith.prims.decompose import decompose_step


def _graph():
    b = GraphBuilder("g")
    x = b.input("x", "f32[4, 8] cpu")
    y = b.op("aten.gelu.default", b.op("aten.mul.Tensor", x, 2.0), approximate="tanh")
    return b.build(b.op("aten.sum.dim_IntList", y, [1], True)), [torch.randn(4, 8)]


def _attention_graph():
    """softmax(q @ k^T * 0.5) @ v over (2, 3, 5, 4) heads, in the aten ops a trace records."""
    shape = (2, 3, 5, 4)
    b = GraphBuilder("attention")
    q, k, v = (b.input(n, "f32[2, 3, 5, 4] cpu") for n in "qkv")

    def flat(x, dims):
        return b.op("aten._unsafe_view.default", b.op("aten.expand.default", x, list(x.type.shape)), dims)

    kt = b.op("aten.transpose.int", k, -1, -2)
    scores = b.op("aten.bmm.default", flat(q, [6, 5, 4]), flat(kt, [6, 4, 5]))
    scores = b.op("aten.mul.Tensor", b.op("aten._unsafe_view.default", scores, [2, 3, 5, 5]), 0.5)
    probs = b.op("aten._softmax.default", scores, -1, False)
    out = b.op("aten.bmm.default", flat(probs, [6, 5, 5]), flat(v, [6, 5, 4]))
    out = b.op("aten._unsafe_view.default", out, list(shape))
    return b.build(out), [torch.randn(shape) for _ in range(3)]


def test_the_pipeline_lists_its_steps():
    assert str(prims_pipeline(fuse=True)) == (
        "prims pipeline:\n"
        "  decompose              -> prims graph: aten ops as prims, kept ops whole\n"
        "  fuse_attention         -> prims graph, softmax attention as one op\n"
        "  common_subexpressions  -> prims graph, each pure value computed once\n"
        "  attention_forms        -> prims graph, causal masks and grouped heads in attention"
    )
    assert prims_pipeline().names() == ["decompose", "common_subexpressions", "attention_forms"]


def test_decompose_is_the_pipeline_s_first_step_and_is_timed_once():
    graph, inputs = _graph()
    with events.observe() as seen:
        alone = decompose(graph)
    through = prims_pipeline().run(graph)
    assert alone == through.replace(stamps=alone.stamps)
    assert [s.pass_name for s in alone.stamps] == [s.pass_name for s in through.stamps] == ["decompose"]
    assert [(e.stage, e.payload["step"]) for e in seen if e.kind == "time"] == [("prims", "decompose")]
    torch.testing.assert_close(interpret(alone, *inputs)[0], interpret(graph, *inputs)[0])


def test_fusing_attention_through_the_pipeline_stamps_both_steps():
    graph, inputs = _attention_graph()
    fused = prims_pipeline(fuse=True).run(graph, verify=True)
    assert [s.pass_name for s in fused.stamps] == ["decompose", "fuse_attention"]
    assert "prims.scaled_dot_product_attention" in fused.ops()
    expected = interpret(graph, *inputs)[0]
    torch.testing.assert_close(interpret(fused, *inputs)[0], expected, rtol=1e-4, atol=1e-5)
    # no attention: fuse_attention returns its input, and the runner adds no stamp
    plain, _ = _graph()
    assert [s.pass_name for s in prims_pipeline(fuse=True).run(plain).stamps] == ["decompose"]


def test_steps_are_dumped_under_the_environment_variable(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCHSMITH_DUMP_IR", str(tmp_path))
    monkeypatch.setenv("TORCHSMITH_DUMP_IR_STEPS", "1")
    graph, _ = _graph()
    result = decompose(graph)
    assert [p.name for p in tmp_path.iterdir()] == ["001-prims-decompose.txt"]
    text = (tmp_path / "001-prims-decompose.txt").read_text()
    assert "prims." in text and "aten." not in text
    assert result.ops() == [line.split(" = ")[1].split("(")[0] for line in text.splitlines() if " = " in line]


def test_a_step_that_breaks_the_graph_is_named_by_the_verifier(monkeypatch):
    def drop_last_node(graph):
        (out,) = graph.outputs
        return graph.replace(outputs=(Value("gone", out.type),))

    graph, _ = _graph()
    pipeline = Pipeline("prims", (decompose_step(), Step("drop", drop_last_node)))
    monkeypatch.setenv("TORCHSMITH_VERIFY", "1")
    with pytest.raises(VerifyError) as caught:
        pipeline.run(graph)
    assert caught.value.__notes__ == ["found by the verifier after step 'drop' of the prims pipeline"]


def test_a_bad_option_is_refused_before_anything_runs():
    graph, _ = _graph()
    with pytest.raises(Exception, match="on_missing must be 'error' or 'keep'"):
        decompose(graph, on_missing="maybe")
