"""Row and column reductions of one input in one read, on the GPU (issues 20 and 21): `var_mean(x,
dim=1)` beside `vector_norm(x, dim=0)` reads x once instead of once per kernel.

`cut_row_blocks` (a `LoopProgram -> LoopProgram` pass) finds a column reduction (over the rows of
an [N, C...] space, kept columns C...) whose elements a row reduction (over C..., kept N) of the same
program reads too, and cuts it into

    partial[s, c...] = reduce over k < RB of value(row = s * RB + k, c...)   (ceil(N / RB) row blocks)
    out[c...]        = reduce over s of partial[s, c...]

The scheduler then puts each partial in the row reductions' kernel (`cross_parts`), where
triton_reduction runs one program per block of RB rows. Rows that fit one block are taken a few
at a time, whole, in registers (exact two-pass statistics, no per-element Welford division), each
step's tile reduced over its rows into column accumulators kept across the steps; longer rows are
looped over in column tiles, each [RB, RBLOCK] tile reduced over its rows into the tile's column
partials. Either way a block's partials are stored once and nothing is accumulated across
programs, so autotuning may rerun the kernel.
The final reduction is an ordinary column walk over the small partial buffer (split.py may cut it
again), with the column epilogues (a norm's square root).

Rows past N in the last block: when RB does not divide N, the partial's value is guarded,
`where(row < N, value[row := min(row, N - 1)], identity)`, so that the loop IR reads only
inside x wherever it runs; the fused kernel masks those rows and drops the guard (`in_rows`).

Only static sizes, and the reduction types whose partial results combine with themselves (sum,
prod, max, min: a column sum, mean or norm). A column variance (Welford) keeps its own kernel.
"""

import logging
from dataclasses import replace

import sympy
import torch

from torchsmith.inductor.loop_ir.program import (
    ComputedBuffer,
    Constant,
    IndexValue,
    LoopProgram,
    Op,
    Reduction,
    index_var,
    index_vars,
    loads,
    map_indices,
    reduction_var,
    reduction_vars,
    substitute,
)
from torchsmith.inductor.triton.index import product, row_major_strides, step_along
from torchsmith.inductor.triton.split import partials_and_final

fusion_log = logging.getLogger("torchsmith.inductor.fusion")

COMBINING = ("sum", "prod", "max", "min")
# Rows of a block (the fused kernel's XBLOCK). The partials cost 2 / RB of x's read in float32 (a
# write and a read); 64 rows keep that at 3% and still give a 65536-row input 1024 programs.
# Fewer rows than this times MIN_PROGRAMS get smaller blocks, down to MIN_BLOCK.
ROW_BLOCK, MIN_BLOCK, MIN_PROGRAMS = 64, 8, 1024
# Rows shorter than this stay in their own kernels: a column tile of the fused kernel would be
# mostly masked lanes, where the row kernel packs many short rows into one block.
MIN_COLUMNS = 256

# Coordinates both sides are compared in: element (ROW, COLUMNS...) of the [N, C...] space.
ROW = sympy.Symbol("row", integer=True, nonnegative=True)


def _column(k: int) -> sympy.Symbol:
    return sympy.Symbol(f"col{k}", integer=True, nonnegative=True)


def _static(expr) -> int | None:
    expr = sympy.sympify(expr)
    return int(expr) if expr.is_Integer else None


def _same(a, b) -> bool:
    return len(a) == len(b) and all(sympy.expand(sympy.sympify(x) - y) == 0 for x, y in zip(a, b))


def _element_reads(expr) -> set[tuple[str, sympy.Expr]]:
    return {(ld.buffer, sympy.expand(ld.index)) for ld in loads(expr)}


def _columns_of_row(row_ranges, column_ranges) -> dict | None:
    """The row reduction's reduced variables as column coordinates of `column_ranges` (the column
    reduction's kept dims): the same dims, or one flat dim of their row-major order (a row
    statistic over dims (1, 2) reduces their flattening). None when neither."""
    columns = [_column(k) for k in range(len(column_ranges))]
    if _same(row_ranges, column_ranges):
        return dict(zip(reduction_vars(len(columns)), columns))
    if len(row_ranges) == 1 and _same((product(row_ranges),), (product(column_ranges),)):
        return {reduction_var(0): sum((c * s for c, s in zip(columns, row_major_strides(column_ranges))), 0)}
    return None


