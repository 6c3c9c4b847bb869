"""The tables behind the JSON form: the fields of every object and every argument kind.

The writer and reader in `serialize.py` work from these tables, and `json_schema.py` derives
the checked-in `schema.json` from them, so the code and its description cannot drift apart
silently: change a table and the schema test fails until the version is bumped and the file
regenerated.
"""

import math
from collections.abc import Callable
from dataclasses import dataclass

import sympy
import torch

from torchsmith.ir.dtypes import DTYPE_BY_NAME, dtype_name
from torchsmith.ir.errors import SerializationError
from torchsmith.ir.graph import ArgList, Slice, Value
from torchsmith.ir.symbolic import format_dim, parse_dim
from torchsmith.ir.types import SCALAR_KINDS

SCHEMA_VERSION = (1, 2)  # bump with every change to the tables below (see the module docstring)


def version_text(version: tuple[int, int] = SCHEMA_VERSION) -> str:
    return f"{version[0]}.{version[1]}"


def json_kind(obj) -> str:
    names = {dict: "an object", list: "an array", str: "a string", bool: "a boolean", int: "an integer",
             float: "a number", type(None): "null"}
    shown = f" ({obj!r})" if type(obj) in (str, int, float, bool) else ""
    return names.get(type(obj), type(obj).__name__) + shown


class Malformed(SerializationError):
    """A problem at a place in the document; `at` prepends the path on the way up."""

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message
        self.path: list[str] = []

    def at(self, part: str) -> "Malformed":
        self.path.insert(0, part)
        self.args = (self.describe(),)
        return self

    def describe(self) -> str:
        return f"{''.join(self.path).lstrip('.')}: {self.message}"


# ---- JSON Schema fragments -------------------------------------------------------------------


def ref(name: str) -> dict:
    return {"$ref": f"#/$defs/{name}"}


def array_of(item: dict) -> dict:
    return {"type": "array", "items": item}


def fixed_array(*items: dict) -> dict:
    return {"type": "array", "prefixItems": list(items), "minItems": len(items), "maxItems": len(items)}


STRING = {"type": "string"}
NON_FINITE = ("inf", "-inf", "nan")

# Named shapes shared by several fields.
DEFINITIONS: dict[str, dict] = {
    "dim": {
        "description": "a size or stride: an integer, or the canonical text of an expression ('2*s0 + 1')",
        "oneOf": [{"type": "integer"}, STRING],
    },
    "float": {
        "description": "a float: a JSON number, or one of the strings inf, -inf, nan",
        "oneOf": [{"type": "number"}, {"enum": list(NON_FINITE)}],
    },
}


@dataclass(frozen=True, slots=True)
class Field:
    """One field of a JSON object. Minor versions may only add fields with `required=False`."""

    name: str
    schema: dict
    required: bool = True
    doc: str = ""


@dataclass(frozen=True, slots=True)
class ObjectSpec:
    name: str
    doc: str
    fields: tuple[Field, ...]

    @property
    def required(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.fields if f.required)


_TENSOR_FIELDS = (
    Field("kind", {"const": "tensor"}),
    Field("shape", array_of(ref("dim"))),
    Field("dtype", {"enum": list(DTYPE_BY_NAME)}, doc="short dtype name"),
    Field("device", STRING, doc="'cpu', 'cuda:0', ..."),
    Field("strides", array_of(ref("dim")), doc="one per dim, always written"),
    Field("requires_grad", {"type": "boolean"}, required=False, doc="false when absent"),
)

