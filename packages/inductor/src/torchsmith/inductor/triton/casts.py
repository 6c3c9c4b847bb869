"""Widening casts read in place (a `LoopProgram -> LoopProgram` pass of the GPU path): a pointwise
buffer that only converts a float16/bfloat16 load to float32 is computed inside each consumer.

inline_pointwise keeps a producer that a consumer reads broadcast (its ops would run once per
element instead of once per value), and a Triton kernel cannot read another lane's result, so such a
producer becomes a kernel of its own. For a widening cast that is a whole launch to save one convert
instruction a load: a half layer norm (triton_upcast) converted its weight and bias in two extra
kernels before this pass. The cast is exact, so computing it per element changes no value.
"""

from dataclasses import replace

import torch

from torchsmith.inductor.loop_ir.index_math import split_index, variable_ranges
from torchsmith.inductor.loop_ir.program import (
    ComputedBuffer,
    ExternCall,
    Load,
    LoopProgram,
    Op,
    Pointwise,
    index_vars,
    loads,
    substitute,
)
from torchsmith.inductor.lowering.inline import replace_loads

HALF = (torch.float16, torch.bfloat16)


def _widening_cast(buffer) -> bool:
    if not isinstance(buffer, ComputedBuffer) or not isinstance(buffer.body, Pointwise):
        return False
    value = buffer.body.value
    return (
        isinstance(value, Op)
        and value.op == "convert"
        and value.dtype == torch.float32
        and len(value.args) == 1
        and isinstance(value.args[0], Load)
        and value.args[0].dtype in HALF
    )


def inline_widening_casts(program: LoopProgram) -> LoopProgram:
    """`program` with every widening-cast buffer read through by its consumers; a cast stays a
    buffer while a graph output, an extern call, or a read that does not split per dim needs it."""
    needed = {view.buffer for view in program.outputs}
    needed |= {a.buffer for b in program.buffers if isinstance(b, ExternCall) for a in b.args}
    casts = {b.name: b for b in program.buffers if _widening_cast(b)}
    if not casts:
        return program
    buffers = []
    for buffer in program.buffers:
        if not isinstance(buffer, ComputedBuffer) or not any(
            ld.buffer in casts for ld in loads(buffer.body.value)
        ):
            buffers.append(buffer)
            continue
        ranges = variable_ranges(buffer)

        def read_through(load: Load, ranges=ranges) -> object:
            cast = casts.get(load.buffer)
            if cast is None:
                return load
            layout = cast.layout
            dims = split_index(load.index, layout.shape, layout.strides, ranges)
            if dims is None:
                needed.add(cast.name)
                return load
            return substitute(cast.body.value, dict(zip(index_vars(len(layout.shape)), dims)))

        value = replace_loads(buffer.body.value, read_through)
        buffers.append(replace(buffer, body=replace(buffer.body, value=value)))
    kept = tuple(b for b in buffers if b.name not in casts or b.name in needed)
    return replace(program, buffers=kept)
