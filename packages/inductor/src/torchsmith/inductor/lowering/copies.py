"""Copies that change nothing: a buffer whose every element is the element at the same storage
offset of an intermediate buffer, in the same dtype, read by nothing but this copy.

A model's `.contiguous()` after a transpose is traced on meta tensors, which lay a library kernel's
result out as eager's meta kernel says; the real kernel may already return the transposed layout
(attention's `[B, L, H, E]` storage), and then the lowered `prims.clone` copies a buffer onto an
identical one. The copy is dropped and its readers read the intermediate itself: buffers are
written once and never changed, so sharing the storage is safe unless both leave the graph (the
caller could see one change through the other) or the intermediate is a graph input.
"""

from dataclasses import replace

import sympy

from torchsmith.inductor.loop_ir.program import (
    ComputedBuffer,
    ExternCall,
    Load,
    LoopProgram,
    Pointwise,
    index_vars,
    loads,
)
from torchsmith.inductor.lowering.inline import replace_loads


def elide_identity_copies(program: LoopProgram) -> LoopProgram:
    """`program` without the copies described above, their readers reading the copied buffer."""
    buffers = {b.name: b for b in program.buffers}
    readers: dict[str, int] = {}
    for b in program.buffers:
        if isinstance(b, ExternCall):
            names = {a.buffer for a in b.args}
        else:
            names = {ld.buffer for ld in loads(b.body.value)}
        for name in names:
            readers[name] = readers.get(name, 0) + 1
    outputs = {view.buffer for view in program.outputs}
    renamed: dict[str, str] = {}
    for b in program.buffers:
        source = _identity_copy_of(b, buffers)
        if source is None or readers.get(source) != 1 or source in renamed:
            continue
        if b.name in outputs and source in outputs:
            continue
        renamed[b.name] = source
    if not renamed:
        return program

    def read(load: Load) -> Load:
        return replace(load, buffer=renamed.get(load.buffer, load.buffer))

    def view(v):
        return replace(v, buffer=renamed.get(v.buffer, v.buffer))

    kept = []
    for b in program.buffers:
        if b.name in renamed:
            continue
        if isinstance(b, ExternCall):
            kept.append(replace(b, args=tuple(view(a) for a in b.args)))
        else:
            kept.append(replace(b, body=replace(b.body, value=replace_loads(b.body.value, read))))
    return replace(program, buffers=tuple(kept), outputs=tuple(view(v) for v in program.outputs))


def _identity_copy_of(buffer, buffers: dict) -> str | None:
    """The intermediate `buffer` copies element for element at the same storage offsets, or None."""
    if not isinstance(buffer, ComputedBuffer) or not isinstance(buffer.body, Pointwise):
        return None
    value = buffer.body.value
    source = buffers.get(value.buffer) if isinstance(value, Load) else None
    if source is None or source.layout.dtype != buffer.layout.dtype or value.dtype != buffer.layout.dtype:
        return None
    layout = buffer.layout
    if tuple(buffer.body.ranges) != tuple(layout.shape):
        return None
    own = sum((v * s for v, s in zip(index_vars(len(layout.shape)), layout.strides)), sympy.Integer(0))
    if sympy.expand(sympy.sympify(value.index) - own) != 0:
        return None
    if sympy.expand(_extent(layout) - _extent(source.layout)) != 0:
        return None
    return source.name


def _extent(layout) -> sympy.Expr:
    """Elements from the first to one past the last one a layout addresses (sizes >= 1)."""
    last = sum(((d - 1) * s for d, s in zip(layout.shape, layout.strides)), sympy.Integer(0))
    return sympy.expand(1 + last)
