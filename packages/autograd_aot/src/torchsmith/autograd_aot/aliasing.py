"""What ATen schemas say about aliasing: which ops make views, which mutate which arguments,
the functional variant of a mutating op, and how to write a changed view back into its base.

Everything here is read from `torch.ops.aten` schemas (`Tensor(a)` marks a view, `Tensor(a!)` a
mutation), so new ops are classified without a hand-kept list; only the inverse of each view (the
`*_scatter` that writes a view back) needs a rule per op.
"""

import functools
from dataclasses import dataclass

import torch

from torchsmith.autograd_aot.errors import FunctionalizationError
from torchsmith.ir import Node, TensorType, Value, lookup_op
from torchsmith.ir.errors import UnknownOpError
from torchsmith.ir.graph import freeze_arg


def schema_of(op: str):
    """The TorchScript schema of an `aten.*` op name or of a registered operator overload (a
    `torch.library` custom op capture recorded, `transformers.grouped_mm_fallback.default`), or
    None for other dialects."""
    if not op.startswith("aten."):
        if op.split(".", 1)[0] in _PYTHON_DIALECTS:
            return None
        try:
            eager = lookup_op(op).eager
        except UnknownOpError:
            return None
        return eager._schema if isinstance(eager, torch._ops.OpOverload) else None
    eager = lookup_op(op).eager
    return getattr(eager, "_schema", None)


# Dialects of Python-level functions, which have no schema
_PYTHON_DIALECTS = frozenset({"torch", "operator", "math", "prims", "allow_in_graph"})


@functools.cache
def mutated_arg_positions(op: str) -> tuple[int, ...]:
    """Positions (in the schema) of the arguments `op` writes to (`Tensor(a!)`)."""
    schema = schema_of(op)
    if schema is None:
        return ()
    return tuple(
        i for i, a in enumerate(schema.arguments) if a.alias_info is not None and a.alias_info.is_write
    )


# Ops that write to arguments their schema does not mark `(a!)`: op -> (positions, condition).
# `native_batch_norm` updates the running statistics in training mode (argument 5).
_UNDECLARED_MUTATIONS = {
    "aten.native_batch_norm.default": ((3, 4), lambda bound: bool(bound[5])),
}


def mutated_args(node: Node) -> tuple[int, ...]:
    """Schema positions of the arguments this node writes to, declared or not."""
    declared = mutated_arg_positions(node.op)
    hidden = _UNDECLARED_MUTATIONS.get(node.op)
    if hidden is not None and hidden[1](bound_arguments(node)):
        return tuple(sorted(set(declared) | set(hidden[0])))
    return declared


@functools.cache
def is_view_op(op: str) -> bool:
    """Whether `op` returns a view of its first tensor argument without writing anything."""
    schema = schema_of(op)
    if schema is None or mutated_arg_positions(op) or not schema.returns:
        return False
    first = schema.returns[0].alias_info
    return first is not None and not first.is_write


def _signature(argument) -> tuple[str, str]:
    # Compare arguments by name and base type, ignoring alias annotations and defaults.
    return argument.name, str(argument.type)


# Mutating ops whose functional twin does not follow a naming rule. The twin returns the op's
# fresh outputs followed by the new value of each mutated argument.
_FUNCTIONAL_TWINS = {
    "aten.native_batch_norm.default": "aten._native_batch_norm_legit_functional.default",
    "aten._native_batch_norm_legit.default": "aten._native_batch_norm_legit_functional.default",
}


@functools.cache
def functional_variant(op: str) -> str:
    """The name of the out-of-place twin of mutating `op`.

    `aten.add_.Tensor` -> `aten.add.Tensor` (returns the new self); `aten.foo.x` mutating other
    arguments -> `aten.foo_functional.x` (returns the outputs, then each mutated argument's new value).
    """
    if op in _FUNCTIONAL_TWINS:
        return _FUNCTIONAL_TWINS[op]
    _, packet, overload = op.split(".")
    schema = schema_of(op)
    if any(a.is_out for a in schema.arguments):
        raise FunctionalizationError(f"{op}: out= variants cannot be functionalized; call the functional op")
    wanted = [_signature(a) for a in schema.arguments]
    candidates = [packet.rstrip("_")] if packet.endswith("_") else [packet + "_functional"]
    for name in candidates:
        functional_packet = getattr(torch.ops.aten, name, None)
        if functional_packet is None:
            continue
        for overload_name in functional_packet.overloads():
            other = getattr(functional_packet, overload_name)._schema
            if [_signature(a) for a in other.arguments] == wanted and not any(
                a.alias_info is not None and a.alias_info.is_write for a in other.arguments
            ):
                return f"aten.{name}.{overload_name}"
    raise FunctionalizationError(
        f"{op} mutates its arguments and has no functional variant torchsmith knows; "
        "rewrite the program with the out-of-place op, or add a rule to "
        "autograd_aot.aliasing._FUNCTIONAL_TWINS"
    )


