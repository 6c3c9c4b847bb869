"""Kernel-local buffers: intermediates that a fused kernel both writes and reads inside one outer
iteration, kept in a small array of that iteration instead of a tensor in memory.

Softmax's kernel computes, per row, the max, `exp(x - max)`, its sum and the quotient; only the
quotient leaves the kernel. Stored as tensors, the exp values alone are a second full-size buffer:
allocated per call (page faults on fresh memory), written to memory and read back. Kept local, a row
of them (1 KB for 256 floats) stays in L1 and the max and sum are scalars: the kernel's only traffic
is reading x and writing the result, as eager's softmax does.

A buffer is local when every reader is a member of its own kernel group (no extern call, no other
kernel, not a graph output), each reader reads it within the outer iteration that computes it (the
scheduler's rule for fusion, checked again here on the code generator's outer loops), and its part
of one outer iteration has a static size within `MAX_LOCAL_BYTES` (summed over the kernel's locals).
The code generator declares `<type> l_<name>[size]` at the top of the outer loop body (so each thread
of the parallel outer loop has its own), stores at the inner dims' row-major offset and rewrites the
readers' loads to the same offsets. The memory plan gives such buffers no storage.
"""

from dataclasses import replace

import sympy

from torchsmith.inductor.cpp.dtypes import storage_type
from torchsmith.inductor.loop_ir.index_math import split_index, variable_ranges
from torchsmith.inductor.loop_ir.program import (
    ComputedBuffer,
    Expr,
    ExternCall,
    Indirect,
    Load,
    LoopProgram,
    Op,
    index_var,
    loads,
)
from torchsmith.ir.types import contiguous_strides

# The stack arrays of one kernel's outer iteration stay within L1 (and far below a thread's stack).
MAX_LOCAL_BYTES = 32 * 1024


def _static_size(dims) -> int | None:
    total = sympy.Integer(1)
    for d in dims:
        total = total * sympy.sympify(d)
    return int(total) if total.is_Integer else None


def _reads_inside(reader: ComputedBuffer, buffer: ComputedBuffer, depth: int) -> bool:
    """Whether every load of `buffer` in `reader` reads inside the current outer iteration (the
    first `depth` per-dim indices are the outer loop variables)."""
    ranges = variable_ranges(reader)
    layout = buffer.layout
    for load in loads(reader.body.value):
        if load.buffer != buffer.name:
            continue
        split = split_index(load.index, layout.shape, layout.strides, ranges)
        if split is None:
            return False
        outer = reader.body.ranges[:depth]
        if any(outer[k] != 1 and sympy.expand(split[k] - index_var(k)) != 0 for k in range(depth)):
            return False
    return True


def _readers(program: LoopProgram, groups) -> dict[str, set[int]]:
    """Buffer name -> indices of the groups reading it (-1 for an extern call or a graph output)."""
    readers: dict[str, set[int]] = {}
    for k, group in enumerate(groups):
        for member in group:
            for load in loads(member.body.value):
                readers.setdefault(load.buffer, set()).add(k)
    for buffer in program.buffers:
        if isinstance(buffer, ExternCall):
            for arg in buffer.args:
                readers.setdefault(arg.buffer, set()).add(-1)
    for view in program.outputs:
        readers.setdefault(view.buffer, set()).add(-1)
    return readers


def kernel_locals(program: LoopProgram, groups, layout_of) -> frozenset[str]:
    """The buffers of `groups` that can live in their kernel's outer iteration. `layout_of(group)`
    gives `(prologue, outer)`: how many leading members the kernel computes whole before its loops
    (`cpp/prologue.py`: their arrays hold all of them, declared once), and the outer loop ranges of
    the rest, or None where locals do not apply to them (a column-reduction kernel); members without
    an outer loop, or alone after the prologue, have none either."""
    readers = _readers(program, groups)
    chosen: set[str] = set()
    for k, group in enumerate(groups):
        if len(group) < 2:
            continue
        first, outer = layout_of(group)
        if len(group) - first < 2:
            outer = None
        budget = MAX_LOCAL_BYTES
        for position, buffer in enumerate(group):
            if position < first:
                depth = 0
            elif not outer:
                break
            else:
                depth = len(outer)
            if readers.get(buffer.name, set()) != {k}:
                continue
            shape = buffer.layout.shape
            if len(shape) != len(buffer.body.ranges) or len(shape) < depth:
                continue
            size = _static_size(shape[depth:])
            if size is None or size * buffer.layout.dtype.itemsize > budget:
                continue
            later = group[position + 1 :]
            if not all(_reads_inside(m, buffer, depth) for m in later):
                continue
            chosen.add(buffer.name)
            budget -= size * buffer.layout.dtype.itemsize
    return frozenset(chosen)


def _local_strides(buffer: ComputedBuffer, depth: int) -> tuple:
    inner = contiguous_strides(tuple(buffer.layout.shape[depth:]))
    return (sympy.Integer(0),) * depth + tuple(inner)


def _rewrite_loads(expr: Expr, fn) -> Expr:
    if isinstance(expr, Load):
        return fn(expr)
    if isinstance(expr, Op):
        return Op(expr.op, tuple(_rewrite_loads(a, fn) for a in expr.args), expr.dtype)
    if isinstance(expr, Indirect):
        return Indirect(expr.var, _rewrite_loads(expr.value, fn), expr.size, _rewrite_loads(expr.body, fn))
    return expr


def localize(group, local: frozenset[str], depth: int):
    """`group` with its local buffers' layouts made iteration-local (strides 0 on the `depth` outer
    dims, row-major on the rest) and every load of them rewritten to that layout; and the arrays to
    declare, as (buffer name, C++ element type, element count)."""
    originals = {b.name: b for b in group if b.name in local}
    if not originals:
        return tuple(group), []
    strides = {name: _local_strides(b, depth) for name, b in originals.items()}

    def relocate(reader: ComputedBuffer):
        ranges = variable_ranges(reader)

        def at(load: Load) -> Expr:
            source = originals.get(load.buffer)
            if source is None:
                return load
            split = split_index(load.index, source.layout.shape, source.layout.strides, ranges)
            assert split is not None, (reader.name, load)  # kernel_locals checked every load
            index = sum((j * s for j, s in zip(split, strides[load.buffer])), sympy.Integer(0))
            return Load(load.buffer, sympy.expand(index), load.dtype)

        return _rewrite_loads(reader.body.value, at)

    rewritten = []
    for member in group:
        value = relocate(member)
        member = replace(member, body=replace(member.body, value=value))
        if member.name in originals:
            member = replace(member, layout=replace(member.layout, strides=strides[member.name]))
        rewritten.append(member)
    arrays = [
        (name, storage_type(b.layout.dtype), max(_static_size(b.layout.shape[depth:]), 1))
        for name, b in originals.items()
    ]
    return tuple(rewritten), arrays
