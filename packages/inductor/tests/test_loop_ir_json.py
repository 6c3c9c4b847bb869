"""The loop IR's JSON form: exact round trips, errors that name the place, and code generation
from a loop IR file alone (`python -m torchsmith.inductor codegen`)."""

import json
import math

import pytest
import torch

import torchsmith.prims  # noqa: F401  (registers the prims ops the graphs use)
from torchsmith.inductor import compile_graph, lower, to_prims
from torchsmith.inductor.__main__ import main
from torchsmith.inductor.loop_ir.program import ComputedBuffer, Constant, Op, Pointwise, loads
from torchsmith.inductor.loop_ir.serialize import (
    LoopIRFormatError,
    load_program,
    program_from_json,
    program_to_json,
    save_program,
)
from torchsmith.inductor.lowering.inline import inline_pointwise
from torchsmith.inductor.testing import make_graph
from torchsmith.ir import TensorType
from torchsmith.ir.symbolic import symbol

F32 = torch.float32


def _softmax(b, x):
    m = b.op("aten.amax.default", x, [1], True)
    e = b.op("aten.exp.default", b.op("aten.sub.Tensor", x, m))
    return b.op("aten.div.Tensor", e, b.op("aten.sum.dim_IntList", e, [1], True))


def _norm_and_argmax(b, x):
    var, mean = b.op("aten.var_mean.correction", x, [1], correction=0, keepdim=True)
    return b.op("aten.argmax.default", x, 1), b.op("aten.add.Tensor", var, mean)


def _embedding(b, table, ids):
    return b.op("aten.mul.Tensor", b.op("aten.embedding.default", table, ids), 2.0)


def _conv(b, x, w):
    y = b.op("aten.convolution.default", x, w, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1)
    return b.op("aten.relu.default", y)


def _transposed_matmul(b, x, w):
    return b.op("aten.mm.default", b.op("aten.t.default", x), w)


def _non_finite_constants(b, x):
    masked = b.op("aten.masked_fill.Scalar", x, b.op("aten.gt.Scalar", x, 0.5), -math.inf)
    return b.op("aten.clamp.default", masked, float("nan"))


def _symbolic_rows(b, x):
    # prims infer output types from symbolic sizes (aten ops would need out_type=)
    return b.op("prims.sum", b.op("prims.exp", x), [1])


S0 = symbol("s0")
GRAPHS = {
    "softmax": ({"x": ((4, 8), F32)}, _softmax),
    "welford_argmax": ({"x": ((6, 10), F32)}, _norm_and_argmax),
    "indirect": ({"table": ((16, 8), F32), "ids": ((3, 5), torch.int64)}, _embedding),
    "extern_with_params": ({"x": ((2, 3, 8, 8), F32), "w": ((4, 3, 3, 3), F32)}, _conv),
    "views": ({"x": ((8, 4), F32), "w": ((8, 5), F32)}, _transposed_matmul),
    "symbolic": ({"x": TensorType.make((8, S0), F32)}, _symbolic_rows),
    "non_finite": ({"x": ((4, 4), F32)}, _non_finite_constants),
}


def _program(name):
    inputs, body = GRAPHS[name]
    program, _ = inline_pointwise(lower(to_prims(make_graph(name, inputs, body)), addmm=True))
    return program


@pytest.mark.parametrize("name", sorted(GRAPHS))
def test_round_trip_is_exact(name):
    program = _program(name)
    doc = program_to_json(program)
    again = program_from_json(json.loads(json.dumps(doc)))  # through text, as a file would be
    if name != "non_finite":  # a nan constant is not equal to itself, so neither is its program
        assert again == program
    assert str(again) == str(program)
    assert program_to_json(again) == doc


def test_loop_variables_keep_their_assumptions():
    again = program_from_json(program_to_json(_program("symbolic")))
    symbols = {s for b in again.buffers if isinstance(b, ComputedBuffer) for x in loads(b.body.value)
               for s in x.index.free_symbols}
    assert {s.name for s in symbols} >= {"s0", "i0", "r0"}
    # Size symbols are positive; loop variables only non-negative (i0 may be 0): read back as written.
    for s in symbols:
        assert s.is_positive if s.name == "s0" else (s.is_nonnegative and s.is_positive is None), s


def test_errors_name_the_place_in_the_document():
    doc = program_to_json(_program("softmax"))
    doc["buffers"][1]["computed"]["body"]["pointwise"]["value"] = {"bogus": []}
    with pytest.raises(LoopIRFormatError, match=r"buffers\[1\].*unknown expression kind 'bogus'"):
        program_from_json(doc)
    with pytest.raises(LoopIRFormatError, match="not a loop IR document"):
        program_from_json({"format": "torchsmith.ir"})
    with pytest.raises(LoopIRFormatError, match="version 99"):
        program_from_json({**program_to_json(_program("softmax")), "version": 99})


def test_codegen_of_a_saved_program_is_the_compilers_code(tmp_path, capsys):
    inputs, body = GRAPHS["softmax"]
    graph = make_graph("softmax", inputs, body)
    compiled = compile_graph(graph)
    path = tmp_path / "loops.json"
    save_program(compiled.program, path)
    assert load_program(path) == compiled.program
    assert main(["codegen", str(path), "--out", str(tmp_path / "out")]) == 0
    assert (tmp_path / "out" / "kernels.cpp").read_text() == compiled.source
    assert main(["codegen", str(path), "--build"]) == 0
    assert "fusion decisions of softmax" in capsys.readouterr().out


def test_a_hand_edited_program_generates_the_edited_code(tmp_path, capsys):
    program = _program("softmax")
    doc = program_to_json(program)
    last = doc["buffers"][-1]["computed"]["body"]["pointwise"]
    last["value"] = {"op": ["mul", [last["value"], {"constant": [3.0, "f32"]}], "f32"]}
    path = tmp_path / "edited.json"
    path.write_text(json.dumps(doc))
    edited = load_program(path)
    before = program.buffers[-1].body
    times_three = Op("mul", (before.value, Constant(3.0, F32)), F32)
    assert edited.buffers[-1].body == Pointwise(before.ranges, times_three)
    assert main(["codegen", str(path)]) == 0
    assert "static_cast<float>(3.0)" in capsys.readouterr().out


def test_codegen_cli_errors_say_what_is_wrong(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    assert main(["codegen", str(bad)]) == 2
    assert "bad.json" in capsys.readouterr().err
