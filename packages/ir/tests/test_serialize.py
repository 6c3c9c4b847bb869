"""The JSON form: exact round trips, versions, malformed documents, and the checked-in schema."""

import copy
import json
import math
import random

import pytest
import sympy
import torch

from torchsmith.ir import (
    ArgList,
    Graph,
    Node,
    ScalarType,
    SchemaVersionError,
    SerializationError,
    Slice,
    Stamp,
    SymIntType,
    TensorType,
    Value,
    dumps,
    floordiv,
    format_graph,
    from_json,
    load,
    loads,
    mod,
    random_graph,
    save,
    symbol,
    to_json,
)
from torchsmith.ir.dtypes import DTYPE_BY_NAME
from torchsmith.ir.json_schema import (
    REGENERATE,
    SCHEMA_PATH,
    describe_schema,
    main,
    schema_digest,
    schema_file_problem,
    validate_document,
)
from torchsmith.ir.serialize_tables import ARG_KINDS, LAYOUTS, MEMORY_FORMATS, SCHEMA_VERSION
from torchsmith.ir.symbolic import format_dim, sym_max

s0, s1 = symbol("s0"), symbol("s1")


def strict(x):
    """A structure that tells apart what == conflates: 1, 1.0 and True; 0.0 and -0.0; nan is nan."""
    if isinstance(x, Graph):
        return ("graph", x.name, strict(x.inputs), strict(x.nodes), strict(x.outputs), strict(x.stamps))
    if isinstance(x, Node):
        return ("node", x.op, strict(x.args), strict(x.kwargs), strict(x.outputs), x.source)
    if isinstance(x, Value):
        return ("value", x.name, strict(x.type))
    if isinstance(x, TensorType):
        return ("tensor", strict(x.shape), x.dtype, x.device, strict(x.strides), x.requires_grad)
    if isinstance(x, (SymIntType, ScalarType, Stamp)):
        return (type(x).__name__,) + tuple(strict(getattr(x, f)) for f in x.__slots__)
    if isinstance(x, Slice):
        return ("slice", strict(x.start), strict(x.stop), strict(x.step))
    if isinstance(x, tuple):
        return (type(x).__name__,) + tuple(strict(a) for a in x)
    if isinstance(x, float):
        return ("float", repr(x))
    if isinstance(x, complex):
        return ("complex", repr(x.real), repr(x.imag))
    if isinstance(x, sympy.Basic):
        return ("sym", format_dim(x))
    return (type(x).__name__, x)


def assert_round_trip(graph: Graph) -> dict:
    doc = to_json(graph)
    assert validate_document(doc) == []
    text = dumps(graph)
    json.loads(text, parse_constant=lambda c: pytest.fail(f"non-standard JSON constant {c}"))
    for back in (from_json(doc), loads(text), loads(dumps(graph, indent=2))):
        assert strict(back) == strict(graph)
        assert format_graph(back) == format_graph(graph)
    return doc


EVERY_KIND = [
    None, True, False, 0, -7, 2**70, 1.5, -0.0, 0.0, math.inf, -math.inf, math.nan, 1e-300, 0.1,
    complex(1.0, -0.0), complex(math.inf, math.nan), "", "tanh", 'quote" \\ and\nnewline ✓',
    "\ud800😀\u2028\x00", torch.device("cpu"), torch.device("cuda"), torch.device("cuda:1"), Ellipsis,
    Slice(), Slice(None, 5, 2), Slice(-1, None, None), (), (1,), (1, 2.0, True),
    ArgList(), ArgList([ArgList([1, 2]), (3,)]), s0, 2 * s0 + 1, floordiv(s0, 2), mod(s1, 3), sym_max(s0, s1),
    s0 * s1 - 1, *DTYPE_BY_NAME.values(), *LAYOUTS.values(), *MEMORY_FORMATS.values(),
]


