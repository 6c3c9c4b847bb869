"""The loop-level IR: buffers defined by pointwise loops or reductions over index expressions.

Everything is data (frozen dataclasses), so a program prints, hashes and compares by value:

- an `Expr` tree computes one element: `Load(buffer, index)` reads the buffer's storage at a flat
  element offset (a sympy expression over the loop variables `i0, i1, ...` and reduction variables
  `r0, r1, ...`, plus size symbols such as `s0`), `Constant`, `IndexValue` (a size expression used
  as a number) and `Op` (an elementwise operation by name, e.g. `"add"`, `"exp"`, `"convert"`);
- a `ComputedBuffer` is written by a `Pointwise` body (element `(i0, ...)` = value) or a
  `Reduction` body (element `(i0, ...)` = combine of value over `(r0, ...)`), in its `Layout`;
- an `ExternCall` is a kept library op (prims.mm, ...) that the Python wrapper runs with torch on
  `TensorView`s of buffers;
- views never copy: a view of a buffer is only a different index expression in the loads that
  read it, or a `TensorView` (shape, strides, offset) where a real strided tensor is needed.
"""

from dataclasses import dataclass
from functools import cache

import sympy
import torch

from torchsmith.ir.dtypes import dtype_name
from torchsmith.ir.symbolic import Dim, format_dim

# ---- loop variables -------------------------------------------------------------------------------


@cache
def index_var(k: int) -> sympy.Symbol:
    """The k-th pointwise loop variable `i<k>` (a non-negative integer)."""
    return sympy.Symbol(f"i{k}", integer=True, nonnegative=True)


@cache
def reduction_var(k: int) -> sympy.Symbol:
    """The k-th reduction loop variable `r<k>`."""
    return sympy.Symbol(f"r{k}", integer=True, nonnegative=True)


def index_vars(n: int) -> tuple[sympy.Symbol, ...]:
    return tuple(index_var(k) for k in range(n))


def reduction_vars(n: int) -> tuple[sympy.Symbol, ...]:
    return tuple(reduction_var(k) for k in range(n))


def is_loop_var_name(name: str) -> bool:
    """Whether `name` is spelled like a loop or indirect index variable (size symbols must not be:
    C++ shares one scope)."""
    return name[:1] in ("i", "r", "x") and name[1:].isdigit()


# ---- element expressions --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Load:
    """Element `index` (flat, in elements) of the storage of `buffer`."""

    buffer: str
    index: sympy.Expr
    dtype: torch.dtype

    def __str__(self) -> str:
        return f"load({self.buffer}, {format_dim(self.index)})"


@dataclass(frozen=True, slots=True)
class Constant:
    value: bool | int | float
    dtype: torch.dtype

    def __str__(self) -> str:
        return f"{self.value!r}:{dtype_name(self.dtype)}"


@dataclass(frozen=True, slots=True)
class IndexValue:
    """A size or index expression used as a number of `dtype` (e.g. the element count of a mean)."""

    expr: sympy.Expr
    dtype: torch.dtype

    def __str__(self) -> str:
        return f"index({format_dim(self.expr)}):{dtype_name(self.dtype)}"


@dataclass(frozen=True, slots=True)
class Op:
    """An elementwise operation; `op` names it as the prim does (`add`, `exp`, `where`, ...), plus
    `convert` (to `dtype`). `dtype` is the result's dtype."""

    op: str
    args: tuple["Expr", ...]
    dtype: torch.dtype

    def __str__(self) -> str:
        inner = ", ".join(map(str, self.args))
        return (
            f"{self.op}({inner})" if self.op != "convert" else f"convert[{dtype_name(self.dtype)}]({inner})"
        )


@dataclass(frozen=True, slots=True)
class Indirect:
    """`body` with the index variable `var` bound to `value`, an integer element read from data: how a
    load's index comes from another buffer (gather, index). `var` (spelled `x<k>`, see
    `indirect_var`) appears in the indices of `body`'s loads like a loop variable. `value` must lie in
    `[0, size)` at run time; a kernel meeting one outside reads element 0 instead and records the bad
    index, which the wrapper raises as eager PyTorch does for that op (see cpp_indirect.py)."""

    var: sympy.Symbol
    value: "Expr"
    size: Dim
    body: "Expr"

    @property
    def dtype(self) -> torch.dtype:
        return self.body.dtype

    def __str__(self) -> str:
        return f"let {self.var} = index({self.value}, {format_dim(self.size)}) in {self.body}"


Expr = Load | Constant | IndexValue | Op | Indirect


@cache
def indirect_var(k: int) -> sympy.Symbol:
    """The k-th indirect index variable `x<k>` (bound by an `Indirect`; never a size symbol)."""
    return sympy.Symbol(f"x{k}", integer=True, nonnegative=True)