# Metadata mutations change a tensor's shape or strides in place, not its elements: the trace
# records each as the view its out-of-place twin makes (`resize_` as an `as_strided` of the new
# geometry), and the runtime applies the change to the caller's tensor after the call.
_METADATA_VIEW_TWINS = {
    "aten.t_.default": "aten.t.default",
    "aten.transpose_.default": "aten.transpose.int",
    "aten.swapdims_.default": "aten.swapdims.default",
    "aten.swapaxes_.default": "aten.swapaxes.default",
    "aten.squeeze_.default": "aten.squeeze.default",
    "aten.squeeze_.dim": "aten.squeeze.dim",
    "aten.squeeze_.dims": "aten.squeeze.dims",
    "aten.unsqueeze_.default": "aten.unsqueeze.default",
    "aten.as_strided_.default": "aten.as_strided.default",
}
METADATA_MUTATIONS = frozenset(op.rsplit(".", 1)[0] for op in _METADATA_VIEW_TWINS) | {"aten.resize_"}


def is_metadata_mutation(op: str) -> bool:
    return op.rsplit(".", 1)[0] in METADATA_MUTATIONS


def metadata_view_twin(node: Node, result: torch.Tensor) -> Node:
    """The view node that gives what metadata mutation `node` leaves its tensor as (`result`, the
    traced tensor after the op): `aten.t_(x)` -> `aten.t(x)`; `aten.resize_(x, size)` ->
    `aten.as_strided(x, size, strides)`, the strides it took."""
    if node.op.startswith("aten.resize_."):
        # resize_ keeps the storage offset, as `as_strided` without one does
        args = (node.args[0], freeze_arg(list(result.shape)), freeze_arg(list(result.stride())))
        return Node("aten.as_strided.default", args, (), node.outputs, node.source)
    twin = _METADATA_VIEW_TWINS.get(node.op)
    if twin is None:
        raise FunctionalizationError(
            f"{node.op} changes a tensor's shape or strides in place and torchsmith has no view for it; "
            "use the out-of-place op (t(), transpose(), squeeze(), ...)"
        )
    return node.replace(op=twin)


def _inverse_permutation(dims) -> list[int]:
    rank = len(dims)
    inverse = [0] * rank
    for i, d in enumerate(dims):
        inverse[d % rank] = i
    return inverse


def scatter_rule(op: str, output_index: int):
    """How to write a changed view back into its base.

    Returns `rule(base, src, args, kwargs, emit) -> Value`, where `args`/`kwargs` are the view
    node's arguments after the base, and `emit(op, *args, **kwargs)` appends a node. Raises for views
    that cannot be written through (`expand` broadcasts one element to many places).
    """
    packet = op.rsplit(".", 1)[0]

    def reshape_back(base, src, args, kwargs, emit):
        return emit("aten.reshape.default", src, list(base.type.shape))

    def same(base, src, args, kwargs, emit):
        return src

    def transpose_back(base, src, args, kwargs, emit):
        return emit(op, src, *args, **kwargs)

    def permute_back(base, src, args, kwargs, emit):
        return emit("aten.permute.default", src, _inverse_permutation(args[0]))

    def slice_back(base, src, args, kwargs, emit):
        dim, start, end, step = (list(args) + [0, None, None, 1][len(args):])[:4]
        return emit("aten.slice_scatter.default", base, src, dim, start, end, step)

    def select_back(base, src, args, kwargs, emit):
        return emit("aten.select_scatter.default", base, src, *args)

    def diagonal_back(base, src, args, kwargs, emit):
        return emit("aten.diagonal_scatter.default", base, src, *args, **kwargs)

    def as_strided_back(base, src, args, kwargs, emit):
        if not base.type.is_contiguous:
            raise FunctionalizationError(
                f"cannot write through {op} into a non-contiguous tensor; mutate a view/slice instead"
            )
        return emit("aten.as_strided_scatter.default", base, src, *args, **kwargs)

    def split_back(base, src, args, kwargs, emit):
        size, dim = (list(args) + [0])[:2]
        start = output_index * size
        return emit("aten.slice_scatter.default", base, src, dim, start, start + src.type.shape[dim], 1)

    def complex_back(base, src, args, kwargs, emit):
        # view_as_real's pairs become complex elements again (view_as_complex wants the pairs
        # contiguous, which a functional result is unless it is itself a strided view)
        if not src.type.is_contiguous:
            src = emit("aten.clone.default", src, memory_format=torch.contiguous_format)
        return emit("aten.view_as_complex.default", src)

    def real_back(base, src, args, kwargs, emit):
        return emit("aten.view_as_real.default", src)

    def unbind_back(base, src, args, kwargs, emit):
        dim = args[0] if args else kwargs.get("dim", 0)
        return emit("aten.select_scatter.default", base, src, dim, output_index)

    rules = {
        "aten.view": reshape_back, "aten._unsafe_view": reshape_back, "aten.reshape": reshape_back,
        "aten.squeeze": reshape_back, "aten.unsqueeze": reshape_back, "aten.flatten": reshape_back,
        "aten.view_as": reshape_back, "aten.unflatten": reshape_back,
        "aten.alias": same, "aten.detach": same, "aten.lift_fresh": same,
        "aten.t": transpose_back, "aten.transpose": transpose_back, "aten.swapdims": transpose_back,
        "aten.permute": permute_back,
        "aten.slice": slice_back, "aten.select": select_back, "aten.diagonal": diagonal_back,
        "aten.as_strided": as_strided_back, "aten.split": split_back, "aten.unbind": unbind_back,
        "aten.view_as_real": complex_back, "aten.view_as_complex": real_back,
    }
    rule = rules.get(packet)
    if rule is None:
        raise FunctionalizationError(
            f"cannot write a mutation back through the view {op}; mutate the base tensor or a "
            "slice/select/view/transpose/permute of it instead"
        )
    return rule


