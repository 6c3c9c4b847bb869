"""C++ code generation: a `LoopProgram` -> one translation unit with one `extern "C"` function per
kernel.

A kernel is a group of buffers that share one outer (pointwise) iteration space; today every group
holds one buffer, and the scheduler will hand over fused groups. The loop nest is emitted once per
group; inside it each buffer emits its own body (reductions as an inner loop with an accumulator),
so fusing pointwise and reduction buffers only changes the grouping, not this emitter.
"""

import math
from dataclasses import dataclass

import sympy
import torch

from torchsmith.inductor import vector_math
from torchsmith.inductor.cpp_prelude import CPP_PRELUDE
from torchsmith.inductor.errors import CodegenError
from torchsmith.inductor.loop_ir import (
    ComputedBuffer,
    Constant,
    Expr,
    IndexValue,
    Load,
    LoopProgram,
    Op,
    Pointwise,
    Reduction,
    index_vars,
    loads,
    reduction_vars,
)
from torchsmith.ir.symbolic import FloorDiv, format_dim

CPP_TYPES = {
    torch.float32: "float",
    torch.float64: "double",
    torch.int64: "int64_t",
    torch.int32: "int32_t",
    torch.int16: "int16_t",
    torch.int8: "int8_t",
    torch.uint8: "uint8_t",
    torch.bool: "bool",
}

# Below this many elements of work a kernel runs on one thread: OpenMP's fork/join costs more.
PARALLEL_THRESHOLD = 32768


def cpp_type(dtype: torch.dtype) -> str:
    try:
        return CPP_TYPES[dtype]
    except KeyError:
        raise CodegenError(
            f"the C++ backend does not support {dtype} yet (supported: {', '.join(map(str, CPP_TYPES))})"
        ) from None


def cpp_index(expr) -> str:
    """An integer index/size expression in C++ (loop variables and size symbols are int64_t)."""
    expr = sympy.sympify(expr)
    if expr.is_Integer:
        return str(int(expr))
    if expr.is_Symbol:
        return expr.name
    if isinstance(expr, sympy.Add):
        return "(" + " + ".join(cpp_index(a) for a in expr.args) + ")"
    if isinstance(expr, sympy.Mul):
        return "(" + " * ".join(cpp_index(a) for a in expr.args) + ")"
    if isinstance(expr, FloorDiv):
        # Indices and sizes are non-negative, where C's truncating division is floor division.
        return f"({cpp_index(expr.args[0])} / {cpp_index(expr.args[1])})"
    if isinstance(expr, sympy.Mod):
        return f"({cpp_index(expr.args[0])} % {cpp_index(expr.args[1])})"
    if isinstance(expr, (sympy.Max, sympy.Min)):
        fn = "std::max" if isinstance(expr, sympy.Max) else "std::min"
        out = cpp_index(expr.args[0])
        for a in expr.args[1:]:
            out = f"{fn}<int64_t>({out}, {cpp_index(a)})"
        return out
    if isinstance(expr, sympy.Pow) and expr.exp.is_Integer and expr.exp > 0:
        return "(" + " * ".join([cpp_index(expr.base)] * int(expr.exp)) + ")"
    raise CodegenError(f"cannot print index expression {format_dim(expr)} in C++")


def cpp_constant(value, dtype: torch.dtype) -> str:
    t = cpp_type(dtype)
    if dtype == torch.bool:
        return "true" if value else "false"
    if isinstance(value, float) and (math.isinf(value) or math.isnan(value)):
        if math.isnan(value):
            return f"std::numeric_limits<{t}>::quiet_NaN()"
        return f"{'-' if value < 0 else ''}std::numeric_limits<{t}>::infinity()"
    if isinstance(value, bool):
        value = int(value)
    return f"static_cast<{t}>({value!r})"