def map_indices(expr: Expr, fn) -> Expr:
    """`expr` with every index expression (of loads and index values) replaced by `fn(index)`."""
    if isinstance(expr, Load):
        return Load(expr.buffer, fn(expr.index), expr.dtype)
    if isinstance(expr, IndexValue):
        return IndexValue(fn(expr.expr), expr.dtype)
    if isinstance(expr, Op):
        return Op(expr.op, tuple(map_indices(a, fn) for a in expr.args), expr.dtype)
    if isinstance(expr, Indirect):
        return Indirect(expr.var, map_indices(expr.value, fn), expr.size, map_indices(expr.body, fn))
    return expr


def substitute(expr: Expr, mapping: dict) -> Expr:
    """Replace loop variables in every index of `expr`, simultaneously (`{i0: r1, i1: i0}` swaps)."""
    return map_indices(expr, lambda index: sympy.sympify(index).xreplace(mapping))


def loads(expr: Expr) -> list[Load]:
    """The loads in `expr`, in evaluation order (repeats kept)."""
    if isinstance(expr, Load):
        return [expr]
    if isinstance(expr, Op):
        return [x for a in expr.args for x in loads(a)]
    if isinstance(expr, Indirect):
        return loads(expr.value) + loads(expr.body)
    return []


# ---- buffers --------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Layout:
    shape: tuple[Dim, ...]
    strides: tuple[Dim, ...]
    dtype: torch.dtype

    def __str__(self) -> str:
        dims = ", ".join(map(format_dim, self.shape))
        strides = ", ".join(map(format_dim, self.strides))
        return f"{dtype_name(self.dtype)}[{dims}]{{{strides}}}"


@dataclass(frozen=True, slots=True)
class Pointwise:
    """Element `(i0, ..., i<n-1>)` over `ranges` is `value`."""

    ranges: tuple[Dim, ...]
    value: Expr

    def __str__(self) -> str:
        return f"pointwise [{', '.join(map(format_dim, self.ranges))}]: {self.value}"


REDUCTION_TYPES = ("sum", "prod", "max", "min", "welford_mean", "welford_m2", "argmax", "argmin")


@dataclass(frozen=True, slots=True)
class Reduction:
    """Element `(i0, ...)` over `ranges` combines `value` over `(r0, ...)` in `reduction_ranges`
    with `reduction_type` (one of REDUCTION_TYPES); the buffer's dtype is the result's.

    - sum, prod, max, min: as torch (max/min propagate nan); the result has the value's dtype.
    - welford_mean, welford_m2: the mean of the values, and the sum of their squared deviations from
      it (M2; variance = M2 / (count - correction)), computed in one pass with Welford's merge. Two
      buffers with these types, the same ranges and the same value are computed together by the code
      generators when they are in one kernel group (var_mean lowers to such a pair).
    - argmax, argmin: the int64 position of the max (min) value in the reduction ranges flattened
      row-major (for one reduced dim: the index along it); first position on ties; a nan counts as
      the max (min), so the first nan wins, as in torch.argmax.
    """

    ranges: tuple[Dim, ...]
    reduction_ranges: tuple[Dim, ...]
    reduction_type: str
    value: Expr

    def __str__(self) -> str:
        ranges = ", ".join(map(format_dim, self.ranges))
        rranges = ", ".join(map(format_dim, self.reduction_ranges))
        return f"reduce {self.reduction_type} [{ranges}] over [{rranges}]: {self.value}"


@dataclass(frozen=True, slots=True)
class Scatter:
    """A copy of a tensor with elements written at positions read from data (scatter, scatter_add,
    index_put): element `(i0, ...)` over `ranges` starts as the base, then for every `(r0, ...)` in
    `reduction_ranges` (the elements of the index and source tensors) the element at flat offset
    `position` is set to the written value, or has it added when `accumulate`.

    `value` is `Op("scatter", (base, write))` so that every pass that reads, inlines into or
    renames a body's expression sees both parts: `base` is over `i0, ...`; `write` is over `r0, ...`
    and is the written value inside the `Indirect`s that bind the index variables `x<k>` which
    `position` uses (each must lie in `[0, size)`; a bad one raises as eager does and is not
    written). A write loop variable in `position` appears there as one output coordinate of its
    own, so threads splitting such a loop never write the same element (cpp_scatter relies on it)."""

    ranges: tuple[Dim, ...]
    reduction_ranges: tuple[Dim, ...]
    value: Op
    position: sympy.Expr
    accumulate: bool

    @property
    def base(self) -> "Expr":
        return self.value.args[0]

    @property
    def write(self) -> "Expr":
        return self.value.args[1]

    def __str__(self) -> str:
        ranges = ", ".join(map(format_dim, self.ranges))
        rranges = ", ".join(map(format_dim, self.reduction_ranges))
        how = "add" if self.accumulate else "set"
        return (
            f"scatter [{ranges}] from {self.base}; over [{rranges}]: {how} at {format_dim(self.position)}: "
            f"{self.write}"
        )


