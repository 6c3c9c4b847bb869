"""Functionalization: a traced ATen graph with in-place ops and views becomes a pure graph.

Each storage (a graph input, or a fresh op result) is tracked by its root value and holds a
current functional value. Reading a view replays its view chain on the root's current value
(cached until the root changes). An in-place op runs as its out-of-place twin, and its result is
written back into the root through the inverse of each view in the chain (`slice_scatter`,
`select_scatter`, a reshape, ...). Inputs whose root changed come out as extra outputs that the
runtime copies back after the call, exactly as eager would have mutated them.

    %add_: f32[4] = aten.add_.Tensor(%x, %y)      ->   %add: f32[4] = aten.add.Tensor(%x, %y)
    return (%add_)                                     return (%add, %add)   # out, new %x
"""

from typing import NamedTuple

import torch

from torchsmith.autograd_aot.aliasing import (
    Alias,
    bound_arguments,
    first_tensor_arg,
    functional_variant,
    is_metadata_mutation,
    is_view_op,
    mutated_args,
    positional_with_defaults,
    returns_aliasing,
    scatter_rule,
    schema_of,
)
from torchsmith.autograd_aot.errors import FunctionalizationError
from torchsmith.autograd_aot.rng_replay import is_random
from torchsmith.ir import Graph, Node, TensorType, Value, map_arg
from torchsmith.ir.builder import infer_output_types, name_hint
from torchsmith.ir.graph import freeze_arg
from torchsmith.ir.names import NameGenerator
from torchsmith.ir.passes import graph_pass
from torchsmith.ir.text import format_node


def _check_layout_free(node: Node, traced: Value, functional: Value) -> None:
    """`as_strided` addresses memory, not elements: it is only right on a value laid out as the
    traced tensor was, and a functional value (an out-of-place result) may be laid out otherwise."""
    if node.op.startswith("aten.as_strided.") and functional.type.strides != traced.type.strides:
        raise FunctionalizationError(
            f"{format_node(node)}: as_strided on a tensor whose memory layout changes once in-place ops "
            "are made functional; use view/reshape/slicing instead of as_strided"
        )


