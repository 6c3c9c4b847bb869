"""Lowerings of indexing prims. gather and index read through `Indirect` index variables bound to
the index tensor's elements (one pointwise loop, no copy of the operand). index_put at the positions
of an iota (slice_scatter, select_scatter) is a pointwise select; other writes (scatter, scatter_add,
index_put) are scatter loops for the C++ generator (lowerings_scatter) and torch's kernels as extern
calls for Triton. (argmax/argmin are reductions: lowerings_reductions.py;
cumsum, a scan: lowerings_scan.py, registered by importing it here.)"""

import sympy
import torch

from torchsmith.inductor.errors import LoweringError
from torchsmith.inductor.loop_ir.program import IndexValue, Indirect, Op
from torchsmith.inductor.lowering import scan as lowerings_scan  # noqa: F401  (registers prims.cumsum)
from torchsmith.inductor.lowering.fallback import extern_params
from torchsmith.inductor.lowering.lower import LoweringContext, register_lowering
from torchsmith.inductor.lowering.pointwise import out_type
from torchsmith.inductor.lowering.scatter import lower_index_put_loop, lower_scatter_loop, scatter_refusal
from torchsmith.inductor.lowering.view_refs import ViewRef
from torchsmith.ir import Node
from torchsmith.ir.symbolic import compare, floordiv, mod


def _checked_size(ctx: LoweringContext, size, what: str):
    if compare("==", size, 0) is True:
        raise LoweringError(f"{ctx.origin}: {what} has size 0, so every index is out of range")
    return size


@register_lowering("prims.gather")
def _lower_gather(ctx: LoweringContext, node: Node) -> ViewRef:
    a, dim, index = node.args
    src, idx_ref, out = ctx.ref(a), ctx.ref(index), out_type(node)
    if not src.shape:
        return _extern(ctx, node, "gather from a 0-d tensor")
    size = _checked_size(ctx, src.shape[dim], f"dim {dim} of the operand")

    def value(idx):
        var = ctx.fresh_indirect_var()
        body = src.load([*idx[:dim], var, *idx[dim + 1 :]])
        return Indirect(var, idx_ref.load(idx), size, body)

    return ctx.pointwise(node.outputs[0].name, out.shape, out.dtype, value)


@register_lowering("prims.index")
def _lower_index(ctx: LoweringContext, node: Node) -> ViewRef:
    a, indices = node.args
    src, out = ctx.ref(a), out_type(node)
    indices = list(indices) + [None] * (len(src.shape) - len(indices))
    positions = [p for p, i in enumerate(indices) if i is not None]
    index_refs = {p: ctx.ref(indices[p]) for p in positions}
    index_rank = len(index_refs[positions[0]].shape)
    adjacent = positions == list(range(positions[0], positions[-1] + 1))
    for p in positions:
        _checked_size(ctx, src.shape[p], f"dim {p} of the operand")

    def value(idx):
        # Which output dims walk the index tensors, and which walk the operand's other dims in order.
        first = positions[0] if adjacent else 0
        index_idx = list(idx[first : first + index_rank])
        rest = iter([*idx[:first], *idx[first + index_rank :]])
        variables = {p: ctx.fresh_indirect_var() for p in positions}
        body = src.load([variables[p] if p in variables else next(rest) for p in range(len(src.shape))])
        for p in reversed(positions):
            body = Indirect(variables[p], index_refs[p].load(index_idx), src.shape[p], body)
        return body

    return ctx.pointwise(node.outputs[0].name, out.shape, out.dtype, value)


@register_lowering("aten.index_select.default")
def _lower_index_select(ctx: LoweringContext, node: Node) -> ViewRef:
    # prims has no decomposition for it; it is a gather of whole slices, so the same indirect load.
    a, dim, index = node.args
    src, idx_ref, out = ctx.ref(a), ctx.ref(index), out_type(node)
    if not src.shape:
        return _extern(ctx, node, "index_select of a 0-d tensor")
    dim = dim + len(src.shape) if dim < 0 else dim
    size = _checked_size(ctx, src.shape[dim], f"dim {dim} of the operand")

    def value(idx):
        var = ctx.fresh_indirect_var()
        body = src.load([*idx[:dim], var, *idx[dim + 1 :]])
        return Indirect(var, idx_ref.load([idx[dim]] if idx_ref.shape else []), size, body)

    return ctx.pointwise(node.outputs[0].name, out.shape, out.dtype, value)


