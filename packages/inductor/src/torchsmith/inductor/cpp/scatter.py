"""C++ of a `Scatter` buffer (scatter, scatter_add, index_put at data-chosen positions): one kernel
that copies the base into the output, then loops over the index and source elements and writes (or
adds) each at the position its index values name.

Index values go through `ts::checked_position` (cpp_indirect's prelude): one outside `[0, size)` is
recorded like a bad gather index, so the wrapper raises eager's exception after the call, and the
element is skipped: a kernel never writes outside its output.

Threading of the write loop, in order of preference:
- a write loop variable that is an output coordinate of its own (the columns of an embedding's
  gradient, the dims of a scatter other than `dim`) is split in blocks among the threads: two
  threads never write one element, so there are no atomics, each element sees its writes in the
  same order as a serial loop (the order eager's kernels add in, for float sums too), and each
  thread still reads contiguous runs of the index and source;
- otherwise (every written position comes from data: `x[idx] += v` on a 1-d x) a large loop runs in
  parallel with `#pragma omp atomic` updates: exact for integer sums (addition modulo 2^n is
  order-free), a different order of float additions than eager (equal within rounding), and any
  one of duplicate plain writes wins, as torch documents for its parallel kernels; 16-bit floats and
  bools have no atomic form here and stay serial;
- small loops (under cpp_codegen.PARALLEL_THRESHOLD elements) are serial.
"""

import sympy
import torch

from torchsmith.inductor.cpp.dtypes import load_code, storage_type, store_code
from torchsmith.inductor.cpp.expr import BodyWriter, cpp_index
from torchsmith.inductor.cpp.indirect import _site
from torchsmith.inductor.loop_ir.program import (
    ComputedBuffer,
    IndexValue,
    Indirect,
    Load,
    LoopProgram,
    index_vars,
    loads,
    reduction_vars,
    substitute,
)
from torchsmith.ir.codegen_text import IdentifierNamer, cpp_comment

# Dtypes whose stored element `#pragma omp atomic` updates (the others: 16-bit floats, computed
# in float and rounded, and bools, stored as bytes but or-ed).
ATOMIC_DTYPES = (torch.float32, torch.float64, torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8)
# A direct loop shorter than this is not worth splitting among threads (atomics are used instead).
MIN_SPLIT = 16


def _product(dims) -> sympy.Expr:
    total = sympy.Integer(1)
    for d in dims:
        total = total * sympy.sympify(d)
    return total


def _condition(work, threshold: int) -> str | None:
    """The OpenMP `if` clause text for `work` elements: "" (always thread), None (never), or a test."""
    work = sympy.sympify(work)
    if work.is_Integer:
        return "" if int(work) >= threshold else None
    return f" if({cpp_index(work)} >= {threshold})"


def _split_var(body, write_vars):
    """The direct write loop (an output coordinate of its own) to split among threads, or None."""
    used = sympy.sympify(body.position).free_symbols
    direct = [(v, sympy.sympify(r)) for v, r in zip(write_vars, body.reduction_ranges) if v in used]
    direct = [(v, r) for v, r in direct if not (r.is_Integer and int(r) < MIN_SPLIT)]
    if not direct:
        return None
    static = [(int(r), -k, v) for k, (v, r) in enumerate(direct) if r.is_Integer]
    return max(static)[2] if len(static) == len(direct) else direct[0][0]


def _varies(expr, var) -> bool:
    """Whether `expr` reads or computes something that depends on loop variable `var`."""
    if isinstance(expr, Load):
        return var in sympy.sympify(expr.index).free_symbols
    if isinstance(expr, IndexValue):
        return var in sympy.sympify(expr.expr).free_symbols
    if isinstance(expr, Indirect):
        return _varies(expr.value, var) or _varies(expr.body, var)
    return any(_varies(a, var) for a in getattr(expr, "args", ()))