def _every_kind_graph() -> Graph:
    x = Value("x", TensorType.make([s0, 4], torch.float32))
    w_type = TensorType.make([4, s1], torch.float16, device="cuda:0", strides=[1, 4], requires_grad=True)
    w = Value("w", w_type)
    n = Value("n", SymIntType(s0))
    scalars = [Value(f"c_{kind}", ScalarType(kind)) for kind in ("bool", "int", "float", "complex", "none")]
    y = Value("y", TensorType.make([floordiv(s0 + 1, 2), 2 * s1], torch.bfloat16, strides=[2 * s1 + 3, 1]))
    y2 = Value("y2", SymIntType(s0 * s1))
    nodes = (
        Node("test.everything", tuple(EVERY_KIND), (("x", x), ("alpha", 2), ("beta", 2.0), ("flag", True)),
             (y, y2), "model.py:12"),
        Node("test.values_inside", (ArgList([x, n, (w, None)]), Slice(n, y2, 1), (scalars[0],)), (), ()),
        Node("aten.add.Tensor", (x, x), (), (Value("z", x.type),), None),
        Node("odd op ✓", (), (), (Value("m", TensorType.make([0, 1], torch.float8_e5m2, device="meta")),)),
    )
    stamps = (Stamp("capture", 0.25), Stamp("dce", 1e-06), Stamp("odd", math.inf))
    return Graph("every_kind", (x, w, n, *scalars), nodes, (y, nodes[2].outputs[0], n), stamps)


def test_every_argument_kind_and_type_round_trips_exactly():
    graph = _every_kind_graph()
    doc = assert_round_trip(graph)
    tags = set()

    def collect(arg):
        ((tag, payload),) = arg.items()
        tags.add(tag)
        for item in payload if tag in ("list", "tuple", "slice") else []:
            collect(item)

    for node in doc["graph"]["nodes"]:
        for arg in node["args"] + list(node.get("kwargs", {}).values()):
            collect(arg)
    assert tags == {kind.tag for kind in ARG_KINDS}, "add the new argument kind to this test"


def test_ints_floats_and_bools_stay_distinct():
    node = _every_kind_graph().nodes[0]
    doc_args = to_json(_every_kind_graph())["graph"]["nodes"][0]["args"]
    by_value = {repr(a): d for a, d in zip(node.args, doc_args)}
    assert by_value["True"] == {"bool": True}
    assert by_value["0"] == {"int": 0}
    assert by_value["0.0"] == {"float": 0.0}
    assert by_value["-0.0"] == {"float": -0.0}
    assert by_value["nan"] == {"float": "nan"}
    assert by_value[repr(2**70)] == {"int": 2**70}


@pytest.mark.parametrize("seed", range(100))
def test_random_graphs_round_trip(seed):
    assert_round_trip(random_graph(seed, num_nodes=25, symbolic=seed % 3 != 0))


def test_save_and_load(tmp_path):
    graph = random_graph(1, num_nodes=40)
    save(graph, tmp_path / "g.json")
    assert strict(load(tmp_path / "g.json")) == strict(graph)


# ---- versions ------------------------------------------------------------------------------------


def _doc():
    return to_json(_every_kind_graph())


@pytest.mark.parametrize("version", ["2.0", "17.3", "0.9"])
def test_another_major_version_is_refused_clearly(version):
    doc = _doc()
    doc["schema_version"] = version
    doc["producer"] = "torchsmith-ir 9.9.9"
    with pytest.raises(SchemaVersionError) as info:
        from_json(doc)
    message = str(info.value)
    assert version in message and "torchsmith-ir 9.9.9" in message
    assert f"reads schema {SCHEMA_VERSION[0]}.x" in message
    assert ("upgrade torchsmith-ir" in message) == (int(version.split(".")[0]) > SCHEMA_VERSION[0])


def test_a_newer_minor_version_is_read_and_unknown_optional_fields_are_ignored():
    graph = _every_kind_graph()
    doc = to_json(graph)
    doc["schema_version"] = f"{SCHEMA_VERSION[0]}.{SCHEMA_VERSION[1] + 7}"
    doc["written_at"] = "today"
    doc["graph"]["metadata"] = {"anything": [1, 2]}
    doc["graph"]["nodes"][0]["cost"] = 3.5
    doc["graph"]["nodes"][0]["outputs"][0]["type"]["layout_hint"] = "dense"
    doc["graph"]["inputs"][0]["origin"] = "parameter"
    assert strict(from_json(doc)) == strict(graph)


def test_unknown_required_structure_in_a_newer_minor_version_names_the_place():
    doc = _doc()
    doc["schema_version"] = f"{SCHEMA_VERSION[0]}.{SCHEMA_VERSION[1] + 1}"
    doc["graph"]["nodes"][2]["args"][1] = {"bigint": "12345678901234567890"}
    where = r"graph\.nodes\[2\]\.args\[1\]"
    with pytest.raises(SerializationError, match=where + ": unknown argument kind 'bigint'"):
        from_json(doc)
    with pytest.raises(SerializationError, match="newer than"):
        from_json(doc)