OBJECTS: dict[str, ObjectSpec] = {spec.name: spec for spec in (
    ObjectSpec("document", "a serialized torchsmith.ir graph", (
        Field("schema_version", {"type": "string", "pattern": r"^\d+\.\d+$"}, doc="major.minor"),
        Field("producer", STRING, required=False, doc="the writer, e.g. 'torchsmith-ir 0.1.0'"),
        Field("graph", ref("graph")),
    )),
    ObjectSpec("graph", "inputs, nodes in topological order (SSA), outputs", (
        Field("name", STRING),
        Field("inputs", array_of(ref("value"))),
        Field("nodes", array_of(ref("node"))),
        Field("outputs", array_of(STRING), doc="names of values defined above"),
        Field("stamps", array_of(ref("stamp")), required=False, doc="the passes that made it"),
    )),
    ObjectSpec("value", "a value definition: a name unique in the graph, and its type", (
        Field("name", STRING),
        Field("type", ref("type")),
    )),
    ObjectSpec("node", "one op application", (
        Field("op", STRING, doc="qualified op name, e.g. aten.add.Tensor"),
        Field("args", array_of(ref("arg"))),
        Field("kwargs", {"type": "object", "additionalProperties": ref("arg")}, required=False,
              doc="keyword arguments in call order; none when absent"),
        Field("outputs", array_of(ref("value"))),
        Field("source", STRING, required=False, doc="the user's file:line"),
    )),
    ObjectSpec("stamp", "a pass that produced the graph, and its time", (
        Field("pass_name", STRING),
        Field("seconds", ref("float")),
    )),
    ObjectSpec("tensor_type", "a tensor type", _TENSOR_FIELDS),
    ObjectSpec("sym_type", "a Python int known symbolically", (
        Field("kind", {"const": "sym"}),
        Field("expr", ref("dim")),
    )),
    ObjectSpec("scalar_type", "a Python scalar", (
        Field("kind", {"const": "scalar"}),
        Field("scalar", {"enum": list(SCALAR_KINDS)}),
    )),
)}
TYPE_OBJECTS = ("tensor_type", "sym_type", "scalar_type")


# ---- argument kinds ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ArgKind:
    """An argument kind: `{tag: payload}`. `write(arg, write_arg)` makes the payload;
    `read(payload, reader)` reads it back (`reader.arg` and `reader.value` recurse)."""

    tag: str
    python_types: tuple[type, ...]
    payload: dict
    write: Callable
    read: Callable
    doc: str = ""


def _expect(payload, py_type: type, what: str):
    if type(payload) is not py_type:
        raise Malformed(f"expected {what}, got {json_kind(payload)}")
    return payload


def write_float(x: float):
    if math.isfinite(x):
        return x
    return "nan" if math.isnan(x) else ("inf" if x > 0 else "-inf")


def read_float(payload) -> float:
    if type(payload) is float or type(payload) is int:
        return float(payload)
    if payload in NON_FINITE:
        return float(payload)
    raise Malformed(f"expected a number or one of inf, -inf, nan, got {payload!r}")


def read_dim(payload):
    if type(payload) is int:
        return payload
    value = parse_dim(_expect(payload, str, "an integer or a symbolic expression"))
    if not isinstance(value, (int, sympy.Expr)) or isinstance(value, bool):
        raise Malformed(f"{payload!r} is a condition, not a size")
    return value  # parse_dim has normalized it already


def _read_enum(table: dict, what: str):
    def read(payload, reader):
        try:
            return table[payload]
        except (KeyError, TypeError):
            raise Malformed(f"unknown {what} {payload!r}; expected one of {', '.join(table)}") from None

    return read


def _write_enum(names: dict, what: str):
    def write(arg, write_arg):
        name = names.get(arg)
        if name is None:
            raise Malformed(f"{what} {arg} has no name in the JSON form; known: {', '.join(names.values())}")
        return name

    return write


def _read_device(payload, reader):
    try:
        return torch.device(_expect(payload, str, "a device string"))
    except (RuntimeError, ValueError):
        raise Malformed(f"unknown device {payload!r}") from None


def _read_complex(payload, reader):
    if type(payload) is not list or len(payload) != 2:
        raise Malformed("expected [real, imag]")
    return complex(read_float(payload[0]), read_float(payload[1]))


def _read_items(payload, reader) -> list:
    items = []
    for i, item in enumerate(_expect(payload, list, "an array of arguments")):
        try:
            items.append(reader.arg(item))
        except Malformed as e:
            raise e.at(f"[{i}]") from None
    return items


