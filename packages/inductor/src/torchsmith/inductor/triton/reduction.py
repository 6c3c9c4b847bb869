"""Reduction Triton kernels: a group of buffers sharing one row (outer) iteration space, with at
least one reduction over the row.

Blocks are [XBLOCK rows, RBLOCK row elements]. Members are reductions (`[rows]` over the row),
row members (pointwise over `rows x row`, e.g. softmax's `exp(x - max)`) and outer members
(pointwise over `rows`, e.g. a mean's division). Two schedules:

- persistent, when the row length is static and fits one block: the whole row is loaded once and
  every member computes in registers (softmax and layer norm read their input once);
- looped, otherwise: one loop over the row per reduction level (a reduction that needs another's
  result runs in a later loop; softmax: max, then sum of exp, then the normalized store).

Row-block partials of a column reduction (triton_cross) join the row reductions reading the same
input, one program per row block (XBLOCK = the partials' row block):

- rows that fit one block: the block's rows SBLOCK at a time, each step the persistent schedule
  (whole rows in registers, two exact passes for a variance) and its tile reduced over its rows
  into column accumulators held across the steps, stored once as the block's partials;
- longer rows: the looped schedule, each column tile of the first loop reduced over its rows into
  the block's partials.

A column walk (the reduced dim is not the contiguous one, e.g. a sum over dim 0) is always looped,
with wide blocks of output columns (contiguous, coalesced loads) and a few reduced rows per step;
triton_split first cuts long columns into pieces so that enough programs run.
"""

import sympy

from torchsmith.inductor.errors import CodegenError
from torchsmith.inductor.loop_ir.program import (
    ComputedBuffer,
    LoopProgram,
    Reduction,
    index_vars,
    loads,
    reduction_vars,
)
from torchsmith.inductor.runtime.triton_launch import interpreting
from torchsmith.inductor.triton.combine import LoopedAccumulator, reduce_row
from torchsmith.inductor.triton.cross import cross_parts, in_rows, partial_index, row_block_configs
from torchsmith.inductor.triton.group import drop_unit_vars, reduction_level, resolve_group
from torchsmith.inductor.triton.index import (
    Axis,
    compute_dtype,
    kernel_symbol,
    product,
    to_kernel_space,
    triton_dtype,
    triton_index,
    walks_columns,
)
from torchsmith.inductor.triton.ops import reduction_identity
from torchsmith.inductor.triton.writer import (
    TritonBodyWriter,
    TritonKernelSpec,
    in_kernel_space,
    next_power_of_2,
)
from torchsmith.ir.codegen_text import python_comment

# Rows up to this long stay in registers (8192 elements over 16 warps: 16 values a thread per live
# row tensor). A looped layer norm reads its row twice and runs a Welford update (a division) per
# element, well below copy bandwidth, where a persistent one reads it once.
PERSISTENT_MAX = 8192
# (XBLOCK, RBLOCK, num_warps). Rows contiguous along r: one row a program, long blocks.
LOOPED_CONFIGS = ((1, 1024, 4), (1, 2048, 8), (1, 4096, 8))
# Column walks: lanes along x (contiguous for them), a few reduced rows per step, per-lane
# accumulators summed across r once at the end. No one config is best for every dtype and shape,
# so these are tuned per call site; each is compiled before a kernel's first call, so the list is
# the fewest that come near the best of a wider one over the benchmark suite's column walks.
COLUMN_CONFIGS = ((64, 64, 4), (32, 128, 4), (128, 64, 8), (512, 16, 8))
# Short column walks (the second pass of a split column sum: 32 partials of 4096 columns) are
# bound by latency: more programs win, so few columns a program.
SHORT_COLUMN_XBLOCKS = (1, 4, 8)
SHORT_COLUMN = 64


def _same(a, b) -> bool:
    return sympy.expand(sympy.sympify(a) - sympy.sympify(b)) == 0


