"""Compile a graph to straight-line Python: the fast way to run a graph on eager PyTorch.

`interpret` looks every op up, resolves every argument and unpacks every result while the graph
runs; `compile_to_python` does that work once and writes one line of Python per node::

    >>> fn = compile_to_python(graph)                      # doctest: +SKIP
    >>> print(fn.source)                                   # doctest: +SKIP
    def forward(v_x, v_w):
        sym_s0 = v_x.shape[0]
        try:
            v_mm = aten_mm_default(v_x, v_w)
            v_relu = torch_relu(v_mm)
        except Exception as error:
            _fail(error)
        return [v_relu]

Op callables and constants without a literal form (dtypes, devices, inf, nan, complex) are bound as
globals of the generated function; symbolic ints are computed from the input sizes with plain
integer arithmetic. The results are the same as `interpret(graph, *inputs)`; an op that raises is
re-raised with its own type (as eager raises it) and a note naming the node, found from the line
number of the failing line, so the happy path pays nothing for it.
"""

import itertools
import keyword
import linecache
import math
import re

import sympy
import torch

from torchsmith.ir.errors import InterpretError
from torchsmith.ir.graph import ArgList, Graph, Node, Slice, Value
from torchsmith.ir.interpreter import _describe, node_results
from torchsmith.ir.registry import lookup_op
from torchsmith.ir.symbolic import FloorDiv, evaluate
from torchsmith.ir.types import SymIntType, TensorType

__all__ = ["compile_to_python"]

_COUNTER = itertools.count()

class _ArityError(Exception):
    """An op returned a different number of values than its node has outputs."""


def _single(result):
    """The one output of a torch-level node: its op may return it inside a list or tuple
    (`torch.gradient` of a 1-d tensor returns a one-element tuple), unpacked as `interpret` does."""
    if isinstance(result, (list, tuple)):
        return _unpack(result, 1)[0]
    return result


def _unpack(result, count: int):
    """The outputs of a multi-output node, checked (and nested results flattened) like `interpret`."""
    try:
        return node_results(result, count)
    except ValueError as e:
        raise _ArityError(str(e)) from None


def _symbol_mismatch(name: str, previous: int, actual: int, what: str):
    return InterpretError(f"symbol {name} is {previous} elsewhere but {actual} in {what}")


