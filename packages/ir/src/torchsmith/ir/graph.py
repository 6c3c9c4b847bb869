"""The graph: immutable `Value`, `Node` and `Graph` records in SSA form.

A `Graph` is inputs, nodes in topological order and outputs. Every value is defined once,
either as a graph input or as an output of exactly one node. Nodes refer to values through
their arguments, which may also be constants and (possibly nested) lists and tuples::

    %y: f32[s0, 256] cpu = aten.addmm.default(%b, %x, %t, beta=1)

Passes never mutate a graph; they build a new one (`Graph.replace`, `GraphBuilder`).
"""

import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass

import sympy
import torch

from torchsmith.ir.errors import GraphBuildError
from torchsmith.ir.types import Type


@dataclass(frozen=True, slots=True)
class Value:
    """An SSA value: a name unique in its graph, and a type."""

    name: str
    type: Type

    def __repr__(self) -> str:
        return f"%{self.name}"


class ArgList(tuple):
    """A Python list argument, stored as a tuple so nodes stay hashable (torch treats
    lists and tuples differently in places, e.g. indexing, so the distinction is kept)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "[" + ", ".join(repr(a) for a in self) + "]"


@dataclass(frozen=True, slots=True)
class Slice:
    """A Python `slice` argument (slices are not hashable before Python 3.12)."""

    start: object = None
    stop: object = None
    step: object = None


CONSTANT_TYPES = (
    type(None),
    bool,
    int,
    float,
    complex,
    str,
    torch.dtype,
    torch.device,
    torch.layout,
    torch.memory_format,
    type(Ellipsis),
    sympy.Expr,
)


def freeze_arg(arg):
    """Turn a user-given argument into its stored form (lists -> ArgList, slice -> Slice)."""
    if isinstance(arg, (Value, Slice, ArgList)):
        return arg
    if isinstance(arg, list):
        return ArgList(freeze_arg(a) for a in arg)
    if isinstance(arg, tuple):
        return tuple(freeze_arg(a) for a in arg)
    if isinstance(arg, slice):
        return Slice(freeze_arg(arg.start), freeze_arg(arg.stop), freeze_arg(arg.step))
    if isinstance(arg, CONSTANT_TYPES):
        return arg
    raise GraphBuildError(
        f"cannot use {type(arg).__name__} {arg!r} as an op argument; arguments are IR values, "
        "Python scalars, strings, dtypes, devices, slices, symbolic ints, or lists/tuples of those"
    )


def iter_values(arg) -> Iterator[Value]:
    """Every `Value` inside an argument, depth first."""
    if isinstance(arg, Value):
        yield arg
    elif isinstance(arg, tuple):  # tuple and ArgList
        for a in arg:
            yield from iter_values(a)
    elif isinstance(arg, Slice):
        yield from iter_values((arg.start, arg.stop, arg.step))


def map_arg(arg, fn):
    """Rebuild an argument with `fn` applied to every Value inside it."""
    if isinstance(arg, Value):
        return fn(arg)
    if isinstance(arg, ArgList):
        return ArgList(map_arg(a, fn) for a in arg)
    if isinstance(arg, tuple):
        return tuple(map_arg(a, fn) for a in arg)
    if isinstance(arg, Slice):
        return Slice(map_arg(arg.start, fn), map_arg(arg.stop, fn), map_arg(arg.step, fn))
    return arg


@dataclass(frozen=True, slots=True)
class Node:
    """One op application. `op` is a qualified name whose first part is the dialect
    (`torch.add`, `aten.mm.default`, `prims.add`); `kwargs` is a tuple of (name, arg) pairs
    so the node stays hashable; `source` is the user's `file:line` when known."""

    op: str
    args: tuple = ()
    kwargs: tuple[tuple[str, object], ...] = ()
    outputs: tuple[Value, ...] = ()
    source: str | None = None

    @property
    def dialect(self) -> str:
        return self.op.split(".", 1)[0]

    @property
    def kwargs_dict(self) -> dict[str, object]:
        return dict(self.kwargs)

    @property
    def inputs(self) -> tuple[Value, ...]:
        """The values this node reads, in argument order (kwargs after args)."""
        return tuple(iter_values(self.args)) + tuple(iter_values(tuple(v for _, v in self.kwargs)))

    @property
    def output(self) -> Value:
        """The single output of a one-output node."""
        if len(self.outputs) != 1:
            raise GraphBuildError(f"{self.op} has {len(self.outputs)} outputs, not one")
        return self.outputs[0]

    def replace(self, **changes) -> "Node":
        return dataclasses.replace(self, **changes)

    def __str__(self) -> str:
        from torchsmith.ir.text import format_node

        return format_node(self)


@dataclass(frozen=True, slots=True)
class Stamp:
    """A record that a pass produced this graph, and how long it took (STYLE: provenance)."""

    pass_name: str
    seconds: float


@dataclass(frozen=True, slots=True)
class Graph:
    """Inputs, nodes in topological order, outputs; `stamps` lists the passes that made it."""

    name: str
    inputs: tuple[Value, ...]
    nodes: tuple[Node, ...]
    outputs: tuple[Value, ...]
    stamps: tuple[Stamp, ...] = ()

    def replace(self, **changes) -> "Graph":
        return dataclasses.replace(self, **changes)

    @staticmethod
    def parse(text: str) -> "Graph":
        """Read a graph from its text form: `Graph.parse(str(g)) == g`."""
        from torchsmith.ir.parser import parse_graph

        return parse_graph(text)

    def stamped(self, pass_name: str, seconds: float) -> "Graph":
        """This graph with one more provenance stamp."""
        return dataclasses.replace(self, stamps=self.stamps + (Stamp(pass_name, seconds),))

    def values(self) -> Iterator[Value]:
        """Every value defined in the graph: inputs, then node outputs in order."""
        yield from self.inputs
        for node in self.nodes:
            yield from node.outputs

    def producers(self) -> dict[str, Node]:
        """Map from value name to the node that defines it (inputs are absent)."""
        return {v.name: node for node in self.nodes for v in node.outputs}

    def with_input_types(self, types: dict[str, Type]) -> "Graph":
        """This graph with the inputs named in `types` given those types, in every node reading them."""
        if not types:
            return self
        retyped = {v.name: Value(v.name, types[v.name]) for v in self.inputs if v.name in types}
        swap = lambda v: retyped.get(v.name, v)  # noqa: E731
        nodes = tuple(
            node.replace(args=map_arg(node.args, swap), kwargs=map_arg(node.kwargs, swap))
            for node in self.nodes
        )
        return self.replace(inputs=tuple(swap(v) for v in self.inputs), nodes=nodes,
                            outputs=tuple(map_arg(self.outputs, swap)))

    def users(self) -> dict[str, list[Node]]:
        """Map from value name to the nodes that read it, in graph order."""
        result: dict[str, list[Node]] = {v.name: [] for v in self.values()}
        for node in self.nodes:
            for v in dict.fromkeys(node.inputs):
                result.setdefault(v.name, []).append(node)
        return result

    def ops(self) -> list[str]:
        return [node.op for node in self.nodes]

    def __str__(self) -> str:
        from torchsmith.ir.text import format_graph

        return format_graph(self)
