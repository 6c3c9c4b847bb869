"""The lowering of each supported prim, registered in `lower.LOWERINGS` by prim name."""

import torch

from torchsmith.inductor.loop_ir import (
    ExternCall,
    IndexValue,
    Layout,
    Op,
    index_vars,
)
from torchsmith.inductor.lower import LoweringContext, register_lowering
from torchsmith.inductor.views import ViewRef, reshape_view, strided_ref
from torchsmith.ir import Node, Value
from torchsmith.ir.types import TensorType
from torchsmith.prims.elementwise import BINARY, UNARY

# ---- elementwise ----------------------------------------------------------------------------------


def _out_type(node: Node) -> TensorType:
    return node.outputs[0].type


def _operand_dtype(node: Node) -> torch.dtype:
    """The dtype operands compute in: that of the tensor operands (prims share one dtype)."""
    tensors = [a for a in node.args if isinstance(a, Value) and isinstance(a.type, TensorType)]
    return tensors[-1].type.dtype


def _lower_elementwise(ctx: LoweringContext, node: Node) -> ViewRef:
    out = _out_type(node)
    op = node.op.removeprefix("prims.")
    dtype = _operand_dtype(node)

    def value(idx):
        args = node.args
        if op == "where":
            pred = ctx.operand(args[0], torch.bool, idx)
            return Op(
                op, (pred, ctx.operand(args[1], dtype, idx), ctx.operand(args[2], dtype, idx)), out.dtype
            )
        return Op(op, tuple(ctx.operand(a, dtype, idx) for a in args), out.dtype)

    return ctx.pointwise(node.outputs[0].name, out.shape, out.dtype, value)


register_lowering(*(f"prims.{name}" for name in (*UNARY, *BINARY, "where")))(_lower_elementwise)


@register_lowering("prims.convert_element_type")
def _lower_convert(ctx: LoweringContext, node: Node) -> ViewRef:
    a, dtype = node.args
    src = ctx.ref(a)
    out = _out_type(node)
    return ctx.pointwise(
        node.outputs[0].name, out.shape, dtype, lambda idx: Op("convert", (src.load(idx),), dtype)
    )


@register_lowering("prims.clone")
def _lower_clone(ctx: LoweringContext, node: Node) -> ViewRef:
    src = ctx.ref(node.args[0])
    return ctx.pointwise(node.outputs[0].name, src.shape, src.dtype, src.load)


# ---- views and shapes: index remapping only ---------------------------------------------------------


@register_lowering("prims.broadcast_in_dim")
def _lower_broadcast_in_dim(ctx: LoweringContext, node: Node) -> ViewRef:
    a, _, broadcast_dims = node.args
    src, out = ctx.ref(a), _out_type(node)
    idx = index_vars(len(out.shape))
    # A size-1 operand dim that broadcasts reads its only element.
    indices = [0 if src.shape[i] == 1 else idx[d] for i, d in enumerate(broadcast_dims)]
    return src.remap(out.shape, indices)


@register_lowering("prims.permute")
def _lower_permute(ctx: LoweringContext, node: Node) -> ViewRef:
    a, dims = node.args
    src, out = ctx.ref(a), _out_type(node)
    idx = index_vars(len(dims))
    indices = [None] * len(dims)
    for j, d in enumerate(dims):
        indices[d] = idx[j]
    return src.remap(out.shape, indices)


@register_lowering("prims.slice")
def _lower_slice(ctx: LoweringContext, node: Node) -> ViewRef:
    a, dim, start, _, step = node.args
    src, out = ctx.ref(a), _out_type(node)
    start = start.type.expr if isinstance(start, Value) else start
    idx = list(index_vars(len(out.shape)))
    idx[dim] = start + step * idx[dim]
    return src.remap(out.shape, idx)


@register_lowering("prims.squeeze")
def _lower_squeeze(ctx: LoweringContext, node: Node) -> ViewRef:
    a, dims = node.args
    src, out = ctx.ref(a), _out_type(node)
    kept = iter(index_vars(len(out.shape)))
    return src.remap(out.shape, [0 if i in dims else next(kept) for i in range(len(src.shape))])


@register_lowering("prims.expand_dims")
def _lower_expand_dims(ctx: LoweringContext, node: Node) -> ViewRef:
    a, dims = node.args
    src, out = ctx.ref(a), _out_type(node)
    idx = index_vars(len(out.shape))
    return src.remap(out.shape, [v for j, v in enumerate(idx) if j not in dims])


@register_lowering("prims.reshape", "prims.collapse", "prims.split_dim")
def _lower_reshape(ctx: LoweringContext, node: Node) -> ViewRef:
    return reshape_view(ctx.ref(node.args[0]), _out_type(node).shape)


# ---- kept library ops ------------------------------------------------------------------------------


@register_lowering("prims.mm", "prims.bmm")
def _lower_matmul(ctx: LoweringContext, node: Node) -> ViewRef:
    out = _out_type(node)
    args = tuple(ctx.realize(ctx.ref(a), f"{node.outputs[0].name}_arg{k}") for k, a in enumerate(node.args))
    name = ctx.fresh(node.outputs[0].name)
    ctx.buffers.append(ExternCall(name, Layout(out.shape, out.strides, out.dtype), node.op, args, ctx.origin))
    return strided_ref(name, out.shape, out.strides, out.dtype)


# ---- creation --------------------------------------------------------------------------------------


@register_lowering("prims.full")
def _lower_full(ctx: LoweringContext, node: Node) -> ViewRef:
    out = _out_type(node)
    value = ctx.scalar(node.args[1], out.dtype)
    return ctx.pointwise(node.outputs[0].name, out.shape, out.dtype, lambda idx: value)


@register_lowering("prims.iota")
def _lower_iota(ctx: LoweringContext, node: Node) -> ViewRef:
    _, start, step = node.args
    out = _out_type(node)
    dtype = out.dtype

    def value(idx):
        # start + i * step, each step rounded in dtype as torch's arange().mul_().add_() is.
        scaled = Op("mul", (IndexValue(idx[0], dtype), ctx.scalar(step, dtype)), dtype)
        return Op("add", (scaled, ctx.scalar(start, dtype)), dtype)

    return ctx.pointwise(node.outputs[0].name, out.shape, dtype, value)