@dataclass(frozen=True, slots=True)
class InputBuffer:
    """A tensor input of the graph; `position` is its index among the graph's inputs."""

    name: str
    position: int
    layout: Layout

    def __str__(self) -> str:
        return f"%{self.name}: {self.layout}"


@dataclass(frozen=True, slots=True)
class ComputedBuffer:
    """A buffer written by one loop nest; `origin` names the prims node (and its source line)."""

    name: str
    layout: Layout
    body: "Pointwise | Reduction | Scatter"
    origin: str = ""

    def __str__(self) -> str:
        where = f"  # {self.origin}" if self.origin else ""
        return f"buf {self.name}: {self.layout} = {self.body}{where}"


@dataclass(frozen=True, slots=True)
class TensorView:
    """A strided view of a buffer's storage: what extern calls take and graph outputs return."""

    buffer: str
    shape: tuple[Dim, ...]
    strides: tuple[Dim, ...]
    offset: Dim
    dtype: torch.dtype

    def __str__(self) -> str:
        dims = ", ".join(map(format_dim, self.shape))
        strides = ", ".join(map(format_dim, self.strides))
        return f"view({self.buffer}, [{dims}]{{{strides}}}+{format_dim(self.offset)})"


@dataclass(frozen=True, slots=True)
class TensorArg:
    """In an `ExternCall`'s `params`/`kwargs`: the place of its tensor argument `args[k]`."""

    k: int

    def __str__(self) -> str:
        return f"${self.k}"


@dataclass(frozen=True, slots=True)
class ExternCall:
    """A library op (`kernel` names it: a prim, an aten op, or `extern.output`) run by the wrapper
    with torch (externs.run_extern). `args` are the tensors it reads. With `params` empty it is called
    as `kernel(*args)`; otherwise `params` and `kwargs` (`((name, arg), ...)`) are its arguments
    with `TensorArg(k)` standing for `args[k]`, sizes as sympy expressions over the size symbols,
    lists as `ArgList`s. The result is stored in `layout` (copied there if torch returns another
    layout). `fallback` says why an op with no loop lowering runs this way (empty for library ops).
    For an op returning several tensors, the buffer holds result element `output` (its first tensor)."""

    name: str
    layout: Layout
    kernel: str
    args: tuple[TensorView, ...]
    origin: str = ""
    params: tuple = ()
    kwargs: tuple = ()
    fallback: str = ""
    # Which element of a multi-output op's result this buffer holds (the others: `extern.output`).
    output: int = 0

    def __str__(self) -> str:
        where = f"  # {self.origin}" if self.origin else ""
        if self.params or self.kwargs:
            shown = [_format_param(p, self.args) for p in self.params]
            shown += [f"{k}={_format_param(v, self.args)}" for k, v in self.kwargs]
        else:
            shown = list(map(str, self.args))
        return f"extern {self.name}: {self.layout} = {self.kernel}({', '.join(shown)}){where}"


def _format_param(param, args) -> str:
    if isinstance(param, TensorArg):
        return str(args[param.k])
    if isinstance(param, tuple):
        inner = ", ".join(_format_param(p, args) for p in param)
        return f"[{inner}]" if type(param).__name__ == "ArgList" else f"({inner})"
    if isinstance(param, sympy.Basic):
        return format_dim(param)
    return repr(param)


Buffer = ComputedBuffer | ExternCall


@dataclass(frozen=True, slots=True)
class LoopProgram:
    """A whole graph in loop IR. `inputs` are the graph's tensor inputs; `symbols` the size symbols
    that kernels take as arguments; `buffers` in execution order; `outputs` one view per output."""

    name: str
    num_graph_inputs: int
    inputs: tuple[InputBuffer, ...]
    symbols: tuple[str, ...]
    buffers: tuple[Buffer, ...]
    outputs: tuple[TensorView, ...]
    # (op, reason) of each op that runs through its eager implementation (no loop lowering yet).
    fallbacks: tuple[tuple[str, str], ...] = ()
    # (variable, op, node) of each `Indirect` index variable: which node a failed index check names.
    indirect_sites: tuple[tuple[str, str, str], ...] = ()

    def __str__(self) -> str:
        return format_program(self)


def format_program(program: LoopProgram) -> str:
    """The readable text form of a loop program."""
    header = ", ".join(map(str, program.inputs))
    sizes = f" sizes({', '.join(program.symbols)})" if program.symbols else ""
    lines = [f"loops {program.name}({header}){sizes}:"]
    lines += [f"  # eager fallback {op}: {reason}" for op, reason in program.fallbacks]
    lines += [f"  {b}" for b in program.buffers]
    lines.append(f"  return ({', '.join(map(str, program.outputs))})")
    return "\n".join(lines)