def _bind(writer, hoisted, position, expr, pad, counter, lines):
    """Write the checked index of each Indirect in `hoisted` (or, with `hoisted` empty, of every
    Indirect `expr` starts with) and a `continue` past a bad one; returns `position` and the
    remaining expression with the index variables renamed to the checked temporaries."""
    chain = list(hoisted)
    if not chain:
        while isinstance(expr, Indirect):
            chain.append(expr)
            expr = expr.body
    checks, mapping = [], {}
    for binding in chain:
        value = writer.value(binding.value)
        temp = f"t{counter[0]}"
        counter[0] += 1
        lines.append(
            f"{pad}const int64_t {temp} = ts::checked_position(static_cast<int64_t>({value}), "
            f"{cpp_index(binding.size)}, {_site(binding.var)});"
        )
        checks.append(f"{temp} < 0")
        mapping[binding.var] = sympy.Symbol(temp, integer=True)
    if checks:
        # A bad index was recorded (the wrapper raises after the call): nothing is written for it.
        lines.append(f"{pad}if ({' || '.join(checks)}) continue;")
    return sympy.sympify(position).xreplace(mapping), substitute(expr, mapping)


def emit_scatter_kernel(name: str, buffer: ComputedBuffer, program: LoopProgram):
    """The C++ function computing `buffer` (a `Scatter` body) and its `Kernel` record."""
    from torchsmith.inductor.cpp.codegen import PARALLEL_THRESHOLD, Kernel  # here: it imports this module

    body, dtype = buffer.body, buffer.layout.dtype
    dtypes = {b.name: b.layout.dtype for b in program.buffers} | {
        i.name: i.layout.dtype for i in program.inputs
    }
    reads = tuple(dict.fromkeys(ld.buffer for ld in loads(body.value) if ld.buffer != buffer.name))
    namer = IdentifierNamer(program.symbols)
    pointer_of = {buffer.name: namer.name(f"out_{buffer.name}")} | {n: namer.name(f"in_{n}") for n in reads}
    params = [f"{storage_type(dtype)}* __restrict__ {pointer_of[buffer.name]}"]
    params += [f"const {storage_type(dtypes[n])}* __restrict__ {pointer_of[n]}" for n in reads]
    params += [f"int64_t {s}" for s in program.symbols]
    lines = [f'extern "C" void {name}({", ".join(params)}) {{']
    lines.append(f"  // {cpp_comment(buffer.origin or buffer.name).replace('@', chr(92) + 'x40')}")
    counter = [0]
    _emit_copy(buffer, pointer_of, lines, counter, PARALLEL_THRESHOLD)
    _emit_writes(buffer, pointer_of, lines, counter, PARALLEL_THRESHOLD)
    lines.append("}")
    return Kernel(name, (buffer.name,), reads), "\n".join(lines)


def _emit_copy(buffer, pointer_of, lines, counter, threshold) -> None:
    """The output's elements set to the base (a constant zero for an embedding's gradient)."""
    body, layout = buffer.body, buffer.layout
    variables = index_vars(len(body.ranges))
    condition = _condition(_product(body.ranges), threshold)
    n = len(variables)
    if condition is not None:
        collapse = f" collapse({n - 1})" if n > 2 else ""
        lines.append(f"  #pragma omp parallel for{' simd' if n == 1 else ''}{collapse}{condition}")
    for depth, (v, r) in enumerate(zip(variables, body.ranges)):
        if depth == n - 1 and (n > 1 or condition is None):
            lines.append(f"{'  ' * (depth + 1)}#pragma omp simd")
        lines.append(f"{'  ' * (depth + 1)}for (int64_t {v} = 0; {v} < {cpp_index(r)}; ++{v}) {{")
    indent = "  " * (n + 1)
    writer = BodyWriter(pointer_of, lines, indent, counter)
    value = writer.value(body.base)
    store = sympy.expand(sum((v * s for v, s in zip(variables, layout.strides)), sympy.Integer(0)))
    lines.append(
        f"{indent}{pointer_of[buffer.name]}[{cpp_index(store)}] = {store_code(value, layout.dtype)};"
    )
    for depth in reversed(range(n)):
        lines.append(f"{'  ' * (depth + 1)}}}")


