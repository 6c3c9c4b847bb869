"""Scatter loops: scatter, scatter_add and index_put at data-chosen positions as one `Scatter`
buffer (a copy of the base, then a loop over the index and source elements writing or adding at
the position their index values name), generated as C++ by cpp_scatter.

Taken when the lowering is for the C++ code generator (`LoweringContext.scatter_loops`); the
Triton generator has no scatter kernel yet and keeps torch's kernel as an extern call there.
"""

import sympy

from torchsmith.inductor.loop_ir.program import Indirect, Op, Scatter, index_vars, reduction_vars
from torchsmith.inductor.lowering.lower import LoweringContext
from torchsmith.inductor.lowering.pointwise import out_type
from torchsmith.inductor.lowering.view_refs import ViewRef
from torchsmith.ir import Node
from torchsmith.ir.types import contiguous_strides


def scatter_refusal(ctx: LoweringContext, node: Node) -> str | None:
    """Why `node` (scatter, scatter_add or index_put) keeps torch's kernel, or None when it
    becomes a scatter loop."""
    if not getattr(ctx, "scatter_loops", False):
        return "writes at data-chosen positions: this code generator has no scatter loop"
    out = out_type(node)  # never complex: lower() runs nodes touching complex values as torch's kernels
    if not out.shape:
        return "writes into a 0-d tensor: torch's kernel"
    return None


def _scatter_buffer(ctx: LoweringContext, node: Node, base: ViewRef, rranges, coords, write, accumulate):
    """The buffer of `node`: `base` copied, then `write` stored (or added) at `coords` (one index
    expression per output dim, over the write loop variables and the Indirects' variables)."""
    out = out_type(node)
    strides = contiguous_strides(tuple(out.shape))
    position = sympy.expand(sum((c * s for c, s in zip(coords, strides)), sympy.Integer(0)))
    value = Op("scatter", (base.load(index_vars(len(out.shape))), write), out.dtype)
    body = Scatter(tuple(out.shape), tuple(rranges), value, position, accumulate)
    return ctx.add_buffer(node.outputs[0].name, out.shape, out.dtype, body)


def lower_scatter_loop(ctx: LoweringContext, node: Node) -> ViewRef:
    """prims.scatter / prims.scatter_add: out[.., index[r], ..] (=|+=) src[r] along `dim`, the other
    coordinates those of r itself."""
    a, dim, index, source = node.args
    base, idx, src = ctx.ref(a), ctx.ref(index), ctx.ref(source)
    r = reduction_vars(len(idx.shape))
    var = ctx.fresh_indirect_var()
    coords = [var if k == dim else r[k] for k in range(len(base.shape))]
    write = Indirect(var, idx.load(list(r)), base.shape[dim], src.load(list(r)))
    return _scatter_buffer(ctx, node, base, idx.shape, coords, write, node.op == "prims.scatter_add")


def lower_index_put_loop(ctx: LoweringContext, node: Node) -> ViewRef:
    """prims.index_put: out[i0[r], .., i1[r], ..] (=|+=) values[r], with NumPy's placement of the
    index dims (adjacent index tensors replace their dims in place, separated ones go first)."""
    a, indices, values, accumulate = node.args
    base, src = ctx.ref(a), ctx.ref(values)
    indices = list(indices) + [None] * (len(base.shape) - len(indices))
    positions = [p for p, i in enumerate(indices) if i is not None]
    index_refs = {p: ctx.ref(indices[p]) for p in positions}
    index_rank = len(index_refs[positions[0]].shape)
    adjacent = positions == list(range(positions[0], positions[-1] + 1))
    r = reduction_vars(len(src.shape))
    first = positions[0] if adjacent else 0
    index_r = list(r[first : first + index_rank])
    rest = iter([*r[:first], *r[first + index_rank :]])
    variables = {p: ctx.fresh_indirect_var() for p in positions}
    coords = [variables[p] if p in variables else next(rest) for p in range(len(base.shape))]
    write = src.load(list(r))
    for p in reversed(positions):
        write = Indirect(variables[p], index_refs[p].load(index_r), base.shape[p], write)
    return _scatter_buffer(ctx, node, base, src.shape, coords, write, bool(accumulate))
