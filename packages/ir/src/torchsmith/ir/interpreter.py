"""The reference interpreter: runs any graph on eager PyTorch, op by op.

It is the ground truth every stage is tested against, and the `"eager"` backend.
"""

import sympy
import torch

from torchsmith.ir.errors import InterpretError, IRError
from torchsmith.ir.graph import ArgList, Graph, Node, Slice, Value
from torchsmith.ir.registry import lookup_op
from torchsmith.ir.symbolic import evaluate, format_dim
from torchsmith.ir.types import ScalarType, SymIntType, TensorType, Type, format_type


def thaw(arg, bindings: dict[str, int] | None = None):
    """Turn a stored argument back into what torch expects (ArgList -> list, Slice -> slice,
    symbolic ints -> ints under `bindings`)."""
    if isinstance(arg, ArgList):
        return [thaw(a, bindings) for a in arg]
    if isinstance(arg, tuple):
        return tuple(thaw(a, bindings) for a in arg)
    if isinstance(arg, Slice):
        return slice(thaw(arg.start, bindings), thaw(arg.stop, bindings), thaw(arg.step, bindings))
    if isinstance(arg, sympy.Basic):
        return evaluate(arg, bindings or {})
    return arg


def bind_symbols(graph: Graph, inputs) -> dict[str, int]:
    """Read the value of every size symbol from the inputs (a bare symbol in a shape, stride or
    sym type binds it); inconsistent values are an error."""
    bindings: dict[str, int] = {}

    def bind(dim, actual: int, what: str):
        if isinstance(dim, sympy.Symbol):
            previous = bindings.setdefault(dim.name, actual)
            if previous != actual:
                raise InterpretError(f"symbol {dim.name} is {previous} elsewhere but {actual} in {what}")

    for value, actual in zip(graph.inputs, inputs, strict=True):
        t = value.type
        if isinstance(t, TensorType) and isinstance(actual, torch.Tensor):
            for dim, size in zip(t.shape, actual.shape, strict=False):
                bind(dim, size, f"the shape of input %{value.name}")
            for dim, stride in zip(t.strides, actual.stride(), strict=False):
                bind(dim, stride, f"the strides of input %{value.name}")
        elif isinstance(t, SymIntType) and isinstance(actual, int):
            bind(t.expr, actual, f"input %{value.name}")
    return bindings


def check_runtime_type(value: Value, actual, bindings: dict[str, int], where: str) -> None:
    """Raise if a runtime value does not match its declared IR type."""
    t: Type = value.type
    problem = None
    if isinstance(t, TensorType):
        if not isinstance(actual, torch.Tensor):
            problem = f"expected a tensor, got {type(actual).__name__}"
        else:
            shape = tuple(evaluate(d, bindings) for d in t.shape)
            if (
                tuple(actual.shape) != shape
                or actual.dtype != t.dtype
                or actual.device != torch.device(t.device)
            ):
                got = TensorType.of(actual)
                problem = f"expected {format_type(t)} (shape {list(shape)}), got {format_type(got)}"
    elif isinstance(t, SymIntType):
        if not isinstance(actual, int) or isinstance(actual, bool):
            problem = f"expected an int, got {type(actual).__name__}"
        elif not any(s not in bindings for s in t.free_symbols) and evaluate(t.expr, bindings) != actual:
            problem = f"expected {format_dim(t.expr)} = {evaluate(t.expr, bindings)}, got {actual}"
    elif isinstance(t, ScalarType) and type(actual) is not t.python_type:
        problem = f"expected {t.kind}, got {type(actual).__name__}"
    if problem:
        raise InterpretError(f"{where}: %{value.name}: {problem}")


def _describe(node: Node) -> str:
    from torchsmith.ir.text import format_node

    try:
        text = format_node(node)
    except IRError:
        text = node.op
    return text + (f"  (from {node.source})" if node.source else "")


def run_node(node: Node, env: dict[str, object], bindings: dict[str, int]):
    """Run one node given the runtime values of its inputs; returns the raw result."""
    fetch = env.__getitem__

    def resolve(arg):
        if isinstance(arg, Value):
            return fetch(arg.name)
        if isinstance(arg, tuple):
            items = [resolve(a) for a in arg]
            return items if isinstance(arg, ArgList) else tuple(items)
        if isinstance(arg, Slice):
            return slice(resolve(arg.start), resolve(arg.stop), resolve(arg.step))
        return thaw(arg, bindings)

    eager = lookup_op(node.op).eager
    args = [resolve(a) for a in node.args]
    kwargs = {k: resolve(v) for k, v in node.kwargs}
    return eager(*args, **kwargs)


def node_results(result, count: int) -> list:
    """The values of a node's `count` outputs in its op's raw result: the result itself for one
    output, else the leaves of a list or tuple. Capture flattens what a torch function returns, so a
    one-element tuple (torch.gradient of a 1-d tensor) is one output and a nested result
    (histogramdd's `(hist, [edges, ...])`) is its leaves in order. Raises ValueError on a count mismatch."""
    if not isinstance(result, (list, tuple)):
        if count != 1:
            raise ValueError(f"it returned one value for {count} outputs")
        return [result]
    if len(result) == count and not any(isinstance(r, (list, tuple)) for r in result):
        return list(result)
    leaves: list = []
    _collect_leaves(result, leaves)
    if len(leaves) != count:
        raise ValueError(f"it returned {len(leaves)} values for {count} outputs")
    return leaves


def _collect_leaves(result, leaves: list) -> None:
    for r in result:
        if isinstance(r, (list, tuple)):
            _collect_leaves(r, leaves)
        else:
            leaves.append(r)


def interpret(graph: Graph, *inputs, check_types: bool = False) -> list:
    """Run `graph` on concrete inputs and return its outputs as a list.

    With `check_types=True`, every produced value is checked against its declared type, which
    catches a stage that wrote a wrong shape or dtype into the IR.
    """
    if len(inputs) != len(graph.inputs):
        raise InterpretError(f"graph {graph.name} takes {len(graph.inputs)} inputs, got {len(inputs)}")
    bindings = bind_symbols(graph, inputs)
    env: dict[str, object] = {v.name: x for v, x in zip(graph.inputs, inputs, strict=True)}
    if check_types:
        for v, x in zip(graph.inputs, inputs, strict=True):
            check_runtime_type(v, x, bindings, f"input of graph {graph.name}")
    for node in graph.nodes:
        try:
            result = run_node(node, env, bindings)
        except InterpretError:
            raise
        except Exception as e:
            raise InterpretError(f"while running {_describe(node)}: {type(e).__name__}: {e}") from e
        outputs = node.outputs
        if outputs:
            try:
                values = node_results(result, len(outputs))
            except ValueError as e:
                raise InterpretError(f"while running {_describe(node)}: {e}") from None
            for v, r in zip(outputs, values, strict=True):
                env[v.name] = r
        if check_types:
            for v in outputs:
                check_runtime_type(v, env[v.name], bindings, f"after {_describe(node)}")
    return [env[v.name] for v in graph.outputs]