def row_reads(b: ComputedBuffer, column_ranges) -> set | None:
    """The elements a row reduction (kept [N], reduced [C...]) reads, in (ROW, COLUMNS) coordinates
    of a column reduction keeping `column_ranges`; None when `b` is not one, its reduced dims are
    not those columns, or a read is not contiguous along the last column (a transposed input,
    where a row block's tile would load strided columns)."""
    body = b.body
    if not isinstance(body, Reduction) or len(body.ranges) != 1:
        return None
    columns = _columns_of_row(body.reduction_ranges, column_ranges)
    if columns is None:
        return None
    last = _column(len(column_ranges) - 1)
    reads = _element_reads(substitute(body.value, {index_var(0): ROW, **columns}))
    every = (ROW, *(_column(k) for k in range(len(column_ranges))))
    if not reads or any(step_along(i, last, every) != 1 for _, i in reads):
        return None
    return reads


def _column_reads(b: ComputedBuffer) -> set:
    """The elements a column reduction (kept [C...], reduced [N]) reads, in (ROW, COLUMNS)."""
    body = b.body
    columns = [_column(k) for k in range(len(body.ranges))]
    mapping = {reduction_var(0): ROW, **dict(zip(index_vars(len(columns)), columns))}
    return _element_reads(substitute(body.value, mapping))


def _is_column_reduction(b) -> bool:
    body = getattr(b, "body", None)
    return (
        isinstance(body, Reduction)
        and body.reduction_type in COMBINING
        and len(body.reduction_ranges) == 1
        and _static(body.reduction_ranges[0]) is not None
        and all(_static(r) is not None for r in body.ranges)
    )


def row_block(rows: int) -> int:
    """Rows per block for an input of `rows` rows (see ROW_BLOCK)."""
    block = ROW_BLOCK
    while block > MIN_BLOCK and rows < block * MIN_PROGRAMS:
        block //= 2
    return block


def _identity(kind: str, dtype) -> Constant:
    if kind == "sum":
        return Constant(0, dtype)
    if kind == "prod":
        return Constant(1, dtype)
    if dtype.is_floating_point:
        return Constant(float("-inf") if kind == "max" else float("inf"), dtype)
    info = torch.iinfo(dtype)
    return Constant(info.min if kind == "max" else info.max, dtype)


def _guard(value, row, rows: int, kind: str):
    clamped = map_indices(value, lambda index: sympy.sympify(index).xreplace({ROW: sympy.Min(row, rows - 1)}))
    inside = Op("lt", (IndexValue(row, torch.int64), Constant(rows, torch.int64)), torch.bool)
    return Op("where", (inside, clamped, _identity(kind, value.dtype)), value.dtype)