@dataclass(frozen=True, slots=True)
class Alias:
    """Where a traced value's memory lives: `root` is the value that owns the storage (a graph
    input or a fresh op output) and `chain` the view nodes, with output index, leading to it."""

    root: str
    chain: tuple[tuple[Node, int], ...] = ()


def bound_arguments(node: Node) -> list:
    """The node's arguments aligned with its schema's parameters (missing ones are None)."""
    schema = schema_of(node.op)
    kwargs = dict(node.kwargs)
    bound = list(node.args)
    for argument in schema.arguments[len(bound):]:
        bound.append(kwargs.get(argument.name))
    return bound


def positional_with_defaults(node: Node) -> tuple:
    """The node's positional arguments with omitted trailing defaults written out, so they can be
    passed to a twin op whose same parameters have no default (`bernoulli_.float` -> `bernoulli.p`)."""
    schema = schema_of(node.op)
    args = list(node.args)
    for argument in schema.arguments[len(args):]:
        if argument.kwarg_only:
            break
        if not argument.has_default_value():
            raise FunctionalizationError(f"{node.op}: argument {argument.name} is missing")
        args.append(freeze_arg(argument.default_value))
    return tuple(args)


def returns_aliasing(node: Node) -> dict[int, int]:
    """For a mutating node: output index -> position of the mutated argument it aliases."""
    schema = schema_of(node.op)
    sets = {}
    for i, a in enumerate(schema.arguments):
        if a.alias_info is not None and a.alias_info.is_write:
            sets[frozenset(a.alias_info.before_set)] = i
    result = {}
    for i, r in enumerate(schema.returns):
        if r.alias_info is not None and frozenset(r.alias_info.before_set) in sets:
            result[i] = sets[frozenset(r.alias_info.before_set)]
    return result


def first_tensor_arg(node: Node) -> Value:
    for v in node.inputs:
        if isinstance(v.type, TensorType):
            return v
    raise FunctionalizationError(f"view op {node.op} has no tensor argument")


def track_aliases(inputs, nodes) -> dict[str, Alias]:
    """The `Alias` of every tensor value of a traced (not yet functional) graph."""
    aliases = {v.name: Alias(v.name) for v in inputs}
    for node in nodes:
        if is_view_op(node.op):
            source = aliases[first_tensor_arg(node).name]
            for i, out in enumerate(node.outputs):
                aliases[out.name] = Alias(source.root, source.chain + ((node, i),))
            continue
        aliased = returns_aliasing(node) if mutated_args(node) else {}
        bound = bound_arguments(node) if aliased else []
        for i, out in enumerate(node.outputs):
            if i in aliased and isinstance(bound[aliased[i]], Value):
                aliases[out.name] = aliases[bound[aliased[i]].name]
            else:
                aliases[out.name] = Alias(out.name)
    return aliases
