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

Reading checks the document's format name and version, the kind of every field, that names are
unique and every load and view names an input or an earlier buffer, and bounds its work (nesting
depth, integer sizes); it names the place of a problem (`buffers[3].body...`) in the one-line
`LoopIRFormatError` it raises.
"""

import json
import pathlib

import sympy

from torchsmith.inductor.errors import InductorError
from torchsmith.inductor.loop_ir.program import (
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
    Scatter,
    TensorArg,
    TensorView,
    index_var,
    indirect_var,
    is_loop_var_name,
    loads,
    reduction_var,
)
from torchsmith.ir.dtypes import dtype_from_name, dtype_name
from torchsmith.ir.errors import SerializationError
from torchsmith.ir.graph import ArgList, Slice
from torchsmith.ir.json_codec import Reader, write_arg
from torchsmith.ir.serialize_tables import SCHEMA_VERSION, read_float, write_float
from torchsmith.ir.symbolic import format_dim, parse_dim, symbol

FORMAT = "torchsmith.loop_ir"
VERSION = 1
_LOOP_VARIABLE = {"i": index_var, "r": reduction_var, "x": indirect_var}


class LoopIRFormatError(InductorError, SerializationError):
    """A loop IR document that cannot be read; the message names the place in the document. It is
    both an inductor error and a `torchsmith.ir.SerializationError`, as every reader's errors are."""


