"""`common_subexpressions(graph)`: a pure value computed twice is computed once.

Decompositions run per node, so a value a model recomputes in every layer stays recomputed: the
additive mask `where(causal, 0, -inf)` that each `scaled_dot_product_attention` call makes from
the one boolean mask the model passes to every layer, a rotary table's `cos`/`sin` slices, the
broadcast of one mask to each layer's scores. This pass keeps the first node of each set of nodes
that apply the same op to the same arguments (the same values, the same constants of the same
type) with the same result types, and makes readers of the others read its outputs::

    %m1 = prims.where(%causal, %zeros, -inf)       %m1 = prims.where(%causal, %zeros, -inf)
    %a1 = prims.scaled_dot_product_attention(..., %m1)  ->  %a1 = ...(..., %m1)
    %m2 = prims.where(%causal, %zeros, -inf)       %a2 = ...(..., %m1)
    %a2 = prims.scaled_dot_product_attention(..., %m2)

Only pure, deterministic nodes merge: prims (not the philox draws, not `empty`, whose contents are
undefined) and ATen ops that mutate nothing and draw no random numbers. A node defining a graph
output is never merged into another: two outputs would then be one tensor, which a caller sees
(writing into one changes the other).
"""

import functools
import math

import sympy

from torchsmith.ir import Graph, Node, Value, map_arg
from torchsmith.ir.graph import Slice
from torchsmith.ir.passes import graph_pass, has_side_effects
from torchsmith.ir.registry import UnknownOpError, draws_random, lookup_op

# Prims that are not a function of their arguments: random draws, and allocations whose
# contents are undefined.
IMPURE_PRIMS = frozenset({"prims.philox_rand", "prims.philox_randn", "prims.empty", "prims.empty_strided"})
_UNDEFINED_ATEN = ("aten.empty.", "aten.empty_strided.", "aten.empty_like.", "aten.new_empty.",
                   "aten.new_empty_strided.")


@functools.lru_cache(maxsize=4096)
def is_pure(op: str) -> bool:
    """Whether two nodes applying `op` to equal arguments always compute equal values and nothing
    else: prims other than `IMPURE_PRIMS`, and ATen overloads whose schema writes no argument,
    that draw no random numbers and allocate nothing undefined. Other dialects are not judged."""
    if op.startswith("prims."):
        return op not in IMPURE_PRIMS and not has_side_effects(op)
    if not op.startswith("aten.") or has_side_effects(op) or op.startswith(_UNDEFINED_ATEN):
        return False
    try:
        overload = lookup_op(op).eager
    except UnknownOpError:
        return False
    schema = getattr(overload, "_schema", None)
    if schema is None or schema.is_mutable or draws_random(op):
        return False
    return all(arg.alias_info is None or not arg.alias_info.is_write for arg in schema.arguments)


def _constant_key(arg):
    """A hashable key equal only for arguments that are the same value of the same type (Python
    says `0 == 0.0 == False` and `0.0 == -0.0`; ops do not)."""
    if isinstance(arg, Value):
        return ("value", arg.name)
    if isinstance(arg, tuple):  # tuple and ArgList
        return (type(arg).__name__, tuple(_constant_key(a) for a in arg))
    if isinstance(arg, Slice):
        return ("slice", _constant_key((arg.start, arg.stop, arg.step)))
    if isinstance(arg, float):
        return ("float", "nan" if math.isnan(arg) else arg.hex())
    if isinstance(arg, sympy.Expr):
        return ("sympy", sympy.srepr(arg))
    return (type(arg).__name__, arg)


def _node_key(node: Node):
    return (
        node.op,
        _constant_key(node.args),
        tuple((name, _constant_key(arg)) for name, arg in node.kwargs),
        tuple(v.type for v in node.outputs),
    )


@graph_pass("common_subexpressions", stage="prims", produces="prims graph, each pure value computed once")
def common_subexpressions(graph: Graph) -> Graph:
    """`graph` with every pure node that repeats an earlier one (same op, arguments and result
    types) removed and its readers reading the earlier node's outputs; the same graph object when
    nothing repeats."""
    outputs = {v.name for v in graph.outputs}
    first: dict = {}
    renamed: dict[str, Value] = {}
    nodes = []
    for node in graph.nodes:
        if renamed:
            node = node.replace(
                args=map_arg(node.args, lambda v: renamed.get(v.name, v)),
                kwargs=tuple((k, map_arg(a, lambda v: renamed.get(v.name, v))) for k, a in node.kwargs),
            )
        if node.outputs and is_pure(node.op):
            key = _node_key(node)
            earlier = first.get(key)
            if earlier is not None and not any(v.name in outputs for v in node.outputs):
                renamed.update((v.name, e) for v, e in zip(node.outputs, earlier.outputs))
                continue
            if earlier is None:
                first[key] = node
        nodes.append(node)
    if not renamed:
        return graph
    return graph.replace(nodes=tuple(nodes))

