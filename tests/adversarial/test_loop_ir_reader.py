"""The loop-IR JSON reader: deep nesting, unknown or duplicate names and wrong field kinds are
refused with a LoopIRFormatError (an ir SerializationError too) naming the JSON path."""

import copy
import json

import pytest
from adversarial_corpus import outcome
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_ir_readers import mutate

from torchsmith.inductor.cpp.codegen import generate_cpp
from torchsmith.inductor.cpu_pipeline import to_prims
from torchsmith.inductor.fusion.scheduler import schedule
from torchsmith.inductor.loop_ir.serialize import (
    LoopIRFormatError,
    load_program,
    program_from_json,
    program_to_json,
)
from torchsmith.inductor.lowering.lower import lower
from torchsmith.ir import SerializationError, parse_graph

GRAPH = """graph g(%inp: f32[4, 8] cpu):
  %a: f32[4, 8] cpu = aten.sin.default(%inp)
  %b: f32[4, 8] cpu = aten.add.Tensor(%a, %inp)
  %c: f32[4] cpu = aten.sum.dim_IntList(%b, [1])
  return (%c)
"""


@pytest.fixture(scope="module")
def doc():
    return program_to_json(lower(to_prims(parse_graph(GRAPH))))


def _codegen(doc):
    program = program_from_json(doc)
    plan = schedule(program)
    return generate_cpp(program, plan.groups)


def _deep(depth: int) -> dict:
    value = {"load": ["inp", "8*i0 + i1", "f32"]}
    for _ in range(depth):
        value = {"op": ["neg", [value], "f32"]}
    return value


def test_deep_nesting_is_refused(doc):
    deep = copy.deepcopy(doc)
    deep["buffers"][0]["computed"]["body"]["pointwise"]["value"] = _deep(500)
    assert outcome("loop-IR JSON: 500-deep nesting", lambda: _codegen(deep)) == "clear"
    with pytest.raises(SerializationError, match=r"buffers\[0\].*deeper than"):
        program_from_json(deep)
    shallow = copy.deepcopy(doc)
    shallow["buffers"][0]["computed"]["body"]["pointwise"]["value"] = _deep(20)
    assert outcome("loop-IR JSON: 20-deep nesting", lambda: _codegen(shallow), bad=False) == "accepted"


def test_unknown_and_duplicate_names_are_refused(doc):
    cases = {}
    unknown = copy.deepcopy(doc)
    unknown["buffers"][1]["computed"]["body"]["pointwise"]["value"]["op"][1][0]["load"][0] = "nowhere"
    cases["unknown load"] = unknown
    duplicate = copy.deepcopy(doc)
    duplicate["buffers"][1]["computed"]["name"] = duplicate["buffers"][0]["computed"]["name"]
    cases["duplicate buffer"] = duplicate
    output = copy.deepcopy(doc)
    output["outputs"][0]["buffer"] = "nowhere"
    cases["unknown output"] = output
    later = copy.deepcopy(doc)
    later["buffers"][0], later["buffers"][1] = later["buffers"][1], later["buffers"][0]
    cases["read before written"] = later
    position = copy.deepcopy(doc)
    position["inputs"][0]["position"] = 5
    cases["input position"] = position
    symbol = copy.deepcopy(doc)
    symbol["symbols"] = ["i0"]
    cases["loop variable as symbol"] = symbol
    negative = copy.deepcopy(doc)
    negative["buffers"][0]["computed"]["layout"]["shape"][0] = -4
    cases["negative size"] = negative
    huge = copy.deepcopy(doc)
    huge["buffers"][0]["computed"]["layout"]["strides"][0] = 2**70
    cases["size beyond int64"] = huge
    op = copy.deepcopy(doc)
    op["buffers"][0]["computed"]["body"]["pointwise"]["value"]["op"][0] = "sin); system(\"x\"); (void"
    cases["op name"] = op
    for name, case in cases.items():
        assert outcome("loop-IR JSON: bad names/values", lambda c=case: _codegen(c)) == "clear", name


def test_unreadable_files_are_clear_errors(tmp_path):
    for k, text in enumerate(["{not json", "[" * 100_000, "[]", '{"format": "torchsmith.loop_ir"}']):
        path = tmp_path / f"bad{k}.json"
        path.write_text(text)
        assert outcome("loop-IR JSON: unreadable files", lambda p=path: load_program(p)) == "clear"


@given(st.lists(st.integers(0, 10**6), min_size=1, max_size=3))
@settings(max_examples=120, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
def test_fuzzed_loop_ir(choices):
    base = program_to_json(lower(to_prims(parse_graph(GRAPH))))
    doc = json.loads(json.dumps(mutate(base, choices)))
    result = outcome("loop-IR JSON: fuzzed structure", lambda: _codegen(doc), bad=False)
    assert result in ("clear", "accepted")


def test_error_is_both_an_inductor_and_an_ir_error():
    from torchsmith.inductor.errors import InductorError

    assert issubclass(LoopIRFormatError, InductorError) and issubclass(LoopIRFormatError, SerializationError)