def _read_slice(payload, reader) -> Slice:
    if type(payload) is not list or len(payload) != 3:
        raise Malformed("expected [start, stop, step]")
    return Slice(*_read_items(payload, reader))


def _read_null(result):
    def read(payload, reader):
        if payload is not None:
            raise Malformed(f"expected null, got {payload!r}")
        return result

    return read


def _read_sym(payload, reader):
    value = parse_dim(_expect(payload, str, "a symbolic expression"))
    if isinstance(value, bool) or not isinstance(value, (int, sympy.Expr)):
        raise Malformed(f"{payload!r} is a condition, not a symbolic int")
    return value


_LAYOUT_NAMES = (
    "strided", "sparse_coo", "sparse_csr", "sparse_csc", "sparse_bsr", "sparse_bsc", "_mkldnn", "jagged",
)
LAYOUTS = {name: getattr(torch, name) for name in _LAYOUT_NAMES if hasattr(torch, name)}
MEMORY_FORMATS = {
    name: getattr(torch, name)
    for name in ("contiguous_format", "channels_last", "channels_last_3d", "preserve_format")
}
_LAYOUT_NAME = {v: k for k, v in LAYOUTS.items()}
_MEMORY_FORMAT_NAME = {v: k for k, v in MEMORY_FORMATS.items()}
_ARGS = array_of(ref("arg"))

ARG_KINDS: tuple[ArgKind, ...] = (
    ArgKind("value", (Value,), STRING, lambda a, w: a.name, lambda p, r: r.value(p), "a value, by name"),
    ArgKind("none", (type(None),), {"type": "null"}, lambda a, w: None, _read_null(None)),
    ArgKind("bool", (bool,), {"type": "boolean"}, lambda a, w: a, lambda p, r: _expect(p, bool, "a boolean")),
    ArgKind("int", (int,), {"type": "integer"}, lambda a, w: int(a), lambda p, r: _expect(p, int, "an int")),
    ArgKind("float", (float,), ref("float"), lambda a, w: write_float(a), lambda p, r: read_float(p)),
    ArgKind("complex", (complex,), fixed_array(ref("float"), ref("float")),
            lambda a, w: [write_float(a.real), write_float(a.imag)], _read_complex, "[real, imag]"),
    ArgKind("str", (str,), STRING, lambda a, w: a, lambda p, r: _expect(p, str, "a string")),
    ArgKind("dtype", (torch.dtype,), {"enum": list(DTYPE_BY_NAME)}, lambda a, w: dtype_name(a),
            _read_enum(DTYPE_BY_NAME, "dtype"), "short dtype name"),
    ArgKind("device", (torch.device,), STRING, lambda a, w: str(a), _read_device, "'cpu', 'cuda:0', ..."),
    ArgKind("layout", (torch.layout,), {"enum": list(LAYOUTS)}, _write_enum(_LAYOUT_NAME, "layout"),
            _read_enum(LAYOUTS, "layout"), "torch.<name>"),
    ArgKind("memory_format", (torch.memory_format,), {"enum": list(MEMORY_FORMATS)},
            _write_enum(_MEMORY_FORMAT_NAME, "memory format"), _read_enum(MEMORY_FORMATS, "memory format"),
            "torch.<name>"),
    ArgKind("ellipsis", (type(Ellipsis),), {"type": "null"}, lambda a, w: None, _read_null(Ellipsis)),
    ArgKind("slice", (Slice,), fixed_array(ref("arg"), ref("arg"), ref("arg")),
            lambda a, w: [w(a.start), w(a.stop), w(a.step)], _read_slice, "[start, stop, step]"),
    ArgKind("list", (ArgList,), _ARGS, lambda a, w: [w(x) for x in a],
            lambda p, r: ArgList(_read_items(p, r)), "a Python list"),
    ArgKind("tuple", (tuple,), _ARGS, lambda a, w: [w(x) for x in a],
            lambda p, r: tuple(_read_items(p, r)), "a Python tuple"),
    ArgKind("sym", (sympy.Expr,), STRING, lambda a, w: format_dim(a), _read_sym,
            "a symbolic int, as canonical expression text"),
)
