"""The lowerings of reductions (sum, prod, amax, amin, argmax, argmin, var_mean) to `Reduction` loop
bodies (see loop_ir.Reduction for the reduction types)."""

import sympy
import torch

from torchsmith.inductor.loop_ir.index_math import index_expressions, reads_as_one_run
from torchsmith.inductor.loop_ir.program import (
    Constant,
    Expr,
    IndexValue,
    Op,
    Reduction,
    index_vars,
    map_indices,
    reduction_vars,
    substitute,
)
from torchsmith.inductor.lowering.lower import LoweringContext, register_lowering
from torchsmith.inductor.lowering.view_refs import ViewRef
from torchsmith.ir import Node

# ---- reductions ------------------------------------------------------------------------------------

REDUCTION_OF = {"prims.sum": "sum", "prims.prod": "prod", "prims.amax": "max", "prims.amin": "min"}


def reduce(
    ctx: LoweringContext, name: str, src: ViewRef, dims, reduction_type: str, value_of=None
) -> ViewRef:
    """A buffer reducing over `dims` of `src` (dropped from the result) the element expression
    `value_of(indices)` (default: `src` itself at `indices`, the operand's per-dim indices)."""
    value_of = value_of or src.load
    kept = [d for d in range(len(src.shape)) if d not in dims]
    out_vars, red_vars = index_vars(len(kept)), reduction_vars(len(dims))
    indices = [None] * len(src.shape)
    for d, v in zip(kept, out_vars):
        indices[d] = v
    for d, v in zip(dims, red_vars):
        indices[d] = v
    if not dims:
        return ctx.pointwise(name, src.shape, src.dtype, value_of)
    value, reduced = value_of(indices), tuple(src.shape[d] for d in dims)
    if reduction_type not in ("argmax", "argmin"):  # their flat position follows the dims' order
        value, reduced = order_by_stride(value, reduced)
    value, reduced = merge_contiguous_reductions(value, reduced)
    shape = tuple(src.shape[d] for d in kept)
    body = Reduction(shape, reduced, reduction_type, value)
    dtype = torch.int64 if reduction_type in ("argmax", "argmin") else value.dtype
    return ctx.add_buffer(name, shape, dtype, body)


def order_by_stride(value: Expr, ranges: tuple) -> tuple[Expr, tuple]:
    """`value` and `ranges` with the reduced dims reordered so that the first load's strides fall
    toward the innermost loop (a channels-last tensor reduced over C, H and W walks its storage in
    order). Only for order-free reductions: the sum's rounding may change, within eager's error."""
    indices = index_expressions(value)
    if not indices or len(ranges) < 2:
        return value, ranges
    rvars = reduction_vars(len(ranges))
    strides = [indices[0].coeff(v) for v in rvars]
    if not all(s.is_Integer for s in strides):
        return value, ranges
    order = sorted(range(len(ranges)), key=lambda d: -int(strides[d]))
    if order == list(range(len(ranges))):
        return value, ranges
    mapping = {rvars[d]: rvars[k] for k, d in enumerate(order)}
    return substitute(value, mapping), tuple(ranges[d] for d in order)


def merge_contiguous_reductions(value: Expr, ranges: tuple) -> tuple[Expr, tuple]:
    """`value` and `ranges` with adjacent reduced dims that every index reads as one contiguous run
    merged into one dim: the innermost loop gets longer (one 3136-element loop instead of 56 loops of
    56), which vectorizes better. Flat positions (argmax's) are unchanged: both count row-major."""
    ranges = tuple(ranges)
    k = len(ranges) - 1
    while k >= 1:
        indices = index_expressions(value)
        if indices is None:
            break
        rvars = reduction_vars(len(ranges))
        if reads_as_one_run(indices, rvars[k - 1], rvars[k], ranges[k]):
            mapping = {rvars[k - 1]: sympy.Integer(0), rvars[k]: rvars[k - 1]}
            mapping |= {rvars[j]: rvars[j - 1] for j in range(k + 1, len(ranges))}
            value = map_indices(value, lambda index, m=mapping: sympy.sympify(index).xreplace(m))
            ranges = (*ranges[: k - 1], ranges[k - 1] * ranges[k], *ranges[k + 1 :])
        k -= 1
    return value, ranges


@register_lowering(*REDUCTION_OF)
def _lower_reduction(ctx: LoweringContext, node: Node) -> ViewRef:
    a, dims = node.args
    return reduce(ctx, node.outputs[0].name, ctx.ref(a), tuple(dims), REDUCTION_OF[node.op])


