"""The writer and reader behind `torchsmith.ir.serialize`: graph <-> JSON document (dicts and lists).

Both work from the tables in `serialize_tables`. The reader names the place of any problem in the
document (`graph.nodes[3].args[1]`) by prepending path parts as a `Malformed` error travels up.
"""

from torchsmith.ir.dtypes import DTYPE_BY_NAME, NAME_BY_DTYPE, dtype_name
from torchsmith.ir.errors import IRError
from torchsmith.ir.graph import Graph, Node, Stamp, Value
from torchsmith.ir.serialize_tables import (
    ARG_KINDS,
    OBJECTS,
    SCALAR_KINDS,
    SCHEMA_VERSION,
    Malformed,
    json_kind,
    read_dim,
    read_float,
    version_text,
    write_float,
)
from torchsmith.ir.symbolic import format_dim
from torchsmith.ir.types import ScalarType, SymIntType, TensorType, normalize_device

_KIND_BY_TYPE = {t: kind for kind in ARG_KINDS for t in kind.python_types}


def write_arg(arg):
    """One stored argument as its tagged JSON object."""
    kind = _KIND_BY_TYPE.get(type(arg))
    if kind is None:
        kind = next((k for k in ARG_KINDS if isinstance(arg, k.python_types)), None)
        if kind is None:
            raise Malformed(f"cannot write {arg!r} of type {type(arg).__name__}: not an IR argument kind")
    return {kind.tag: kind.write(arg, write_arg)}


class Writer:
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

    def graph(self, graph: Graph) -> dict:
        obj = {
            "name": graph.name,
            "inputs": _write_list(graph.inputs, self.value, ".inputs"),
            "nodes": _write_list(graph.nodes, self.node, ".nodes"),
            "outputs": [v.name for v in graph.outputs],
        }
        stamps = graph.stamps
        if stamps:
            obj["stamps"] = [{"pass_name": s.pass_name, "seconds": write_float(s.seconds)} for s in stamps]
        return obj


def _guard(fn, item, where: str):
    try:
        return fn(item)
    except Malformed as e:
        raise e.at(where) from None
    except IRError as e:  # e.g. a dtype argument without a short name
        raise Malformed(str(e)).at(where) from None


def _write_list(items, fn, where: str) -> list:
    try:
        return [fn(item) for item in items]
    except IRError:
        pass
    return [_guard(fn, item, f"{where}[{i}]") for i, item in enumerate(items)]  # finds and names the bad one


class Reader:
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
        except IRError as e:  # e.g. a symbolic expression that does not parse
            raise Malformed(str(e)).at(f".{tag}") from None

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
            raise Malformed(f"expected an array, got {json_kind(items)}").at(f".{key}")
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
            raise Malformed(f"expected a {what.replace('_', ' ')} object, got {json_kind(obj)}")
        for name in _REQUIRED[what]:
            if name not in obj:
                raise Malformed(f"the {what.replace('_', ' ')} has no {name!r} field")
        return obj

    def string(self, obj: dict, key: str, required: bool = True) -> str | None:
        text = obj.get(key)
        if type(text) is not str and (required or text is not None):
            raise Malformed(f"expected a string, got {json_kind(text)}").at(f".{key}")
        return text

    def type(self, obj):
        if type(obj) is not dict or "kind" not in obj:
            raise Malformed(f"expected a type object with a 'kind' field, got {json_kind(obj)}")
        kind = obj["kind"]
        if kind == "tensor":
            self.record(obj, "tensor_type")
            shape, strides, grad = obj["shape"], obj["strides"], obj.get("requires_grad", False)
            if type(shape) is not list or type(strides) is not list:
                raise Malformed("expected arrays of dims for shape and strides")
            # The types of the dims are part of the key so that `true` or `1.0` never pass for 1.
            key = (tuple(shape), tuple(map(type, shape)), obj["dtype"], obj["device"], tuple(strides),
                   tuple(map(type, strides)), grad, type(grad))
            try:
                t = self._types.get(key)
            except TypeError:  # an unhashable field: let the full check say which
                return _read_tensor_type(shape, obj["dtype"], obj["device"], strides, grad)
            if t is None:
                t = self._types[key] = _read_tensor_type(shape, obj["dtype"], obj["device"], strides, grad)
            return t
        if kind == "sym":
            self.record(obj, "sym_type")
            return SymIntType(_at(read_dim, obj["expr"], ".expr"))
        if kind == "scalar":
            self.record(obj, "scalar_type")
            if obj["scalar"] not in SCALAR_KINDS:
                known = ", ".join(SCALAR_KINDS)
                message = f"unknown scalar kind {obj['scalar']!r}; expected one of {known}"
                raise Malformed(message).at(".scalar")
            return ScalarType(obj["scalar"])
        message = f"unknown type kind {kind!r}; expected tensor, sym or scalar" + self._newer_hint()
        raise Malformed(message).at(".kind")

    def define(self, obj) -> Value:
        self.record(obj, "value")
        name = self.string(obj, "name")
        if name in self.values:
            raise Malformed(f"value %{name} is defined twice").at(".name")
        try:
            v = Value(name, self.type(obj["type"]))
        except Malformed as e:
            raise e.at(".type") from None
        self.values[name] = v
        return v

    def node(self, obj) -> Node:
        self.record(obj, "node")
        op = self.string(obj, "op")
        args = tuple(self.each(obj, "args", self.arg))
        kwargs = obj.get("kwargs")
        if kwargs is None:
            kwargs = ()
        elif type(kwargs) is dict:
            kwargs = tuple((k, _at(self.arg, v, f".kwargs.{k}")) for k, v in kwargs.items())
        else:
            raise Malformed(f"expected an object of keyword arguments, got {json_kind(kwargs)}").at(".kwargs")
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
_REQUIRED = {name: spec.required for name, spec in OBJECTS.items()}


def _at(fn, item, where: str):
    try:
        return fn(item)
    except Malformed as e:
        raise e.at(where) from None
    except IRError as e:
        raise Malformed(str(e)).at(where) from None


def _read_tensor_type(shape, dtype, device, strides, grad) -> TensorType:
    if type(dtype) is not str or dtype not in DTYPE_BY_NAME:
        raise Malformed(f"unknown dtype {dtype!r}; expected one of {', '.join(DTYPE_BY_NAME)}").at(".dtype")
    if type(device) is not str:
        raise Malformed(f"expected a device such as 'cpu' or 'cuda:0', got {json_kind(device)}").at(".device")
    try:
        device = normalize_device(device)
    except (RuntimeError, ValueError):
        raise Malformed(f"unknown device {device!r}").at(".device") from None
    if type(grad) is not bool:
        raise Malformed(f"expected true or false, got {json_kind(grad)}").at(".requires_grad")
    if len(strides) != len(shape):
        raise Malformed(f"{len(shape)} dims but {len(strides)} strides").at(".strides")
    dims = tuple(_at(read_dim, d, f".shape[{i}]") for i, d in enumerate(shape))
    steps = tuple(_at(read_dim, d, f".strides[{i}]") for i, d in enumerate(strides))
    return TensorType(dims, DTYPE_BY_NAME[dtype], device, steps, grad)
