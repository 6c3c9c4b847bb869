"""The JSON form of graphs: a versioned document that every stage and tool can read and write.

    {"schema_version": "1.0", "producer": "torchsmith-ir 0.1.0",
     "graph": {"name": "mlp",
               "inputs": [{"name": "x", "type": {"kind": "tensor", "shape": ["s0", 64], "dtype": "f32",
                                                 "device": "cpu", "strides": [64, 1]}}],
               "nodes": [{"op": "aten.gelu.default", "args": [{"value": "x"}],
                          "kwargs": {"approximate": {"str": "tanh"}},
                          "outputs": [{"name": "y", "type": {...}}], "source": "model.py:12"}],
               "outputs": ["y"]}}

Every argument is an object with one key naming its kind (`{"int": 3}`, `{"float": 3.0}`,
`{"float": "nan"}`, `{"value": "x"}`, `{"list": [...]}`), so ints, bools and floats stay distinct
and the round trip is exact. Dims are JSON ints, or the canonical text of a symbolic expression.

Versions: `major.minor`. A minor version only adds optional fields, so this code reads any 1.x
document (fields it does not know are ignored); a document of another major version is refused
with `SchemaVersionError`. The tables below drive the writer and reader and also derive the
checked-in `schema.json` (see `torchsmith.ir.json_schema`); regenerate it after a change with
`python -m torchsmith.ir.serialize --write-schema`, after bumping `SCHEMA_VERSION`.
"""

import json
import math
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from torchsmith.ir.__about__ import __version__
from torchsmith.ir.dtypes import NAME_BY_DTYPE, dtype_name
from torchsmith.ir.errors import IRError, SchemaVersionError, SerializationError
from torchsmith.ir.graph import Graph, Node, Stamp, Value
from torchsmith.ir.serialize_tables import (
    ARG_KINDS,
    OBJECTS,
    SCALAR_KINDS,
    Malformed,
    read_dim,
    read_float,
    write_float,
)
from torchsmith.ir.symbolic import format_dim
from torchsmith.ir.types import ScalarType, SymIntType, TensorType

SCHEMA_VERSION = (1, 0)
_VERSION_RE = re.compile(r"^(\d+)\.(\d+)$")


def version_text(version: tuple[int, int] = SCHEMA_VERSION) -> str:
    return f"{version[0]}.{version[1]}"


# ---- writing ---------------------------------------------------------------------------------

_KIND_BY_TYPE = {t: kind for kind in ARG_KINDS for t in kind.python_types}


def write_arg(arg):
    """One stored argument as its tagged JSON object."""
    kind = _KIND_BY_TYPE.get(type(arg))
    if kind is None:
        kind = next((k for k in ARG_KINDS if isinstance(arg, k.python_types)), None)
        if kind is None:
            raise Malformed(f"cannot write argument {arg!r} of type {type(arg).__name__}: not an IR argument kind")
    return {kind.tag: kind.write(arg, write_arg)}


class _Writer:
    """Writes types; remembers the text of each symbolic dim object, since formatting (and even
    hashing) sympy expressions costs far more than the rest of writing a value."""

    def __init__(self):
        self._texts: dict[int, tuple] = {}

    def dim(self, d):
        if type(d) is int:
            return d
        hit = self._texts.get(id(d))
        if hit is None:
            hit = self._texts[id(d)] = (d, format_dim(d))  # holding `d` keeps its id unique
        return hit[1]

    def type(self, t) -> dict:
        """A value type as a JSON object with a `kind` of tensor, sym or scalar."""
        if type(t) is TensorType:
            dim = self.dim
            obj = {
                "kind": "tensor",
                "shape": [dim(d) for d in t.shape],
                "dtype": NAME_BY_DTYPE.get(t.dtype) or dtype_name(t.dtype),
                "device": t.device,
                "strides": [dim(d) for d in t.strides],
            }
            if t.requires_grad:
                obj["requires_grad"] = True
            return obj
        if type(t) is SymIntType:
            return {"kind": "sym", "expr": self.dim(t.expr)}
        if type(t) is ScalarType:
            return {"kind": "scalar", "scalar": t.kind}
        raise Malformed(f"cannot write type {t!r}: not an IR type")

    def value(self, v: Value) -> dict:
        try:
            return {"name": v.name, "type": self.type(v.type)}
        except IRError as e:  # e.g. a dtype without a short name
            raise Malformed(str(e)).at(".type") from None

    def node(self, node: Node) -> dict:
        obj = {"op": node.op, "args": _write_list(node.args, write_arg, ".args")}
        if node.kwargs:
            kwargs = {}
            for name, arg in node.kwargs:
                if name in kwargs:
                    raise Malformed(f"keyword argument {name!r} is given twice").at(".kwargs")
                kwargs[name] = _guard(write_arg, arg, f".kwargs.{name}")
            obj["kwargs"] = kwargs
        obj["outputs"] = _write_list(node.outputs, self.value, ".outputs")
        if node.source is not None:
            obj["source"] = node.source
        return obj