def _emit_writes(buffer, pointer_of, lines, counter, threshold) -> None:
    body, dtype = buffer.body, buffer.layout.dtype
    variables = reduction_vars(len(body.reduction_ranges))
    n = len(variables)
    split = _split_var(body, variables)
    condition = _condition(_product(body.reduction_ranges), threshold)
    atomic = split is None and condition is not None and dtype in ATOMIC_DTYPES
    lines.append("  {")
    indent = "    "
    if split is not None and condition is not None:
        # Each thread takes one block of the split loop; outside a parallel region the block is all.
        lines.append(f"  #pragma omp parallel{condition}")
        lines.append("  {")
        extent = cpp_index(dict(zip(variables, body.reduction_ranges))[split])
        lines.append(
            f"{indent}const int64_t ts_threads = omp_get_num_threads(), ts_thread = omp_get_thread_num();"
        )
        lines.append(f"{indent}const int64_t ts_lo = {extent} * ts_thread / ts_threads;")
        lines.append(f"{indent}const int64_t ts_hi = {extent} * (ts_thread + 1) / ts_threads;")
    elif atomic:
        collapse = f" collapse({n})" if n > 1 else ""
        lines.append(f"{indent}#pragma omp parallel for{collapse}{condition}")
    if n == 0:  # one write: still a loop, so that a bad index's `continue` skips it
        lines.append(f"{indent}for (int ts_once = 0; ts_once < 1; ++ts_once) {{")
    expr, position = body.write, sympy.sympify(body.position)
    inner_var = variables[-1] if n >= 2 else None
    # Index values the innermost loop does not change (an embedding row's token) are read and
    # checked once per row, before that loop, which then has no branch and vectorizes.
    hoisted = []
    while isinstance(expr, Indirect) and inner_var is not None and not _varies(expr.value, inner_var):
        hoisted.append(expr)
        expr = expr.body
    rest = expr
    simd = (
        inner_var is not None and not isinstance(rest, Indirect) and not atomic
        and inner_var in position.free_symbols
    )  # fmt: skip
    for depth, (v, r) in enumerate(zip(variables, body.reduction_ranges)):
        pad = indent + "  " * depth
        if v is inner_var:
            if hoisted:
                row = BodyWriter(pointer_of, lines, pad, counter)
                position, rest = _bind(row, hoisted, position, rest, pad, counter, lines)
            if simd:  # distinct positions along it (an output coordinate of its own): no conflicts
                lines.append(f"{pad}#pragma omp simd")
        if v == split and condition is not None:
            lines.append(f"{pad}for (int64_t {v} = ts_lo; {v} < ts_hi; ++{v}) {{")
        else:
            lines.append(f"{pad}for (int64_t {v} = 0; {v} < {cpp_index(r)}; ++{v}) {{")
    inner = indent + "  " * max(n, 1)
    writer = BodyWriter(pointer_of, lines, inner, counter)
    position, expr = _bind(writer, [], position, rest, inner, counter, lines)
    value = writer.value(expr)
    target = f"{pointer_of[buffer.name]}[{cpp_index(position)}]"
    if atomic:
        lines.append(f"{inner}#pragma omp atomic{'' if body.accumulate else ' write'}")
        op = "+=" if body.accumulate else "="
        lines.append(f"{inner}{target} {op} static_cast<{storage_type(dtype)}>({value});")
    elif body.accumulate and dtype == torch.bool:
        lines.append(f"{inner}{target} = {store_code(f'{load_code(target, dtype)} || {value}', dtype)};")
    elif body.accumulate:
        lines.append(f"{inner}{target} = {store_code(f'{load_code(target, dtype)} + {value}', dtype)};")
    else:
        lines.append(f"{inner}{target} = {store_code(value, dtype)};")
    for depth in reversed(range(max(n, 1))):
        lines.append(f"{indent}{'  ' * depth}}}")
    if split is not None and condition is not None:
        lines.append("  }")
    lines.append("  }")
