"""The lowering of `prims.cumsum` (an inclusive scan) to loops.

The loop IR has pointwise and reduction bodies but no sequential scan body yet (that needs a body
kind the scheduler, memory planner and both code generators know). A prefix sum is, though, a
reduction: element j along the scanned dim is the sum over r of `x[r] if r <= j else 0`, a masked
row reduction that the C++ and Triton reduction code generators vectorize, and into which the
scan's producers inline (GPT-2's position ids: `cumsum(mask.ne(0)) * mask` becomes one kernel).
It does `length` times the work of a sequential scan, so it is taken only for scans short enough
that the extra work costs less than an extern call and a materialized input: at most
`MAX_SCAN_LENGTH` along the dim and `MAX_SCAN_WORK` element-steps in all (static sizes). Longer scans
run torch's kernel as an extern call (listed among the program's fallbacks, with that reason).

Sums run in the operand's dtype (the decomposition already moved ints and bools to int64 and
16-bit floats to float32), so integer results are exact and wrap as torch's do; float results
differ from eager's sequential order only by rounding.
"""

import sympy
import torch

from torchsmith.inductor.loop_ir.program import Constant, IndexValue, Op, Reduction, index_vars, reduction_var
from torchsmith.inductor.lowering.fallback import extern_params
from torchsmith.inductor.lowering.lower import LoweringContext, register_lowering
from torchsmith.inductor.lowering.view_refs import ViewRef
from torchsmith.ir import Node

MAX_SCAN_LENGTH = 1024
MAX_SCAN_WORK = 1 << 22  # elements x scan length: ~4M masked adds, a millisecond or two on one core


def _static_work(shape, dim) -> int | None:
    """numel * length of the scanned dim, or None when a size is symbolic."""
    if not all(isinstance(d, (int, sympy.Integer)) for d in shape):
        return None
    total = 1
    for d in shape:
        total *= int(d)
    return total * int(shape[dim])


def _too_long(shape, dim) -> str | None:
    """Why the masked-reduction form is not taken for a scan of `shape` along `dim` (None: it is)."""
    work = _static_work(shape, dim)
    if work is None:
        return "a scan over symbolic sizes: its cost as a masked reduction is unknown; torch's kernel"
    if int(shape[dim]) > MAX_SCAN_LENGTH or work > MAX_SCAN_WORK:
        return (
            f"a scan of length {int(shape[dim])} over {work // max(int(shape[dim]), 1)} elements: as a "
            "masked reduction it would do length x the work; torch's sequential kernel"
        )
    return None


@register_lowering("prims.cumsum")
def _lower_cumsum(ctx: LoweringContext, node: Node) -> ViewRef:
    a, dim = node.args
    src = ctx.ref(a)
    name, dtype = node.outputs[0].name, node.outputs[0].type.dtype
    rank = len(src.shape)
    if rank == 0:  # a 0-d cumsum is a copy
        return ctx.pointwise(name, (), dtype, src.load)
    dim = dim % rank
    reason = _too_long(src.shape, dim)
    if reason is not None:
        params, kwargs, tensors = extern_params(ctx, node)
        (ref,) = ctx.extern(node, node.op, params=params, kwargs=kwargs, tensors=tensors, fallback=reason)
        return ref
    out = index_vars(rank)
    r = reduction_var(0)
    indices = [r if d == dim else v for d, v in enumerate(out)]
    # Element j sums x[r] for r <= j: the mask compares the reduction variable with the output's.
    keep = Op("le", (IndexValue(r, torch.int64), IndexValue(out[dim], torch.int64)), torch.bool)
    zero = Constant(0.0 if dtype.is_floating_point else 0, dtype)
    value = Op("where", (keep, src.load(indices), zero), dtype)
    body = Reduction(tuple(src.shape), (src.shape[dim],), "sum", value)
    return ctx.add_buffer(name, src.shape, dtype, body)
