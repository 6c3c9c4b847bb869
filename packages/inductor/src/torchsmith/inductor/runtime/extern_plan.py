"""Extern calls of a C++ graph with static sizes, planned once when the graph is built.

`run_extern` decides everything per call: it evaluates each argument view's sizes, compares them
with the buffer's, looks the kernel up by name, resolves parameters and checks the result's dtype,
shape, aliasing and strides. Without size symbols all of that except the result's strides is known
when the graph is compiled, so `static_extern_step` returns one closure per call that reads its
arguments from the wrapper's slots (the buffer itself where the view is all of it), calls the
resolved torch function, and for the library matmuls (which return a fresh tensor of the call's
shape) only compares the result's strides. A small model's call makes a dozen or more such library
calls, and the per-call decisions took several times longer than the matmuls themselves.

    >>> run = static_extern_step(call, slot_of, layouts, drop=[3])   # doctest: +SKIP
    >>> run(values, {}, [], scratch)                                # values[slot_of[call.name]] set
"""

import types

import torch

from torchsmith.inductor.loop_ir.program import ExternCall, TensorArg, TensorView
from torchsmith.inductor.runtime import extern_pool, onednn_matmul
from torchsmith.inductor.runtime.conv_relu import convolution_relu
from torchsmith.inductor.runtime.externs import (
    EXTERN_KERNELS,
    OUTPUT_KERNEL,
    in_layout,
    kernel_function,
    own_output,
    same_strides,
)
from torchsmith.inductor.runtime.straight_line import LibraryStep, MatmulStep
from torchsmith.ir.graph import ArgList
from torchsmith.ir.interpreter import thaw
from torchsmith.ir.registry import lookup_op
from torchsmith.ir.symbolic import evaluate

# The library matmuls: no parameters, a fresh result of the call's shape and dtype, never a view of
# an argument; only its strides may differ from the layout (where a size is 1, or a library choice).
MATMULS = {"prims.mm": torch.mm, "prims.bmm": torch.bmm, "extern.addmm": torch.addmm}

# Library functions whose result is a new tensor of the call's dtype, never a view of an argument,
# by kernel name (None: the op registry's eager function). A call still bound to that very function
# (not a replacement a test or user put in EXTERN_KERNELS) skips the check that its result shares
# no argument's storage, and runs as a `LibraryStep` of a straight-line graph, which compares its
# sizes and strides only.
FRESH_RESULT_FUNCTIONS = {
    "prims.convolution": torch.convolution,
    "extern.convolution_relu": convolution_relu,
    "prims.scaled_dot_product_attention": None,
}


def _fresh_result_function(kernel: str):
    if kernel not in FRESH_RESULT_FUNCTIONS:
        return None
    fn = FRESH_RESULT_FUNCTIONS[kernel]
    return lookup_op(kernel).eager if fn is None else fn


def static_ints(dims) -> tuple[int, ...]:
    """Sizes or strides of a graph without size symbols, as ints."""
    return tuple(int(evaluate(d, {})) for d in dims)


def plannable(call: ExternCall) -> bool:
    """Whether `static_extern_step` handles `call` (an output pick of a multi-output call reads the
    wrapper's scratch by name and keeps the general path)."""
    return call.kernel != OUTPUT_KERNEL


def slot_reader(view: TensorView, slot: int, layout, graph_input: bool = False):
    """`values -> tensor`: the buffer in `slot` where `view` is all of it in its `layout` (which the
    wrapper's buffers hold, up to strides where a size is 1, which no op reads), else a strided view.

    A view of a graph input that is a parameter (a transposed weight) is made once and reused while
    the same parameter object holds the same memory: the view only names that memory (the caller's
    checks fix the parameter's sizes and strides), and graphs run without autograd recording, so the
    view carries no history. Other inputs are not kept past the call."""
    shape, strides, offset = (
        static_ints(view.shape),
        static_ints(view.strides),
        int(evaluate(view.offset, {})),
    )
    if offset == 0 and (static_ints(layout.shape), static_ints(layout.strides)) == (shape, strides):
        return None  # the buffer itself: the caller reads the slot without a function call
    if not graph_input:

        def read(values):
            base = values[slot]
            return base.as_strided(shape, strides, base.storage_offset() + offset)

        return read
    view_of = parameter_view(shape, strides, offset)

    def read_input(values):
        return view_of(values[slot])

    return read_input


def parameter_view(shape, strides, offset):
    """`base -> view` of a graph input, the view kept while the same parameter object holds the same
    memory (the caller's checks fix its sizes and strides; graphs run without autograd recording,
    so the view carries no history). Other tensors get a new view each call."""
    kept = [None, 0, None]  # the parameter, its data pointer, the view

    def read(base):
        if base is kept[0] and base.data_ptr() == kept[1]:
            return kept[2]
        result = base.as_strided(shape, strides, base.storage_offset() + offset)
        if type(base) is torch.nn.Parameter:
            kept[:] = base, base.data_ptr(), result
        return result

    return read


