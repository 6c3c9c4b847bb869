"""Conversion between torchsmith.ir graphs and `torch.fx.GraphModule`, so fx tools and backends plug in.

    >>> gm = to_fx(graph)            # a runnable GraphModule; gm(*inputs) returns a tuple
    >>> from_fx(gm) == graph         # to_fx keeps our names, types and op names in node.meta
    True
    >>> g = from_fx(torch.fx.symbolic_trace(fn), example_inputs=(x,))

to_fx: graph inputs become placeholders (named after them), `aten.*` ops call their OpOverload,
`torch.Tensor.<m>` becomes `call_method`, other `torch.*`, `operator.*`, `math.*` and registered ops
call their eager function. A node with several outputs is one call followed by `operator.getitem`s.
A symbolic int used as an argument (`aten.view.default(%x, [s0, 64])`) is computed in the fx graph from
the inputs (`aten.sym_size.int(x, 0)`, then `operator.mul`, ...); a symbol that no input carries
cannot be, and to_fx refuses it. Every fx node gets `meta["torchsmith_type"]` (our Type; a tuple
of Types on a multi-output call), `meta["torchsmith_name"]`, `meta["torchsmith_op"]`, and
`meta["tensor_meta"]` (fx's TensorMetadata) when the shape is concrete.

from_fx: types come, in this order, from `meta["torchsmith_type"]`, `meta["val"]`, a run of the
GraphModule on `example_inputs`, our op's inference rule (meta tensors), or `meta["tensor_meta"]`
(which has no device: the first typed input's device is assumed). The output structure is not
kept: nested tuples/lists are flattened into the graph's outputs, in order, as `interpret` returns
them; a dict or a constant output is refused. Parameters and buffers (`get_attr`) become extra graph
inputs after the placeholders when `lift_attributes=True`, in the order `lifted_attributes(gm)`
gives them. `call_module` is refused: trace with a tracer that inlines modules (see the error).
"""

import functools
import keyword
import math
import operator

import sympy
import torch
import torch.fx
from torch.fx.passes.shape_prop import TensorMetadata

from torchsmith.ir.errors import FxConversionError, IRError
from torchsmith.ir.graph import ArgList, Graph, Node, Slice, Value
from torchsmith.ir.registry import lookup_op
from torchsmith.ir.symbolic import (
    FloorDiv,
    floordiv,
    format_dim,
    mod,
    normalize_dim,
    sym_max,
    sym_min,
    symbol,
)
from torchsmith.ir.text import format_node
from torchsmith.ir.types import SymIntType, TensorType

META_TYPE = "torchsmith_type"
META_NAME = "torchsmith_name"
META_OP = "torchsmith_op"
META_SOURCE = "torchsmith_source"
META_SYM_EXPR = "torchsmith_sym_expr"  # marks fx nodes that to_fx made to compute a symbolic argument
META_CONSTANT = "torchsmith_constant"  # marks fx nodes that to_fx made to build a constant argument
META_STAMPS = "torchsmith_stamps"  # in GraphModule.meta


def to_fx(graph: Graph) -> torch.fx.GraphModule:
    """The graph as a `torch.fx.GraphModule` whose forward takes the graph inputs and returns a
    tuple of its outputs. Raises FxConversionError for what plain fx cannot express."""
    fx_graph = torch.fx.Graph()
    env: dict[str, torch.fx.Node] = {}
    targets: set[str] = set()
    for value in graph.inputs:
        target = _placeholder_target(value.name, targets)
        fx_node = fx_graph.placeholder(target)
        # fx renames a node that would shadow a builtin or a global of its code (`torch`, `inf`);
        # the forward() parameter must then carry that name too, or it would do the shadowing.
        fx_node.target = fx_node.name
        _annotate(fx_node, value)
        env[value.name] = fx_node
    symbols = _SymbolicArgs(fx_graph, graph.inputs, env)
    for node in graph.nodes:
        try:
            _emit_node(fx_graph, node, env, symbols)
        except FxConversionError as e:
            raise FxConversionError(f"to_fx: {_describe(node)}: {e}") from None
        except IRError as e:
            raise FxConversionError(f"to_fx: {_describe(node)}: {type(e).__name__}: {e}") from e
    fx_graph.output(tuple(env[v.name] for v in graph.outputs))
    gm = torch.fx.GraphModule(torch.nn.Module(), fx_graph, class_name=graph.name)
    gm.meta[META_STAMPS] = graph.stamps
    return gm


def _describe(node: Node) -> str:
    try:
        text = format_node(node)
    except IRError:
        text = node.op
    return text + (f"  (from {node.source})" if node.source else "")