def _classify(group, outer, rnumel) -> dict[str, str]:
    """Each member's role: reduction, row (pointwise over the row too) or outer (one per row)."""
    roles = {}
    for b in group:
        ranges = b.body.ranges
        if len(ranges) < len(outer) or not all(_same(p, q) for p, q in zip(ranges, outer)):
            raise CodegenError(
                f"{b.name} (ranges {list(ranges)}) does not share the rows {list(outer)} of its "
                "reduction group"
            )
        extra = product(ranges[len(outer) :])
        if isinstance(b.body, Reduction):
            if not _same(product(b.body.reduction_ranges), rnumel):
                raise CodegenError(f"reductions of different lengths in one group ({b.name})")
            roles[b.name] = "reduction"
        elif _same(extra, 1):
            roles[b.name] = "outer"
        elif _same(extra, rnumel):
            roles[b.name] = "row"
        else:
            raise CodegenError(f"{b.name} runs over {extra} per row, the group's reductions over {rnumel}")
    return roles


def _axes(buffer: ComputedBuffer, shared: int) -> tuple[Axis, ...]:
    units = drop_unit_vars(buffer)
    body = buffer.body
    outer = [(v, r) for v, r in zip(index_vars(shared), body.ranges[:shared]) if v not in units]
    if isinstance(body, Reduction):
        row = list(zip(reduction_vars(len(body.reduction_ranges)), body.reduction_ranges))
    else:
        row = list(zip(index_vars(len(body.ranges)), body.ranges))[shared:]
    row = [(v, r) for v, r in row if v not in units]
    return (
        Axis(kernel_symbol("xindex"), tuple(v for v, _ in outer), tuple(r for _, r in outer)),
        Axis(kernel_symbol("rindex"), tuple(v for v, _ in row), tuple(r for _, r in row)),
    )