class _Functionalizer:
    def __init__(self, graph: Graph):
        self.graph = graph
        self.nodes: list[Node] = []
        self.names = NameGenerator(v.name for v in graph.values())
        self.aliases: dict[str, Alias] = {v.name: Alias(v.name) for v in graph.inputs}
        self.current: dict[str, Value] = {v.name: v for v in graph.inputs}
        self.version: dict[str, int] = {}
        self.view_cache: dict[str, tuple[int, Value]] = {}

    # -- emitting ---------------------------------------------------------------------------
    def emit(self, op: str, *args, source=None, **kwargs):
        """Append a new node; output types are inferred from the argument types."""
        args = tuple(freeze_arg(a) for a in args)
        kwargs = tuple((k, freeze_arg(v)) for k, v in kwargs.items())
        with torch.no_grad():  # like traced values: below autograd no intermediate "requires grad"
            types, multi = infer_output_types(op, args, dict(kwargs))
        outputs = tuple(Value(self.names.fresh(name_hint(op)), t) for t in types)
        self.nodes.append(Node(op, args, kwargs, outputs, source))
        return outputs if multi else outputs[0]

    # -- reading ----------------------------------------------------------------------------
    def read(self, value: Value) -> Value:
        """The functional value holding `value`'s contents at this point of the program."""
        if not isinstance(value.type, TensorType):
            return self.current.get(value.name, value)
        alias = self.aliases[value.name]
        if not alias.chain:
            return self.current[alias.root]
        version = self.version.get(alias.root, 0)
        cached = self.view_cache.get(value.name)
        if cached is not None and cached[0] == version:
            return cached[1]
        result = self.current[alias.root]
        for node, index in alias.chain:
            result = self.replay(node, index, result)
        self.view_cache[value.name] = (version, result)
        return result

    def map_args(self, node: Node):
        args = tuple(map_arg(a, self.read) for a in node.args)
        kwargs = tuple((k, map_arg(v, self.read)) for k, v in node.kwargs)
        return args, kwargs

    def replay(self, node: Node, index: int, base: Value) -> Value:
        """Apply view `node` to `base` instead of its original input."""
        source = first_tensor_arg(node)
        _check_layout_free(node, source, base)
        args = tuple(map_arg(a, lambda v: base if v == source else self.read(v)) for a in node.args)
        kwargs = tuple((k, map_arg(a, self.read)) for k, a in node.kwargs)
        outputs = tuple(Value(self.names.fresh(v.name), v.type) for v in node.outputs)
        self.nodes.append(Node(node.op, args, kwargs, outputs, node.source))
        return outputs[index]

    # -- writing ----------------------------------------------------------------------------
    def write(self, target: Value, new: Value, node: Node) -> None:
        """Make `new` the contents of `target` (a root or a view of one)."""
        if isinstance(target.type, TensorType) and new.type.dtype != target.type.dtype:
            # In-place ops keep the destination's dtype; the out-of-place twin may promote.
            new = self.emit("aten._to_copy.default", new, dtype=target.type.dtype, source=node.source)
        alias = self.aliases[target.name]
        if alias.chain:
            bases = [self.current[alias.root]]
            for view, index in alias.chain[:-1]:
                bases.append(self.replay(view, index, bases[-1]))
            for (view, index), base in zip(reversed(alias.chain), reversed(bases)):
                rule = scatter_rule(view.op, index)
                rest = tuple(map_arg(a, self.read) for a in view.args[1:])
                kwargs = {k: map_arg(a, self.read) for k, a in view.kwargs}
                emit = lambda op, *a, **k: self.emit(op, *a, source=node.source, **k)  # noqa: B023
                new = rule(base, new, rest, kwargs, emit)
        self.current[alias.root] = new
        self.version[alias.root] = self.version.get(alias.root, 0) + 1

    # -- nodes ------------------------------------------------------------------------------
    def visit(self, node: Node) -> None:
        if is_metadata_mutation(node.op):
            raise FunctionalizationError(
                f"{format_node(node)}: in-place changes of shape or strides are not supported; "
                "use the out-of-place op (t(), transpose(), squeeze(), ...)"
            )
        if is_view_op(node.op):
            source = self.aliases[first_tensor_arg(node).name]
            _check_layout_free(node, first_tensor_arg(node), self.read(first_tensor_arg(node)))
            args, kwargs = self.map_args(node)
            self.nodes.append(node.replace(args=args, kwargs=kwargs))
            version = self.version.get(source.root, 0)
            for i, out in enumerate(node.outputs):
                self.aliases[out.name] = Alias(source.root, source.chain + ((node, i),))
                self.view_cache[out.name] = (version, out)
            return
        mutated = mutated_args(node)
        bound = bound_arguments(node) if mutated else []
        targets = [bound[i] for i in mutated if isinstance(bound[i], Value)]
        if not targets:
            args, kwargs = self.map_args(node)
            self.nodes.append(node.replace(args=args, kwargs=kwargs))
            for out in node.outputs:
                self.aliases[out.name] = Alias(out.name)
                self.current[out.name] = out
            return
        self.visit_mutation(node, targets)

    def visit_mutation(self, node: Node, targets: list[Value]) -> None:
        twin = functional_variant(node.op)
        args, kwargs = self.map_args(node.replace(args=positional_with_defaults(node)))
        results = self.emit(twin, *args, source=node.source, **dict(kwargs))
        results = results if isinstance(results, tuple) else (results,)
        aliased = returns_aliasing(node)
        fresh_outputs = [i for i in range(len(node.outputs)) if i not in aliased]
        if not node.op.split(".")[1].endswith("_"):  # the fresh outputs, then the mutated arguments
            results = self.keep_traced_types(results, [node.outputs[i] for i in fresh_outputs] + targets)
        if node.op.split(".")[1].endswith("_"):
            new_values = list(results)  # `foo_` -> `foo`: the twin returns the new self
        else:
            new_values = list(results[len(fresh_outputs):])
        if len(new_values) != len(targets):
            raise FunctionalizationError(
                f"{format_node(node)}: its functional twin {twin} returned {len(results)} values, "
                f"expected one per mutated argument ({len(targets)})"
            )
        for i, out in zip(fresh_outputs, results):
            original = node.outputs[i]
            self.aliases[original.name] = Alias(original.name)
            self.current[original.name] = out
        for target, new in zip(targets, new_values):
            self.write(target, new, node)
        bound = bound_arguments(node)
        for i, position in aliased.items():
            self.aliases[node.outputs[i].name] = self.aliases[bound[position].name]


    def keep_traced_types(self, results: tuple, traced: list[Value]) -> tuple:
        """The twin's results typed as the traced node's own outputs and mutated arguments where
        their sizes or dtypes differ: the trace took those from the device where the meta kernel
        differs (device_shapes.py: batch norm's statistics), the twin's come from the meta kernel."""
        fixed = [
            Value(r.name, t.type) if _tensor_types(r, t) and _differ(r.type, t.type) else r
            for r, t in zip(results, traced)
        ]
        if all(a is b for a, b in zip(fixed, results)):
            return results
        fixed += results[len(fixed):]
        self.nodes[-1] = self.nodes[-1].replace(outputs=tuple(fixed))
        return tuple(fixed)