def _placeholder_target(name: str, taken: set[str]) -> str:
    """The forward() parameter name for an input: keywords and `self` would not compile."""
    target = name
    while keyword.iskeyword(target) or target == "self" or target in taken:
        target += "_"
    taken.add(target)
    return target


def _annotate(fx_node: torch.fx.Node, value: Value) -> None:
    fx_node.meta[META_NAME] = value.name
    fx_node.meta[META_TYPE] = value.type
    t = value.type
    if isinstance(t, TensorType) and all(type(d) is int for d in t.shape + t.strides):
        fx_node.meta["tensor_meta"] = TensorMetadata(
            torch.Size(t.shape), t.dtype, t.requires_grad, t.strides, None, False, {}
        )


def _fx_target(op: str) -> tuple[str, object]:
    """(fx opcode, target) for one of our op names."""
    if op.startswith("torch.Tensor."):
        return "call_method", op[len("torch.Tensor."):]
    return "call_function", lookup_op(op).eager


def _returns_sequence(op: str) -> bool:
    """Whether a one-output node's op still returns a list/tuple (known from aten schemas only)."""
    if not op.startswith("aten."):
        return False
    schema = lookup_op(op).schema
    return schema is not None and schema.num_outputs != 1


def _emit_node(fx_graph: torch.fx.Graph, node: Node, env: dict, symbols: "_SymbolicArgs") -> None:
    kind, target = _fx_target(node.op)
    args = tuple(_to_fx_arg(a, env, symbols) for a in node.args)
    kwargs = {k: _to_fx_arg(v, env, symbols) for k, v in node.kwargs}
    multi = len(node.outputs) != 1 or _returns_sequence(node.op)
    name = None if multi else node.outputs[0].name
    fx_node = fx_graph.create_node(kind, target, args, kwargs, name=name)
    fx_node.meta[META_OP] = node.op
    if node.source:
        fx_node.meta[META_SOURCE] = node.source
    if not multi:
        _annotate(fx_node, node.outputs[0])
        env[node.outputs[0].name] = fx_node
        return
    fx_node.meta[META_TYPE] = tuple(v.type for v in node.outputs)
    for index, value in enumerate(node.outputs):
        item = fx_graph.create_node("call_function", operator.getitem, (fx_node, index), name=value.name)
        _annotate(item, value)
        env[value.name] = item


def _to_fx_arg(arg, env: dict, symbols: "_SymbolicArgs"):
    if isinstance(arg, Value):
        return env[arg.name]
    if isinstance(arg, ArgList):
        return [_to_fx_arg(a, env, symbols) for a in arg]
    if isinstance(arg, tuple):
        return tuple(_to_fx_arg(a, env, symbols) for a in arg)
    if isinstance(arg, Slice):
        return slice(*(_to_fx_arg(a, env, symbols) for a in (arg.start, arg.stop, arg.step)))
    if isinstance(arg, sympy.Basic):
        return symbols.emit(arg)
    if isinstance(arg, complex) and not (math.isfinite(arg.real) and math.isfinite(arg.imag)):
        return symbols.complex_constant(arg)  # fx prints it as `(1+infj)`, which is not Python
    return arg