class _Writer:
    """Collects the lines, the globals and the line -> node map of one generated function."""

    def __init__(self, graph: Graph):
        self.graph = graph
        self.lines: list[str] = []
        self.globals: dict[str, object] = {
            "_single": _single,
            "_unpack": _unpack,
            "_symbol_mismatch": _symbol_mismatch,
            "_evaluate": evaluate,
        }
        self.bound_ids: dict[int, str] = {}
        self.var_of: dict[str, str] = {}
        self.symbols: dict[str, str] = {}  # symbol name -> local variable holding its value
        self.node_at_line: dict[int, Node] = {}

    def line(self, text: str, node: Node | None = None) -> None:
        self.lines.append(text)
        if node is not None:
            self.node_at_line[len(self.lines)] = node

    def bind(self, hint: str, obj) -> str:
        """A global name holding `obj` (one name per object)."""
        if id(obj) in self.bound_ids and self.globals[self.bound_ids[id(obj)]] is obj:
            return self.bound_ids[id(obj)]
        base = re.sub(r"\W", "_", hint).strip("_") or "const"
        if base[0].isdigit():
            base = "c_" + base
        name, n = base, 1
        while name in self.globals or keyword.iskeyword(name):
            n += 1
            name = f"{base}_{n}"
        self.globals[name] = obj
        self.bound_ids[id(obj)] = name
        return name

    def variable(self, value: Value) -> str:
        """The local variable of a value: `v_<name>` when the name allows it."""
        name = self.var_of.get(value.name)
        if name is None:
            clean = value.name if value.name.isidentifier() else f"{len(self.var_of)}"
            name = f"v_{clean}"
            while name in self.var_of.values():
                name += "_"
            self.var_of[value.name] = name
        return name

    # -- arguments -------------------------------------------------------------------------

    def arg(self, arg) -> str:
        """Python source for one stored argument, evaluated as `interpret` would thaw it."""
        if isinstance(arg, Value):
            return self.variable(arg)
        if isinstance(arg, ArgList):
            return "[" + ", ".join(self.arg(a) for a in arg) + "]"
        if isinstance(arg, tuple):
            items = [self.arg(a) for a in arg]
            return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"
        if isinstance(arg, Slice):
            return f"slice({self.arg(arg.start)}, {self.arg(arg.stop)}, {self.arg(arg.step)})"
        if arg is None or isinstance(arg, (bool, str)):
            return repr(arg)
        if arg is Ellipsis:
            return "..."
        if isinstance(arg, int):
            return repr(arg) if arg >= 0 else f"({arg})"
        if isinstance(arg, float) and math.isfinite(arg):
            return repr(arg) if math.copysign(1.0, arg) > 0 else f"({arg!r})"
        if isinstance(arg, sympy.Basic):
            return self.symbolic(arg)
        if isinstance(arg, float):
            return self.bind({math.inf: "inf", -math.inf: "neg_inf"}.get(arg, "nan"), arg)
        if isinstance(arg, torch.dtype):
            return self.bind(str(arg).replace("torch.", ""), arg)
        return self.bind(f"c_{type(arg).__name__}", arg)

    def symbolic(self, expr) -> str:
        """Integer arithmetic for a symbolic int over the symbols bound from the inputs; an
        expression this printer does not know, or one with an unbound symbol, falls back to
        `evaluate` (which raises a clear error for the unbound symbol, as in `interpret`)."""
        text = _python_expr(expr, self.symbols)
        if text is not None:
            return text
        known = {name: var for name, var in self.symbols.items()}
        bindings = "{" + ", ".join(f"{name!r}: {var}" for name, var in known.items()) + "}"
        return f"_evaluate({self.bind('expr', expr)}, {bindings})"


def _python_expr(expr, symbols: dict[str, str]) -> str | None:
    """Python source for `expr`, or None when it uses something other than + * ** // % max min
    and comparisons, or a symbol not in `symbols`."""
    if expr is sympy.true or expr is sympy.false:
        return repr(bool(expr))
    if isinstance(expr, sympy.Integer):
        return f"({int(expr)})"
    if isinstance(expr, sympy.Symbol):
        return symbols.get(expr.name)
    binary = {sympy.Add: " + ", sympy.Mul: " * "}
    relations = {sympy.Eq: "==", sympy.Ne: "!=", sympy.Lt: "<", sympy.Le: "<=", sympy.Gt: ">", sympy.Ge: ">="}
    parts = [_python_expr(a, symbols) for a in expr.args]
    if any(p is None for p in parts):
        return None
    if type(expr) in binary:
        return "(" + binary[type(expr)].join(parts) + ")"
    if isinstance(expr, sympy.Pow) and expr.exp.is_Integer and int(expr.exp) >= 0:
        return f"({parts[0]} ** {parts[1]})"
    if isinstance(expr, FloorDiv):
        return f"({parts[0]} // {parts[1]})"
    if isinstance(expr, sympy.Mod):
        return f"({parts[0]} % {parts[1]})"
    if isinstance(expr, (sympy.Max, sympy.Min)):
        return f"{'max' if isinstance(expr, sympy.Max) else 'min'}({', '.join(parts)})"
    if type(expr) in relations:
        return f"({parts[0]} {relations[type(expr)]} {parts[1]})"
    return None


def _returns_single_value(node: Node) -> bool:
    """Whether the op of a one-output node returns that value itself, never a sequence: decided from
    an ATen overload's schema; any other op (torch functions and methods) may return a sequence."""
    eager = lookup_op(node.op).eager
    if isinstance(eager, torch._ops.OpOverload):
        returns = eager._schema.returns
        return len(returns) == 1 and not isinstance(returns[0].type, torch.ListType)
    return False