# Bounds on a document: expressions nest at most this deep (the reader recurses), names are short
# strings, and every integer fits in int64 as the generated code stores it.
MAX_EXPRESSION_DEPTH = 200
MAX_NAME_CHARS = 200
MAX_INT = 2**63 - 1


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
        elif isinstance(body, Scatter):
            written = {"scatter": {"ranges": _dims(body.ranges),
                                   "reduction_ranges": _dims(body.reduction_ranges),
                                   "value": _expr(body.value), "position": _dim(body.position),
                                   "accumulate": body.accumulate}}  # fmt: skip
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
        self.depth = 0

    def fail(self, message: str):
        where = _short_path("".join(self.path)) or "the document"
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

    def name(self, obj, key: str) -> str:
        """A buffer, input, kernel or program name: a short non-empty string."""
        value = self.field(obj, key)
        if not isinstance(value, str) or not value or len(value) > MAX_NAME_CHARS:
            self.fail(f"{key!r} must be a non-empty string of at most {MAX_NAME_CHARS} characters, "
                      f"got {_shown(value)}")
        return value

    def text(self, obj, key: str) -> str:
        """An optional free-text field (an origin): a string, empty when absent."""
        value = obj.get(key, "")
        if not isinstance(value, str):
            self.fail(f"{key!r} must be a string, got {_shown(value)}")
        return value

    def integer(self, obj, key: str, default=None) -> int:
        value = obj.get(key, default) if default is not None else self.field(obj, key)
        if type(value) is not int or not 0 <= value <= MAX_INT:
            self.fail(f"{key!r} must be a non-negative integer, got {_shown(value)}")
        return value

    def dim(self, d):
        if type(d) is int:
            if not -MAX_INT <= d <= MAX_INT:
                self.fail(f"integer {d} does not fit in 64 bits")
            return d
        if not isinstance(d, str):
            self.fail(f"expected an integer or an expression string, got {d!r}")
        try:
            value = parse_dim(d, _make_symbol)
        except Exception as e:  # sympy and the parser raise several kinds; all mean the same here
            self.fail(f"cannot read expression {_shown(d)}: {e}")
        if isinstance(value, sympy.Basic) and any(abs(int(n)) > MAX_INT for n in value.atoms(sympy.Integer)):
            self.fail(f"expression {_shown(d)} holds an integer that does not fit in 64 bits")
        return value

    def dims(self, obj, key: str) -> tuple:
        return self.each(self.field(obj, key), self.dim, f".{key}")

    def sizes(self, obj, key: str) -> tuple:
        """Sizes, strides or ranges: integers or expressions, never a negative integer."""
        dims = self.dims(obj, key)
        if any(isinstance(d, int) and d < 0 for d in dims):
            self.fail(f"{key} {list(dims)} holds a negative integer")
        return dims

    def dtype(self, name):
        try:
            return dtype_from_name(name)
        except Exception:
            self.fail(f"unknown dtype {name!r}")

    def layout(self, obj) -> Layout:
        dtype = self.dtype(self.field(obj, "dtype"))
        shape, strides = self.sizes(obj, "shape"), self.sizes(obj, "strides")
        if len(shape) != len(strides):
            self.fail(f"a layout has {len(shape)} sizes but {len(strides)} strides")
        return Layout(shape, strides, dtype)

    def view(self, obj) -> TensorView:
        return TensorView(self.name(obj, "buffer"), self.sizes(obj, "shape"), self.sizes(obj, "strides"),
                          self.dim(self.field(obj, "offset")), self.dtype(self.field(obj, "dtype")))

    def expr(self, obj):
        if self.depth >= MAX_EXPRESSION_DEPTH:
            self.fail(f"expressions nest deeper than {MAX_EXPRESSION_DEPTH} levels")
        self.depth += 1
        try:
            return self._expr(obj)
        finally:
            self.depth -= 1

    def _expr(self, obj):
        if not isinstance(obj, dict) or len(obj) != 1:
            self.fail("expected an expression: one of {load|constant|index|op|indirect: [...]}")
        ((tag, parts),) = obj.items()
        if not isinstance(parts, list):
            self.fail(f"{tag!r} takes a list of its parts, got {_shown(parts)}")
        if tag == "load":
            buffer, index, dtype = parts
            if not isinstance(buffer, str):
                self.fail(f"a load names its buffer by a string, got {_shown(buffer)}")
            return Load(buffer, self.dim(index), self.dtype(dtype))
        if tag == "constant":
            value, dtype = parts
            if isinstance(value, str):
                try:
                    value = read_float(value)
                except Exception:
                    self.fail(f"constant {_shown(value)} is not a number")
            if type(value) not in (int, float, bool) or type(value) is int and abs(value) > 2**64:
                self.fail(f"constant {_shown(value)} is not a number of at most 64 bits")
            return Constant(value, self.dtype(dtype))
        if tag == "index":
            expr, dtype = parts
            return IndexValue(self.dim(expr), self.dtype(dtype))
        if tag == "op":
            op, args, dtype = parts
            if not isinstance(op, str) or not op.isidentifier():
                self.fail(f"an op is named by an identifier such as 'exp', got {_shown(op)}")
            return Op(op, self.each(args, self.expr, f".op[{op}]"), self.dtype(dtype))
        if tag == "indirect":
            var, value, size, body = parts
            if not isinstance(var, str) or not is_loop_var_name(var) or var[0] != "x":
                self.fail(f"an indirect variable is named x0, x1, ..., got {_shown(var)}")
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
        if isinstance(obj, dict) and "pointwise" in obj:
            body = obj["pointwise"]
            return Pointwise(self.sizes(body, "ranges"), self.expr(self.field(body, "value")))
        if isinstance(obj, dict) and "scatter" in obj:
            return self.scatter(obj["scatter"])
        body = self.field(obj, "reduction")
        return Reduction(self.sizes(body, "ranges"), self.sizes(body, "reduction_ranges"),
                         self.name(body, "type"), self.expr(self.field(body, "value")))

    def scatter(self, body):
        value = self.expr(self.field(body, "value"))
        if not isinstance(value, Op) or value.op != "scatter" or len(value.args) != 2:
            self.fail("a scatter's value is op scatter of (base, write)")
        accumulate = self.field(body, "accumulate")
        if not isinstance(accumulate, bool):
            self.fail(f"a scatter's accumulate is true or false, got {_shown(accumulate)}")
        return Scatter(self.sizes(body, "ranges"), self.sizes(body, "reduction_ranges"), value,
                       self.dim(self.field(body, "position")), accumulate)  # fmt: skip

    def buffer(self, obj):
        if isinstance(obj, dict) and "computed" in obj:
            b = obj["computed"]
            return ComputedBuffer(self.name(b, "name"), self.layout(self.field(b, "layout")),
                                  self.body(self.field(b, "body")), self.text(b, "origin"))
        b = self.field(obj, "extern")
        kwargs = b.get("kwargs", [])
        if not isinstance(kwargs, list) or not all(
            isinstance(kv, list) and len(kv) == 2 and isinstance(kv[0], str) and kv[0].isidentifier()
            for kv in kwargs
        ):
            self.fail("'kwargs' must be a list of [identifier, argument] pairs")
        return ExternCall(
            self.name(b, "name"), self.layout(self.field(b, "layout")), self.name(b, "kernel"),
            self.each(self.field(b, "args"), self.view, ".args"), self.text(b, "origin"),
            self.each(b.get("params", []), self.param, ".params"),
            tuple((k, self.param(v)) for k, v in kwargs),
            self.text(b, "fallback"), self.integer(b, "output", 0),
        )  # fmt: skip

    def program(self, doc) -> LoopProgram:
        if not isinstance(doc, dict) or doc.get("format") != FORMAT:
            self.fail(f"not a loop IR document (its 'format' must be {FORMAT!r})")
        if doc.get("version") != VERSION:
            self.fail(f"loop IR version {doc.get('version')!r}; this inductor reads version {VERSION}")
        num_graph_inputs = self.integer(doc, "num_graph_inputs")
        symbols = self.each(self.field(doc, "symbols"), self.symbol_name, "symbols")
        inputs = self.each(self.field(doc, "inputs"), self.input, "inputs")
        program = LoopProgram(
            name=self.name(doc, "name"),
            num_graph_inputs=num_graph_inputs,
            inputs=inputs,
            symbols=symbols,
            buffers=self.each(self.field(doc, "buffers"), self.buffer, "buffers"),
            outputs=self.each(self.field(doc, "outputs"), self.view, "outputs"),
            fallbacks=self.each(doc.get("fallbacks", []), self.strings, "fallbacks"),
            indirect_sites=self.each(doc.get("indirect_sites", []), self.site, "indirect_sites"),
        )
        self.check_references(program)
        return program

    def input(self, obj) -> InputBuffer:
        layout = self.layout(self.field(obj, "layout"))
        return InputBuffer(self.name(obj, "name"), self.integer(obj, "position"), layout)

    def symbol_name(self, name) -> str:
        if not isinstance(name, str) or is_loop_var_name(name):
            self.fail(f"a size symbol is named like s0 (not like a loop variable), got {_shown(name)}")
        try:
            symbol(name)
        except Exception as e:
            self.fail(str(e))
        return name

    def site(self, item) -> tuple:
        """An indirect load's site: [variable x<k>, op, node description]."""
        site = self.strings(item)
        if len(site) != 3 or not is_loop_var_name(site[0]) or site[0][0] != "x":
            self.fail(f"an indirect site is [\"x<k>\", op, node], got {_shown(item)}")
        return site

    def strings(self, item) -> tuple:
        if not isinstance(item, list) or not all(isinstance(x, str) for x in item):
            self.fail(f"expected a list of strings, got {_shown(item)}")
        return tuple(item)

    def check_references(self, program: LoopProgram) -> None:
        """Names are unique; inputs sit at distinct positions below num_graph_inputs; every load,
        extern argument and output names an input or an earlier buffer."""
        self.path = []
        known: set[str] = set()
        positions: set[int] = set()
        for k, i in enumerate(program.inputs):
            if i.name in known:
                self.fail(f"inputs[{k}]: name {_shown(i.name)} is used twice")
            if i.position >= program.num_graph_inputs or i.position in positions:
                self.fail(f"inputs[{k}]: position {i.position} is taken or not below num_graph_inputs "
                          f"({program.num_graph_inputs})")
            known.add(i.name)
            positions.add(i.position)
        for k, b in enumerate(program.buffers):
            reads = [v.buffer for v in b.args] if isinstance(b, ExternCall) else [
                ld.buffer for ld in loads(b.body.value)
            ]
            for name in reads:
                if name not in known:
                    self.fail(f"buffers[{k}] ({_shown(b.name)}) reads {_shown(name)}, which is no input "
                              "and no earlier buffer")
            if b.name in known:
                self.fail(f"buffers[{k}]: name {_shown(b.name)} is used twice")
            known.add(b.name)
        for k, view in enumerate(program.outputs):
            if view.buffer not in known:
                self.fail(f"outputs[{k}] names {_shown(view.buffer)}, which is no input and no buffer")