@pytest.mark.parametrize("version", [None, 1, "1", "one.zero", "1.0.0", ""])
def test_a_missing_or_malformed_version_is_an_error(version):
    doc = _doc()
    doc["schema_version"] = version
    with pytest.raises(SerializationError, match="schema_version"):
        from_json(doc)


# ---- malformed documents -------------------------------------------------------------------------


def _set(path, value):
    def mutate(doc):
        target = doc
        for key in path[:-1]:
            target = target[key]
        if value is _DELETE:
            del target[path[-1]]
        else:
            target[path[-1]] = value

    return mutate


_DELETE = object()
G, N0, N2 = ("graph",), ("graph", "nodes", 0), ("graph", "nodes", 2)
X_TYPE = ("graph", "inputs", 0, "type")

MALFORMED = [
    (_set(("graph",), _DELETE), "no 'graph' field"),
    (_set(G, [1]), "graph: expected a graph object, got an array"),
    (_set(G + ("nodes",), {}), "graph.nodes: expected an array, got an object"),
    (_set(G + ("name",), 3), "graph.name: expected a string, got an integer"),
    (_set(N0 + ("op",), _DELETE), "graph.nodes[0]: the node has no 'op' field"),
    (_set(N0 + ("args",), "x"), "graph.nodes[0].args: expected an array"),
    (_set(N2 + ("args", 1), {"value": "nope"}), r"graph.nodes[2].args[1].value: value %nope is used before"),
    (_set(N2 + ("args", 1), {"value": "z"}), r"graph.nodes[2].args[1].value: value %z is used before"),
    (_set(N2 + ("args", 1), {"int": 1.5}), "graph.nodes[2].args[1].int: expected an int, got a number"),
    (_set(N2 + ("args", 1), {"int": True}), "graph.nodes[2].args[1].int: expected an int, got a boolean"),
    (_set(N2 + ("args", 1), {"bool": 1}), "graph.nodes[2].args[1].bool: expected a boolean"),
    (_set(N2 + ("args", 1), {"float": "fast"}), "graph.nodes[2].args[1].float: expected a number"),
    (_set(N2 + ("args", 1), {}), "graph.nodes[2].args[1]: expected an argument"),
    (_set(N2 + ("args", 1), {"int": 1, "float": 2.0}), "graph.nodes[2].args[1]: expected an argument"),
    (_set(N2 + ("args", 1), 3), "graph.nodes[2].args[1]: expected an argument"),
    (_set(N2 + ("args", 1), {"slice": [None, None]}), "args[1].slice: expected [start, stop, step]"),
    (_set(N2 + ("args", 1), {"complex": [1.0]}), "graph.nodes[2].args[1].complex: expected [real, imag]"),
    (_set(N2 + ("args", 1), {"list": [{"int": 1}, {"dtype": "f33"}]}),
     "graph.nodes[2].args[1].list[1].dtype: unknown dtype 'f33'"),
    (_set(N2 + ("args", 1), {"tuple": {"int": 1}}), "graph.nodes[2].args[1].tuple: expected an array"),
    (_set(N2 + ("args", 1), {"layout": "banana"}), "graph.nodes[2].args[1].layout: unknown layout 'banana'"),
    (_set(N2 + ("args", 1), {"memory_format": 1}), "args[1].memory_format: unknown memory format"),
    (_set(N2 + ("args", 1), {"device": "gpu:x"}), "graph.nodes[2].args[1].device: unknown device 'gpu:x'"),
    (_set(N2 + ("args", 1), {"none": 0}), "graph.nodes[2].args[1].none: expected null"),
    (_set(N2 + ("args", 1), {"ellipsis": []}), "graph.nodes[2].args[1].ellipsis: expected null"),
    (_set(N2 + ("args", 1), {"sym": "s0 +"}), "graph.nodes[2].args[1].sym: cannot parse"),
    (_set(N2 + ("args", 1), {"sym": "s0 >= 2"}), "graph.nodes[2].args[1].sym: 's0 >= 2' is a condition"),
    (_set(N2 + ("args", 1), {"sym": 3}), "graph.nodes[2].args[1].sym: expected a symbolic expression"),
    (_set(N0 + ("kwargs",), []), "graph.nodes[0].kwargs: expected an object"),
    (_set(N0 + ("kwargs", "beta"), {"float": None}), "graph.nodes[0].kwargs.beta.float: expected a number"),
    (_set(N0 + ("source",), 12), "graph.nodes[0].source: expected a string"),
    (_set(N0 + ("outputs", 1, "name"), "x"), "graph.nodes[0].outputs[1].name: value %x is defined twice"),
    (_set(N0 + ("outputs", 1, "type"), "int"), "graph.nodes[0].outputs[1].type: expected a type object"),
    (_set(X_TYPE + ("kind",), "quantum"), "graph.inputs[0].type.kind: unknown type kind 'quantum'"),
    (_set(X_TYPE + ("shape", 0), "s0 +"), "graph.inputs[0].type.shape[0]: cannot parse"),
    (_set(X_TYPE + ("shape", 0), "s0 > 1"), "graph.inputs[0].type.shape[0]: 's0 > 1' is a condition"),
    (_set(X_TYPE + ("shape", 0), 2.5), "graph.inputs[0].type.shape[0]: expected an integer or a symbolic"),
    (_set(X_TYPE + ("shape", 1), True), "graph.inputs[0].type.shape[1]: expected an integer or a symbolic"),
    (_set(N2 + ("outputs", 0, "type", "shape", 1), 4.0), "graph.nodes[2].outputs[0].type.shape[1]: expected"),
    (_set(X_TYPE + ("strides",), [1]), "graph.inputs[0].type.strides: 2 dims but 1 strides"),
    (_set(X_TYPE + ("strides",), _DELETE), "graph.inputs[0].type: the tensor type has no 'strides' field"),
    (_set(X_TYPE + ("dtype",), "float32"), "graph.inputs[0].type.dtype: unknown dtype 'float32'"),
    (_set(X_TYPE + ("dtype",), ["f32"]), "graph.inputs[0].type.dtype: unknown dtype ['f32']"),
    (_set(X_TYPE + ("shape", 1), [4]), "graph.inputs[0].type.shape[1]: expected an integer or a symbolic"),
    (_set(X_TYPE + ("device",), "tpu"), "graph.inputs[0].type.device: unknown device 'tpu'"),
    (_set(X_TYPE + ("requires_grad",), "yes"), "graph.inputs[0].type.requires_grad: expected true or false"),
    (_set(("graph", "inputs", 2, "type", "expr"), None), "graph.inputs[2].type.expr: expected an integer"),
    (_set(("graph", "inputs", 3, "type", "scalar"), "quaternion"),
     "graph.inputs[3].type.scalar: unknown scalar kind 'quaternion'"),
    (_set(("graph", "inputs", 0), "x"), "graph.inputs[0]: expected a value object, got a string"),
    (_set(G + ("outputs", 1), "ghost"), r"graph.outputs[1]: value %ghost is used before it is defined"),
    (_set(G + ("outputs", 1), {"value": "z"}), "graph.outputs[1]: expected a value name"),
    (_set(G + ("stamps", 0, "seconds"), "slow"), "graph.stamps[0].seconds: expected a number"),
    (_set(G + ("stamps", 0), _DELETE), None),  # still valid: one stamp fewer
]


