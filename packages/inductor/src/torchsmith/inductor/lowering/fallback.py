"""The fallback for nodes with no loop lowering: an `ExternCall` running the op's eager
implementation (`torchsmith.ir.registry.lookup_op(op).eager`) on realized inputs.

This is what keeps a graph compiling when it holds an op the inductor does not generate loops for
(prims without a lowering, aten ops that `prims.decompose` keeps whole: sort, topk, nonzero-free
library kernels, ...), and for every node that reads or writes a tensor of a dtype outside
`LOOP_DTYPES`, whatever its op (complex values: prims keeps such ATen ops whole, the wrapper runs
their ATen kernels while the real-valued rest of the graph fuses into generated kernels). Each
such op is listed in `LoopProgram.fallbacks` with its reason and logged once per graph (logger
`torchsmith.inductor.fallback`). Ops whose outputs are not tensors, or that
mutate their inputs, cannot run this way and raise `LoweringError`.
"""

import sympy
import torch

from torchsmith.inductor.errors import LoweringError
from torchsmith.inductor.loop_ir.program import TensorArg
from torchsmith.inductor.lowering.lower import LOOP_DTYPES, LoweringContext
from torchsmith.inductor.lowering.view_refs import ViewRef
from torchsmith.ir import Node, Value, iter_values
from torchsmith.ir.errors import UnknownOpError
from torchsmith.ir.graph import ArgList, Slice
from torchsmith.ir.registry import lookup_op
from torchsmith.ir.types import ScalarType, SymIntType, TensorType


def foreign_dtype(node: Node) -> torch.dtype | None:
    """The first dtype outside `LOOP_DTYPES` among `node`'s tensor inputs and outputs, or None."""
    for value in (*node.outputs, *iter_values((node.args, tuple(a for _, a in node.kwargs)))):
        if isinstance(value.type, TensorType) and value.type.dtype not in LOOP_DTYPES:
            return value.type.dtype
    return None


def extern_params(ctx: LoweringContext, node: Node) -> tuple[tuple, tuple, list[Value]]:
    """(params, kwargs, tensors): `node`'s arguments with each tensor Value replaced by a
    `TensorArg` into `tensors` and each symbolic int by its size expression."""
    tensors: list[Value] = []

    def convert(arg):
        if isinstance(arg, Value):
            t = arg.type
            if isinstance(t, TensorType):
                tensors.append(arg)
                return TensorArg(len(tensors) - 1)
            if isinstance(t, SymIntType):
                return sympy.sympify(t.expr)
            raise LoweringError(
                f"{ctx.origin}: argument %{arg.name} of type {t} is only known at run time; the eager "
                "fallback takes tensors, sizes and constants"
            )
        if isinstance(arg, ArgList):
            return ArgList(convert(a) for a in arg)
        if isinstance(arg, tuple):
            return tuple(convert(a) for a in arg)
        if isinstance(arg, Slice):
            return Slice(convert(arg.start), convert(arg.stop), convert(arg.step))
        return arg

    params = tuple(convert(a) for a in node.args)
    kwargs = tuple((k, convert(v)) for k, v in node.kwargs)
    return params, kwargs, tensors


def _mutates(op: str) -> bool:
    """Whether the aten overload `op` writes into one of its arguments (its schema says so)."""
    if not op.startswith("aten."):
        return False
    _, name, overload = (op.split(".") + ["default"])[:3]
    packet = getattr(torch.ops.aten, name, None)
    target = getattr(packet, overload, None) if packet is not None else None
    return bool(target is not None and target._schema.is_mutable)


def lower_fallback(ctx: LoweringContext, node: Node) -> list[ViewRef]:
    """Lower `node` to an extern call of its eager implementation, or raise `LoweringError` when it
    cannot run that way."""
    try:
        lookup_op(node.op)
    except UnknownOpError as e:
        raise LoweringError(f"{ctx.origin}: {node.op} is not a registered op: {e}") from None
    for value in node.outputs:
        # An output typed none is a result the op was asked not to compute (convolution_backward's mask).
        if not isinstance(value.type, (TensorType, SymIntType)) and value.type != ScalarType("none"):
            kind = "a size" if isinstance(value.type, SymIntType) else f"a {value.type}"
            raise LoweringError(
                f"{ctx.origin}: {node.op} has no loop lowering and its output %{value.name} is {kind}, "
                "not a tensor, so it cannot run as an extern call; decompose it before the inductor"
            )
    if not any(isinstance(v.type, TensorType) for v in node.outputs):
        raise LoweringError(f"{ctx.origin}: {node.op} has no tensor outputs; only functional ops lower")
    unbound = {s for v in node.outputs for s in v.type.free_symbols} - ctx.symbols
    if unbound:
        raise LoweringError(
            f"{ctx.origin}: the shape of {node.op}'s result depends on data (sizes "
            f"{', '.join(sorted(unbound))} are not bound by the graph's inputs); the inductor cannot "
            "allocate it ahead of time: break the graph before this op"
        )
    if _mutates(node.op):
        raise LoweringError(
            f"{ctx.origin}: {node.op} mutates its arguments; the inductor takes functional graphs "
            "(functionalize with torchsmith.autograd_aot first)"
        )
    params, kwargs, tensors = extern_params(ctx, node)
    dtype = foreign_dtype(node)
    if dtype is not None:
        reason = f"reads or writes {dtype} tensors, which no code generator computes; runs torch's kernel"
    else:
        kind = "prim" if node.op.startswith("prims.") else "op kept whole by prims.decompose"
        reason = f"no loop lowering for this {kind}; runs its eager implementation"
    return ctx.extern(node, node.op, params=params, kwargs=kwargs, tensors=tensors, fallback=reason)