def _iota_write(ctx: LoweringContext, node: Node):
    """(dim, length, start, step) when `node` (an index_put) writes without accumulating at positions
    made by one int64 iota with a positive step along one dim: a slice or select scatter."""
    a, indices, _, accumulate = node.args
    positions = [p for p, i in enumerate(indices) if i is not None]
    if accumulate or len(positions) != 1:
        return None
    dim = positions[0]
    iota = ctx.iotas.get(indices[dim].name)
    if iota is None or not (isinstance(iota[2], sympy.Integer) and iota[2] > 0):
        return None
    length, start, step = iota
    # Out-of-range positions must raise as eager does: only provably in-range ones become a select.
    size = ctx.ref(a).shape[dim]
    if (
        compare(">=", start, 0) is not True
        or compare("<=", start + (length - 1) * step, size - 1) is not True
    ):
        return None
    return (dim, *iota)


def _position(expr) -> IndexValue:
    return IndexValue(sympy.sympify(expr), torch.int64)


@register_lowering("prims.index_put")
def _lower_index_put(ctx: LoweringContext, node: Node) -> ViewRef:
    write = _iota_write(ctx, node)
    if write is None:
        refusal = scatter_refusal(ctx, node)
        return lower_index_put_loop(ctx, node) if refusal is None else _extern(ctx, node, refusal)
    a, _, values, _ = node.args
    base, src, out = ctx.ref(a), ctx.ref(values), out_type(node)
    dim, length, start, step = write
    end = start + length * step

    def value(idx):
        # out = src at the written positions of `dim` (start, start + step, ...), else base.
        j = idx[dim]
        offset = sympy.Max(j - start, 0) if start != 0 else j
        k = offset if step == 1 else floordiv(offset, step)
        checks = []
        if start != 0:
            checks.append(Op("ge", (_position(j), _position(start)), torch.bool))
        if compare(">=", end, base.shape[dim]) is not True:
            checks.append(Op("lt", (_position(j), _position(end)), torch.bool))
        if step != 1:
            checks.append(Op("eq", (_position(mod(offset, step)), _position(0)), torch.bool))
        if not checks:  # every position is written
            return src.load([*idx[:dim], k, *idx[dim + 1 :]])
        # Clamped, so the load of a position not written stays inside src.
        written = src.load([*idx[:dim], sympy.Min(k, length - 1), *idx[dim + 1 :]])
        inside = checks[0]
        for check in checks[1:]:
            inside = Op("bitwise_and", (inside, check), torch.bool)
        return Op("where", (inside, written, base.load(idx)), out.dtype)

    return ctx.pointwise(node.outputs[0].name, out.shape, out.dtype, value)


def _one_per_line(ctx: LoweringContext, node: Node) -> bool:
    """Whether a scatter writes one element per line along `dim` (the index has size 1 there and
    the operand's size elsewhere): nll_loss's backward, one-hot encodings."""
    a, dim, index, _ = node.args
    base, idx = ctx.ref(a).shape, ctx.ref(index).shape
    if len(base) == 0 or len(idx) != len(base) or compare("==", idx[dim], 1) is not True:
        return False
    return all(k == dim or compare("==", sympy.expand(idx[k] - base[k]), 0) is True for k in range(len(base)))


@register_lowering("prims.scatter", "prims.scatter_add")
def _lower_scatter(ctx: LoweringContext, node: Node) -> ViewRef:
    if not _one_per_line(ctx, node):
        # Several writes per line at data-chosen positions: a copy of the operand, then a loop over
        # the index elements (lowerings_scatter).
        refusal = scatter_refusal(ctx, node)
        return lower_scatter_loop(ctx, node) if refusal is None else _extern(ctx, node, refusal)
    a, dim, index, source = node.args
    base, idx_ref, src, out = ctx.ref(a), ctx.ref(index), ctx.ref(source), out_type(node)
    size = _checked_size(ctx, base.shape[dim], f"dim {dim} of the operand")

    def value(idx):
        # out[.., j, ..] = src[.., 0, ..] where index[.., 0, ..] == j, else the operand (plus it: add).
        line = [*idx[:dim], 0, *idx[dim + 1 :]]
        var = ctx.fresh_indirect_var()
        hit = Op("eq", (IndexValue(var, torch.int64), IndexValue(idx[dim], torch.int64)), torch.bool)
        old, new = base.load(idx), src.load(line)
        if node.op == "prims.scatter_add":
            new = Op("add", (old, new), out.dtype)
        return Indirect(var, idx_ref.load(line), size, Op("where", (hit, new, old), out.dtype))

    return ctx.pointwise(node.outputs[0].name, out.shape, out.dtype, value)


def _extern(ctx: LoweringContext, node: Node, reason: str) -> ViewRef:
    params, kwargs, tensors = extern_params(ctx, node)
    (ref,) = ctx.extern(node, node.op, params=params, kwargs=kwargs, tensors=tensors, fallback=reason)
    return ref
