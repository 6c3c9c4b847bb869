"""The lowerings of reductions (sum, prod, amax, amin, var_mean) to `Reduction` loop bodies."""

import sympy

from torchsmith.inductor.loop_ir import Constant, IndexValue, Op, Reduction, index_vars, reduction_vars
from torchsmith.inductor.lower import LoweringContext, register_lowering
from torchsmith.inductor.views import ViewRef
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
    value = value_of(indices)
    shape = tuple(src.shape[d] for d in kept)
    body = Reduction(shape, tuple(src.shape[d] for d in dims), reduction_type, value)
    return ctx.add_buffer(name, shape, value.dtype, body)


@register_lowering(*REDUCTION_OF)
def _lower_reduction(ctx: LoweringContext, node: Node) -> ViewRef:
    a, dims = node.args
    return reduce(ctx, node.outputs[0].name, ctx.ref(a), tuple(dims), REDUCTION_OF[node.op])


@register_lowering("prims.var_mean")
def _lower_var_mean(ctx: LoweringContext, node: Node) -> list[ViewRef]:
    # Two passes (mean, then squared deviations from it) for now; Welford in one pass comes next.
    a, dims, correction = node.args
    src, dims, dtype = ctx.ref(a), tuple(dims), node.outputs[0].type.dtype
    var_name, mean_name = (v.name for v in node.outputs)
    kept = [d for d in range(len(src.shape)) if d not in dims]
    count: sympy.Expr = sympy.Integer(1)
    for d in dims:
        count = count * src.shape[d]
    n = IndexValue(count, dtype)
    total = reduce(ctx, f"{mean_name}_sum", src, dims, "sum")
    mean = ctx.pointwise(mean_name, total.shape, dtype, lambda idx: Op("div", (total.load(idx), n), dtype))

    def squared_deviation(indices):
        deviation = Op("sub", (src.load(indices), mean.load([indices[d] for d in kept])), dtype)
        return Op("mul", (deviation, deviation), dtype)

    squares = reduce(ctx, f"{var_name}_squares", src, dims, "sum", squared_deviation)
    # torch divides by max(n - correction, 0): a non-positive count gives inf or nan, not a negative.
    denominator = Op(
        "maximum", (Op("sub", (n, Constant(float(correction), dtype)), dtype), Constant(0.0, dtype)), dtype
    )
    var = ctx.pointwise(
        var_name, total.shape, dtype, lambda idx: Op("div", (squares.load(idx), denominator), dtype)
    )
    return [var, mean]