UNARY_CPP = {
    "abs": "std::abs({0})", "neg": "-{0}", "sign": "ts::sign({0})", "signbit": "ts::signbit({0})",
    "exp": "std::exp({0})", "exp2": "std::exp2({0})", "expm1": "std::expm1({0})", "log": "std::log({0})",
    "log2": "std::log2({0})", "log10": "std::log10({0})", "log1p": "std::log1p({0})",
    "sqrt": "std::sqrt({0})", "rsqrt": "{T}(1) / std::sqrt({0})", "reciprocal": "{T}(1) / {0}",
    "sin": "std::sin({0})", "cos": "std::cos({0})", "tan": "std::tan({0})", "asin": "std::asin({0})",
    "acos": "std::acos({0})", "atan": "std::atan({0})", "sinh": "std::sinh({0})", "cosh": "std::cosh({0})",
    "tanh": "std::tanh({0})", "asinh": "std::asinh({0})", "acosh": "std::acosh({0})",
    "atanh": "std::atanh({0})", "erf": "std::erf({0})", "erfc": "std::erfc({0})",
    "lgamma": "std::lgamma({0})",
    "floor": "std::floor({0})", "ceil": "std::ceil({0})", "round": "std::nearbyint({0})",
    "trunc": "std::trunc({0})", "isnan": "std::isnan({0})", "isinf": "std::isinf({0})",
    "isfinite": "std::isfinite({0})",
}  # fmt: skip

BINARY_CPP = {
    "add": "{0} + {1}", "sub": "{0} - {1}", "mul": "{0} * {1}", "div": "{0} / {1}",
    "remainder": "ts::remainder<{A}>({0}, {1})", "fmod": "ts::fmod<{A}>({0}, {1})",
    "pow": "ts::pow<{A}>({0}, {1})", "atan2": "std::atan2({0}, {1})",
    "maximum": "ts::maximum<{A}>({0}, {1})", "minimum": "ts::minimum<{A}>({0}, {1})",
    "eq": "{0} == {1}", "ne": "{0} != {1}", "lt": "{0} < {1}", "le": "{0} <= {1}", "gt": "{0} > {1}",
    "ge": "{0} >= {1}", "bitwise_and": "{0} & {1}", "bitwise_or": "{0} | {1}", "bitwise_xor": "{0} ^ {1}",
    "shift_left": "ts::shift_left<{A}>({0}, {1})", "shift_right": "ts::shift_right<{A}>({0}, {1})",
}  # fmt: skip

BOOL_CPP = {"add": "{0} || {1}", "mul": "{0} && {1}", "bitwise_not": "!{0}", "maximum": "{0} || {1}",
            "minimum": "{0} && {1}"}  # fmt: skip


def cpp_op(op: Op, args: list[str]) -> str:
    """The C++ expression of one elementwise op on already-named operands."""
    operand = op.args[-1].dtype
    fmt = dict(T=cpp_type(op.dtype), A=cpp_type(operand))
    if op.op == "convert":
        return f"static_cast<{fmt['T']}>({args[0]})" if op.dtype != torch.bool else f"({args[0]} != 0)"
    if op.op == "where":
        return f"{args[0]} ? {args[1]} : {args[2]}"
    if operand == torch.bool and op.op in BOOL_CPP:
        return BOOL_CPP[op.op].format(*args)
    if op.op == "bitwise_not":
        return f"~{args[0]}"
    table = UNARY_CPP if len(args) == 1 else BINARY_CPP
    if op.op not in table:
        raise CodegenError(f"no C++ form for elementwise op {op.op!r} with {len(args)} operands")
    return table[op.op].format(*args, **fmt)


class BodyWriter:
    """Writes the statements computing expressions, one named temporary per distinct subexpression."""

    def __init__(self, pointer_of: dict[str, str], lines: list[str], indent: str, counter: list[int]):
        self.pointer_of, self.lines, self.indent, self.counter = pointer_of, lines, indent, counter
        self.names: dict[Expr, str] = {}

    def value(self, expr: Expr) -> str:
        if expr in self.names:
            return self.names[expr]
        if isinstance(expr, Load):
            code = f"{self.pointer_of[expr.buffer]}[{cpp_index(expr.index)}]"
        elif isinstance(expr, Constant):
            return cpp_constant(expr.value, expr.dtype)
        elif isinstance(expr, IndexValue):
            code = f"static_cast<{cpp_type(expr.dtype)}>({cpp_index(expr.expr)})"
        else:
            code = cpp_op(expr, [self.value(a) for a in expr.args])
        name = f"t{self.counter[0]}"
        self.counter[0] += 1
        self.lines.append(f"{self.indent}{cpp_type(expr.dtype)} {name} = {code};")
        self.names[expr] = name
        return name


REDUCTION_CPP = {
    # type: (initial value, combine statement)
    "sum": ("0", "{acc} += {v};"),
    "prod": ("1", "{acc} *= {v};"),
    "max": ("std::numeric_limits<{T}>::lowest()", "{acc} = ts::max_combine<{T}>({acc}, {v});"),
    "min": ("std::numeric_limits<{T}>::max()", "{acc} = ts::min_combine<{T}>({acc}, {v});"),
}