def _bind_symbols(w: _Writer) -> None:
    """Read each size symbol from the first input dim that is that bare symbol, and check the
    others agree (as `interpret`'s bind_symbols does)."""
    for value in w.graph.inputs:
        t, var = value.type, w.variable(value)
        places = []
        if isinstance(t, TensorType):
            shape_of, strides_of = f"the shape of input %{value.name}", f"the strides of input %{value.name}"
            places += [(d, f"{var}.shape[{i}]", shape_of) for i, d in enumerate(t.shape)]
            places += [(d, f"{var}.stride({i})", strides_of) for i, d in enumerate(t.strides or ())]
        elif isinstance(t, SymIntType):
            places.append((t.expr, var, f"input %{value.name}"))
        for dim, source, what in places:
            if not isinstance(dim, sympy.Symbol):
                continue
            if dim.name not in w.symbols:
                w.symbols[dim.name] = f"sym_{dim.name}"
                w.line(f"    sym_{dim.name} = {source}")
            else:
                known = w.symbols[dim.name]
                w.line(f"    if {source} != {known}:")
                w.line(f"        raise _symbol_mismatch({dim.name!r}, {known}, {source}, {what!r})")


def _node_line(w: _Writer, node: Node) -> str:
    opdef = lookup_op(node.op)
    call_args = [w.arg(a) for a in node.args]
    odd_kwargs = []
    for name, value in node.kwargs:
        if name.isidentifier() and not keyword.iskeyword(name):
            call_args.append(f"{name}={w.arg(value)}")
        else:
            odd_kwargs.append(f"{name!r}: {w.arg(value)}")
    if odd_kwargs:
        call_args.append("**{" + ", ".join(odd_kwargs) + "}")
    call = f"{w.bind(node.op, opdef.eager)}({', '.join(call_args)})"
    outputs = [w.variable(v) for v in node.outputs]
    if not outputs:
        return call
    if len(outputs) == 1:
        if not _returns_single_value(node):
            call = f"_single({call})"
        return f"{outputs[0]} = {call}"
    return f"{', '.join(outputs)} = _unpack({call}, {len(outputs)})"


def compile_to_python(graph: Graph):
    """Generate, compile and return `fn(*inputs) -> list` running `graph` like `interpret` does.

    `fn.source` is the generated Python and `fn.graph` the graph. Op callables are looked up now,
    so an unknown op raises here, not at the first call. Calling with the wrong number of inputs
    raises TypeError (the generated function has one parameter per graph input).
    """
    w = _Writer(graph)
    name = re.sub(r"\W", "_", graph.name)
    if not name.isidentifier() or keyword.iskeyword(name):
        name = f"graph_{name}"
    params = ", ".join(w.variable(v) for v in graph.inputs)
    w.line(f"def {name}({params}):")
    _bind_symbols(w)
    w.line("    try:")
    for node in graph.nodes:
        w.line(f"        {_node_line(w, node)}", node)
    w.line("        pass")
    w.line("    except Exception as error:")
    w.line("        _fail(error)")
    w.line(f"    return [{', '.join(w.arg(v) for v in graph.outputs)}]")
    source = "\n".join(w.lines) + "\n"

    filename = f"<torchsmith.ir.pycodegen {name}#{next(_COUNTER)}>"
    node_at_line = w.node_at_line

    def fail(error: Exception):
        node = node_at_line.get(error.__traceback__.tb_lineno) if error.__traceback__ else None
        if node is None or isinstance(error, InterpretError):
            raise error
        if isinstance(error, _ArityError):
            raise InterpretError(f"while running {_describe(node)}: {error}") from None
        # The op's own exception goes on with its own type, as eager would raise it, so a user's
        # `except RuntimeError:` still works; the note names the node and the user's source line.
        error.add_note(f"while running {_describe(node)}")
        raise error

    w.globals["_fail"] = fail
    # Registered with linecache so tracebacks through the generated code show its lines.
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    namespace = dict(w.globals)
    exec(compile(source, filename, "exec"), namespace)
    fn = namespace[name]
    fn.source = source
    fn.graph = graph
    return fn