def argument_builder(param):
    """`args -> argument` for one parameter: constants thawed once, `TensorArg`s picked from `args`."""
    if isinstance(param, TensorArg):
        k = param.k
        return lambda args: args[k]
    if isinstance(param, tuple) and _holds_tensor(param):
        items = [argument_builder(p) for p in param]
        if isinstance(param, ArgList):
            return lambda args: [item(args) for item in items]
        return lambda args: tuple(item(args) for item in items)
    value = thaw(param, {})
    if isinstance(value, list):  # a fresh list per call: the op owns what it is given
        return lambda args: list(value)
    return lambda args: value


def _flat_params(params, builtin: bool = False) -> list[tuple[bool, object]] | None:
    """`(True, k)` for a parameter that is argument k, `(False, value)` for a constant, where every
    parameter is one or the other and no constant is a list the op could change (those get a fresh
    copy per call from `argument_builder`); None otherwise. For a `builtin` op (a C++ binding:
    `torch.convolution`), which parses a list of numbers into its own array and never keeps or
    changes the list, or a function of ours that only passes it on to such ops (`convolution_relu`),
    such a list is passed as a tuple made once."""
    flat = []
    for param in params:
        if isinstance(param, TensorArg):
            flat.append((True, param.k))
            continue
        if isinstance(param, tuple) and _holds_tensor(param):
            return None
        value = thaw(param, {})
        if builtin and type(value) is list and all(type(v) in (int, float, bool) for v in value):
            value = tuple(value)
        if isinstance(value, (list, dict, set)):
            return None
        flat.append((False, value))
    return flat


def _holds_tensor(param) -> bool:
    return isinstance(param, TensorArg) or (isinstance(param, tuple) and any(map(_holds_tensor, param)))


def returns_own_layout(call: ExternCall) -> bool:
    """Whether the planned step of `call` (a graph without size symbols) always leaves a tensor of
    exactly the call's layout at storage offset 0 in its slot: the library matmuls' step does (a
    fresh result, its pooled buffer, or a copy, in `in_matmul_layout`)."""
    fn = kernel_function(call.kernel)
    return (plannable(call) and MATMULS.get(call.kernel) is fn and EXTERN_KERNELS.get(call.kernel) is fn
            and not (call.params or call.kwargs))


def static_extern_step(
    call: ExternCall, slot_of: dict[str, int], layouts: dict, drop: list[int], inputs: frozenset = frozenset()
):
    """The wrapper step `run(values, bindings, symbol_values, scratch)` of one extern call of a
    graph without size symbols: `slot_of` maps buffer names to the wrapper's slots, `layouts` buffer
    names to their layouts, `drop` the slots freed after the call, `inputs` the graph inputs' names."""
    if not plannable(call):
        raise ValueError(f"extern call {call.name} ({call.kernel}) has no static plan")
    fn = kernel_function(call.kernel)
    readers = [slot_reader(v, slot_of[v.buffer], layouts[v.buffer], v.buffer in inputs) for v in call.args]
    slots = [slot_of[v.buffer] for v in call.args]
    out = slot_of[call.name]
    is_matmul = MATMULS.get(call.kernel) is fn and EXTERN_KERNELS.get(call.kernel) is fn
    if is_matmul and not (call.params or call.kwargs):
        fn = onednn_matmul.choose(call.kernel, fn, [static_ints(v.shape) for v in call.args])
        return _matmul_step(call, fn, readers, slots, out, drop)
    params = [argument_builder(p) for p in call.params]
    kwargs = [(key, argument_builder(v)) for key, v in call.kwargs]
    plain = not (call.params or call.kwargs)
    flat = None if call.kwargs else _flat_params(call.params, isinstance(fn, types.BuiltinFunctionType))
    may_alias = _fresh_result_function(call.kernel) is not fn
    layout = call.layout
    shape, strides, dtype = static_ints(layout.shape), static_ints(layout.strides), layout.dtype
    no_bindings: dict = {}

    def run(values, bindings, symbol_values, scratch):
        args = [values[s] if r is None else r(values) for r, s in zip(readers, slots)]
        if plain:
            result = fn(*args)
        elif flat is not None:
            result = fn(*[args[v] if is_tensor else v for is_tensor, v in flat])
        else:
            result = fn(*[p(args) for p in params], **{key: v(args) for key, v in kwargs})
        if type(result) is not torch.Tensor:
            result = own_output(call, result, scratch)
        if not _fresh_in_layout(result, args, shape, strides, dtype, may_alias):
            result = in_layout(call, result, no_bindings, args)  # copies it, or says what is wrong
        values[out] = result
        for s in drop:
            values[s] = None

    return run