@pytest.mark.parametrize(("mutate", "expected"), MALFORMED, ids=[m or "valid" for _, m in MALFORMED])
def test_malformed_documents_name_the_place(mutate, expected):
    doc = _doc()
    mutate(doc)
    if expected is None:
        from_json(doc)
        return
    with pytest.raises(SerializationError) as info:
        from_json(doc)
    assert expected in str(info.value)


@pytest.mark.parametrize(
    "text", ["{not json", "[1, 2]", "null", '"graph"', '{"schema_version": "1.0"}', "[" * 10**5, b"\x81\xff"]
)
def test_text_that_is_not_a_graph_document(text):
    with pytest.raises(SerializationError):
        loads(text)


def test_arguments_nested_too_deeply():
    deep = {"int": 1}
    for _ in range(5000):
        deep = {"list": [deep]}
    doc = _doc()
    doc["graph"]["nodes"][2]["args"][1] = deep
    with pytest.raises(SerializationError, match="nested too deeply"):
        from_json(doc)


def test_random_damage_only_ever_raises_serialization_errors():
    rng = random.Random(0)
    junk = [None, 0, -1, 1.5, "", "x", "s0 +", [], {}, [{}], {"int": 1}, {"value": "x0"}, True]
    base = to_json(random_graph(4, num_nodes=30))
    for _ in range(600):
        doc = copy.deepcopy(base)
        parent, key = _random_place(doc, rng)
        if isinstance(parent, dict) and rng.random() < 0.3:
            del parent[key]
        else:
            parent[key] = rng.choice(junk)
        try:
            from_json(doc)
        except SerializationError:
            pass