@register_lowering("prims.argmax", "prims.argmin")
def _lower_arg_reduction(ctx: LoweringContext, node: Node) -> ViewRef:
    a, dim = node.args
    src = ctx.ref(a)
    kind = node.op.removeprefix("prims.")
    if not src.shape:  # a 0-d tensor: its only element is at index 0
        return ctx.pointwise(node.outputs[0].name, (), torch.int64, lambda idx: Constant(0, torch.int64))
    return reduce(ctx, node.outputs[0].name, src, (dim % len(src.shape),), kind)


@register_lowering("prims.var_mean")
def _lower_var_mean(ctx: LoweringContext, node: Node) -> list[ViewRef]:
    # One pass: a welford_mean and a welford_m2 reduction of the same value, which the C++ code
    # generator computes together (one read of the data, per-chunk shifted sums: exact for data with
    # a large mean and a small spread); the variance is M2 over the corrected count.
    a, dims, correction = node.args
    src, dims, dtype = ctx.ref(a), tuple(dims), node.outputs[0].type.dtype
    var_name, mean_name = (v.name for v in node.outputs)
    count: sympy.Expr = sympy.Integer(1)
    for d in dims:
        count = count * src.shape[d]
    n = IndexValue(count, dtype)
    if not dims:
        mean = ctx.pointwise(mean_name, src.shape, dtype, src.load)
        zero = ctx.pointwise(f"{var_name}_m2", src.shape, dtype, lambda idx: Constant(0.0, dtype))
        m2 = zero
    else:
        mean = reduce(ctx, mean_name, src, dims, "welford_mean")
        m2 = reduce(ctx, f"{var_name}_m2", src, dims, "welford_m2")
    # torch divides by max(n - correction, 0): a non-positive count gives inf or nan, not a negative.
    denominator = Op(
        "maximum", (Op("sub", (n, Constant(float(correction), dtype)), dtype), Constant(0.0, dtype)), dtype
    )
    var = ctx.pointwise(var_name, m2.shape, dtype, lambda idx: Op("div", (m2.load(idx), denominator), dtype))
    return [var, mean]


# ---- vector norms -----------------------------------------------------------------------------------

# ord -> (reduction type, element value of x, whether the result is the square root): the norms whose
# loops are one reduction. Other orders (0, fractional p) run through torch's kernel.
_NORMS = {
    2: ("sum", lambda x: Op("mul", (x, x), x.dtype), True),
    1: ("sum", lambda x: Op("abs", (x,), x.dtype), False),
    float("inf"): ("max", lambda x: Op("abs", (x,), x.dtype), False),
    float("-inf"): ("min", lambda x: Op("abs", (x,), x.dtype), False),
}


def _norm_args(node: Node):
    """(input, ord, dims or None, keepdim, dtype) of `aten.linalg_vector_norm.default`."""
    names = ("x", "ord", "dim", "keepdim", "dtype")
    args = dict(zip(names, node.args)) | dict(node.kwargs)
    return args["x"], args.get("ord", 2), args.get("dim"), bool(args.get("keepdim", False)), args.get("dtype")


@register_lowering("aten.linalg_vector_norm.default")
def _lower_vector_norm(ctx: LoweringContext, node: Node) -> ViewRef | list[ViewRef]:
    # prims keeps this op whole; its 2-, 1- and inf-norms are one reduction of |x| here, so they fuse
    # and vectorize like sums (a column norm runs blocked over the kept dim).
    from torchsmith.inductor.lowering.fallback import lower_fallback

    a, order, dims, keepdim, dtype = _norm_args(node)
    src = ctx.ref(a)
    order = float(order) if isinstance(order, (int, float)) else order
    if order not in _NORMS or dtype is not None or not src.dtype.is_floating_point:
        return lower_fallback(ctx, node)
    rank = len(src.shape)
    dims = tuple(range(rank)) if dims is None or len(dims) == 0 else tuple(sorted(d % rank for d in dims))
    kind, element, root = _NORMS[order]
    out = node.outputs[0]
    name = f"{out.name}_acc" if root else out.name

    def value_of(idx):
        return element(src.load(idx))

    if not rank:  # a 0-d tensor: its norm is |x|
        return ctx.pointwise(out.name, (), src.dtype, lambda idx: Op("abs", (src.load(idx),), src.dtype))
    reduced = reduce(ctx, name, src, dims, kind, value_of)
    if keepdim:
        kept = [d for d in range(rank) if d not in dims]
        shape = tuple(1 if d in dims else src.shape[d] for d in range(rank))
        reduced = reduced.remap(shape, [index_vars(rank)[d] for d in kept])
    if not root:
        return reduced
    return ctx.pointwise(
        out.name, reduced.shape, src.dtype, lambda idx: Op("sqrt", (reduced.load(idx),), src.dtype)
    )