class _SymbolicArgs:
    """Emits fx nodes that compute a symbolic int from the graph inputs, each once."""

    _BINARY = {
        sympy.Add: operator.add, sympy.Mul: operator.mul, sympy.Max: torch.sym_max, sympy.Min: torch.sym_min,
        FloorDiv: operator.floordiv, sympy.Mod: operator.mod,
    }

    def __init__(self, fx_graph: torch.fx.Graph, inputs: tuple[Value, ...], env: dict):
        self.fx_graph = fx_graph
        self.env = env
        self.cache: dict[sympy.Basic, object] = {}
        # Where each symbol can be read: tensor sizes first, then strides, then sym inputs.
        self.sources: dict[str, tuple] = {}
        for value in inputs:
            if isinstance(value.type, TensorType):
                for d, dim in enumerate(value.type.shape):
                    if isinstance(dim, sympy.Symbol):
                        self.sources.setdefault(dim.name, (torch.ops.aten.sym_size.int, value.name, d))
        for value in inputs:
            if isinstance(value.type, TensorType):
                for d, dim in enumerate(value.type.strides):
                    if isinstance(dim, sympy.Symbol):
                        self.sources.setdefault(dim.name, (torch.ops.aten.sym_stride.int, value.name, d))
            elif isinstance(value.type, SymIntType) and isinstance(value.type.expr, sympy.Symbol):
                self.sources.setdefault(value.type.expr.name, (operator.index, value.name, None))

    def emit(self, expr):
        """An fx argument (node or int) whose run-time value is `expr`."""
        if not isinstance(expr, sympy.Expr):
            raise FxConversionError(f"argument {expr} is a symbolic relation, which fx cannot compute")
        if expr.is_Integer:
            return int(expr)
        if expr in self.cache:
            return self.cache[expr]
        if isinstance(expr, sympy.Symbol):
            if expr.name not in self.sources:
                raise FxConversionError(
                    f"symbol {expr.name} is not a size, stride or value of any graph input, so a torch.fx "
                    "graph cannot compute it; make it a graph input (a sym int) or specialize it to a number"
                )
            target, input_name, dim = self.sources[expr.name]
            args = (self.env[input_name],) if dim is None else (self.env[input_name], dim)
        elif type(expr) in self._BINARY:
            function = self._BINARY[type(expr)]
            operands = [self.emit(a) for a in expr.args]
            result = operands[0]
            for k in range(1, len(operands)):
                # Partial results are marked too, so from_fx folds the whole chain back into `expr`.
                partial = expr if k == len(operands) - 1 else type(expr)(*expr.args[: k + 1])
                result = self._node(function, (result, operands[k]), partial)
            return result
        elif isinstance(expr, sympy.Pow) and expr.exp.is_Integer and int(expr.exp) > 0:
            target, args = operator.pow, (self.emit(expr.base), int(expr.exp))
        else:
            raise FxConversionError(f"cannot compute symbolic argument {format_dim(expr)} in an fx graph")
        return self._node(target, args, expr)

    def complex_constant(self, value: complex):
        """An fx node that makes a complex constant with an inf or nan part."""
        if value not in self.cache:
            fx_node = self.fx_graph.create_node("call_function", complex, (value.real, value.imag))
            fx_node.meta[META_CONSTANT] = value
            self.cache[value] = fx_node
        return self.cache[value]

    def _node(self, target, args, expr):
        fx_node = self.fx_graph.create_node("call_function", target, args)
        fx_node.meta[META_SYM_EXPR] = expr
        fx_node.meta[META_TYPE] = SymIntType(expr)
        self.cache[expr] = fx_node
        return fx_node


def from_fx(gm: torch.fx.GraphModule, example_inputs=None, *, lift_attributes: bool = False,
            name: str | None = None) -> Graph:
    """Our graph for an fx GraphModule (see the module docstring for where types come from).

    `example_inputs`, when given, are the forward arguments; the module is run on them node by node
    to learn each node's type. Raises FxConversionError naming the fx node for what has no IR form.
    """
    from torchsmith.ir.fx_import import FxImporter

    return FxImporter(gm, example_inputs, lift_attributes).convert(name)


def lifted_attributes(gm: torch.fx.GraphModule) -> list[tuple[str, torch.Tensor]]:
    """(qualified name, tensor) of each `get_attr` tensor, in the order `from_fx(...,
    lift_attributes=True)` appends them as graph inputs: pass them after the placeholders' values."""
    from torchsmith.ir.fx_import import fetch_attribute

    seen: dict[str, torch.Tensor] = {}
    for fx_node in gm.graph.nodes:
        if fx_node.op == "get_attr" and fx_node.target not in seen:
            seen[fx_node.target] = fetch_attribute(gm, fx_node)
    return list(seen.items())


def fx_dim(d):
    """A dim from fx metadata: an int, or a torch.SymInt whose sympy expression is rebuilt with ours."""
    if isinstance(d, int):
        return d
    if isinstance(d, torch.SymInt):
        try:
            return normalize_dim(_rebuild(d.node.expr))
        except (IRError, AttributeError, TypeError) as e:
            raise FxConversionError(f"cannot read symbolic size {d} from fx metadata: {e}") from None
    raise FxConversionError(f"fx metadata holds {d!r} where a size was expected")


# torch's own sympy classes, by name (torch.utils._sympy is not a public API to import from).
_TORCH_SYMPY_FUNCTIONS = {
    "FloorDiv": floordiv, "Mod": mod, "PythonMod": mod, "Max": sym_max, "Min": sym_min,
}


def _rebuild(expr):
    """torch's symbolic size expression as one of ours (same symbol names)."""
    if expr.is_Integer:
        return int(expr)
    if isinstance(expr, sympy.Symbol):
        return symbol(expr.name)
    args = [_rebuild(a) for a in expr.args]
    if isinstance(expr, sympy.Add):
        return sum(args[1:], args[0])
    if isinstance(expr, sympy.Mul):
        return functools.reduce(operator.mul, args)
    if isinstance(expr, sympy.Pow) and isinstance(args[1], int) and args[1] > 0:
        return args[0] ** args[1]
    function = _TORCH_SYMPY_FUNCTIONS.get(type(expr).__name__)
    if function is None:
        raise FxConversionError(f"{type(expr).__name__} has no torchsmith.ir form")
    return function(*args)
