"""Graph outputs that are sizes, not tensors: a forward graph hands the backward a size symbol it
cannot read from its own inputs' shapes (`%s0_size = aten.sym_size.int(%x, 2)`, typed `sym(s0)`), or
returns a symbolic int the program computed (`sym(s0 // 2)`).

Kernels compute tensors only, so such outputs never reach the code generators: `split_size_outputs`
takes them out of the graph, and `SizeOutputs.wrap` puts them back into the compiled graph's list of
outputs at run time, each evaluated from its type's expression over the size symbols the call's
inputs bind (a non-tensor input returned as it is comes back as it was given). The values are Python
ints, as eager and aot_eager return them.

    tensors_only, sizes = split_size_outputs(graph)
    compiled = compile_tensors(tensors_only)
    compiled = sizes.wrap(compiled) if sizes is not None else compiled
"""

from dataclasses import dataclass

import sympy

from torchsmith.ir import Graph, Value
from torchsmith.ir.interpreter import bind_symbols
from torchsmith.ir.symbolic import evaluate
from torchsmith.ir.types import SymIntType, TensorType


@dataclass(frozen=True, slots=True)
class SizeOutputs:
    """Where the size outputs stand among the graph's outputs and how each is computed per call.

    `outputs[p]` for each output position p: None for a tensor output (the compiled graph's next
    one), ("input", k) for the graph's k-th input returned as it is, ("size", expr) for a symbolic
    int. `reads` maps each symbol the expressions use to the (input position, dim) of an input
    tensor whose size it is, or (input position, None) for a size input; None when some symbol is
    bound otherwise (by strides), and then every call binds all of them (`bind_symbols`)."""

    graph: Graph
    outputs: tuple[tuple | None, ...]
    reads: tuple[tuple[str, int, int | None], ...] | None

    def values(self, inputs, tensors: list) -> list:
        """The full list of outputs: `tensors` (the compiled graph's) with the sizes in their places."""
        if self.reads is None:
            bindings = bind_symbols(self.graph, inputs)
        else:
            bindings = {
                name: (inputs[k] if dim is None else inputs[k].shape[dim]) for name, k, dim in self.reads
            }
        result, rest = [], iter(tensors)
        for how in self.outputs:
            if how is None:
                result.append(next(rest))
            elif how[0] == "input":
                result.append(inputs[how[1]])
            else:
                result.append(int(evaluate(how[1], bindings)))
        return result

    def wrap(self, compiled):
        """`compiled` (a callable returning the tensor outputs) as one returning every output."""
        return WithSizeOutputs(compiled, self)


class WithSizeOutputs:
    """A compiled graph whose calls also return its size outputs; other attributes (`program`,
    `source`, `timings`, ...) are the compiled tensor graph's own."""

    def __init__(self, compiled, sizes: SizeOutputs):
        self.compiled, self.sizes = compiled, sizes

    def __getattr__(self, name: str):
        if name == "compiled":  # not set yet (copying): no recursion
            raise AttributeError(name)
        return getattr(self.compiled, name)

    def __call__(self, *inputs) -> list:
        return self.sizes.values(inputs, self.compiled(*inputs))

    def lend_outputs(self, positions) -> None:
        """The tensor graph's `lend_outputs` (CUDA graphs), with the graph's output positions
        counted among its tensor outputs."""
        lend = getattr(self.compiled, "lend_outputs", None)
        tensors = [p for p, how in enumerate(self.sizes.outputs) if how is None]
        if lend is not None:
            lend([tensors.index(p) for p in positions if p in tensors])


def _symbol_reads(graph: Graph, names: set[str]) -> tuple | None:
    """For each symbol in `names`, an input whose size (or value) it is, or None if one has none."""
    found: dict[str, tuple[int, int | None]] = {}
    for k, value in enumerate(graph.inputs):
        t = value.type
        if isinstance(t, TensorType):
            for dim, size in enumerate(t.shape):
                if isinstance(size, sympy.Symbol):
                    found.setdefault(size.name, (k, dim))
        elif isinstance(t, SymIntType) and isinstance(t.expr, sympy.Symbol):
            found.setdefault(t.expr.name, (k, None))
    if not names <= found.keys():
        return None
    return tuple((name, *found[name]) for name in sorted(names))


def _bindable(graph: Graph) -> set[str]:
    """The symbols `bind_symbols` can read from the inputs (bare in a shape, stride or size input)."""
    names = set()
    for value in graph.inputs:
        t = value.type
        dims = (*t.shape, *t.strides) if isinstance(t, TensorType) else (
            (t.expr,) if isinstance(t, SymIntType) else ())
        names.update(d.name for d in dims if isinstance(d, sympy.Symbol))
    return names


def split_size_outputs(graph: Graph) -> tuple[Graph, SizeOutputs | None]:
    """`graph` returning only its tensor outputs, and how to put the others back (None when every
    output is a tensor, or when an output is neither a size the inputs determine nor an input: the
    graph is then returned whole, for the lowering to refuse with its own message)."""
    inputs = {v.name: k for k, v in enumerate(graph.inputs)}
    outputs, symbols = [], set()
    for value in graph.outputs:
        if isinstance(value, Value) and isinstance(value.type, TensorType):
            outputs.append(None)
        elif isinstance(value, Value) and value.name in inputs:
            outputs.append(("input", inputs[value.name]))
        elif isinstance(value, Value) and isinstance(value.type, SymIntType):
            expr = sympy.sympify(value.type.expr)
            outputs.append(("size", expr))
            symbols |= {s.name for s in expr.free_symbols}
        else:
            return graph, None
    if all(how is None for how in outputs) or not symbols <= _bindable(graph):
        return graph, None
    tensors = tuple(v for v, how in zip(graph.outputs, outputs) if how is None)
    sizes = SizeOutputs(graph, tuple(outputs), _symbol_reads(graph, symbols))
    return graph.replace(outputs=tensors), sizes

