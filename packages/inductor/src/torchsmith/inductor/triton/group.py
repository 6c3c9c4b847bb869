"""What one Triton kernel computes: a group of buffers whose reads of each other are resolved in
registers instead of through memory.

A Triton program cannot read back what another lane of the same launch stored, so a member that
reads an earlier pointwise member gets that member's expression inlined (its loop variables bound
to the per-dim indices of the load), and a member that reads an earlier reduction of the same row
reads the reduction's result. A read that is neither (another element of a member) makes the group
unfit for one kernel: `CodegenError`, and the caller splits the group.
"""

from dataclasses import dataclass

import sympy

from torchsmith.inductor.errors import CodegenError
from torchsmith.inductor.loop_ir.index_math import split_index
from torchsmith.inductor.loop_ir.program import (
    ComputedBuffer,
    Expr,
    Indirect,
    Load,
    Op,
    Pointwise,
    Reduction,
    index_vars,
    map_indices,
    reduction_vars,
)
from torchsmith.ir.symbolic import format_dim


@dataclass(frozen=True, slots=True)
class ReductionResult:
    """The finished value of reduction member `buffer` for the current row (an element expression)."""

    buffer: str
    dtype: object

    def __str__(self) -> str:
        return f"result({self.buffer})"


def _same(a, b) -> bool:
    return sympy.expand(sympy.sympify(a) - sympy.sympify(b)) == 0


def _member_vars(buffer: ComputedBuffer) -> dict:
    body = buffer.body
    ranges = dict(zip(index_vars(len(body.ranges)), body.ranges))
    if isinstance(body, Reduction):
        ranges |= dict(zip(reduction_vars(len(body.reduction_ranges)), body.reduction_ranges))
    return ranges


def drop_unit_vars(buffer: ComputedBuffer) -> dict:
    """The substitution sending the buffer's size-1 loop variables to 0 (they only ever take 0)."""
    return {v: sympy.Integer(0) for v, r in _member_vars(buffer).items() if r == 1}


def resolve_group(group: tuple[ComputedBuffer, ...], shared: int) -> dict[str, Expr]:
    """Each member's value with its reads of earlier pointwise members inlined and its reads of
    earlier reductions replaced by `ReductionResult`; `shared` is the number of outer loop
    variables all members share (the row of a reduction group)."""
    resolved: dict[str, Expr] = {}
    members = {b.name: b for b in group}
    for buffer in group:
        units = drop_unit_vars(buffer)
        var_ranges = {v: r for v, r in _member_vars(buffer).items() if v not in units}

        def resolve(expr: Expr, buffer=buffer, units=units, var_ranges=var_ranges) -> Expr:
            if isinstance(expr, Op):
                return Op(expr.op, tuple(resolve(a) for a in expr.args), expr.dtype)
            if isinstance(expr, Indirect):
                return Indirect(expr.var, resolve(expr.value), expr.size, resolve(expr.body))
            if not isinstance(expr, Load):
                return expr
            index = sympy.sympify(expr.index).xreplace(units)
            if expr.buffer not in resolved:
                return Load(expr.buffer, index, expr.dtype)
            producer = members[expr.buffer]
            dims = split_index(index, producer.layout.shape, producer.layout.strides, var_ranges)
            if dims is None:
                raise CodegenError(
                    f"{buffer.name} reads group member {producer.name} at {format_dim(index)}, not one "
                    "element per loop iteration: these buffers cannot share one Triton kernel"
                )
            if isinstance(producer.body, Reduction):
                # A row variable of size 1 is 0 in this member (`units`): reading row 0 there is
                # reading the current row.
                row = [sympy.sympify(v).xreplace(units) for v in index_vars(shared)]
                if any(not _same(dims[k], row[k]) for k in range(shared)) or any(
                    d != 0 for d in dims[shared:]
                ):
                    raise CodegenError(
                        f"{buffer.name} reads reduction {producer.name} of another row "
                        f"({format_dim(index)}): they cannot share one Triton kernel"
                    )
                return ReductionResult(producer.name, expr.dtype)
            binding = dict(zip(index_vars(len(producer.body.ranges)), dims))
            return _bind(resolved[producer.name], binding)

        resolved[buffer.name] = resolve(buffer.body.value)
    return resolved


def _bind(expr, binding: dict):
    return map_indices(expr, lambda index: sympy.sympify(index).xreplace(binding))


def reduction_level(expr, levels: dict[str, int]) -> int:
    """How many reduction loops must finish before `expr` can be computed."""
    if isinstance(expr, ReductionResult):
        return levels[expr.buffer] + 1
    if isinstance(expr, Op):
        return max((reduction_level(a, levels) for a in expr.args), default=0)
    if isinstance(expr, Indirect):
        return max(reduction_level(expr.value, levels), reduction_level(expr.body, levels))
    return 0


def pointwise_only(group) -> bool:
    return all(isinstance(b.body, Pointwise) for b in group)