def _short_path(path: str) -> str:
    """A JSON path fit for one line: the middle of a very deep one is elided."""
    return path if len(path) <= 200 else f"{path[:90]}...{path[-90:]}"


def _shown(value) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:60] + "..."


def program_from_json(doc: dict) -> LoopProgram:
    """The `LoopProgram` that `program_to_json` wrote; raises `LoopIRFormatError` naming the place of
    a problem."""
    reader = _Reader()
    try:
        return reader.program(doc)
    except LoopIRFormatError:
        raise
    except (TypeError, ValueError, AttributeError, KeyError, IndexError, InductorError) as e:
        # a part of the wrong shape, e.g. a list of two for three, or a record refusing its fields
        where = _short_path("".join(reader.path)) or "the document"
        raise LoopIRFormatError(f"loop IR JSON, at {where}: malformed: {type(e).__name__}: {e}") from None


def save_program(program: LoopProgram, path) -> None:
    """Write `program` as indented JSON to `path`."""
    pathlib.Path(path).write_text(json.dumps(program_to_json(program), indent=1) + "\n")


def load_program(path) -> LoopProgram:
    """Read a loop program that `save_program` (or an IR dump) wrote."""
    try:
        doc = json.loads(pathlib.Path(path).read_text())
    except (ValueError, RecursionError) as e:  # not JSON, or JSON nested too deeply to decode
        raise LoopIRFormatError(f"loop IR JSON: not readable JSON: {e}") from None
    return program_from_json(doc)
