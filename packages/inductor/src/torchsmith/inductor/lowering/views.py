"""Lowerings of view and shape prims. Views (broadcast_in_dim, permute, slice, squeeze, expand_dims,
reshape, flip) only rewrite the index a value is read with; cat and pad are pointwise buffers whose
loads are selected by position (`where` over index comparisons), with indices clamped into each
operand so that the loads of the branches not taken stay inside their buffers."""

import sympy
import torch

from torchsmith.inductor.loop_ir.program import Constant, IndexValue, Op, index_vars
from torchsmith.inductor.lowering.lower import LoweringContext, register_lowering
from torchsmith.inductor.lowering.pointwise import out_type
from torchsmith.inductor.lowering.view_refs import ViewRef, reshape_view
from torchsmith.ir import Node, Value
from torchsmith.ir.symbolic import compare


def _size(arg):
    """A size argument (int or SymInt value) as a sympy expression."""
    return sympy.sympify(arg.type.expr if isinstance(arg, Value) else arg)


@register_lowering("prims.broadcast_in_dim")
def _lower_broadcast_in_dim(ctx: LoweringContext, node: Node) -> ViewRef:
    a, _, broadcast_dims = node.args
    src, out = ctx.ref(a), out_type(node)
    idx = index_vars(len(out.shape))
    # A size-1 operand dim that broadcasts reads its only element.
    indices = [0 if src.shape[i] == 1 else idx[d] for i, d in enumerate(broadcast_dims)]
    return src.remap(out.shape, indices)


@register_lowering("prims.permute")
def _lower_permute(ctx: LoweringContext, node: Node) -> ViewRef:
    a, dims = node.args
    src, out = ctx.ref(a), out_type(node)
    idx = index_vars(len(dims))
    indices = [None] * len(dims)
    for j, d in enumerate(dims):
        indices[d] = idx[j]
    return src.remap(out.shape, indices)


@register_lowering("prims.slice")
def _lower_slice(ctx: LoweringContext, node: Node) -> ViewRef:
    a, dim, start, _, step = node.args
    src, out = ctx.ref(a), out_type(node)
    idx = list(index_vars(len(out.shape)))
    idx[dim] = _size(start) + step * idx[dim]
    return src.remap(out.shape, idx)


@register_lowering("prims.squeeze")
def _lower_squeeze(ctx: LoweringContext, node: Node) -> ViewRef:
    a, dims = node.args
    src, out = ctx.ref(a), out_type(node)
    kept = iter(index_vars(len(out.shape)))
    return src.remap(out.shape, [0 if i in dims else next(kept) for i in range(len(src.shape))])


@register_lowering("prims.expand_dims")
def _lower_expand_dims(ctx: LoweringContext, node: Node) -> ViewRef:
    a, dims = node.args
    src, out = ctx.ref(a), out_type(node)
    idx = index_vars(len(out.shape))
    return src.remap(out.shape, [v for j, v in enumerate(idx) if j not in dims])


@register_lowering("prims.reshape", "prims.collapse", "prims.split_dim")
def _lower_reshape(ctx: LoweringContext, node: Node) -> ViewRef:
    return reshape_view(ctx.ref(node.args[0]), out_type(node).shape)


@register_lowering("prims.flip")
def _lower_flip(ctx: LoweringContext, node: Node) -> ViewRef:
    a, dims = node.args
    src = ctx.ref(a)
    idx = list(index_vars(len(src.shape)))
    for d in set(dims):
        idx[d] = src.shape[d] - 1 - idx[d]
    return src.remap(src.shape, idx)


def _position(expr) -> IndexValue:
    return IndexValue(sympy.sympify(expr), torch.int64)


def _compare(op: str, left, right) -> Op:
    return Op(op, (_position(left), _position(right)), torch.bool)


def _clamped(index, size, low: bool, high: bool):
    """`index` kept inside [0, size): only where a branch not taken could step outside."""
    if high:
        index = sympy.Min(index, size - 1)
    if low:
        index = sympy.Max(index, 0)
    return index


@register_lowering("prims.cat")
def _lower_cat(ctx: LoweringContext, node: Node) -> ViewRef:
    tensors, dim = node.args
    out = out_type(node)
    # Statically empty operands add nothing (and have no element a clamped load could read).
    refs = [r for r in (ctx.ref(t) for t in tensors) if r.shape[dim] != 0]
    if len(refs) == 1:
        return ctx.pointwise(node.outputs[0].name, out.shape, out.dtype, refs[0].load)

    def value(idx):
        position = idx[dim]
        pieces, offset = [], sympy.Integer(0)
        for k, ref in enumerate(refs):
            size = ref.shape[dim]
            local = _clamped(position - offset, size, low=k > 0, high=k < len(refs) - 1)
            pieces.append((offset + size, ref.load([*idx[:dim], local, *idx[dim + 1 :]])))
            offset = offset + size

        def select(lo: int, hi: int):
            # A balanced tree of selects: depth log2(operands), so long concatenations stay shallow.
            if hi - lo == 1:
                return pieces[lo][1]
            mid = (lo + hi) // 2
            below = _compare("lt", position, pieces[mid - 1][0])
            return Op("where", (below, select(lo, mid), select(mid, hi)), out.dtype)

        return select(0, len(pieces))

    if not refs:
        return ctx.pointwise(node.outputs[0].name, out.shape, out.dtype, lambda idx: Constant(0, out.dtype))
    return ctx.pointwise(node.outputs[0].name, out.shape, out.dtype, value)


@register_lowering("prims.pad")
def _lower_pad(ctx: LoweringContext, node: Node) -> ViewRef:
    a, pads, fill = node.args
    src, out = ctx.ref(a), out_type(node)
    pads = [_size(p) for p in pads]
    fill_value = ctx.scalar(fill, out.dtype)
    if any(compare("==", size, 0) is True for size in src.shape):
        return ctx.pointwise(node.outputs[0].name, out.shape, out.dtype, lambda idx: fill_value)

    def value(idx):
        inside, indices = None, []
        for d, size in enumerate(src.shape):
            low, high = pads[2 * d], pads[2 * d + 1]
            padded_low, padded_high = low != 0, high != 0
            indices.append(_clamped(idx[d] - low, size, low=padded_low, high=padded_high))
            checks = ([_compare("ge", idx[d], low)] if padded_low else []) + (
                [_compare("lt", idx[d], low + size)] if padded_high else []
            )
            for check in checks:
                inside = check if inside is None else Op("bitwise_and", (inside, check), torch.bool)
        load = src.load(indices)
        return load if inside is None else Op("where", (inside, load, fill_value), out.dtype)

    return ctx.pointwise(node.outputs[0].name, out.shape, out.dtype, value)