def emit_reduction(
    name: str, group: tuple[ComputedBuffer, ...], program: LoopProgram, stored: set[str]
) -> tuple[TritonKernelSpec, str]:
    """The Triton kernel computing the reduction `group`, storing the members in `stored`."""
    blocked = cross_parts(group)
    partials = blocked[1] if blocked else []
    group = tuple(blocked[0]) if blocked else group
    reductions = [b for b in group if isinstance(b.body, Reduction)]
    outer = reductions[0].body.ranges
    shared = len(outer)
    xnumel, rnumel = product(outer), product(reductions[0].body.reduction_ranges)
    roles = _classify(group, outer, rnumel)
    resolved = resolve_group(group, shared)
    levels: dict[str, int] = {}
    for b in group:
        levels[b.name] = reduction_level(resolved[b.name], levels)
    members = {b.name for b in group}
    values = [resolved[b.name] for b in group] + [p.body.value for p in partials]
    reads = tuple(dict.fromkeys(ld.buffer for v in values for ld in loads(v) if ld.buffer not in members))
    writes = tuple(b.name for b in (*group, *partials) if b.name in stored)
    pointer_of = {n: f"out_{i}" for i, n in enumerate(writes)} | {n: f"in_{i}" for i, n in enumerate(reads)}
    params = [pointer_of[n] for n in writes + reads] + list(program.symbols)
    params += ["XBLOCK: tl.constexpr", "RBLOCK: tl.constexpr"]
    rnumel_static = sympy.sympify(rnumel)
    axes_of = {b.name: _axes(b, shared) for b in group}
    columns = _walks_columns(reductions, resolved, axes_of)
    persistent = rnumel_static.is_Integer and int(rnumel_static) <= PERSISTENT_MAX and not columns
    row_steps = persistent and bool(partials)  # whole rows, SBLOCK of the block's rows a step
    persistent = persistent and not partials
    if row_steps:
        params.append("SBLOCK: tl.constexpr")
    lines = [
        "@triton.jit",
        f"def {name}({', '.join(params)}):",
        f"    xnumel = {triton_index(xnumel)}",
        f"    rnumel = {triton_index(rnumel)}",
    ]
    if not row_steps:
        lines += [
            "    xindex = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)[:, None]",
            "    xmask = xindex < xnumel",
        ]
    if partials:
        lines.append("    xpid = tl.program_id(0)")
    results: dict[str, str] = {}
    counter = [0]

    def writer(indent: str) -> TritonBodyWriter:
        return TritonBodyWriter(
            pointer_of,
            lambda used: "xmask & rmask" if "rindex" in used else "xmask",
            "0 * xindex",
            2,
            lines,
            indent,
            counter,
            results,
        )

    def emit_member(b: ComputedBuffer, w: TritonBodyWriter, accumulate) -> None:
        w.lines.append(f"{w.indent}# {python_comment(b.origin or b.name)}")
        value = w.value(in_kernel_space(resolved[b.name], axes_of[b.name]))
        if roles[b.name] == "reduction":
            accumulate(b, value)
        elif b.name in stored:
            mask = "xmask & rmask" if roles[b.name] == "row" else "xmask"
            w.store(pointer_of[b.name], _store_index(b, axes_of[b.name]), value, b.layout.dtype, mask)

    max_level = max(levels.values())
    if row_steps:
        configs = _row_steps(lines, group, partials, roles, stored, xnumel, int(rnumel_static), writer,
                             emit_member, results, pointer_of, axes_of)
    elif persistent:
        rblock = next_power_of_2(int(rnumel_static))
        lines += ["    rindex = tl.arange(0, RBLOCK)[None, :]", "    rmask = rindex < rnumel"]
        w = writer("    ")

        def finish(b, value):
            results[b.name] = reduce_row(w._emit, b, value, "xmask & rmask", triton_index(rnumel))

        for b in group:
            emit_member(b, w, finish)
        xblocks = sorted({max(1, min(64, 1024 // rblock)), max(1, min(64, 4096 // rblock)), 1})
        configs = tuple(
            (("XBLOCK", xb), ("RBLOCK", rblock), ("num_warps", _warps(xb * rblock))) for xb in xblocks
        )
        if rblock >= 2048:  # one wide row a program: also try half the warps (less shuffling)
            configs += ((("XBLOCK", 1), ("RBLOCK", rblock), ("num_warps", _warps(rblock) // 2)),)
        if rblock == 4096:
            # Two rows a program: twice the bytes in flight, for 16-bit rows, which one row a program
            # leaves short of copy bandwidth.
            configs += ((("XBLOCK", 2), ("RBLOCK", rblock), ("num_warps", 16)),)
    else:
        for level in range(max_level + 1):
            in_loop = [b for b in group if levels[b.name] == level and roles[b.name] != "outer"]
            if not in_loop:
                continue
            reducing = [b for b in in_loop if roles[b.name] == "reduction"]
            accumulators = _accumulators(reducing, group, resolved, column_count=bool(partials))
            for acc in accumulators.values():
                lines += [f"    {line}" for line in acc.init_lines()]
            lines += loop_header(rnumel)
            w = writer("        ")

            def accumulate(b, value, accumulators=accumulators, w=w):
                w.lines.extend(f"{w.indent}{line}" for line in accumulators[b.name].update_lines(value))

            for b in in_loop:
                emit_member(b, w, accumulate)
            for p in partials if level == 0 else ():
                _emit_partial(p, xnumel, w)
            if interpreting():
                lines.append("        roffset += RBLOCK")
            for b_name, acc in accumulators.items():
                lines += [f"    {line}" for line in acc.finish_lines()]
                results[b_name] = acc.result
        table = COLUMN_CONFIGS if columns else LOOPED_CONFIGS
        if partials:
            table = row_block_configs(int(partials[0].body.reduction_ranges[0]), int(sympy.sympify(rnumel)))
        short = sympy.sympify(rnumel)
        if columns and short.is_Integer and int(short) <= SHORT_COLUMN:
            rblock = next_power_of_2(int(short))
            table = tuple((xb, rblock, 4) for xb in SHORT_COLUMN_XBLOCKS) + table
        configs = tuple((("XBLOCK", xb), ("RBLOCK", rb), ("num_warps", w)) for xb, rb, w in table)
    # Outer members (one value per row) and the reductions' own stores, after every loop.
    if not row_steps:
        _store_rows(writer("    "), group, roles, stored, results, pointer_of, axes_of, emit_member,
                    outer=not persistent)
    cap = sympy.sympify(xnumel)
    if cap.is_Integer:
        limit = next_power_of_2(int(cap))
        configs = tuple(dict.fromkeys(_cap_x(c, limit) for c in configs))
    spec = TritonKernelSpec(name, "reduction", writes, reads, (xnumel, rnumel), configs)
    return spec, "\n".join(lines)


def _store_rows(w, group, roles, stored, results, pointer_of, axes_of, emit_member, outer: bool) -> None:
    """The outer members (where `outer`) and the stored reductions' values, one per row."""
    for b in group:
        if roles[b.name] == "outer" and outer:
            emit_member(b, w, None)
        elif roles[b.name] == "reduction" and b.name in stored:
            w.store(
                pointer_of[b.name], _store_index(b, axes_of[b.name]), results[b.name], b.layout.dtype, "xmask"
            )


def _row_steps(lines, group, partials, roles, stored, xnumel, rnumel: int, writer, emit_member, results,
               pointer_of, axes_of) -> tuple:
    """The block's rows SBLOCK at a time, each whole row in registers: the members as the persistent
    schedule computes them and every partial's tile reduced over its rows into an accumulator over
    the block's columns, stored once after the last step. Returns the configs."""
    rblock = next_power_of_2(rnumel)
    lines += ["    rindex = tl.arange(0, RBLOCK)[None, :]", "    rmask = rindex < rnumel"]
    accumulators = []
    for k, p in enumerate(partials):
        kind, dtype = p.body.reduction_type, p.layout.dtype
        acc = f"pacc{k}"
        init = reduction_identity(kind, dtype)
        lines.append(f"    {acc} = tl.full([1, RBLOCK], {init}, {triton_dtype(compute_dtype(dtype))})")
        accumulators.append(acc)
    if interpreting():
        lines += ["    xstep = 0", "    while xstep < XBLOCK:"]
    else:
        lines.append("    for xstep in range(0, XBLOCK, SBLOCK):")
    lines += [
        "        xindex = tl.program_id(0) * XBLOCK + xstep + tl.arange(0, SBLOCK)[:, None]",
        "        xmask = xindex < xnumel",
    ]
    w = writer("        ")

    def finish(b, value):
        results[b.name] = reduce_row(w._emit, b, value, "xmask & rmask", triton_index(rnumel))

    for b in group:
        emit_member(b, w, finish)
    _store_rows(w, group, roles, stored, results, pointer_of, axes_of, emit_member, outer=False)
    for p, acc in zip(partials, accumulators, strict=True):
        tile, _ = _partial_tile(p, xnumel, w)
        lines.append(f"        {acc} = {ACROSS_STEPS[p.body.reduction_type].format(acc, tile)}")
    if interpreting():
        lines.append("        xstep += SBLOCK")
    w = writer("    ")
    for p, acc in zip(partials, accumulators, strict=True):
        _, index = _partial_tile(p, xnumel, None)
        w.store(w.pointer_of[p.name], index, acc, p.layout.dtype, "rmask")
    block = int(partials[0].body.reduction_ranges[0])
    steps = [s for s in (1, 2, 4) if s <= block and s * rblock <= 2 * PERSISTENT_MAX]
    configs = []
    for s in steps:
        warps = _warps(s * rblock)
        for w_ in dict.fromkeys((warps, max(4, warps // 2))):
            configs.append((("XBLOCK", block), ("RBLOCK", rblock), ("SBLOCK", s), ("num_warps", w_)))
    return tuple(configs)


# A partial's accumulator across the row steps combined with one step's tile.
ACROSS_STEPS = {
    "sum": "{0} + {1}",
    "prod": "{0} * {1}",
    "max": "ts_maximum({0}, {1})",
    "min": "ts_minimum({0}, {1})",
}

# A tile's reduction over its rows (axis 0), per reduction type of a row-block partial.
OVER_ROWS = {
    "sum": "tl.sum({0}, 0)",
    "prod": "tl.reduce({0}, 0, ts_mul)",
    "max": "tl.reduce({0}, 0, ts_maximum)",
    "min": "tl.reduce({0}, 0, ts_minimum)",
}


def _emit_partial(p: ComputedBuffer, rows, w: TritonBodyWriter) -> None:
    """Reduce the current [XBLOCK rows, RBLOCK columns] tile of row-block partial `p` over its rows
    and store it at (this program's block, the tile's columns). Masked rows (past the last) and
    columns take the identity."""
    tile, index = _partial_tile(p, rows, w)
    w.store(w.pointer_of[p.name], index, tile, p.layout.dtype, "rmask")


def _partial_tile(p: ComputedBuffer, rows, w: TritonBodyWriter | None) -> tuple[str | None, sympy.Expr]:
    """(The current [XBLOCK rows, RBLOCK columns] tile of row-block partial `p` reduced over its rows,
    [1, RBLOCK], written with `w`; where it is stored: this program's block, the tile's columns).
    Without `w`, only where it is stored. Masked rows (past the last) and columns take the identity."""
    xindex, rindex = kernel_symbol("xindex"), kernel_symbol("rindex")
    kept = index_vars(len(p.body.ranges))[1:]
    columns = (Axis(rindex, kept, tuple(p.body.ranges[1:])),)
    index = to_kernel_space(partial_index(p, kernel_symbol("xpid")), columns)
    if w is None:
        return None, index
    value = in_rows(p, int(sympy.sympify(rows)), row=xindex)
    if value is None:
        raise CodegenError(f"{p.name} is not a row-block partial of these {rows} rows")
    w.lines.append(f"{w.indent}# {python_comment(p.origin or p.name)}: column partials of this block")
    v = w.value(in_kernel_space(value, columns))
    kind, dtype = p.body.reduction_type, p.layout.dtype
    accumulate = triton_dtype(compute_dtype(dtype))
    masked = w._emit(f"tl.where(xmask & rmask, {v}, {reduction_identity(kind, dtype)}).to({accumulate})")
    return w._emit(f"{OVER_ROWS[kind].format(masked)}[None, :]"), index


def loop_header(rnumel) -> list[str]:
    """The loop over a row, RBLOCK elements at a time. A `for` on the GPU (Triton pipelines its
    loads); a `while` under the interpreter, whose `range` cannot take a kernel argument."""
    if interpreting():
        head = ["    roffset = 0", "    while roffset < rnumel:"]
    else:
        head = [f"    for roffset in range(0, {triton_index(rnumel)}, RBLOCK):"]
    return head + [
        "        rindex = roffset + tl.arange(0, RBLOCK)[None, :]",
        "        rmask = rindex < rnumel",
    ]


def _accumulators(members, group, resolved, column_count: bool = False) -> dict[str, LoopedAccumulator]:
    """One accumulator per reduction member, except that a Welford mean and M2 of the same value
    share one running (mean, M2, count): layer norm's mean and variance cost one update.
    `column_count`: Welford counts per column lane (the blocks of many rows of a row-block kernel)."""
    out, welford_owner = {}, {}
    for b in members:
        prefix = f"acc{b_name_index(group, b.name)}"
        if b.body.reduction_type.startswith("welford"):
            key = resolved[b.name]
            if key in welford_owner:
                out[b.name] = LoopedAccumulator(b, welford_owner[key], shared=True, column_count=column_count)
                continue
            welford_owner[key] = prefix
        out[b.name] = LoopedAccumulator(b, prefix, column_count=column_count)
    return out


def _walks_columns(reductions, resolved, axes_of) -> bool:
    """Whether the group's reductions read along columns (see triton_index.walks_columns)."""
    indices = [
        ld.index
        for b in reductions
        for ld in loads(in_kernel_space(resolved[b.name], axes_of[b.name]))
    ]
    x, r = kernel_symbol("xindex"), kernel_symbol("rindex")
    return walks_columns(indices, (x,), (r,))


def b_name_index(group, name: str) -> int:
    return next(k for k, b in enumerate(group) if b.name == name)


def _cap_x(config, limit: int):
    return tuple((k, min(v, limit)) if k == "XBLOCK" else (k, v) for k, v in config)


def _warps(elements: int) -> int:
    return 2 if elements <= 512 else 4 if elements <= 2048 else 8 if elements <= 4096 else 16


def _store_index(b: ComputedBuffer, axes) -> sympy.Expr:
    strides = b.layout.strides
    store = sum((v * s for v, s in zip(index_vars(len(strides)), strides)), sympy.Integer(0))
    return to_kernel_space(sympy.sympify(store).xreplace(drop_unit_vars(b)), axes)
