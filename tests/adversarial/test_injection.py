"""User text (file and function names, graph names, node sources, buffer names, origins) never runs
as code and never lands in generated C++, Triton or Python source outside a comment or a string."""

import ast
import importlib.util
import json
import os
import types

import pytest
import torch
from adversarial_corpus import code_lines_holding, outcome, payloads, record
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from torchsmith.inductor.cpp.build import KERNEL_MARK
from torchsmith.inductor.cpp.codegen import generate_cpp
from torchsmith.inductor.cpu_pipeline import to_prims
from torchsmith.inductor.loop_ir.serialize import LoopIRFormatError, program_from_json, program_to_json
from torchsmith.inductor.lowering.lower import lower
from torchsmith.inductor.triton.codegen import generate_triton
from torchsmith.ir import compile_to_python, dumps, interpret, loads, parse_graph, verify
from torchsmith.ir.codegen_text import (
    IdentifierNamer,
    cpp_comment,
    cpp_string,
    identifier,
    python_comment,
    python_string,
)

GRAPH = """graph g(%inp: f32[4, 8] cpu):
  %a: f32[4, 8] cpu = aten.sin.default(%inp)
  %b: f32[4, 8] cpu = aten.add.Tensor(%a, %inp)
  %c: f32[4] cpu = aten.sum.dim_IntList(%b, [1])
  return (%c)
"""


@pytest.fixture(scope="module")
def program_doc():
    return program_to_json(lower(to_prims(parse_graph(GRAPH))))


def _rename(node, old: str, new: str, key: str | None = None):
    """The loop-IR document with buffer `old` called `new` (its definition, loads and views)."""
    if isinstance(node, dict):
        out = {}
        for k, v in node.items():
            if k in ("name", "buffer") and v == old:
                out[k] = new
            else:
                out[k] = _rename(v, old, new, k)
        return out
    if isinstance(node, list):
        if key == "load" and node and node[0] == old:
            return [new, *node[1:]]
        return [_rename(v, old, new, key) for v in node]
    return node


def _hostile_programs(doc, marker: str):
    for k, text in enumerate(payloads(marker)):
        edited = json.loads(json.dumps(doc))
        edited["name"] = text
        for b in edited["buffers"]:
            b["computed"]["origin"] = text
        edited = _rename(edited, "add", text[:190] + str(k))
        yield text, edited


def _readable(programs, category: str):
    """The documents the reader takes; the others must be refused clearly (too long a name)."""
    for text, doc in programs:
        try:
            program_from_json(doc)
        except LoopIRFormatError as e:
            assert "at most" in str(e)
            record(category, "clear")
            continue
        yield text, doc


def test_hostile_loop_ir_names_stay_in_cpp_comments(program_doc, tmp_path):
    marker = str(tmp_path / "PWNED_CPP")
    for _, doc in _readable(_hostile_programs(program_doc, marker), "C++ source: hostile names"):
        source, kernels = generate_cpp(program_from_json(doc))
        bad = code_lines_holding(source, marker, "//")
        assert source.count(KERNEL_MARK) <= len(kernels)  # no origin adds a place to split the unit
        record("C++ source: hostile names", "wrong" if bad else "accepted")
        assert not bad, bad[:3]
    assert not os.path.exists(marker)


def test_hostile_loop_ir_names_stay_in_triton_comments(program_doc, tmp_path):
    marker = str(tmp_path / "PWNED_TRITON")
    hostile = _readable(_hostile_programs(program_doc, marker), "Triton source: hostile names")
    for k, (_, doc) in enumerate(hostile):
        source, _ = generate_triton(program_from_json(doc))
        bad = code_lines_holding(source, marker, "#")
        record("Triton source: hostile names", "wrong" if bad else "accepted")
        assert not bad, bad[:3]
        # importing the module runs its top level: nothing there may come from the names
        path = tmp_path / f"kernels_{k}.py"
        path.write_text(source)
        spec = importlib.util.spec_from_file_location(f"adversarial_kernels_{k}", path)
        spec.loader.exec_module(importlib.util.module_from_spec(spec))
    assert not os.path.exists(marker)


def test_buffers_differing_only_in_punctuation_get_distinct_pointers(program_doc):
    doc = _rename(_rename(program_doc, "add", "a.b"), "sin", "a_b")
    source, _ = generate_cpp(program_from_json(doc))
    header = next(line for line in source.splitlines() if "kernel1_" in line and "extern" in line)
    assert "a_b" in header and "a_b_2" in header or "in_a_b" in header


