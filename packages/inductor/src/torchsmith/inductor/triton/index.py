"""Index arithmetic for Triton kernels: printing sympy index expressions as Triton code, and moving a
buffer's per-dim loop variables (`i0, i1, ...`, `r0, ...`) into a kernel's flat block indices
(`xindex`, `yindex`, `rindex`).

A kernel iterates over one or two flat axes; each axis covers a tuple of a member's loop variables
in row-major order. An index that is a multiple of the axis' own row-major flattening (the common
case: a contiguous read of a same-shaped tensor) becomes `c * xindex`, with no division at all;
otherwise each variable is decoded with `//` and `%`.
"""

from dataclasses import dataclass

import sympy
import torch

from torchsmith.inductor.errors import CodegenError
from torchsmith.inductor.loop_ir.index_print import TRITON_INDEX, print_index
from torchsmith.ir.symbolic import FloorDiv

TRITON_DTYPES = {
    torch.float32: "tl.float32",
    torch.float64: "tl.float64",
    torch.float16: "tl.float16",
    torch.bfloat16: "tl.bfloat16",
    torch.int64: "tl.int64",
    torch.int32: "tl.int32",
    torch.int16: "tl.int16",
    torch.int8: "tl.int8",
    torch.uint8: "tl.uint8",
    torch.bool: "tl.int1",
}


def triton_dtype(dtype: torch.dtype) -> str:
    """The Triton spelling of a torch dtype."""
    try:
        return TRITON_DTYPES[dtype]
    except KeyError:
        raise CodegenError(
            f"the Triton backend does not support {dtype} (supported: {', '.join(map(str, TRITON_DTYPES))})"
        ) from None


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """Half-precision values are loaded into float32 and computed there, as eager's kernels do."""
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


def triton_index(expr) -> str:
    """An integer index/size expression as Triton code (size symbols are kernel arguments)."""
    return print_index(expr, TRITON_INDEX)


def product(dims) -> sympy.Expr:
    total = sympy.Integer(1)
    for d in dims:
        total = total * d
    return total


def row_major_strides(ranges) -> list[sympy.Expr]:
    strides, step = [], sympy.Integer(1)
    for r in reversed(ranges):
        strides.append(step)
        step = step * r
    return list(reversed(strides))


@dataclass(frozen=True, slots=True)
class Axis:
    """A flat kernel index `symbol` enumerating `variables` (with `ranges`) in row-major order."""

    symbol: sympy.Symbol
    variables: tuple[sympy.Symbol, ...]
    ranges: tuple

    def decode(self) -> dict[sympy.Symbol, sympy.Expr]:
        """Each variable as `//` and `%` of the flat index (the outermost needs no `%`)."""
        out = {}
        strides = row_major_strides(self.ranges)
        for k, (v, r, s) in enumerate(zip(self.variables, self.ranges, strides)):
            q = self.symbol if s == 1 else FloorDiv(self.symbol, s)
            out[v] = q if k == 0 else sympy.Mod(q, r)
        return out

    def flat(self) -> sympy.Expr:
        return sum((v * s for v, s in zip(self.variables, row_major_strides(self.ranges))), sympy.Integer(0))


def kernel_symbol(name: str) -> sympy.Symbol:
    return sympy.Symbol(name, integer=True, nonnegative=True)


def to_kernel_space(index, axes: tuple[Axis, ...]) -> sympy.Expr:
    """`index` (over member loop variables) rewritten over the axes' flat symbols."""
    index = sympy.expand(sympy.sympify(index))
    owner = {v: axis for axis in axes for v in axis.variables}
    parts: dict[Axis | None, sympy.Expr] = {}
    for term in sympy.Add.make_args(index):
        touched = {owner[s] for s in term.free_symbols if s in owner}
        if len(touched) > 1:
            return _decoded(index, axes)
        key = next(iter(touched)) if touched else None
        parts[key] = parts.get(key, sympy.Integer(0)) + term
    out = parts.pop(None, sympy.Integer(0))
    for axis, part in parts.items():
        out = out + _flattened(part, axis)
    return out


def _flattened(part: sympy.Expr, axis: Axis) -> sympy.Expr:
    """`c * symbol` when `part` is c times the axis' flat index, else the decoded form."""
    flat = axis.flat()
    scale = part.coeff(axis.variables[-1], 1)
    if not (scale.free_symbols & set(axis.variables)) and sympy.expand(part - scale * flat) == 0:
        return scale * axis.symbol
    return _decoded(part, (axis,))


def _decoded(expr, axes) -> sympy.Expr:
    mapping = {}
    for axis in axes:
        mapping.update(axis.decode())
    return expr.xreplace(mapping)


def kernel_symbols_in(expr) -> set[str]:
    """Names of the flat kernel indices an expression uses."""
    return {s.name for s in sympy.sympify(expr).free_symbols if s.name in ("xindex", "yindex", "rindex")}


def step_along(index, var, variables) -> int | None:
    """How far `index` moves when `var` goes from 0 to 1 with every other of `variables` at 0 (its
    stride for a plain strided read), or None when that is not a constant (size symbols)."""
    index = sympy.sympify(index)
    zero = {v: sympy.Integer(0) for v in variables}
    step = sympy.expand(index.xreplace({**zero, var: sympy.Integer(1)}) - index.xreplace(zero))
    return int(step) if step.is_Integer else None


def walks_columns(indices, row_vars, reduced_vars) -> bool:
    """Whether reading `indices` (over output variables `row_vars` and reduced variables
    `reduced_vars`) is a column walk: no read is contiguous along the reduced dims, and some read
    is contiguous along the output dims (a sum over dim 0 of a row-major matrix). Such reductions
    want lanes along the output dims and a loop over the reduced ones."""
    if not indices or not row_vars or not reduced_vars:
        return False
    every = tuple(row_vars) + tuple(reduced_vars)
    if any(step_along(i, reduced_vars[-1], every) == 1 for i in indices):
        return False
    return any(step_along(i, row_vars[-1], every) == 1 for i in indices)