def _guard(fn, item, where: str):
    try:
        return fn(item)
    except Malformed as e:
        raise e.at(where) from None


def _write_list(items, fn, where: str) -> list:
    try:
        return [fn(item) for item in items]
    except Malformed:
        pass
    return [_guard(fn, item, f"{where}[{i}]") for i, item in enumerate(items)]  # finds and names the bad one


def to_json(graph: Graph) -> dict:
    """The JSON document (plain dicts and lists) of `graph`; `from_json` reads it back exactly."""
    writer = _Writer()
    try:
        body = {
            "name": graph.name,
            "inputs": _write_list(graph.inputs, writer.value, ".inputs"),
            "nodes": _write_list(graph.nodes, writer.node, ".nodes"),
            "outputs": [v.name for v in graph.outputs],
        }
        if graph.stamps:
            body["stamps"] = [{"pass_name": s.pass_name, "seconds": write_float(s.seconds)} for s in graph.stamps]
    except Malformed as e:
        raise SerializationError(f"cannot write graph {graph.name} as JSON: {e.at('graph').describe()}") from None
    return {"schema_version": version_text(), "producer": f"torchsmith-ir {__version__}", "graph": body}


# ---- reading ---------------------------------------------------------------------------------


class _Reader:
    """Reads one document; `values` maps each name defined so far to its Value (SSA order)."""

    def __init__(self, version: tuple[int, int]):
        self.version = version
        self.values: dict[str, Value] = {}
        self._types: dict[tuple, object] = {}

    # The argument kinds call back into these two.
    def arg(self, obj):
        if type(obj) is not dict or len(obj) != 1:
            raise Malformed('expected an argument: an object with one key naming its kind, e.g. {"int": 3}')
        ((tag, payload),) = obj.items()
        kind = ARG_KINDS_BY_TAG.get(tag)
        if kind is None:
            raise Malformed(f"unknown argument kind {tag!r}; known kinds: {', '.join(ARG_KINDS_BY_TAG)}"
                            + self._newer_hint())
        try:
            return kind.read(payload, self)
        except Malformed as e:
            raise e.at(f".{tag}") from None

    def value(self, name) -> Value:
        if type(name) is not str:
            raise Malformed(f"expected a value name (a string), got {name!r}")
        v = self.values.get(name)
        if v is None:
            raise Malformed(f"value %{name} is used before it is defined")
        return v

    def _newer_hint(self) -> str:
        if self.version > SCHEMA_VERSION:
            return (f" (the document is schema {version_text(self.version)}, newer than {version_text()}, "
                    "which this torchsmith-ir reads; upgrade torchsmith-ir)")
        return ""

    def each(self, obj: dict, key: str, fn, required: bool = True) -> list:
        items = obj.get(key)
        if items is None and not required:
            return []
        if type(items) is not list:
            raise Malformed(f"expected an array, got {_json_kind(items)}").at(f".{key}")
        out = []
        for i, item in enumerate(items):
            try:
                out.append(fn(item))
            except Malformed as e:
                raise e.at(f".{key}[{i}]") from None
            except IRError as e:
                raise Malformed(str(e)).at(f".{key}[{i}]") from None
            except (KeyError, TypeError, ValueError, AttributeError, IndexError) as e:  # safety net
                raise Malformed(f"cannot read it ({type(e).__name__}: {e})").at(f".{key}[{i}]") from None
        return out

    def record(self, obj, what: str) -> dict:
        """Check that `obj` is an object with the required fields of OBJECTS[what]."""
        if type(obj) is not dict:
            raise Malformed(f"expected a {what.replace('_', ' ')} object, got {_json_kind(obj)}")
        for name in OBJECTS[what].required:
            if name not in obj:
                raise Malformed(f"the {what.replace('_', ' ')} has no {name!r} field")
        return obj

    def string(self, obj: dict, key: str, required: bool = True) -> str | None:
        text = obj.get(key)
        if type(text) is not str and (required or text is not None):
            raise Malformed(f"expected a string, got {_json_kind(text)}").at(f".{key}")
        return text

    def type(self, obj):
        if type(obj) is not dict or "kind" not in obj:
            raise Malformed(f"expected a type object with a 'kind' field, got {_json_kind(obj)}")
        kind = obj["kind"]
        if kind == "tensor":
            self.record(obj, "tensor_type")
            shape, strides, grad = obj["shape"], obj["strides"], obj.get("requires_grad", False)
            if type(shape) is not list or type(strides) is not list:
                raise Malformed("expected arrays of dims for shape and strides")
            key = (tuple(shape), obj["dtype"], obj["device"], tuple(strides), grad)
            t = self._types.get(key)
            if t is None:
                t = self._types[key] = _read_tensor_type(shape, obj["dtype"], obj["device"], strides, grad)
            return t
        if kind == "sym":
            self.record(obj, "sym_type")
            return SymIntType(_at(read_dim, obj["expr"], ".expr"))
        if kind == "scalar":
            self.record(obj, "scalar_type")
            if obj["scalar"] not in SCALAR_KINDS:
                raise Malformed(f"unknown scalar kind {obj['scalar']!r}; expected one of {', '.join(SCALAR_KINDS)}")
            return ScalarType(obj["scalar"])
        raise Malformed(f"unknown type kind {kind!r}; expected tensor, sym or scalar" + self._newer_hint()).at(".kind")

    def define(self, obj) -> Value:
        self.record(obj, "value")
        name = self.string(obj, "name")
        if name in self.values:
            raise Malformed(f"value %{name} is defined twice").at(".name")
        v = Value(name, _at(self.type, obj["type"], ".type"))
        self.values[name] = v
        return v

    def node(self, obj) -> Node:
        self.record(obj, "node")
        op = self.string(obj, "op")
        args = tuple(self.each(obj, "args", self.arg))
        kwargs = obj.get("kwargs", {})
        if type(kwargs) is not dict:
            raise Malformed(f"expected an object of keyword arguments, got {_json_kind(kwargs)}").at(".kwargs")
        kwargs = tuple((k, _at(self.arg, v, f".kwargs.{k}")) for k, v in kwargs.items())
        source = self.string(obj, "source", required=False)
        outputs = tuple(self.each(obj, "outputs", self.define))
        return Node(op, args, kwargs, outputs, source)

    def stamp(self, obj) -> Stamp:
        self.record(obj, "stamp")
        return Stamp(self.string(obj, "pass_name"), _at(read_float, obj["seconds"], ".seconds"))

    def graph(self, obj) -> Graph:
        self.record(obj, "graph")
        name = self.string(obj, "name")
        inputs = self.each(obj, "inputs", self.define)
        nodes = self.each(obj, "nodes", self.node)
        outputs = self.each(obj, "outputs", self.value)
        stamps = self.each(obj, "stamps", self.stamp, required=False)
        return Graph(name, tuple(inputs), tuple(nodes), tuple(outputs), tuple(stamps))


