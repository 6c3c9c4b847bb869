"""The steps of a compiled graph with static sizes, each as a function of the call's tensors.

`TritonCompiledGraph.__call__` interprets its steps: per step it looks at the kind, evaluates sizes,
looks the kernel's arguments up by name, and runs matmuls through `run_extern`'s general path (argument
views, parameters, output layout checks). With static sizes all of that is known when the graph is
compiled. `static_steps` decides it once and returns one closure per step, so a call is the
allocations, the launches and the library calls: a BERT forward has about 40 kernels and 35 matmuls,
and the interpretation cost more host time per call than the GPU took to run them.
"""

import torch

from torchsmith.inductor.loop_ir.program import ExternCall, LoopProgram, TensorView
from torchsmith.inductor.runtime.extern_plan import MATMULS, argument_builder, in_matmul_layout, static_ints
from torchsmith.inductor.runtime.externs import (
    EXTERN_KERNELS,
    OUTPUT_KERNEL,
    in_layout,
    kernel_function,
    own_output,
    run_extern,
)
from torchsmith.ir.symbolic import evaluate


def view_reader(view: TensorView, exact_layouts: dict):
    """A function `T -> tensor` reading `view` from the call's tensors `T` (by buffer name): the
    buffer itself when the view is all of it in the layout the buffer is known to have at run time
    (`exact_layouts`, by name), else a strided view of it."""
    name = view.buffer
    shape, strides, offset = (
        static_ints(view.shape),
        static_ints(view.strides),
        int(evaluate(view.offset, {})),
    )
    layout = exact_layouts.get(name)
    whole = layout is not None and (static_ints(layout.shape), static_ints(layout.strides)) == (
        shape,
        strides,
    )
    if whole and offset == 0:
        return lambda T: T[name]

    def read(T):
        base = T[name]
        if offset == 0 and base.shape == shape and base.stride() == strides:
            return base
        return base.as_strided(shape, strides, base.storage_offset() + offset)

    return read


def _matmul_step(call: ExternCall, fn, layouts: dict, device: torch.device):
    readers = [view_reader(v, layouts) for v in call.args]
    name, dtype = call.name, call.layout.dtype
    shape, strides = static_ints(call.layout.shape), static_ints(call.layout.strides)

    def step(T):
        T[name] = in_matmul_layout(fn(*[read(T) for read in readers]), shape, strides, dtype)

    return step


def _extern_step(call: ExternCall, layouts: dict):
    """A library call with parameters (a convolution, attention, a fallback op): its arguments built
    from precomputed parts, its result checked and laid out as `run_extern` does."""
    name, empty = call.name, {}
    if call.kernel == OUTPUT_KERNEL or not (call.params or call.kwargs):

        def step(T):
            T[name] = run_extern(call, T, empty)

        return step
    fn = kernel_function(call.kernel)
    readers = [view_reader(v, layouts) for v in call.args]
    params = [argument_builder(p) for p in call.params]
    kwargs = [(key, argument_builder(v)) for key, v in call.kwargs]

    def step(T):
        args = [read(T) for read in readers]
        result = fn(*[p(args) for p in params], **{key: v(args) for key, v in kwargs})
        T[name] = in_layout(call, own_output(call, result, T), empty, args)

    return step


def _in_place_step(call: ExternCall, op_name: str, layouts: dict):
    """A functional update run by its in-place variant (`loop_ir.in_place`): it writes into its
    first argument, an input of the graph, and that tensor is the call's result."""
    op = getattr(torch.ops.aten, op_name).default
    name = call.name
    readers = [view_reader(v, layouts) for v in call.args]
    params = [argument_builder(p) for p in call.params]
    kwargs = [(key, argument_builder(v)) for key, v in call.kwargs]

    def step(T):
        args = [read(T) for read in readers]
        if params or kwargs:
            op(*[p(args) for p in params], **{key: v(args) for key, v in kwargs})
        else:
            op(*args)
        T[name] = args[0]

    return step


def _kernel_step(launcher, allocate: list, device: torch.device):
    allocations = [
        (name, static_ints(shape), static_ints(strides), dtype) for name, shape, strides, dtype in allocate
    ]
    names = launcher.spec.writes + launcher.spec.reads
    empty_strided, no_symbols, empty = torch.empty_strided, [], {}

    def step(T):
        for name, shape, strides, dtype in allocations:
            T[name] = empty_strided(shape, strides, dtype=dtype, device=device)
        launcher.launch([T[n] for n in names], no_symbols, empty)

    return step


def _alias_step(name: str, target: str):
    """A copy a kernel folded in (`triton.folded_copy`): its result is the target that kernel wrote."""

    def step(T):
        T[name] = T[target]

    return step


def _epilogue_step(launcher, fused, device: torch.device):
    no_symbols, empty = [], {}

    def step(T):
        fused.run(T, empty, launcher, no_symbols, device)

    return step


def static_steps(program: LoopProgram, steps: list, device: torch.device, matmul=None, in_place=None):
    """(step functions, output readers) of a program without size symbols: one `step(T)` per
    (kind, what, extra) step (kind "kernel", "epilogue", "extern" or "alias"), reading its inputs
    from and writing its results to `T` (tensors by buffer name), and one `T -> tensor` per output
    view. `matmul` is max-autotune's replacement for the `prims.mm` calls, or None; `in_place`
    names the extern calls that run as an in-place op (`{call name: op name}`, from
    `loop_ir.in_place.in_place_updates`)."""
    in_place = in_place or {}
    matmuls = matmul_functions(steps, matmul)
    # Buffers whose tensors have exactly their layout in every call: inputs (a static graph checks
    # them), kernel results (allocated so) and matmul results (`_matmul_step` makes them so).
    # Other extern results may differ in the strides of size-1 dimensions.
    exact = {
        b.name: b.layout
        for b in (*program.inputs, *program.buffers)
        if not isinstance(b, ExternCall) or b.name in matmuls
    }
    out = []
    for kind, what, extra in steps:
        if kind == "kernel":
            out.append(_kernel_step(what, extra, device))
        elif kind == "epilogue":
            out.append(_epilogue_step(what, extra, device))
        elif kind == "alias":
            out.append(_alias_step(what.name, extra))
        elif what.name in in_place:
            out.append(_in_place_step(what, in_place[what.name], exact))
        elif what.name in matmuls:
            out.append(_matmul_step(what, matmuls[what.name], exact, device))
        else:
            out.append(_extern_step(what, exact))
    return out, [view_reader(v, exact) for v in program.outputs]


def matmul_functions(steps: list, matmul=None) -> dict:
    """`{call name: function}` of the extern steps that are library matmuls without parameters
    (max-autotune's `matmul` for `prims.mm` where given): the function of its arguments, whose
    result `in_matmul_layout` puts in the call's layout."""
    matmuls = {}
    for kind, what, _ in steps:
        if kind == "extern" and matmul is not None and what.kernel == "prims.mm":
            matmuls[what.name] = matmul
        elif kind == "extern" and _is_plain_matmul(what):
            matmuls[what.name] = MATMULS[what.kernel]
    return matmuls


def _is_plain_matmul(call: ExternCall) -> bool:
    # Still the library function (tests and users may swap EXTERN_KERNELS entries), no parameters.
    fn = MATMULS.get(call.kernel)
    return fn is not None and EXTERN_KERNELS.get(call.kernel) is fn and not (call.params or call.kwargs)
