"""Lowerings of elementwise prims (unary, binary, where), convert_element_type and clone: one
pointwise buffer per node, whose element is an `Op` over the operands' loads."""

import torch

from torchsmith.inductor.loop_ir.program import Op
from torchsmith.inductor.lowering.lower import LoweringContext, register_lowering
from torchsmith.inductor.lowering.view_refs import ViewRef
from torchsmith.ir import Node, Value
from torchsmith.ir.types import TensorType
from torchsmith.prims.elementwise import BINARY, UNARY


def out_type(node: Node) -> TensorType:
    """The type of `node`'s first output."""
    return node.outputs[0].type


def _operand_dtype(node: Node) -> torch.dtype:
    """The dtype operands compute in: that of the tensor operands (prims share one dtype)."""
    tensors = [a for a in node.args if isinstance(a, Value) and isinstance(a.type, TensorType)]
    return tensors[-1].type.dtype


def _lower_elementwise(ctx: LoweringContext, node: Node) -> ViewRef:
    out = out_type(node)
    op = node.op.removeprefix("prims.")
    dtype = _operand_dtype(node)
    if op == "add":
        from torchsmith.inductor.lowering.library import fuse_bias_add

        fused = fuse_bias_add(ctx, node)
        if fused is not None:
            return fused
    if op == "maximum":
        from torchsmith.inductor.lowering.library import fuse_convolution_relu

        fused = fuse_convolution_relu(ctx, node)
        if fused is not None:
            return fused

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
    out = out_type(node)
    return ctx.pointwise(
        node.outputs[0].name, out.shape, dtype, lambda idx: Op("convert", (src.load(idx),), dtype)
    )


@register_lowering("prims.clone")
def _lower_clone(ctx: LoweringContext, node: Node) -> ViewRef:
    src = ctx.ref(node.args[0])
    return ctx.pointwise(node.outputs[0].name, src.shape, src.dtype, src.load)