def matmul_plan(call: ExternCall, slot_of: dict[str, int], layouts: dict, drop: list[int],
                inputs: frozenset = frozenset()) -> MatmulStep | None:
    """The planned step of `call` for a straight-line graph (`straight_line.MatmulStep`) where it is
    a library matmul that keeps no pooled result (what `_matmul_step` then does: read the arguments,
    call the function, fix the strides); None for any other call."""
    if not returns_own_layout(call):
        return None
    slots = [slot_of[v.buffer] for v in call.args]
    readers = [slot_reader(v, slot_of[v.buffer], layouts[v.buffer], v.buffer in inputs) for v in call.args]
    shapes = [static_ints(v.shape) for v in call.args]
    fn = onednn_matmul.choose(call.kernel, kernel_function(call.kernel), shapes)
    layout = call.layout
    shape, strides, dtype = static_ints(layout.shape), static_ints(layout.strides), layout.dtype
    if extern_pool.worth_keeping(shape, dtype) and extern_pool.OUT_KERNELS.get(call.kernel) is fn:
        return None
    out = slot_of[call.name]
    args = tuple(zip(slots, readers))
    return MatmulStep(fn, args, out, shape, strides, dtype, in_matmul_layout, tuple(drop))


def fresh_library_call(call: ExternCall):
    """`(function, flat parameters)` of a call to a function of `FRESH_RESULT_FUNCTIONS` with tensor
    arguments and constants only (`_flat_params`: `(True, k)` for argument k, `(False, value)`);
    None for any other call."""
    if not plannable(call) or call.kernel not in FRESH_RESULT_FUNCTIONS or call.kwargs:
        return None
    fn = kernel_function(call.kernel)
    if _fresh_result_function(call.kernel) is not fn:
        return None
    lists_untouched = isinstance(fn, types.BuiltinFunctionType) or fn is convolution_relu
    flat = _flat_params(call.params, lists_untouched)
    return None if flat is None else (fn, flat)


def library_plan(call: ExternCall, slot_of: dict[str, int], layouts: dict, drop: list[int],
                 inputs: frozenset = frozenset()) -> LibraryStep | None:
    """The planned step of `call` for a straight-line graph (`straight_line.LibraryStep`) where it
    calls a function of `FRESH_RESULT_FUNCTIONS` with tensor arguments and constants only; None for
    any other call."""
    planned = fresh_library_call(call)
    if planned is None:
        return None
    fn, flat = planned
    reads = []
    for v in call.args:
        slot = slot_of[v.buffer]
        reads.append((slot, slot_reader(v, slot, layouts[v.buffer], v.buffer in inputs)))
    params = tuple((True, reads[v]) if is_tensor else (False, v) for is_tensor, v in flat)
    layout = call.layout

    def check(result):
        return in_layout(call, result, {}, [])  # copies it into the planned strides, or says what is wrong

    return LibraryStep(fn, params, slot_of[call.name], static_ints(layout.shape), static_ints(layout.strides),
                       check, tuple(drop))


def _fresh_in_layout(result, args, shape, strides, dtype, may_alias: bool = True) -> bool:
    """Whether `result` may stand as the call's buffer as it is: a tensor of the planned dtype,
    shape and strides (up to sizes of 1) that shares no storage with an argument (`in_layout` asks
    the same, with sizes evaluated per call; `may_alias` False: the kernel never returns a view)."""
    if not isinstance(result, torch.Tensor) or result.dtype != dtype or result.shape != shape:
        return False
    if may_alias and result.numel():
        storage = result.untyped_storage().data_ptr()
        for a in args:
            if a.numel() and a.untyped_storage().data_ptr() == storage:
                return False
    actual = result.stride()
    return actual == strides or result.numel() <= 1 or same_strides(shape, actual, strides)


def in_matmul_layout(result: torch.Tensor, shape, strides, dtype) -> torch.Tensor:
    """A library matmul's `result` with the strides the program indexes it with."""
    actual = result.stride()
    if actual == strides:
        return result
    if same_strides(shape, actual, strides):  # differing only where the size is 1
        return result.as_strided(shape, strides)
    # the library chose another layout than the program indexes with
    return torch.empty_strided(shape, strides, dtype=dtype, device=result.device).copy_(result)


def _matmul_step(call: ExternCall, fn, readers, slots, out: int, drop: list[int]):
    layout = call.layout
    shape, strides, dtype = static_ints(layout.shape), static_ints(layout.strides), layout.dtype
    pooled = extern_pool.worth_keeping(shape, dtype) and extern_pool.OUT_KERNELS.get(call.kernel) is fn
    direct = all(r is None for r in readers)

    def run(values, bindings, symbol_values, scratch):
        if direct:
            args = [values[s] for s in slots]
        else:
            args = [values[s] if r is None else r(values) for r, s in zip(readers, slots)]
        if pooled:
            buffer = extern_pool.out_buffer(call, shape, strides, dtype, args[0].device)
            result = fn(*args, out=buffer)
            extern_pool.keep(call, result)
        else:
            result = fn(*args)
        values[out] = in_matmul_layout(result, shape, strides, dtype)
        for s in drop:
            values[s] = None

    return run
