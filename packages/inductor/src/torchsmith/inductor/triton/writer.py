"""The pieces every Triton kernel emitter shares: the kernel's description for the runtime
(`TritonKernelSpec`), `in_kernel_space` (a member's expression over the kernel's block indices) and
`TritonBodyWriter`, which turns such expressions into Triton statements, one named temporary per
distinct subexpression (so two members reading the same element load it once)."""

from collections.abc import Callable
from dataclasses import dataclass

import sympy
import torch

from torchsmith.inductor.loop_ir.program import Constant, Expr, IndexValue, Indirect, Load, Op, map_indices
from torchsmith.inductor.triton.group import ReductionResult
from torchsmith.inductor.triton.index import (
    Axis,
    compute_dtype,
    kernel_symbols_in,
    to_kernel_space,
    triton_dtype,
    triton_index,
)
from torchsmith.inductor.triton.ops import triton_constant, triton_op

Config = tuple[tuple[str, int], ...]  # ("XBLOCK", 1024), ..., ("num_warps", 4)


@dataclass(frozen=True, slots=True)
class TritonKernelSpec:
    """One generated kernel, as the runtime launches it: pointer arguments are `writes` then `reads`
    (buffer names), then every size symbol of the program; `numels` are the flat extents of its
    axes (`x` for pointwise, `y, x` or `outer, y, x` for tiled, `x, r` for reductions); `configs` the launch
    configurations the autotuner may pick from (the first is the default)."""

    name: str
    kind: str
    writes: tuple[str, ...]
    reads: tuple[str, ...]
    numels: tuple[sympy.Expr, ...]
    configs: tuple[Config, ...]


def in_kernel_space(expr: Expr, axes: tuple[Axis, ...]) -> Expr:
    """`expr` with every index over a member's loop variables rewritten over the kernel's axes."""
    return map_indices(expr, lambda index: to_kernel_space(index, axes))


def next_power_of_2(n: int) -> int:
    return 1 << max(0, (int(n) - 1).bit_length())


class TritonBodyWriter:
    """Appends `tmpN = ...` statements to `lines`; `mask_of(kernel symbols)` names the mask a load
    with those indices needs, `zero_index` is a zero block of the kernel's shape (it broadcasts
    loads whose index uses no block index), `rank` the number of block dims."""

    def __init__(
        self,
        pointer_of: dict[str, str],
        mask_of: Callable[[set[str]], str],
        zero_index: str,
        rank: int,
        lines: list[str],
        indent: str,
        counter: list[int],
        results: dict[str, str] | None = None,
    ):
        self.pointer_of, self.mask_of = pointer_of, mask_of
        self.zero_index, self.rank, self.lines, self.indent = zero_index, rank, lines, indent
        self.counter, self.results = counter, results if results is not None else {}
        self.names: dict[Expr, str] = {}

    def _emit(self, code: str) -> str:
        name = f"tmp{self.counter[0]}"
        self.counter[0] += 1
        self.lines.append(f"{self.indent}{name} = {code}")
        return name

    def index(self, index) -> tuple[str, set[str]]:
        """Code of a kernel-space index, and the block indices it uses."""
        return triton_index(index), kernel_symbols_in(index)

    def value(self, expr: Expr) -> str:
        """The name of a temporary holding `expr` (an element expression over kernel indices)."""
        if expr in self.names:
            return self.names[expr]
        if isinstance(expr, ReductionResult):
            return self.results[expr.buffer]
        if isinstance(expr, Constant):
            shape = ", ".join(["1"] * self.rank)
            dtype = triton_dtype(compute_dtype(expr.dtype))
            code = f"tl.full([{shape}], {triton_constant(expr.value, expr.dtype)}, {dtype})"
        elif isinstance(expr, Load):
            index, used = self.index(expr.index)
            if not used:
                index = f"{index} + {self.zero_index}"
            code = f"tl.load({self.pointer_of[expr.buffer]} + ({index}), {self.mask_of(used)}, other=0)"
            if compute_dtype(expr.dtype) != expr.dtype:
                code += ".to(tl.float32)"
        elif isinstance(expr, IndexValue):
            index, _ = self.index(expr.expr)
            code = f"({index} + {self.zero_index}).to({triton_dtype(compute_dtype(expr.dtype))})"
        elif isinstance(expr, Op):
            code = triton_op(expr, [self.value(a) for a in expr.args])
        elif isinstance(expr, Indirect):
            return self._indirect(expr)
        else:
            raise TypeError(f"not an element expression: {expr!r}")
        name = self._emit(code)
        self.names[expr] = name
        return name

    def _indirect(self, expr: Indirect) -> str:
        # A fresh name per binding: two gathers may both call their variable x0.
        value = self.value(expr.value)
        size = triton_index(expr.size)
        # An index outside [0, size) reads element 0 instead of faulting (no IndexError on the GPU yet).
        name = self._emit(f"tl.where(({value} >= 0) & ({value} < {size}), {value}, 0).to(tl.int32)")
        symbol = sympy.Symbol(name, integer=True, nonnegative=True)
        body = map_indices(expr.body, lambda index: sympy.sympify(index).xreplace({expr.var: symbol}))
        result = self.value(body)
        self.names[expr] = result
        return result

    def indirect_store(
        self, pointer: str, index, position: str, target, dim: int, value: str, mask: str
    ) -> None:
        """Store `value` into `target` (a TensorView) at a kernel-space `index` plus `position` (a
        temporary: the element's place along `dim`, read from an index tensor) times that dim's
        stride. A position outside `[0, size)` stores nothing, as a gather reads element 0 there:
        no IndexError on the GPU yet."""
        code, used = self.index(index)
        if not used:
            code = f"{code} + {self.zero_index}"
        stride, size = triton_index(target.strides[dim]), triton_index(target.shape[dim])
        dtype = target.dtype
        cast = "" if dtype == torch.bool else f".to({triton_dtype(dtype)})"
        inside = f"{mask} & ({position} >= 0) & ({position} < {size})"
        place = f"{pointer} + ({code} + {position} * {stride})"
        self.lines.append(f"{self.indent}tl.store({place}, {value}{cast}, {inside})")

    def store(self, pointer: str, index, value: str, dtype: torch.dtype, mask: str) -> None:
        """Store `value` at a kernel-space `index`, cast to the buffer's dtype."""
        code, used = self.index(index)
        if not used:
            code = f"{code} + {self.zero_index}"
        cast = "" if dtype == torch.bool else f".to({triton_dtype(dtype)})"
        self.lines.append(f"{self.indent}tl.store({pointer} + ({code}), {value}{cast}, {mask})")
