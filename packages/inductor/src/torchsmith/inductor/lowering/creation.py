"""Lowerings of creation prims: full and iota as pointwise buffers, empty and empty_strided as
allocations, the philox random prims, and `torch.tensor` literals."""

import sympy
import torch

from torchsmith.inductor.cpp.rng import RANDOM_DTYPES, random_code
from torchsmith.inductor.loop_ir.program import IndexValue, Op
from torchsmith.inductor.lowering.fallback import extern_params
from torchsmith.inductor.lowering.lower import LoweringContext, register_lowering
from torchsmith.inductor.lowering.pointwise import out_type
from torchsmith.inductor.lowering.view_refs import ViewRef
from torchsmith.ir import Node, Value
from torchsmith.ir.types import SymIntType, contiguous_strides


def _is_size(arg) -> bool:
    if isinstance(arg, Value):
        return isinstance(arg.type, SymIntType)
    return isinstance(arg, int) and not isinstance(arg, bool)


def _size(arg):
    """An int or SymInt argument as a sympy expression."""
    return sympy.sympify(arg.type.expr if isinstance(arg, Value) else arg)


@register_lowering("prims.full")
def _lower_full(ctx: LoweringContext, node: Node) -> ViewRef:
    out = out_type(node)
    value = ctx.scalar(node.args[1], out.dtype)
    return ctx.pointwise(node.outputs[0].name, out.shape, out.dtype, lambda idx: value)


@register_lowering("prims.iota")
def _lower_iota(ctx: LoweringContext, node: Node) -> ViewRef:
    length, start, step = node.args
    out = out_type(node)
    dtype = out.dtype
    if dtype == torch.int64 and all(map(_is_size, (length, start, step))):
        ctx.iotas[node.outputs[0].name] = tuple(_size(x) for x in (length, start, step))

    def value(idx):
        # start + i * step, each step rounded in dtype as torch's arange().mul_().add_() is.
        scaled = Op("mul", (IndexValue(idx[0], dtype), ctx.scalar(step, dtype)), dtype)
        return Op("add", (scaled, ctx.scalar(start, dtype)), dtype)

    return ctx.pointwise(node.outputs[0].name, out.shape, dtype, value)


@register_lowering("prims.empty", "prims.empty_strided")
def _lower_empty(ctx: LoweringContext, node: Node) -> ViewRef:
    # No loop: its values are unspecified, so a buffer of the right layout is all it needs.
    out = out_type(node)
    params = (tuple(out.shape), tuple(out.strides))
    kwargs = (("dtype", out.dtype), ("device", out.device))
    (ref,) = ctx.extern(node, "extern.empty", params=params, kwargs=kwargs)
    return ref


def _c_printer_has_random_ops() -> bool:
    """Whether the C++ printer prints the random ops (it imports cpp_random's `random_code`)."""
    from torchsmith.inductor.cpp import expr as cpp_expr

    return getattr(cpp_expr, "random_code", None) is random_code


@register_lowering("prims.philox_rand", "prims.philox_randn")
def _lower_philox(ctx: LoweringContext, node: Node) -> ViewRef:
    shape, seed, offset = node.args
    out = out_type(node)
    if out.device == "cpu" and out.dtype in RANDOM_DTYPES and _c_printer_has_random_ops():
        # Element i is a pure function of (seed, offset, i): a pointwise loop, fusable with its users.
        op = node.op.removeprefix("prims.")
        strides = contiguous_strides(tuple(out.shape))

        def value(idx):
            flat = IndexValue(sum((v * s for v, s in zip(idx, strides)), sympy.Integer(0)), torch.int64)
            counters = (ctx.operand(seed, torch.int64, []), ctx.operand(offset, torch.int64, []))
            return Op(op, (*counters, flat), out.dtype)

        return ctx.pointwise(node.outputs[0].name, out.shape, out.dtype, value)
    # Elsewhere the prim's torch implementation, which defines the bits, draws them.
    params, kwargs, tensors = extern_params(ctx, node)
    reason = f"the prim's torch implementation draws the bits (no loop form for {out.dtype} on {out.device})"
    (ref,) = ctx.extern(node, node.op, params=params, kwargs=kwargs, tensors=tensors, fallback=reason)
    return ref


@register_lowering("torch.tensor")
def _lower_tensor_literal(ctx: LoweringContext, node: Node) -> ViewRef:
    # A small tensor from Python data (autograd_aot records `torch.tensor([1., 2.])` this way).
    out = out_type(node)
    data = node.args[0] if node.args else None
    if type(data) in (bool, int, float) and not out.shape:
        # A scalar is a constant loop (it fuses into its readers): no copy from the host per call.
        value = ctx.scalar(data, out.dtype)
        return ctx.pointwise(node.outputs[0].name, out.shape, out.dtype, lambda idx: value)
    # Other data is built by torch per call (extern.tensor: without waiting for the GPU).
    params, kwargs, tensors = extern_params(ctx, node)
    (ref,) = ctx.extern(node, "extern.tensor", params=params, kwargs=kwargs, tensors=tensors)
    return ref
