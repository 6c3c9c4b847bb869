"""The loop IR as JSON: `program_to_json` / `program_from_json` (and `save_program` / `load_program`).

A researcher dumps the loop IR of a compiled graph (`TORCHSMITH_DUMP_IR=DIR` writes
`NNN-loops-<graph>.json`), edits it by hand, and feeds it to the code generator alone
(`python -m torchsmith.inductor codegen FILE.json`). The document mirrors the dataclasses of
`loop_ir` one to one; index expressions and sizes are written in the text form of
`torchsmith.ir.format_dim` (`1024*i0 + r0`, `s0 // 2`), dtypes by their IR names (`f32`), and the
constant arguments of extern calls in the IR's own tagged argument form. For example, a buffer::

    {"computed": {
        "name": "exp", "layout": {"shape": [4, 8], "strides": [8, 1], "dtype": "f32"},
        "body": {"pointwise": {
            "ranges": [4, 8], "value": {"op": ["exp", [{"load": ["x", "8*i0 + i1", "f32"]}], "f32"]}}},
        "origin": "%exp = prims.exp"}}

Reading checks the document's format name and version and names the place of a problem
(`buffers[3].body...`) in the `LoopIRFormatError` it raises.
"""

import json
import pathlib

import sympy

from torchsmith.inductor.errors import InductorError
from torchsmith.inductor.loop_ir import (
    ComputedBuffer,
    Constant,
    ExternCall,
    IndexValue,
    Indirect,
    InputBuffer,
    Layout,
    Load,
    LoopProgram,
    Op,
    Pointwise,
    Reduction,
    TensorArg,
    TensorView,
    index_var,
    indirect_var,
    is_loop_var_name,
    reduction_var,
)
from torchsmith.ir.dtypes import dtype_from_name, dtype_name
from torchsmith.ir.graph import ArgList, Slice
from torchsmith.ir.json_codec import Reader, write_arg
from torchsmith.ir.serialize_tables import SCHEMA_VERSION, read_float, write_float
from torchsmith.ir.symbolic import format_dim, parse_dim, symbol

FORMAT = "torchsmith.loop_ir"
VERSION = 1
_LOOP_VARIABLE = {"i": index_var, "r": reduction_var, "x": indirect_var}


class LoopIRFormatError(InductorError):
    """A loop IR document that cannot be read; the message names the place in the document."""


# ---- writing --------------------------------------------------------------------------------------


def _dim(d):
    if isinstance(d, (int, sympy.Integer)):
        return int(d)
    return format_dim(d)


def _dims(dims) -> list:
    return [_dim(d) for d in dims]


def _layout(layout: Layout) -> dict:
    return {"shape": _dims(layout.shape), "strides": _dims(layout.strides), "dtype": dtype_name(layout.dtype)}


def _view(view: TensorView) -> dict:
    return {"buffer": view.buffer, "shape": _dims(view.shape), "strides": _dims(view.strides),
            "offset": _dim(view.offset), "dtype": dtype_name(view.dtype)}


def _expr(e) -> dict:
    if isinstance(e, Load):
        return {"load": [e.buffer, _dim(e.index), dtype_name(e.dtype)]}
    if isinstance(e, Constant):
        value = write_float(e.value) if isinstance(e.value, float) else e.value
        return {"constant": [value, dtype_name(e.dtype)]}
    if isinstance(e, IndexValue):
        return {"index": [_dim(e.expr), dtype_name(e.dtype)]}
    if isinstance(e, Op):
        return {"op": [e.op, [_expr(a) for a in e.args], dtype_name(e.dtype)]}
    if isinstance(e, Indirect):
        return {"indirect": [str(e.var), _expr(e.value), _dim(e.size), _expr(e.body)]}
    raise LoopIRFormatError(f"cannot write {e!r}: not a loop IR expression")


def _param(p):
    # Tensor places and containers first: the IR's argument writer knows constants, not TensorArg.
    if isinstance(p, TensorArg):
        return {"tensor_arg": p.k}
    if isinstance(p, ArgList):
        return {"list": [_param(x) for x in p]}
    if isinstance(p, tuple):
        return {"tuple": [_param(x) for x in p]}
    if isinstance(p, Slice):
        return {"slice": [_param(p.start), _param(p.stop), _param(p.step)]}
    return write_arg(p)