def _tensor_types(*values: Value) -> bool:
    return all(isinstance(v.type, TensorType) for v in values)


def _differ(a: TensorType, b: TensorType) -> bool:
    return a.shape != b.shape or a.dtype != b.dtype


# Ops that return their input unchanged as far as a graph without autograd is concerned.
_IDENTITY_VIEWS = frozenset({"aten.detach.default", "aten.alias.default", "aten.lift_fresh.default"})


def drop_identity_views(graph: Graph) -> Graph:
    """Replace `detach`/`alias` results by their input: with no autograd and no mutation left in
    the graph they only add names (and would make the partitioner count one tensor twice)."""
    renamed: dict[str, Value] = {}
    rename = lambda v: renamed.get(v.name, v)
    nodes = []
    for node in graph.nodes:
        if node.op in _IDENTITY_VIEWS:
            renamed[node.outputs[0].name] = rename(first_tensor_arg(node))
            continue
        args = tuple(map_arg(a, rename) for a in node.args)
        kwargs = tuple((k, map_arg(v, rename)) for k, v in node.kwargs)
        nodes.append(node.replace(args=args, kwargs=kwargs))
    return graph.replace(nodes=tuple(nodes), outputs=tuple(rename(v) for v in graph.outputs))


def dead_code_elimination(graph: Graph) -> Graph:
    """Drop nodes none of whose outputs is used. Every node of a functional graph is pure but for
    random ops: an unused draw still moves the generator, so the numbers drawn after it are eager's."""
    live = {v.name for v in graph.outputs}
    kept = []
    for node in reversed(graph.nodes):
        if any(v.name in live for v in node.outputs) or is_random(node.op):
            kept.append(node)
            live.update(v.name for v in node.inputs)
    return graph.replace(nodes=tuple(reversed(kept)))


# Non-aten nodes the trace records: small tensors made from Python data (trace._Recorder.constant).
CONSTANT_OPS = frozenset({"torch.tensor"})


class Functionalized(NamedTuple):
    """What `functionalize` returns: the functional graph and the indices of the inputs it mutates."""

    graph: Graph
    mutated: tuple[int, ...]

    def stamped(self, pass_name: str, seconds: float) -> "Functionalized":
        """The same with its graph stamped (the pass runner's timing record)."""
        return self._replace(graph=self.graph.stamped(pass_name, seconds))


@graph_pass("functionalize", stage="autograd_aot", produces="functional ATen graph, mutations as outputs")
def functionalize(graph: Graph, num_forward_outputs: int) -> Functionalized:
    """Remove in-place ops and views' side effects from a traced ATen graph.

    Returns the functional graph and the indices of the inputs it mutates. Its outputs are the
    first `num_forward_outputs` outputs, then the new value of each mutated input, then the rest.
    Raises `FunctionalizationError` for an input that requires grad and is mutated. Stamped
    `functionalize`.
    """
    state = _Functionalizer(graph)
    for node in graph.nodes:
        if schema_of(node.op) is None and node.op not in CONSTANT_OPS:
            raise FunctionalizationError(f"{format_node(node)}: only aten ops can be functionalized")
        state.visit(node)
    outputs = [state.read(v) for v in graph.outputs]
    mutated = tuple(i for i, v in enumerate(graph.inputs) if state.version.get(v.name, 0) > 0)
    for i in mutated:
        value = graph.inputs[i]
        if value.type.requires_grad:
            raise FunctionalizationError(
                f"input %{value.name} requires grad and is mutated in place; eager autograd would "
                "rewrite its history. Mutate a detached copy or run the mutation under torch.no_grad()"
            )
    new_inputs = [state.current[graph.inputs[i].name] for i in mutated]
    ordered = outputs[:num_forward_outputs] + new_inputs + outputs[num_forward_outputs:]
    result = Graph(graph.name, graph.inputs, tuple(state.nodes), tuple(ordered), graph.stamps)
    return Functionalized(dead_code_elimination(drop_identity_views(result)), mutated)


def is_functional(graph: Graph) -> bool:
    """Whether no node of `graph` writes to one of its arguments."""
    return not any(mutated_args(node) for node in graph.nodes)

