"""Computing a buffer that only library calls read just before the first of them.

A training backward recomputes a GELU's output for the weight gradient's matmul, and the graph puts
that recompute at its start: far from the GELU's backward, which reads the same pre-activation
later. Moved next to its matmul, the recompute comes after the matmul the GELU's backward waits
for, so the scheduler's horizontal fusion puts both in one kernel reading the pre-activation once
(mlp_train: two kernels fewer per step). Buffers live shorter as well.

Only buffers read by extern calls alone move: no kernel reads them, so no fusion with a consumer
is lost, and the loop IR is functional (a buffer's inputs do not change after it is written), so
computing it later gives the same values.
"""

from dataclasses import replace

from torchsmith.inductor.fusion.scheduler import reads_of
from torchsmith.inductor.loop_ir.program import ComputedBuffer, ExternCall, LoopProgram


def sink_extern_inputs(program: LoopProgram) -> LoopProgram:
    """`program` with each computed buffer that only extern calls read moved to just before the
    first of them (the graph's outputs stay where they are)."""
    buffers = program.buffers
    readers: dict[str, list[int]] = {}
    for i, buffer in enumerate(buffers):
        for name in reads_of(buffer):
            readers.setdefault(name, []).append(i)
    outputs = {view.buffer for view in program.outputs}
    moved_before: dict[int, list[int]] = {}
    moved = set()
    for i, buffer in enumerate(buffers):
        if not isinstance(buffer, ComputedBuffer) or buffer.name in outputs:
            continue
        reading = readers.get(buffer.name, [])
        if reading and all(isinstance(buffers[j], ExternCall) for j in reading) and min(reading) > i + 1:
            moved_before.setdefault(min(reading), []).append(i)
            moved.add(i)
    if not moved:
        return program
    order = []
    for j, buffer in enumerate(buffers):
        order.extend(buffers[i] for i in moved_before.get(j, ()))
        if j not in moved:
            order.append(buffer)
    return replace(program, buffers=tuple(order))


def sink_output_externs(program: LoopProgram) -> LoopProgram:
    """`program` with each extern call whose result only leaves the graph (a weight gradient's
    matmul) moved to just after the last reader of its computed inputs: later, without keeping any
    input alive longer.

    A backward computes a linear layer's weight gradient and its input gradient from the same
    activation gradient; computed last, the weight gradient is still in cache when the caller reads
    it right away (FSDP's and DDP's gradient hooks copy it into their communication buffers)."""
    buffers = list(program.buffers)
    readers: dict[str, list[int]] = {}
    for i, buffer in enumerate(buffers):
        for name in reads_of(buffer):
            readers.setdefault(name, []).append(i)
    computed = {b.name for b in buffers}
    after: dict[int, list[int]] = {}
    moved = set()
    for i, buffer in enumerate(buffers):
        if not isinstance(buffer, ExternCall) or buffer.name in readers:
            continue
        last = max((max(readers[n]) for n in reads_of(buffer) if n in computed), default=i)
        if last > i:
            after.setdefault(last, []).append(i)
            moved.add(i)
    if not moved:
        return program
    order = []
    for j, buffer in enumerate(buffers):
        if j not in moved:
            order.append(buffer)
        order.extend(buffers[i] for i in after.get(j, ()))
    return replace(program, buffers=tuple(order))