def test_hostile_graph_names_and_sources_in_ir_json(tmp_path):
    marker = str(tmp_path / "PWNED_IR")
    graph = parse_graph(GRAPH)
    for text in payloads(marker):
        hostile = graph.replace(name=text, nodes=tuple(n.replace(source=text) for n in graph.nodes))
        back = loads(dumps(hostile))
        assert back == hostile  # the names survive the round trip as data
        fn = compile_to_python(back)
        bad = code_lines_holding(fn.source, marker, "#")
        x = torch.randn(4, 8)
        same = torch.equal(fn(x)[0], interpret(back, x)[0])
        source, _ = generate_cpp(lower(to_prims(back)))
        bad += code_lines_holding(source, marker, "//")
        record("IR JSON: hostile graph name/source", "wrong" if bad or not same else "accepted")
        assert not bad and same
    assert not os.path.exists(marker)


def test_hostile_value_names_are_refused():
    for name in ("a b", "a\nb", "1a", "a;system", "", "a\x00"):
        doc = json.loads(dumps(parse_graph(GRAPH)))
        doc["graph"]["nodes"][0]["outputs"][0]["name"] = name
        doc["graph"]["nodes"][1]["args"][0]["value"] = name
        result = outcome("IR JSON: hostile value names", lambda d=doc: verify(loads(json.dumps(d))))
        assert result == "clear", name


def _function_from(filename: str, name: str):
    source = "def f(x):\n    return (x.sin() + 1).relu().sum(1)\n"
    module = compile(source, filename, "exec")
    code = next(c for c in module.co_consts if isinstance(c, types.CodeType))
    code = code.replace(co_name=name, co_qualname=name)
    return types.FunctionType(code, {"__builtins__": __builtins__})


def test_non_ascii_value_names_become_ascii_identifiers_in_cpp():
    graph = parse_graph(GRAPH.replace("%a", "%\"é\""))
    source, _ = generate_cpp(lower(to_prims(verify(graph))))
    assert source.isascii()


@pytest.mark.parametrize("which", [0, 2])
def test_compiled_cpp_from_hostile_file_and_function_names_runs_no_user_code(tmp_path, which):
    import torchsmith

    marker = str(tmp_path / "PWNED_COMPILE")
    text = payloads(marker)[which]
    fn = _function_from(f"evil{text}.py", f"f{text}")
    compiled = torchsmith.compile(fn, backend="inductor", options={"fallback": "raise"})
    x = torch.randn(4, 8)
    same = torch.allclose(compiled(x), fn(x))
    ran = os.path.exists(marker)
    record("compile: hostile file/function names", "wrong" if ran or not same else "accepted")
    assert same
    assert not os.path.exists(marker)


def test_escapers_keep_text_on_one_line_and_round_trip():
    for text in payloads("/tmp/m") + ["", "plain", "\\", "a\\", "??/", "*/", "\udcff", "\U0001f600"]:
        for escaped in (cpp_comment(text), python_comment(text)):
            assert escaped.isascii() and escaped.isprintable() and "\\" + "\n" not in escaped
            assert not escaped.endswith("\\") and "*/" not in cpp_comment(text)
        literal = cpp_string(text)
        assert literal.startswith('"') and literal.endswith('"') and literal.isascii() and "\n" not in literal
    namer = IdentifierNamer()
    names = [namer.name(t) for t in ("a.b", "a_b", "a-b", "int", "1x", "", "__x", "é")]
    assert len(set(names)) == len(names) and all(n.isidentifier() and n.isascii() for n in names)
    assert identifier("return").isidentifier() and identifier("return") != "return"


@given(st.text(max_size=200))
@settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
def test_any_text_stays_one_comment_or_one_string(text):
    tree = ast.parse(f"# {python_comment(text)}\nx = {python_string(text)}\n")
    ok = len(tree.body) == 1 and ast.literal_eval(tree.body[0].value) == text
    ok = ok and all(c not in cpp_comment(text) for c in "\n\r") and not cpp_comment(text).endswith("\\")
    literal = cpp_string(text)
    ok = ok and literal.count('"') == 2 and "\\\n" not in literal
    record("escapers: random text", "accepted" if ok else "wrong")
    assert ok
