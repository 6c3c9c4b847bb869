"""Functional updates of an input that the runtime copies back into it, run in place instead.

A traced `cache.index_copy_(2, pos, k)` reaches the inductor functionalized: an extern call makes a
new tensor, `index_copy(cache, 2, pos, k)`, the graph returns it, and autograd_aot's runtime copies
it back into `cache`. For a KV cache that is two whole copies per layer and step to change one
position. When nothing else in the program reads the input, the call can write into the input
itself and return it: the runtime's copy back is then a copy of a tensor onto itself, which torch
skips. `in_place_updates` finds those calls; the runtime runs each with the op's in-place variant,
or on the GPU, for `index_copy`, has a Triton kernel over the source's elements do it
(`triton.folded_copy`).
"""

from torchsmith.inductor.loop_ir.program import (
    ComputedBuffer,
    ExternCall,
    LoopProgram,
    TensorArg,
    TensorView,
    loads,
)

# The functional ops whose in-place variant writes the same values into the first argument, each
# idempotent: a call re-run eagerly after a failure writes the same values again.
IN_PLACE_VARIANTS = {
    "aten.index_copy.default": "index_copy_",
    "aten.index_put.default": "index_put_",
    "prims.index_put": "index_put_",  # (self, indices, values, accumulate) as aten's
}


def in_place_updates(program: LoopProgram, written_back: dict[int, int]) -> dict[str, str]:
    """{extern call name: in-place op name} for the calls that may write into their first argument:
    the call's result is graph output `j` with `written_back[j] == k` (the runtime copies output `j`
    into graph input `k`), its first argument is all of input `k` in its own layout, its result has
    that layout too, and nothing else reads input `k` (no other argument, kernel or output)."""
    inputs = {b.position: b for b in program.inputs}
    calls = {b.name: b for b in program.buffers if isinstance(b, ExternCall)}
    readers = _readers(program)
    found = {}
    for j, k in written_back.items():
        if j >= len(program.outputs) or k not in inputs:
            continue
        output, source = program.outputs[j], inputs[k]
        call = calls.get(output.buffer)
        if call is None or call.kernel not in IN_PLACE_VARIANTS or not call.args:
            continue
        if _accumulates(call) or (call.params and call.params[0] != TensorArg(0)):
            continue  # adds into the input, or the first argument is not the one written
        if not (_whole(output, call.layout) and _whole(call.args[0], source.layout)):
            continue
        if call.args[0].buffer != source.name or readers.get(source.name) != 1:
            continue
        if (call.layout.shape, call.layout.strides, call.layout.dtype) != (
            source.layout.shape,
            source.layout.strides,
            source.layout.dtype,
        ):
            continue
        found[call.name] = IN_PLACE_VARIANTS[call.kernel]
    return found


def _readers(program: LoopProgram) -> dict[str, int]:
    """How many reads of each buffer the program makes: extern arguments, kernel loads (once per
    kernel), and graph outputs."""
    counts: dict[str, int] = {}
    for b in program.buffers:
        if isinstance(b, ExternCall):
            names = [a.buffer for a in b.args]
        elif isinstance(b, ComputedBuffer):
            names = sorted({ld.buffer for ld in loads(b.body.value)})
        else:
            names = []
        for name in names:
            counts[name] = counts.get(name, 0) + 1
    for view in program.outputs:
        counts[view.buffer] = counts.get(view.buffer, 0) + 1
    return counts


def _whole(view: TensorView, layout) -> bool:
    return (view.shape, view.strides, view.offset, view.dtype) == (
        layout.shape,
        layout.strides,
        0,
        layout.dtype,
    )


def _accumulates(call: ExternCall) -> bool:
    """`index_put(..., accumulate=True)` adds into the input: not idempotent, left functional."""
    if IN_PLACE_VARIANTS[call.kernel] != "index_put_":
        return False
    for key, value in call.kwargs:
        if key == "accumulate":
            return value is not False
    return len(call.params) > 3 and call.params[3] is not False
