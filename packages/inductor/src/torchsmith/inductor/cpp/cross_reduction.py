"""C++ for row reductions and column reductions of one 2-D input in one pass over it (issue 21's
`var_mean(x, dim=1)` beside `vector_norm(x, dim=0)`).

Apart, the row kernel (`reductions.py`) and the column kernel (`column_reduction.py`) each read all of
x from memory. Here one kernel walks the rows in order: for each row, the row reductions (and their
epilogues) run as in any row kernel, then one simd loop over the same row, still in L1, adds its
elements into the per-column partials. The rows are cut into chunks of `CHUNK` (fewer when there
are not enough rows for every thread); threads take chunks, each thread keeping its own column state
(float partials per chunk, added into double accumulators, the two-level summation of the column
kernel). After the rows, the threads' column states are added in thread order and the column results
(and their epilogues) stored.

Only column sums take part (a mean, a sum, a vector norm's sum of squares), over one kept and one
reduced dim, with a static number of columns (the per-thread partials live on the stack).
"""

import logging

import sympy
import torch

from torchsmith.inductor.cpp.column_reduction import CHUNK, column_like
from torchsmith.inductor.cpp.dtypes import cpp_type, store_code
from torchsmith.inductor.cpp.expr import BodyWriter, cpp_index
from torchsmith.inductor.loop_ir.program import (
    ComputedBuffer,
    Pointwise,
    Reduction,
    index_var,
    loads,
    reduction_var,
    substitute,
)

fusion_log = logging.getLogger("torchsmith.inductor.fusion")

# Per-thread column partials (float) live on the stack: at most this many columns.
MAX_COLUMNS = 16384
# Most threads whose column accumulators the kernel allocates.
MAX_THREADS = 256
# An unthreaded kernel keeps up to this many column accumulators on the stack instead of the heap.
STACK_DOUBLES = 8192


def _same(a, b) -> bool:
    return sympy.expand(sympy.sympify(a) - sympy.sympify(b)) == 0


def _one_dim(body) -> bool:
    return len(body.ranges) == 1 and (not isinstance(body, Reduction) or len(body.reduction_ranges) == 1)


def _column_fits(body: Reduction) -> bool:
    if body.reduction_type != "sum" or body.value.dtype not in (torch.float32, torch.float64):
        return False
    columns = sympy.sympify(body.ranges[0])
    return columns.is_Integer and int(columns) <= MAX_COLUMNS


def _at(buffer: ComputedBuffer, variables) -> sympy.Expr:
    """The element of `buffer` at loop position `variables` (its layout's offsets)."""
    return sum((v * st for v, st in zip(variables, buffer.layout.strides)), sympy.Integer(0))


def _row_producer(b: ComputedBuffer, n, c) -> bool:
    return (
        isinstance(b.body, Pointwise)
        and len(b.body.ranges) == 2
        and _same(b.body.ranges[0], n)
        and _same(b.body.ranges[1], c)
        and len(b.layout.strides) == 2
    )


def cross_parts(group) -> tuple[list[ComputedBuffer], list[ComputedBuffer]] | None:
    """(row members, column members) of `group` when it is column sums over the rows of one [N, C]
    iteration space (`column_like` sums over [N] kept [C]) with a row side computed row by row:
    row reductions over [C] kept [N] (reading no member), pointwise [N, C] producers (reading other
    producers at their own element and row results at their row) and pointwise epilogues of either
    side reading that side's results at their own position. The column sums read inputs and the
    producers' elements of the row being summed. Else None."""
    reductions = [b for b in group if isinstance(b.body, Reduction)]
    columns = [b for b in reductions if column_like(b.body)]
    if not columns:
        return None
    c, n = columns[0].body.ranges[0], columns[0].body.reduction_ranges[0]
    if not all(_one_dim(b.body) and _column_fits(b.body) and _same(b.body.ranges[0], c)
               and _same(b.body.reduction_ranges[0], n) for b in columns):  # fmt: skip
        return None
    rows = [b for b in reductions if b not in columns]
    producers = [b for b in group if _row_producer(b, n, c)]
    if not rows and not producers:
        return None
    if not all(_one_dim(b.body) and _same(b.body.ranges[0], n) and _same(b.body.reduction_ranges[0], c)
               for b in rows):  # fmt: skip
        return None
    names = {b.name: b for b in group}
    if any(ld.buffer in names for b in rows for ld in loads(b.body.value)):
        return None
    produced = {b.name for b in producers}
    i0, i1, r0 = index_var(0), index_var(1), reduction_var(0)
    for b in columns:
        for ld in loads(b.body.value):
            if ld.buffer not in names:
                continue
            # Swapped to (row i0, column r0): the producer's element of that row and column.
            index = sympy.sympify(ld.index).xreplace({i0: r0, r0: i0})
            if ld.buffer not in produced or not _same(index, _at(names[ld.buffer], (i0, r0))):
                return None
    row_side, column_side = {b.name for b in rows}, {b.name for b in columns}
    row_members, column_members = [*rows, *producers], list(columns)
    for b in group:
        if b.name in produced:
            for ld in loads(b.body.value):
                member = names.get(ld.buffer)
                if member is None:
                    continue
                own = ld.buffer in produced and _same(ld.index, _at(member, (i0, i1)))
                row_result = ld.buffer in row_side and _same(ld.index, _at(member, (i0,)))
                if not (own or row_result):
                    return None
            continue
        if not isinstance(b.body, Pointwise):
            continue
        if not _one_dim(b.body) or len(b.layout.strides) != 1:
            return None
        read = [ld for ld in loads(b.body.value) if ld.buffer in names]
        # An epilogue reads its side's 1-d results at its own position.
        if not read or any(ld.buffer in produced or not _same(ld.index, _at(names[ld.buffer], (i0,)))
                           for ld in read):  # fmt: skip
            return None
        if all(ld.buffer in row_side for ld in read) and _same(b.body.ranges[0], n):
            row_side.add(b.name)
            row_members.append(b)
        elif all(ld.buffer in column_side for ld in read) and _same(b.body.ranges[0], c):
            column_side.add(b.name)
            column_members.append(b)
        else:
            return None
    if not all(len(names[m].layout.strides) == 1 for m in row_side | column_side):
        return None
    order = {b.name: k for k, b in enumerate(group)}
    by_order = lambda b: order[b.name]  # noqa: E731
    return sorted(row_members, key=by_order), sorted(column_members, key=by_order)