def _buffer(b) -> dict:
    if isinstance(b, ComputedBuffer):
        body = b.body
        if isinstance(body, Pointwise):
            written = {"pointwise": {"ranges": _dims(body.ranges), "value": _expr(body.value)}}
        else:
            written = {"reduction": {"ranges": _dims(body.ranges),
                                     "reduction_ranges": _dims(body.reduction_ranges),
                                     "type": body.reduction_type, "value": _expr(body.value)}}
        layout = _layout(b.layout)
        return {"computed": {"name": b.name, "layout": layout, "body": written, "origin": b.origin}}
    return {"extern": {
        "name": b.name, "layout": _layout(b.layout), "kernel": b.kernel, "args": [_view(v) for v in b.args],
        "origin": b.origin, "params": [_param(p) for p in b.params],
        "kwargs": [[k, _param(v)] for k, v in b.kwargs], "fallback": b.fallback, "output": b.output,
    }}  # fmt: skip


def program_to_json(program: LoopProgram) -> dict:
    """`program` as a JSON document (dicts, lists, strings and numbers)."""
    return {
        "format": FORMAT,
        "version": VERSION,
        "name": program.name,
        "num_graph_inputs": program.num_graph_inputs,
        "inputs": [
            {"name": i.name, "position": i.position, "layout": _layout(i.layout)} for i in program.inputs
        ],
        "symbols": list(program.symbols),
        "buffers": [_buffer(b) for b in program.buffers],
        "outputs": [_view(v) for v in program.outputs],
        "fallbacks": [list(f) for f in program.fallbacks],
        "indirect_sites": [list(s) for s in program.indirect_sites],
    }


# ---- reading --------------------------------------------------------------------------------------


def _make_symbol(name: str) -> sympy.Symbol:
    """Loop variables (`i0`, `r1`, `x0`) are non-negative integers; every other name is a size symbol."""
    if is_loop_var_name(name):
        return _LOOP_VARIABLE[name[0]](int(name[1:]))
    return symbol(name)