def _random_place(doc, rng):
    parent, key = doc, "graph"
    while True:
        child = parent[key]
        keys = list(child) if type(child) is dict else list(range(len(child))) if type(child) is list else []
        if not keys or rng.random() < 0.25:
            return parent, key
        parent, key = child, rng.choice(keys)


# ---- writing errors --------------------------------------------------------------------------------


def test_writing_an_unknown_argument_names_the_node():
    x = Value("x", TensorType.make([2], torch.float32))
    graph = Graph("g", (x,), (Node("aten.relu.default", (x,), (), (Value("r", x.type),)),
                             Node("test.odd", (x, object()), (), ())), (x,))
    with pytest.raises(SerializationError, match=r"graph\.nodes\[1\]\.args\[1\]: cannot write"):
        to_json(graph)


def test_writing_a_dtype_without_a_short_name_is_an_error():
    x = Value("x", TensorType.make([2], torch.quint8))
    with pytest.raises(SerializationError, match=r"graph\.inputs\[0\]\.type: dtype torch\.quint8"):
        to_json(Graph("g", (x,), (), (x,)))


# ---- the checked-in schema -----------------------------------------------------------------------


# Every published schema version and the digest of its description: a change to the JSON form
# must come with a new version, so a reader can tell which documents it understands.
KNOWN_SCHEMA_DIGESTS = {
    "1.0": "c72f7248240f4c5461c5cecd316a1767a7bfdae47b26849ad304394db2987f5f",
    "1.1": "c5a8b38475c37b86dc53784e9d2619fdcd0613cd5ff0c1decfeb6cf1ccf2e9cf",  # dtypes u16, u32, u64
    "1.2": "3f6f6533aef70a3175b36d5142220d86298ddd5740601af0618e9bdb1004a7e8",  # dtype c32
}


def test_checked_in_schema_matches_the_code():
    problem = schema_file_problem()
    assert problem is None, problem
    assert main(["--check-schema"]) == 0


def test_schema_changes_come_with_a_new_version():
    digest = schema_digest()
    version = describe_schema()["schema_version"]
    assert version in KNOWN_SCHEMA_DIGESTS, (
        f"schema version {version} is new: add it with digest {digest} to KNOWN_SCHEMA_DIGESTS in this test"
    )
    assert KNOWN_SCHEMA_DIGESTS[version] == digest, (
        f"the JSON form changed but SCHEMA_VERSION is still {version}: bump it in "
        f"torchsmith/ir/serialize_tables.py (minor if only optional fields were added, else major), run "
        f"`{REGENERATE}`, and add the new version's digest {digest} to KNOWN_SCHEMA_DIGESTS"
    )


def test_schema_file_problem_explains_what_to_do(tmp_path):
    changed = describe_schema()
    changed["$defs"]["node"]["required"].append("cost")
    path = tmp_path / "schema.json"
    path.write_text(json.dumps(changed))
    problem = schema_file_problem(path)
    assert "bump" in problem and REGENERATE in problem
    reworded = describe_schema()
    reworded["$defs"]["node"]["description"] = "reworded prose needs no new version"
    path.write_text(json.dumps(reworded))
    problem = schema_file_problem(path)
    assert "bump" not in problem and REGENERATE in problem
    assert schema_digest(reworded) == schema_digest() != schema_digest(changed)
    assert SCHEMA_PATH.name == "schema.json"


def test_schema_describes_every_table_entry():
    schema = describe_schema()
    assert schema["schema_version"] == f"{SCHEMA_VERSION[0]}.{SCHEMA_VERSION[1]}"
    tags = {next(iter(alt["properties"])) for alt in schema["$defs"]["arg"]["oneOf"]}
    assert tags == {kind.tag for kind in ARG_KINDS}
    assert schema["$defs"]["node"]["required"] == ["op", "args", "outputs"]


def test_validator_reports_problems_with_their_place():
    doc = _doc()
    doc["graph"]["nodes"][0]["cost"] = 1
    doc["graph"]["nodes"][2]["args"][0] = {"int": "3"}
    del doc["graph"]["name"]
    problems = validate_document(doc)
    assert "graph.nodes[0]: unexpected field 'cost'" in problems
    assert "graph: missing required field 'name'" in problems
    assert any(p.startswith("graph.nodes[2].args[0].int: expected integer") for p in problems)
    assert validate_document({"schema_version": "1.0", "graph": {}}) != []