def _initial(reduction_type: str, dtype: torch.dtype) -> str:
    t = cpp_type(dtype)
    if dtype.is_floating_point and reduction_type in ("max", "min"):
        sign = "-" if reduction_type == "max" else ""
        return f"{sign}std::numeric_limits<{t}>::infinity()"
    return f"static_cast<{t}>({REDUCTION_CPP[reduction_type][0].format(T=t)})"


@dataclass(frozen=True, slots=True)
class Kernel:
    """One generated function: its C name, the buffers it writes and reads (pointer order)."""

    name: str
    writes: tuple[str, ...]
    reads: tuple[str, ...]


def _work(ranges) -> sympy.Expr:
    total = sympy.Integer(1)
    for r in ranges:
        total = total * r
    return total


def _outer_ranges(group: tuple[ComputedBuffer, ...]) -> tuple:
    """The loops a group shares: the shortest member ranges, which every member's ranges extend.
    A lone pointwise buffer keeps its last dim as its own loop so that loop can be vectorized."""
    first = group[0].body
    if len(group) == 1 and isinstance(first, Pointwise) and len(first.ranges) > 1:
        return first.ranges[:-1]
    outer = min((b.body.ranges for b in group), key=len)
    for b in group:
        prefix = b.body.ranges[: len(outer)]
        if len(prefix) != len(outer) or any(sympy.expand(x - y) != 0 for x, y in zip(prefix, outer)):
            raise CodegenError(
                f"buffer {b.name} with ranges {list(b.body.ranges)} cannot share the loops "
                f"{list(outer)} of its group {[m.name for m in group]}"
            )
    return outer


def emit_kernel(name: str, group: tuple[ComputedBuffer, ...], program: LoopProgram) -> tuple[Kernel, str]:
    """The C++ function computing the buffers of `group`, in order, in one loop nest.

    The members share the outer loops (`_outer_ranges`); inside them each member loops over its
    remaining dims and, for a reduction, its reduction dims. A member reads what an earlier member
    stored in the same outer iteration straight from memory: the scheduler only groups buffers
    whose reads stay inside that iteration (softmax rows, layer-norm rows).
    """
    outer = _outer_ranges(group)
    dtypes = {b.name: b.layout.dtype for b in program.buffers} | {
        i.name: i.layout.dtype for i in program.inputs
    }
    writes = tuple(b.name for b in group)
    reads = tuple(
        dict.fromkeys(ld.buffer for b in group for ld in loads(b.body.value) if ld.buffer not in writes)
    )
    pointer_of = {n: f"out_{_c_name(n)}" for n in writes} | {n: f"in_{_c_name(n)}" for n in reads}
    params = [f"{cpp_type(dtypes[n])}* __restrict__ {pointer_of[n]}" for n in writes]
    params += [f"const {cpp_type(dtypes[n])}* __restrict__ {pointer_of[n]}" for n in reads]
    params += [f"int64_t {s}" for s in program.symbols]
    lines = [f'extern "C" void {name}({", ".join(params)}) {{']
    biggest = max(group, key=lambda b: len(b.body.ranges) + len(getattr(b.body, "reduction_ranges", ())))
    total_work = _work(biggest.body.ranges) * _work(getattr(biggest.body, "reduction_ranges", ()))
    # A lone 1-d pointwise loop is both the threaded and the vectorized loop.
    simd_outer = len(group) == 1 and isinstance(group[0].body, Pointwise) and len(outer) == 1
    if outer:
        pragma = _parallel_pragma(len(outer), total_work, simd_outer)
        if pragma or simd_outer:
            lines.append(f"  {pragma or '#pragma omp simd'}")
    for depth, (v, r) in enumerate(zip(index_vars(len(outer)), outer)):
        lines.append(f"{'  ' * (depth + 1)}for (int64_t {v} = 0; {v} < {cpp_index(r)}; ++{v}) {{")
    indent = "  " * (len(outer) + 1)
    counter = [0]
    for buffer in group:
        _emit_member(buffer, len(outer), pointer_of, lines, indent, counter)
    for depth in reversed(range(len(outer))):
        lines.append(f"{'  ' * (depth + 1)}}}")
    lines.append("}")
    return Kernel(name, writes, reads), "\n".join(lines)