def _cut(buffer: ComputedBuffer, rows: int, block: int, name: str) -> tuple[ComputedBuffer, ComputedBuffer]:
    body = buffer.body
    blocks = -(-rows // block)
    kept = len(body.ranges)
    columns = [_column(k) for k in range(kept)]
    # Over (ROW, COLUMNS) first, then ROW = s * RB + k with s = i0, columns i1..., k = r0.
    value = substitute(body.value, {reduction_var(0): ROW, **dict(zip(index_vars(kept), columns))})
    row = index_var(0) * block + reduction_var(0)
    if rows % block:
        value = _guard(value, row, rows, body.reduction_type)
    value = substitute(value, {ROW: row, **{c: index_var(k + 1) for k, c in enumerate(columns)}})
    return partials_and_final(buffer, name, blocks, block, value)


def cut_row_blocks(program: LoopProgram) -> LoopProgram:
    """`program` with each column reduction that a row reduction's read covers cut into row-block
    partials and their reduction (see the module docstring)."""
    row_side = [
        b for b in program.buffers
        if isinstance(b, ComputedBuffer) and isinstance(b.body, Reduction) and len(b.body.ranges) == 1
    ]  # fmt: skip
    if not row_side:
        return program
    names = {b.name for b in program.buffers} | {i.name for i in program.inputs}
    buffers, changed = [], False
    for buffer in program.buffers:
        if not _is_column_reduction(buffer):
            buffers.append(buffer)
            continue
        body = buffer.body
        rows = _static(body.reduction_ranges[0])
        reads = _column_reads(buffer)
        partner = next(
            (
                r for r in row_side
                if _same(r.body.ranges, body.reduction_ranges)
                and reads <= (row_reads(r, body.ranges) or set())
            ),
            None,
        )  # fmt: skip
        columns = _static(product(body.ranges))
        if partner is None or rows < 2 * MIN_BLOCK or columns < MIN_COLUMNS:
            buffers.append(buffer)
            continue
        name = f"{buffer.name}_rows"
        while name in names:
            name += "_"
        names.add(name)
        block = row_block(rows)
        fusion_log.info(
            "row blocks: %s reduces the rows %s reads; cut into %d partials of %d rows (%s) to share "
            "its read", buffer.name, partner.name, -(-rows // block), block, name,
        )  # fmt: skip
        buffers += _cut(buffer, rows, block, name)
        changed = True
    return replace(program, buffers=tuple(buffers)) if changed else program


def in_rows(partial: ComputedBuffer, rows: int, row=ROW):
    """The value of row-block partial `partial` at element (row, i1, i2...) of the [rows, C...]
    space, without the guard of a ragged last block (the fused kernel masks those rows);
    None when `partial` is not a row-block partial of `rows` rows."""
    body = partial.body
    if not _is_column_reduction(partial) or len(body.ranges) < 2:
        return None
    block, blocks = _static(body.reduction_ranges[0]), _static(body.ranges[0])
    if blocks != -(-rows // block):
        return None
    value = substitute(body.value, {reduction_var(0): row - block * index_var(0)})
    if rows % block:
        clamp = {sympy.Min(row, rows - 1): row}
        value = _unguard(map_indices(value, lambda index: sympy.sympify(index).xreplace(clamp)), row)
    if any(index_var(0) in sympy.sympify(ld.index).free_symbols for ld in loads(value)) or _guarded(value):
        return None
    return value


def _unguard(value, row):
    """`value` without the `where(row < N, ..., identity)` of `_guard`."""
    if isinstance(value, Op) and value.op == "where":
        test = value.args[0]
        if isinstance(test, Op) and test.op == "lt" and isinstance(test.args[0], IndexValue):
            if sympy.sympify(test.args[0].expr) == row:
                return value.args[1]
    return value


def _guarded(value) -> bool:
    """Whether the block's rows still reach `value` through an index value (a guard not removed)."""
    if isinstance(value, IndexValue):
        return index_var(0) in sympy.sympify(value.expr).free_symbols
    return any(_guarded(a) for a in getattr(value, "args", ()))


def _covered(p: ComputedBuffer, row_reductions) -> bool:
    """Whether a row reduction among `row_reductions` reads every element row-block partial `p` reads."""
    columns = p.body.ranges[1:]
    mapping = {index_var(k + 1): _column(k) for k in range(len(columns))}
    for r in row_reductions:
        n, reads = _static(r.body.ranges[0]), row_reads(r, columns)
        value = None if n is None or reads is None else in_rows(p, n)
        if value is not None and _element_reads(substitute(value, mapping)) <= reads:
            return True
    return False


def cross_parts(members) -> tuple[list[ComputedBuffer], list[ComputedBuffer]] | None:
    """(row members, row-block partials) when `members` are row-space buffers (kept [N]: row
    reductions and their epilogues) and partials cut by `cut_row_blocks` (kept [blocks, C...])
    whose reads a row reduction among them covers; partials read no member. Else None."""
    row_reductions = [m for m in members if isinstance(m.body, Reduction) and len(m.body.ranges) == 1]
    if not row_reductions:
        return None
    partials = [
        m for m in members
        if isinstance(m.body, Reduction) and len(m.body.ranges) >= 2 and _covered(m, row_reductions)
    ]  # fmt: skip
    if not partials or len({p.body.reduction_ranges[0] for p in partials}) != 1:
        return None
    names = {m.name for m in members}
    if any(ld.buffer in names for p in partials for ld in loads(p.body.value)):
        return None
    return [m for m in members if m not in partials], partials


def partial_index(partial: ComputedBuffer, block_symbol) -> sympy.Expr:
    """Where element (block `block_symbol`, columns i1...) of `partial` lies in its storage."""
    strides = partial.layout.strides
    return block_symbol * strides[0] + sum(
        (index_var(k + 1) * s for k, s in enumerate(strides[1:])), sympy.Integer(0)
    )


def row_block_configs(block: int, columns: int) -> tuple:
    """(XBLOCK, RBLOCK, num_warps) of the fused kernel: XBLOCK is the partials' row block; tiles of
    2K-8K elements (the Welford state of a row statistic is three fp32 tensors of a tile)."""
    configs = []
    widest = max(32, 1 << max(0, (columns - 1).bit_length()))
    for elements, warps in ((4096, 8), (2048, 4), (8192, 8), (8192, 16), (4096, 4)):
        rblock = elements // block
        if 32 <= rblock <= widest:
            configs.append((block, rblock, warps))
    return tuple(dict.fromkeys(configs)) or ((block, 32, 4),)
