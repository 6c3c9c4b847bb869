"""The loop-IR verifier accepts what the lowering makes and rejects broken programs, and the
pipelines run it between their steps under TORCHSMITH_VERIFY_LOOPS=1."""

import dataclasses

import pytest
import torch

from torchsmith.inductor import compile_graph, cpu_pipeline, lower, to_prims
from torchsmith.inductor.__main__ import main
from torchsmith.inductor.loop_ir.program import ComputedBuffer, Load, Op, Pointwise, index_var
from torchsmith.inductor.loop_ir.verify import LoopIRVerificationError, verify_loops
from torchsmith.inductor.lowering.inline import inline_pointwise
from torchsmith.inductor.testing import make_graph


def _graph(name="verify_me"):
    def body(b, x, y):
        return (b.op("aten.sum.dim_IntList", b.op("aten.mul.Tensor", b.op("aten.exp.default", x), y), [1]),)

    f32 = torch.float32
    return make_graph(name, {"x": ((4, 8), f32), "y": ((4, 8), f32)}, body)


def _program():
    return lower(to_prims(_graph()))


def _computed(program):
    return next(b for b in program.buffers if isinstance(b, ComputedBuffer) and isinstance(b.body, Pointwise))


def _with_body_value(program, value):
    """`program` with its first pointwise buffer computing `value` instead."""
    target = _computed(program)
    body = dataclasses.replace(target.body, value=value)
    buffers = tuple(dataclasses.replace(b, body=body) if b is target else b for b in program.buffers)
    return dataclasses.replace(program, buffers=buffers)


def test_lowered_and_inlined_programs_verify():
    program = _program()
    assert verify_loops(program) is program
    inlined, _ = inline_pointwise(program)
    assert verify_loops(inlined) is inlined


def test_a_load_of_an_undefined_buffer_is_caught():
    program = _program()
    value = Load("nowhere", index_var(0), torch.float32)
    with pytest.raises(LoopIRVerificationError, match="reads buffer nowhere"):
        verify_loops(_with_body_value(program, value))


def test_an_index_variable_outside_the_loops_is_caught():
    program = _program()
    x = program.inputs[0].name
    value = Load(x, 8 * index_var(0) + index_var(5), torch.float32)
    with pytest.raises(LoopIRVerificationError, match="uses i5"):
        verify_loops(_with_body_value(program, value))


def test_a_load_with_the_wrong_dtype_is_caught():
    program = _program()
    x = program.inputs[0].name
    value = Op("exp", (Load(x, index_var(0), torch.float64),), torch.float32)
    with pytest.raises(LoopIRVerificationError, match="as torch.float64"):
        verify_loops(_with_body_value(program, value))


def test_a_body_of_another_dtype_than_its_buffer_is_caught():
    program = _program()
    x = program.inputs[0].name
    value = Op("exp", (Load(x, index_var(0), torch.float32),), torch.float64)
    with pytest.raises(LoopIRVerificationError, match="computes torch.float64 values"):
        verify_loops(_with_body_value(program, value))


def test_the_cpu_pipeline_verifies_after_each_step(monkeypatch):
    """A step that breaks the program is named by the verifier running between steps."""

    def broken_inline(program):
        return _with_body_value(program, Load("ghost", index_var(0), torch.float32)), []

    monkeypatch.setattr(cpu_pipeline, "inline_pointwise", broken_inline)
    monkeypatch.setenv("TORCHSMITH_VERIFY_LOOPS", "1")
    with pytest.raises(LoopIRVerificationError, match="reads buffer ghost") as caught:
        compile_graph(_graph("verify_broken_inline"))
    assert "after step 'inline' of the inductor pipeline" in "\n".join(caught.value.__notes__)


def test_pipeline_listing(capsys):
    assert main(["--pipeline"]) == 0
    out = capsys.readouterr().out
    listed = [line.split("->")[0].strip() for line in out.splitlines() if "->" in line]
    assert listed[: len(cpu_pipeline.CPU_PIPELINE.names())] == cpu_pipeline.CPU_PIPELINE.names()


def test_a_load_past_the_end_of_its_buffer_is_caught():
    program = _program()
    x = program.inputs[0].name  # 4 x 8 elements
    value = Load(x, 8 * index_var(0) + 1 + index_var(1), torch.float32)
    with pytest.raises(LoopIRVerificationError, match="outside its storage of 32 elements"):
        verify_loops(_with_body_value(program, value))