class _Reader:
    """Reads one document; `at` keeps the path to the part being read for error messages."""

    def __init__(self):
        self.path: list[str] = []
        self.args = Reader(SCHEMA_VERSION)

    def fail(self, message: str):
        where = "".join(self.path) or "the document"
        raise LoopIRFormatError(f"loop IR JSON, at {where}: {message}")

    def field(self, obj, key: str):
        if not isinstance(obj, dict) or key not in obj:
            self.fail(f"expected an object with key {key!r}")
        return obj[key]

    def each(self, items, fn, where: str) -> tuple:
        if not isinstance(items, list):
            self.fail(f"expected a list at {where}")
        out = []
        for k, item in enumerate(items):
            self.path.append(f"{where}[{k}]")
            out.append(fn(item))
            self.path.pop()
        return tuple(out)

    def dim(self, d):
        if type(d) is int:
            return d
        if not isinstance(d, str):
            self.fail(f"expected an integer or an expression string, got {d!r}")
        try:
            return parse_dim(d, _make_symbol)
        except Exception as e:  # sympy and the parser raise several kinds; all mean the same here
            self.fail(f"cannot read expression {d!r}: {e}")

    def dims(self, obj, key: str) -> tuple:
        return self.each(self.field(obj, key), self.dim, f".{key}")

    def dtype(self, name):
        try:
            return dtype_from_name(name)
        except Exception:
            self.fail(f"unknown dtype {name!r}")

    def layout(self, obj) -> Layout:
        dtype = self.dtype(self.field(obj, "dtype"))
        return Layout(self.dims(obj, "shape"), self.dims(obj, "strides"), dtype)

    def view(self, obj) -> TensorView:
        return TensorView(self.field(obj, "buffer"), self.dims(obj, "shape"), self.dims(obj, "strides"),
                          self.dim(self.field(obj, "offset")), self.dtype(self.field(obj, "dtype")))

    def expr(self, obj):
        if not isinstance(obj, dict) or len(obj) != 1:
            self.fail("expected an expression: one of {load|constant|index|op|indirect: [...]}")
        ((tag, parts),) = obj.items()
        if tag == "load":
            buffer, index, dtype = parts
            return Load(buffer, self.dim(index), self.dtype(dtype))
        if tag == "constant":
            value, dtype = parts
            return Constant(read_float(value) if isinstance(value, str) else value, self.dtype(dtype))
        if tag == "index":
            expr, dtype = parts
            return IndexValue(self.dim(expr), self.dtype(dtype))
        if tag == "op":
            op, args, dtype = parts
            return Op(op, self.each(args, self.expr, f".op[{op}]"), self.dtype(dtype))
        if tag == "indirect":
            var, value, size, body = parts
            return Indirect(_make_symbol(var), self.expr(value), self.dim(size), self.expr(body))
        self.fail(f"unknown expression kind {tag!r}; known: load, constant, index, op, indirect")

    def param(self, obj):
        if isinstance(obj, dict) and len(obj) == 1:
            ((tag, payload),) = obj.items()
            if tag == "tensor_arg":
                return TensorArg(payload)
            if tag == "list":
                return ArgList(self.param(p) for p in payload)
            if tag == "tuple":
                return tuple(self.param(p) for p in payload)
            if tag == "slice":
                return Slice(*(self.param(p) for p in payload))
        try:
            return self.args.arg(obj)
        except Exception as e:
            self.fail(f"cannot read argument {obj!r}: {e}")

    def body(self, obj):
        if "pointwise" in obj:
            body = obj["pointwise"]
            return Pointwise(self.dims(body, "ranges"), self.expr(self.field(body, "value")))
        body = self.field(obj, "reduction")
        return Reduction(self.dims(body, "ranges"), self.dims(body, "reduction_ranges"),
                         self.field(body, "type"), self.expr(self.field(body, "value")))

    def buffer(self, obj):
        if isinstance(obj, dict) and "computed" in obj:
            b = obj["computed"]
            return ComputedBuffer(self.field(b, "name"), self.layout(self.field(b, "layout")),
                                  self.body(self.field(b, "body")), b.get("origin", ""))
        b = self.field(obj, "extern")
        return ExternCall(
            self.field(b, "name"), self.layout(self.field(b, "layout")), self.field(b, "kernel"),
            self.each(self.field(b, "args"), self.view, ".args"), b.get("origin", ""),
            self.each(b.get("params", []), self.param, ".params"),
            tuple((k, self.param(v)) for k, v in b.get("kwargs", [])),
            b.get("fallback", ""), b.get("output", 0),
        )  # fmt: skip

    def program(self, doc) -> LoopProgram:
        if not isinstance(doc, dict) or doc.get("format") != FORMAT:
            self.fail(f"not a loop IR document (its 'format' must be {FORMAT!r})")
        if doc.get("version") != VERSION:
            self.fail(f"loop IR version {doc.get('version')!r}; this inductor reads version {VERSION}")
        inputs = self.each(self.field(doc, "inputs"), lambda i: InputBuffer(
            self.field(i, "name"), self.field(i, "position"), self.layout(self.field(i, "layout"))), "inputs")
        return LoopProgram(
            name=self.field(doc, "name"),
            num_graph_inputs=self.field(doc, "num_graph_inputs"),
            inputs=inputs,
            symbols=tuple(self.field(doc, "symbols")),
            buffers=self.each(self.field(doc, "buffers"), self.buffer, "buffers"),
            outputs=self.each(self.field(doc, "outputs"), self.view, "outputs"),
            fallbacks=tuple(tuple(f) for f in doc.get("fallbacks", [])),
            indirect_sites=tuple(tuple(s) for s in doc.get("indirect_sites", [])),
        )


def program_from_json(doc: dict) -> LoopProgram:
    """The `LoopProgram` that `program_to_json` wrote; raises `LoopIRFormatError` naming the place of
    a problem."""
    try:
        return _Reader().program(doc)
    except (TypeError, ValueError) as e:  # a part of the wrong shape, e.g. a list of two for three
        raise LoopIRFormatError(f"loop IR JSON: malformed document: {e}") from None


def save_program(program: LoopProgram, path) -> None:
    """Write `program` as indented JSON to `path`."""
    pathlib.Path(path).write_text(json.dumps(program_to_json(program), indent=1) + "\n")


def load_program(path) -> LoopProgram:
    """Read a loop program that `save_program` (or an IR dump) wrote."""
    return program_from_json(json.loads(pathlib.Path(path).read_text()))