ARG_KINDS_BY_TAG = {kind.tag: kind for kind in ARG_KINDS}


def _at(fn, item, where: str):
    try:
        return fn(item)
    except Malformed as e:
        raise e.at(where) from None
    except IRError as e:
        raise Malformed(str(e)).at(where) from None


def _read_tensor_type(shape, dtype, device, strides, grad) -> TensorType:
    from torchsmith.ir.dtypes import DTYPE_BY_NAME
    from torchsmith.ir.types import normalize_device

    if dtype not in DTYPE_BY_NAME:
        raise Malformed(f"unknown dtype {dtype!r}; expected one of {', '.join(DTYPE_BY_NAME)}").at(".dtype")
    if type(device) is not str:
        raise Malformed(f"expected a device string such as 'cpu' or 'cuda:0', got {_json_kind(device)}").at(".device")
    try:
        device = normalize_device(device)
    except (RuntimeError, ValueError):
        raise Malformed(f"unknown device {device!r}").at(".device") from None
    if type(grad) is not bool:
        raise Malformed(f"expected true or false, got {_json_kind(grad)}").at(".requires_grad")
    if len(strides) != len(shape):
        raise Malformed(f"{len(shape)} dims but {len(strides)} strides").at(".strides")
    dims = tuple(_at(read_dim, d, f".shape[{i}]") for i, d in enumerate(shape))
    steps = tuple(_at(read_dim, d, f".strides[{i}]") for i, d in enumerate(strides))
    return TensorType(dims, DTYPE_BY_NAME[dtype], device, steps, grad)


