"""Split reductions for the GPU (a `LoopProgram -> LoopProgram` pass): a reduction with few outputs
and long rows (a column sum, a bias gradient, a full sum) would run on a handful of GPU programs
while the rest of the GPU idles. It becomes two reductions:

    partial[s, i...] = reduce over c < chunk of value(i..., r = s * chunk + c)     (split x rows)
    out[i...]        = reduce over s < split of partial[s, i...]

The split index is the partial's OUTER dim, so neighbouring lanes of the first kernel still walk
the original output dims (coalesced for a column sum) and the second kernel reads rows of
`partial` contiguously. Only static sizes whose row length the split divides, and the reduction
types whose partial results combine with themselves (sum, prod, max, min).
"""

from dataclasses import replace

import sympy

from torchsmith.inductor.loop_ir.program import (
    ComputedBuffer,
    Layout,
    Load,
    LoopProgram,
    Reduction,
    index_var,
    index_vars,
    loads,
    reduction_var,
    reduction_vars,
    substitute,
)
from torchsmith.inductor.triton.index import compute_dtype, product, row_major_strides, walks_columns
from torchsmith.ir.symbolic import FloorDiv
from torchsmith.ir.types import contiguous_strides

SPLITTABLE = ("sum", "prod", "max", "min")
# Row reductions (contiguous along the reduced dim) run one row a program: split until about this
# many (piece, output) rows, pieces of at least ROW_CHUNK elements; rows shorter than MIN_ROW stay.
ROW_TARGET, ROW_CHUNK, MIN_ROW = 2048, 4096, 8192
# Column walks (triton_reduction.COLUMN_CONFIGS) put 32-512 output columns in a program: split until
# about this many (piece, column) pairs, pieces of at least COLUMN_CHUNK rows: enough programs to
# fill the GPU. Past a few hundred programs of 64 columns, more pieces only add partial sums to
# write and read.
COLUMN_TARGET, COLUMN_CHUNK = 32768, 512


def _static(expr) -> int | None:
    expr = sympy.sympify(expr)
    return int(expr) if expr.is_Integer else None


def choose_split(xnumel: int, rnumel: int, columns: bool = False) -> int:
    """How many pieces to cut each row into (1: leave it alone); `columns`: the reduction walks
    columns (see triton_index.walks_columns)."""
    target, chunk = (COLUMN_TARGET, COLUMN_CHUNK) if columns else (ROW_TARGET, ROW_CHUNK)
    if (not columns and rnumel < MIN_ROW) or xnumel >= target:
        return 1
    split = 1
    while split * 2 * xnumel <= target and rnumel % (split * 2) == 0 and rnumel // (split * 2) >= chunk:
        split *= 2
    return split


def _walks_columns(body: Reduction) -> bool:
    indices = [ld.index for ld in loads(body.value)]
    return walks_columns(
        indices, index_vars(len(body.ranges)), reduction_vars(len(body.reduction_ranges))
    )


def _split_buffer(buffer: ComputedBuffer, split: int, name: str) -> tuple[ComputedBuffer, ComputedBuffer]:
    body = buffer.body
    rnumel = _static(product(body.reduction_ranges))
    chunk = rnumel // split
    rank = len(body.ranges)
    # Original output vars move one place right; i0 is the piece, r0 the position inside it.
    shift = {index_var(k): index_var(k + 1) for k in range(rank)}
    flat = index_var(0) * chunk + reduction_var(0)
    strides = row_major_strides(body.reduction_ranges)
    decode = {}
    for k, (v, size, stride) in enumerate(
        zip(reduction_vars(len(body.reduction_ranges)), body.reduction_ranges, strides)
    ):
        q = flat if stride == 1 else FloorDiv(flat, stride)
        decode[v] = q if k == 0 else sympy.Mod(q, size)
    value = substitute(body.value, {**shift, **decode})
    return partials_and_final(buffer, name, split, chunk, value)


def partials_and_final(
    buffer: ComputedBuffer, name: str, pieces: int, piece_length: int, value
) -> tuple[ComputedBuffer, ComputedBuffer]:
    """`buffer`'s reduction as partials `name` of shape (pieces, *ranges), each reducing
    `piece_length` elements of `value` (written over i0 = the piece, r0 = the place in it, i1... =
    the kept dims), and the reduction of those partials into `buffer` itself."""
    body = buffer.body
    shape = (pieces, *body.ranges)
    dtype = compute_dtype(buffer.layout.dtype)  # half partials would round every piece
    partial = ComputedBuffer(
        name,
        Layout(shape, contiguous_strides(shape), dtype),
        Reduction(shape, (piece_length,), body.reduction_type, value),
        buffer.origin,
    )
    strides = contiguous_strides(shape)
    index = reduction_var(0) * strides[0] + sum(
        (v * s for v, s in zip(index_vars(len(body.ranges)), strides[1:])), sympy.Integer(0)
    )
    final = ComputedBuffer(
        buffer.name,
        buffer.layout,
        Reduction(body.ranges, (pieces,), body.reduction_type, Load(name, index, dtype)),
        buffer.origin,
    )
    return partial, final


def split_reductions(program: LoopProgram) -> LoopProgram:
    """`program` with every long, narrow reduction split in two (see the module docstring)."""
    buffers, names = [], {b.name for b in program.buffers} | {i.name for i in program.inputs}
    for buffer in program.buffers:
        body = getattr(buffer, "body", None)
        if isinstance(body, Reduction) and body.reduction_type in SPLITTABLE:
            xnumel, rnumel = _static(product(body.ranges)), _static(product(body.reduction_ranges))
            split = 1
            if xnumel is not None and rnumel is not None:
                split = choose_split(xnumel, rnumel, _walks_columns(body))
            if split > 1:
                name = f"{buffer.name}_partial"
                while name in names:
                    name += "_"
                names.add(name)
                buffers += _split_buffer(buffer, split, name)
                continue
        buffers.append(buffer)
    return replace(program, buffers=tuple(buffers))