def emit_cross_kernel(group, pointer_of, lines: list[str], work_condition, emit_rows) -> None:
    """The body of the kernel computing `group` (`cross_parts`): `emit_rows(lines, indent, counter)`
    writes the row members' statements for row `i0`."""
    rows, column_members = cross_parts(group)
    # Named in the log: the row reductions and producers (not their epilogues).
    rows = [b for b in rows if isinstance(b.body, Reduction) or len(b.body.ranges) == 2]
    columns = [b for b in column_members if isinstance(b.body, Reduction)]
    epilogues = [b for b in column_members if not isinstance(b.body, Reduction)]
    body = columns[0].body
    c, n = body.ranges[0], body.reduction_ranges[0]
    cc, nc = cpp_index(c), cpp_index(n)
    i0, r0 = index_var(0), reduction_var(0)
    if fusion_log.isEnabledFor(logging.INFO):
        fusion_log.info(
            "cross kernel: %s and %s share one read, row by row, the column sums in per-thread partials "
            "over %s columns", ", ".join(b.name for b in rows),
            ", ".join(b.name for b in columns), cc,
        )  # fmt: skip
    condition = work_condition(sympy.sympify(c) * n)
    threads = f"ts::threads({MAX_THREADS})" if condition is not None else "1"
    states = len(columns)
    lines.append(f"  const int64_t nt = {threads};")
    # Zeroed: a thread of the team that takes no chunk leaves its accumulators at 0.
    on_stack = condition is None and states * int(c) <= STACK_DOUBLES
    if on_stack:
        # One thread: its accumulators fit the stack (no allocation per call for a small kernel).
        lines.append(f"  double colp[{states * int(c)}] = {{}};")
    else:
        lines.append(f"  double* colp = new double[nt * {states * int(c)}]();")
    # Rows per chunk: `CHUNK`, fewer where the chunks would not go round the threads.
    lines.append(f"  const int64_t step = ts::imax(1, ts::imin({CHUNK}, ({nc} + nt - 1) / nt));")
    if condition is not None:
        lines.append(f"  #pragma omp parallel num_threads(nt){f' if({condition})' if condition else ''}")
    lines.append("  {")
    lines.append("    const int64_t tid = omp_get_thread_num();")
    for k in range(states):
        lines.append(f"    double* acc{k} = colp + (tid * {states} + {k}) * {cc};")
    if condition is not None:
        lines.append("    #pragma omp for schedule(static)")
    lines.append(f"    for (int64_t rc = 0; rc < {nc}; rc += step) {{")
    lines.append(f"      const int64_t rend = ts::imin(rc + step, {nc});")
    for k, b in enumerate(columns):
        t = cpp_type(b.body.value.dtype)
        lines.append(f"      {t} part{k}[{cc}];")
        lines.append(f"      for (int64_t jj = 0; jj < {cc}; ++jj) part{k}[jj] = 0;")
    lines.append(f"      for (int64_t {i0} = rc; {i0} < rend; ++{i0}) {{")
    counter = [0]
    emit_rows(lines, "        ", counter)
    # The column sums' values at (row i0, column r0): their own variables swapped.
    at = len(lines)
    lines.append("        #pragma omp simd")
    lines.append(f"        for (int64_t {r0} = 0; {r0} < {cc}; ++{r0}) {{")
    hoisted: list[str] = []
    writer = BodyWriter(pointer_of, lines, "          ", counter, r0, hoisted, "        ")
    for k, b in enumerate(columns):
        value = writer.value(substitute(b.body.value, {i0: r0, r0: i0}))
        lines.append(f"          part{k}[{r0}] += {value};")
    lines.append("        }")
    lines[at:at] = hoisted
    lines.append("      }")
    for k in range(states):
        lines.append(f"      for (int64_t jj = 0; jj < {cc}; ++jj) acc{k}[jj] += part{k}[jj];")
    lines.append("    }")
    lines.append("  }")
    lines.append(f"  for (int64_t {i0} = 0; {i0} < {cc}; ++{i0}) {{")
    for k, b in enumerate(columns):
        lines.append(f"    double s{k} = 0;")
        partial = f"colp[(t * {states} + {k}) * {cc} + {i0}]"
        lines.append(f"    for (int64_t t = 0; t < nt; ++t) s{k} += {partial};")
        value = store_code(f"static_cast<{cpp_type(b.layout.dtype)}>(s{k})", b.layout.dtype)
        lines.append(f"    {pointer_of[b.name]}[{cpp_index(_at(b, (i0,)))}] = {value};")
    epilogue_writer = BodyWriter(pointer_of, lines, "    ", counter)
    for b in epilogues:
        value = epilogue_writer.value(b.body.value)
        target = f"{pointer_of[b.name]}[{cpp_index(_at(b, (i0,)))}]"
        lines.append(f"    {target} = {store_code(value, b.layout.dtype)};")
    lines.append("  }")
    if not on_stack:
        lines.append("  delete[] colp;")