def _json_kind(obj) -> str:
    names = {dict: "an object", list: "an array", str: "a string", bool: "a boolean", int: "an integer",
             float: "a number", type(None): "null"}
    return names.get(type(obj), type(obj).__name__) + (f" ({obj!r})" if type(obj) in (str, int, float, bool) else "")


def read_version(doc: dict) -> tuple[int, int]:
    """The schema version of a document; raises SchemaVersionError for another major version."""
    text = doc.get("schema_version")
    match = _VERSION_RE.match(text) if type(text) is str else None
    if match is None:
        raise SerializationError(
            f"schema_version: expected a 'major.minor' string such as {version_text()!r}, got {_json_kind(text)}; "
            "is this a torchsmith.ir graph document?"
        )
    version = (int(match[1]), int(match[2]))
    if version[0] != SCHEMA_VERSION[0]:
        producer = doc.get("producer")
        by = f" by {producer}" if type(producer) is str else ""
        if version[0] > SCHEMA_VERSION[0]:
            advice = (f"upgrade torchsmith-ir (pip install -U torchsmith-ir) to a release that reads schema "
                      f"{version[0]}.x, or write the graph again with this torchsmith-ir")
        else:
            advice = (f"write the graph again with this torchsmith-ir, or read it with an older release "
                      f"that reads schema {version[0]}.x")
        raise SchemaVersionError(
            f"this graph was written{by} in JSON schema version {text}, but torchsmith-ir {__version__} "
            f"reads schema {SCHEMA_VERSION[0]}.x (up to {version_text()}): {advice}"
        )
    return version


def from_json(doc) -> Graph:
    """Read a graph from its JSON document (as `to_json` writes it, or any 1.x document).

    Raises SchemaVersionError for a document of another major version, and SerializationError
    naming the place in the document (e.g. `graph.nodes[3].args[1]`) for anything malformed.
    """
    if type(doc) is not dict:
        raise SerializationError(f"expected a JSON object with schema_version and graph, got {_json_kind(doc)}")
    reader = _Reader(read_version(doc))
    if "graph" not in doc:
        raise SerializationError("the document has no 'graph' field")
    try:
        return reader.graph(doc["graph"])
    except Malformed as e:
        raise SerializationError(e.at("graph").describe()) from None


def dumps(graph: Graph, indent: int | None = None) -> str:
    """The JSON text of `graph` (compact unless `indent` is given)."""
    separators = (",", ":") if indent is None else (",", ": ")
    return json.dumps(to_json(graph), indent=indent, separators=separators, allow_nan=False)


def loads(text: str | bytes) -> Graph:
    """Read a graph from JSON text."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise SerializationError(f"not valid JSON: {e.msg} at line {e.lineno}, column {e.colno}") from None
    return from_json(doc)


def save(graph: Graph, path) -> None:
    """Write `graph` as JSON to `path`."""
    Path(path).write_text(dumps(graph) + "\n", encoding="utf-8")


def load(path) -> Graph:
    """Read a graph saved with `save`."""
    return loads(Path(path).read_text(encoding="utf-8"))


def _main(argv: list[str]) -> int:
    from torchsmith.ir import json_schema

    if argv == ["--write-schema"]:
        json_schema.write_schema()
        print(f"wrote {json_schema.SCHEMA_PATH} (schema {version_text()})")
        return 0
    if argv == ["--check-schema"]:
        problem = json_schema.schema_file_problem()
        print(problem or f"{json_schema.SCHEMA_PATH} matches the code (schema {version_text()})")
        return 1 if problem else 0
    if len(argv) == 1 and not argv[0].startswith("-"):
        from torchsmith.ir.text import format_graph

        print(format_graph(load(argv[0])), end="")
        return 0
    print("usage: python -m torchsmith.ir.serialize --write-schema | --check-schema | GRAPH.json", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