def _parallel_pragma(depth: int, work, simd: bool) -> str | None:
    """The OpenMP pragma threading the `depth` outer loops, or None when the work is too small."""
    head = "#pragma omp parallel for" + (" simd" if simd else "")
    head += f" collapse({depth})" if depth > 1 else ""
    work = sympy.sympify(work)
    if work.is_Integer:
        return head if int(work) >= PARALLEL_THRESHOLD else None
    return f"{head} if({cpp_index(work)} >= {PARALLEL_THRESHOLD})"


def _emit_member(
    buffer: ComputedBuffer, shared: int, pointer_of, lines: list[str], indent: str, counter
) -> None:
    """One buffer's loops beyond the `shared` outer ones, its body and its store."""
    body, layout = buffer.body, buffer.layout
    store = sum((v * s for v, s in zip(index_vars(len(layout.shape)), layout.strides)), sympy.Integer(0))
    target = f"{pointer_of[buffer.name]}[{cpp_index(store)}]"
    lines.append(f"{indent}// {buffer.origin or buffer.name}")
    extra = list(zip(index_vars(len(body.ranges)), body.ranges))[shared:]
    for depth, (v, r) in enumerate(extra):
        if isinstance(body, Pointwise) and depth == len(extra) - 1:
            # Iterations are independent and buffers never alias: let the compiler vectorize.
            lines.append(f"{indent}{'  ' * depth}#pragma omp simd")
        lines.append(f"{indent}{'  ' * depth}for (int64_t {v} = 0; {v} < {cpp_index(r)}; ++{v}) {{")
    inner_indent = indent + "  " * len(extra)
    if isinstance(body, Pointwise):
        writer = BodyWriter(pointer_of, lines, inner_indent, counter)
        lines.append(f"{inner_indent}{target} = {writer.value(body.value)};")
    else:
        _emit_reduction(body, layout.dtype, target, pointer_of, lines, inner_indent, counter)
    for depth in reversed(range(len(extra))):
        lines.append(f"{indent}{'  ' * depth}}}")


def _emit_reduction(body: Reduction, dtype, target: str, pointer_of, lines, indent: str, counter) -> None:
    t = cpp_type(dtype)
    if dtype == torch.float32 and body.reduction_type in ("sum", "prod"):
        # A float accumulator drifts ~sqrt(n) ulps from eager's cascade sum; double stays within eager's
        # own error at half the vector width. (Cascade or Kahan partials are the faster fix to come.)
        t = "double"
    acc = f"acc{counter[0]}"
    counter[0] += 1
    lines.append(f"{indent}{t} {acc} = {_initial(body.reduction_type, dtype)};")
    rvars = reduction_vars(len(body.reduction_ranges))
    for depth, (v, r) in enumerate(zip(rvars, body.reduction_ranges)):
        if body.reduction_type == "sum" and depth == len(rvars) - 1:
            # Vector partial sums reorder the additions, as eager's own vectorized sum does.
            lines.append(f"{indent}{'  ' * depth}#pragma omp simd reduction(+:{acc})")
        lines.append(f"{indent}{'  ' * depth}for (int64_t {v} = 0; {v} < {cpp_index(r)}; ++{v}) {{")
    inner = indent + "  " * len(rvars)
    writer = BodyWriter(pointer_of, lines, inner, counter)
    value = writer.value(body.value)
    lines.append(inner + REDUCTION_CPP[body.reduction_type][1].format(acc=acc, v=value, T=t))
    for depth in reversed(range(len(rvars))):
        lines.append(f"{indent}{'  ' * depth}}}")
    lines.append(f"{indent}{target} = static_cast<{cpp_type(dtype)}>({acc});")


Group = tuple[ComputedBuffer, ...]


def generate_cpp(
    program: LoopProgram, groups: list[Group] | None = None
) -> tuple[str, list[tuple[Kernel, Group]]]:
    """The translation unit of `program`: one kernel per group of computed buffers (default: one
    buffer per group; the scheduler passes fused groups), returned with each kernel and its group."""
    if groups is None:
        groups = [(b,) for b in program.buffers if isinstance(b, ComputedBuffer)]
    parts = [f"// torchsmith inductor: graph {program.name}", CPP_PRELUDE, vector_math.declarations()]
    kernels = []
    for k, group in enumerate(groups):
        kernel, code = emit_kernel(f"kernel{k}_{_c_name(group[0].name)}", tuple(group), program)
        parts.append(code)
        kernels.append((kernel, tuple(group)))
    return "\n\n".join(parts) + "\n", kernels


def _c_name(name: str) -> str:
    return "".join(c if c.isalnum() or c == "_" else "_" for c in name)
