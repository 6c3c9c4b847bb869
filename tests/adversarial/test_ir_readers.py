"""Every IR reader (text, JSON, symbolic expressions) bounds its work and refuses bad input with one
of our errors whose first line names the place: never a hang, a MemoryError or a bare KeyError."""

import copy
import json
import signal

import pytest
from adversarial_corpus import outcome
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from torchsmith.ir import (
    ParseError,
    SerializationError,
    SymbolicError,
    dumps,
    loads,
    parse_dim,
    parse_graph,
    random_graph,
    verify,
)

GRAPH = """graph f(%x: f32[4, 8] cpu, %n: sym(s0)):
  %y: f32[4, 8] cpu = aten.relu.default(%x)  # model.py:3
  %z: f32[4, 8] cpu = aten.mul.Tensor(%y, 2.5)
  return (%z)
"""
FUZZ = settings(max_examples=120, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)


@pytest.fixture(autouse=True)
def time_limit():
    """A reader that hangs fails the test instead of the run."""

    def expire(*_):
        raise TimeoutError("the reader took more than 10 s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(10)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


def _read_and_verify_text(text):
    return verify(parse_graph(text))


def _read_and_verify_json(text):
    return verify(loads(text))


@pytest.mark.parametrize(
    "dim",
    [
        "9**999999999",
        "-" * 100_000 + "4",
        "(" * 100_000 + "4" + ")" * 100_000,
        "9" * 5000,
        "2**16 * 2**16 * 2**16 * 2**16 * 2**16 * 2**16 * 2**16 * 2**16 * 2**16",
        "s0" + " + s0" * 400,
        "max(" * 300 + "1" + ", 1)" * 300,
        "s0 ** 100",
        "(s0 + s0 + s0 + s0 + s0) ** 16 ** 16",
        "-1",
        str(2**63),
    ],
)
def test_hostile_dims_get_clear_errors(dim):
    text = GRAPH.replace("f32[4, 8] cpu, %n", f"f32[{dim}, 8] cpu, %n", 1)
    result = outcome("IR text: hostile dims", lambda: _read_and_verify_text(text))
    assert result == "clear"
    doc = json.loads(dumps(parse_graph(GRAPH)))
    doc["graph"]["inputs"][0]["type"]["shape"][0] = dim
    assert outcome("IR JSON: hostile dims", lambda: _read_and_verify_json(json.dumps(doc))) == "clear"


def test_parse_errors_name_line_and_column_in_their_first_line():
    with pytest.raises(ParseError) as info:
        parse_graph(GRAPH.replace("aten.relu.default(%x)", "aten.relu.default(%x" + "," * 100_000))
    first = str(info.value).splitlines()[0]
    assert first.startswith("line 2, column") and len(str(info.value)) < 1000


def test_deep_json_is_a_clear_error():
    text = '{"schema_version": "1.0", "graph": ' + "[" * 100_000 + "]" * 100_000 + "}"
    assert outcome("IR JSON: deep nesting", lambda: loads(text)) == "clear"
    with pytest.raises(SerializationError):
        loads(text)


@given(st.text(alphabet="s0123456789+-*/%() ,maxin<=>_", max_size=300))
@FUZZ
def test_fuzzed_symbolic_expressions(text):
    result = outcome("symbolic expressions: fuzz", lambda: parse_dim(text), bad=False)
    assert result in ("clear", "accepted")


_SYNTAX = list('%:[](),="#{}-*0189sfia. \n\\')
_EDITS = st.lists(
    st.tuples(st.integers(0, len(GRAPH)), st.integers(0, 3), st.sampled_from(_SYNTAX)), min_size=1, max_size=4
)


@given(_EDITS)
@FUZZ
def test_fuzzed_ir_text(edits):
    text = GRAPH
    for at, cut, char in edits:
        text = text[:at] + char + text[at + cut:]
    result = outcome("IR text: fuzzed edits", lambda: _read_and_verify_text(text), bad=False)
    assert result in ("clear", "accepted")


_VALUES = [None, True, -1, 0, 2**63, 2**70, 1.5, "", "x", "%x", "s0", "-" * 50, "9**99999", "cuda:99",
           "a\nb", [], {}, [1], {"value": "nope"}, {"kind": "tensor"}, "f32", "aten.relu.default",
           "torch.os.system", "meta", "torch.load", [[[[[]]]]]]
SEEDS = [json.loads(dumps(random_graph(seed=i))) for i in range(4)]


def _paths(obj, prefix=()):
    yield prefix
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _paths(v, (*prefix, k))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _paths(v, (*prefix, i))


def mutate(doc, choices):
    """`doc` with a few parts replaced, dropped or repeated, as `choices` (ints) say."""
    doc = copy.deepcopy(doc)
    for choice in choices:
        paths = list(_paths(doc))[1:]
        if not paths:
            break
        path = paths[choice % len(paths)]
        parent = doc
        for key in path[:-1]:
            parent = parent[key]
        key, how = path[-1], (choice // len(paths)) % 5
        if how < 3:
            parent[key] = copy.deepcopy(_VALUES[choice % len(_VALUES)])
        elif how == 3 and isinstance(parent, dict):
            del parent[key]
        elif how == 3:
            parent.pop(key)
        elif isinstance(parent, list):
            parent.append(copy.deepcopy(parent[key]))
    return doc


@given(st.integers(0, len(SEEDS) - 1), st.lists(st.integers(0, 10**6), min_size=1, max_size=3))
@FUZZ
def test_fuzzed_ir_json(seed, choices):
    text = json.dumps(mutate(SEEDS[seed], choices))
    result = outcome("IR JSON: fuzzed structure", lambda: _read_and_verify_json(text), bad=False)
    assert result in ("clear", "accepted")


def test_symbol_names_are_ascii_identifiers():
    for name in ("ſ0", "s 0", "_s", "s" * 100, "int", "while", "s0 + int"):
        assert outcome("IR text: hostile symbol names", lambda n=name: parse_dim(n)) == "clear"
    with pytest.raises(SymbolicError):
        parse_dim("ſ0")
