"""A GPU graph without size symbols run as one generated Python function.

`static_steps` gives a static graph one closure per step; a call still pays, per Triton launch, the
closure, the argument list, `DirectLaunch`'s hook check, alignment key and stream lookup, Triton's
Python launcher (scratch allocators) and, inside its C launcher, a `data_ptr()` call and a CUDA
pointer query per tensor; per library matmul the view readers and the layout check. With the
sizes, configs and binaries fixed, `straight_gpu` writes the steps out once, over locals:

    def run(inputs):
        if len(inputs) != 4 or hooked():         # a profiler watches launches: the closures run
            return None
        i = inputs[0]                            # each input checked against its signature
        if i.dtype is not d0 or i.shape != s1 or i.stride() != t2 or i.get_device() != 0:
            return None
        ...
        x0 = inputs[0]
        ...
        T = {n0: x0, ...}                        # for the steps that stay closures
        stream = current_stream(dev)
        x5 = T[n5] = empty_strided(s0, t0, dtype=d0, device=dev)
        p5 = x5.data_ptr()
        p0 = x0.data_ptr()
        if p0 & 15:                              # a pointer the binary assumes aligned is not:
            k0([x5, x0], [], {})                 #   the launcher picks the binary for it
        else:
            l0(4096, 1, 1, stream, f0, c0, c1, None, None, m0, None, None, None, p5, p0, a0)
        r = mm(x5, g1(x1))                       # g1: a weight's view, made once per storage
        x6 = T[n6] = r if r.stride() == t1 else relayout(r, s1, t1, d1)
        r = f2(x6, g3(x2), None, c4, c5)         # a convolution: tensors and constants
        x7 = T[n7] = r if r.stride() == t2 else check7(r)
        e0(T)                                    # any other step, as its closure
        return [o0(T), ...]

Buffers this function allocates come from the caching allocator, aligned; only tensors it did not
allocate (inputs, library results) are checked. Every name in the source is made here.
"""

import torch
from triton import knobs
from triton.runtime import driver

from torchsmith.inductor.loop_ir.program import ExternCall
from torchsmith.inductor.runtime import input_derived
from torchsmith.inductor.runtime.extern_plan import (
    MATMULS,
    fresh_library_call,
    in_matmul_layout,
    parameter_view,
    static_ints,
)
from torchsmith.inductor.runtime.externs import EXTERN_KERNELS, in_layout
from torchsmith.inductor.runtime.input_derived import (
    InputDerivedCache,
    kept_steps,
    output_buffers,
    read_after,
    read_inputs,
    step_accesses,
)
from torchsmith.inductor.runtime.triton_direct import ALIGNMENT, _hooked
from torchsmith.ir.symbolic import evaluate


def launches_hooked() -> bool:
    """Whether a profiler hooked Triton's launches (then they go through Triton, which reports them)."""
    return _hooked(knobs.runtime.launch_enter_hook) or _hooked(knobs.runtime.launch_exit_hook)


def _aligned_binary(launcher, count: int):
    """(C launch function, leading arguments, metadata, constexpr tail) of the binary the kernel's
    `DirectLaunch` bound for all-aligned pointers, callable without Triton's Python launcher; None
    where there is none (not launched directly yet, or a binary needing scratch memory)."""
    direct = launcher.direct
    bound = direct._by_alignment.get((True,) * count) if direct is not None else None
    if bound is None:
        return None
    run, function, metadata, tail = bound
    launch = getattr(run, "launch", None)
    if launch is None or getattr(run, "global_scratch_size", 1) or getattr(run, "profile_scratch_size", 1):
        return None
    lead = (function, run.launch_cooperative_grid, run.launch_pdl)
    return launch, direct.grid, lead, metadata, tail


class _Writer:
    """Source lines and the namespace of constants they name."""

    def __init__(self):
        self.namespace: dict = {}
        self.lines: list[str] = []
        self.depth = 0  # indentation added to every line (inside a block)
        self.views: dict[tuple, str] = {}  # (buffer, shape, strides, offset) -> the local holding that view

    def constant(self, prefix: str, value) -> str:
        key = f"{prefix}{len(self.namespace)}"
        self.namespace[key] = value
        return key

    def add(self, line: str, indent: int = 1) -> None:
        self.lines.append("    " * (indent + self.depth) + line)


def straight_gpu(program, steps: list, closures: list, output_readers: list, device: torch.device,
                 plain_matmuls: dict, *, signatures=(), device_index: int = -1, in_place=(),
                 unchanging: frozenset = frozenset(), keeping: list | None = None):
    """The function `run(inputs) -> outputs | None` doing `steps` (the graph's `(kind, what, extra)`
    list) in order: kernel launches, the library matmuls in `plain_matmuls` (call name -> function)
    and the library calls with fresh results (convolutions; not those in `in_place`) written out,
    every other step by its closure in `closures` (same order, `step(T)`). The kernel steps
    computed from the inputs at `unchanging` positions alone run first, and only where the
    values they kept last time are out of date (`input_derived`), while `keeping[0]` holds.
    It returns None, having run nothing, when the inputs are not as compiled (a different count,
    or a tensor unlike its `signatures` entry `(position, dtype, shape, strides)` or not on
    `device_index`, -1 the CPU) or a profiler hooked Triton's launches."""
    w = _Writer()
    ns = w.namespace
    ns.update(empty_strided=torch.empty_strided, hooked=launches_hooked, relayout=in_matmul_layout)
    ns["dev"] = device
    slot: dict[str, int] = {}  # buffer name -> index of its local `x{i}`
    known: set[str] = set()  # buffers held in a local
    pointer: set[str] = set()  # buffers whose data pointer is in a local
    aligned: set[str] = set()  # buffers allocated here (the caching allocator aligns them)
    key: dict[str, str] = {}  # buffer name -> the constant naming it in T

    def local(name: str) -> str:
        if name not in slot:
            slot[name] = len(slot)
            key[name] = w.constant("n", name)
        if name not in known:
            w.add(f"x{slot[name]} = T[{key[name]}]")
            known.add(name)
        return f"x{slot[name]}"

    def define(name: str) -> str:
        if name not in slot:
            slot[name] = len(slot)
            key[name] = w.constant("n", name)
        known.add(name)
        return f"x{slot[name]}"

    w.lines.append("def run(inputs):")
    w.add(f"if len(inputs) != {int(program.num_graph_inputs)} or hooked():")
    w.add("return None", 2)
    # the signature check, written out: the cheapest reads first, dtypes by identity
    for k, dtype, shape, strides in signatures:
        d, s, t = w.constant("d", dtype), w.constant("s", shape), w.constant("t", strides)
        w.add(f"i = inputs[{int(k)}]")
        w.add(f"if i.dtype is not {d} or i.shape != {s} or i.stride() != {t} or "
              f"i.get_device() != {int(device_index)}:")
        w.add("return None", 2)
    entries = []
    for b in program.inputs:
        x = define(b.name)
        w.add(f"{x} = inputs[{int(b.position)}]")
        entries.append(f"{key[b.name]}: {x}")
    w.add("T = {" + ", ".join(entries) + "}")
    if device.type == "cuda":  # under the interpreter (CPU tensors) kernels launch through Triton
        ns["current_stream"] = driver.active.get_current_stream
        index = device.index if device.index is not None else torch.cuda.current_device()
        w.add(f"stream = current_stream({int(index)})")
    # Buffers whose tensors have exactly their layout: inputs (checked by the caller), kernel
    # results (allocated so), planned matmul results (laid out so); not other library results.
    exact = {
        b.name: b.layout
        for b in (*program.inputs, *program.buffers)
        if not isinstance(b, ExternCall) or b.name in plain_matmuls or _written_out_library(b, in_place)
    }
    inputs = {b.name for b in program.inputs}
    kept = kept_steps(program, steps, set(unchanging)) if unchanging and input_derived.enabled() else []
    kept_set = set(kept)
    if kept:
        switch = keeping if keeping is not None else [True]
        cache = InputDerivedCache(read_inputs(program, steps, kept), switch)
        _kernel_block(w, program, steps, kept, cache, local, define, key, pointer, aligned)
    reuse = _Reuse(program, steps, kept_set, in_place, plain_matmuls)
    for k, ((kind, what, extra), closure) in enumerate(zip(steps, closures, strict=True)):
        if k in kept_set:
            continue
        if kind == "kernel":
            _kernel(w, what, extra, local, define, key, pointer, aligned, reuse)
        elif kind == "alias":  # a copy its source's kernel did: the result is the target
            target = local(extra)
            w.add(f"{define(what.name)} = T[{key[what.name]}] = {target}")
        elif kind == "extern" and what.name in plain_matmuls:
            _matmul(w, what, plain_matmuls[what.name], local, define, key, inputs, exact)
        elif kind == "extern" and _written_out_library(what, in_place):
            _library(w, what, *fresh_library_call(what), local, define, key, inputs, exact)
        else:
            w.add(f"{w.constant('e', closure)}(T)")
            # what the closure wrote is read from T again where a later step needs it
            written = {what.name} if kind == "extern" else set(slot) - inputs
            known.difference_update(written)
            pointer.difference_update(written)
            aligned.difference_update(written)
        reuse.after(k, local)
    outputs = ", ".join(f"{w.constant('o', read)}(T)" for read in output_readers)
    w.add(f"return [{outputs}]")
    source = "\n".join(w.lines) + "\n"
    exec(compile(source, f"<torchsmith gpu graph {program.name}>", "exec"), ns)  # noqa: S102 - made here
    run = ns["run"]
    run.source = source
    return run


def _kernel_block(w: _Writer, program, steps, kept, cache, local, define, key, pointer, aligned):
    """The `kept` kernel steps inside a check of `cache`: run where it has no results for these
    inputs, else their results read from it."""
    kept_names = read_after(steps, kept, output_buffers(program))
    before = set(pointer)
    w.add(f"c = {w.constant('lookup', cache.lookup)}(inputs)")
    w.add("if c is None:")
    w.depth += 1
    for k in kept:
        _, launcher, allocate = steps[k]
        _kernel(w, launcher, allocate, local, define, key, pointer, aligned)
    w.add(f"{w.constant('keep', cache.keep)}(inputs, ({''.join(local(n) + ', ' for n in kept_names)}))")
    w.depth -= 1
    w.add("else:")
    for j, name in enumerate(kept_names):
        w.add(f"{define(name)} = T[{key[name]}] = c[{j}]", 2)
    if not kept_names:
        w.add("pass", 2)
    # data pointers read inside the block exist on one branch only
    pointer.intersection_update(before)


class _Reuse:
    """Buffers a kernel step allocates take the tensor of a buffer allocated earlier in the same
    call that nothing reads any more, where shape, strides and dtype agree: a decoder's layers
    allocate the same buffers again, and an allocation costs several microseconds of host time.

    A buffer is given up after the last step reading it, unless it is a graph output, a value
    kept between calls (`input_derived`), or read by a step run as its closure (a library call
    whose result may be a view of its arguments): only kernels, library matmuls and library
    calls with fresh results (`_written_out_library`) read it. Steps run in order on one stream,
    so a later kernel writing the memory runs after every earlier reader."""

    def __init__(self, program, steps: list, kept: set, in_place, plain_matmuls: dict):
        reads = [step_accesses(step)[0] for step in steps]
        self.last_read: dict[str, int] = {}
        for k, names in enumerate(reads):
            for name in names:
                self.last_read[name] = k
        never = output_buffers(program) | set(read_after(steps, sorted(kept), output_buffers(program)))
        for k, (kind, what, _) in enumerate(steps):
            fresh = kind == "kernel" or (
                kind == "extern" and (what.name in plain_matmuls or _written_out_library(what, in_place))
            )
            if not fresh:
                never |= reads[k]
        self.never = never
        self.allocated: dict[str, tuple] = {}  # buffer -> its (shape, strides, dtype), allocated here
        self.free: dict[tuple, list[str]] = {}  # (shape, strides, dtype) -> buffers given up

    def take(self, name: str, layout: tuple) -> str | None:
        """A buffer given up whose tensor `name` may use, or None."""
        self.allocated[name] = layout
        free = self.free.get(layout)
        return free.pop() if free else None

    def after(self, k: int, local) -> None:
        """Give up the buffers allocated here whose last reader was step `k`."""
        for name, layout in list(self.allocated.items()):
            if self.last_read.get(name, -1) <= k and name not in self.never:
                del self.allocated[name]
                self.free.setdefault(layout, []).append(local(name))


def _kernel(w: _Writer, launcher, allocate, local, define, key, pointer: set, aligned: set,
            reuse: _Reuse | None = None) -> None:
    for name, shape, strides, dtype in allocate:
        layout = (static_ints(shape), static_ints(strides), dtype)
        earlier = reuse.take(name, layout) if reuse is not None else None
        x = define(name)
        if earlier is not None:
            w.add(f"{x} = T[{key[name]}] = {earlier}")
            pointer.discard(name)
        else:
            s, t, d = w.constant("s", layout[0]), w.constant("t", layout[1]), w.constant("d", dtype)
            w.add(f"{x} = T[{key[name]}] = empty_strided({s}, {t}, dtype={d}, device=dev)")
        aligned.add(name)
    names = list(launcher.spec.writes + launcher.spec.reads)
    # the launcher's own path: it picks the binary for these pointers' alignment
    general = f"{w.constant('k', launcher.launch)}([{', '.join(local(n) for n in names)}], [], {{}})"
    binary = _aligned_binary(launcher, len(names))
    if binary is None:
        w.add(general)
        return
    for name in names:
        x = local(name)
        if name not in pointer:
            w.add(f"p{x[1:]} = {x}.data_ptr()")
            pointer.add(name)
    launch, grid, lead, metadata, tail = binary
    pointers = [f"p{local(n)[1:]}" for n in names]
    unchecked = sorted({p for n, p in zip(names, pointers) if n not in aligned})
    args = ", ".join(
        [str(int(grid)), "1", "1", "stream"]
        + [w.constant("c", v) for v in lead]
        + ["None", "None", w.constant("m", metadata), "None", "None", "None"]
        + pointers
        + [w.constant("a", v) for v in tail]
    )
    call = f"{w.constant('l', launch)}({args})"
    if unchecked:
        w.add(f"if ({' | '.join(unchecked)}) & {ALIGNMENT - 1}:")
        w.add(general, 2)
        w.add("else:")
        w.add(call, 2)
    else:
        w.add(call)


def _argument_views(w: _Writer, call, local, inputs: set, exact: dict) -> list[str]:
    """The expressions of `call`'s tensor arguments: a buffer itself, a parameter's kept view, or a
    strided view."""
    args = []
    for view in call.args:
        base = local(view.buffer)
        shape, strides = static_ints(view.shape), static_ints(view.strides)
        offset = int(evaluate(view.offset, {}))
        layout = exact.get(view.buffer)
        whole = layout is not None and static_ints(layout.shape) == shape
        if whole and offset == 0 and static_ints(layout.strides) == strides:
            args.append(base)
        elif view.buffer in inputs:
            args.append(f"{w.constant('g', parameter_view(shape, strides, offset))}({base})")
        else:
            # made once per call where several library calls read the same view (q, k and v
            # projections of one normalized input)
            place = (view.buffer, shape, strides, offset)
            if place not in w.views:
                s, t = w.constant("s", shape), w.constant("t", strides)
                w.views[place] = f"v{len(w.views)}"
                w.add(f"{w.views[place]} = {base}.as_strided({s}, {t}, {base}.storage_offset() + {offset})")
            args.append(w.views[place])
    return args


def _matmul(w: _Writer, call, fn, local, define, key, inputs: set, exact: dict) -> None:
    args = _argument_views(w, call, local, inputs, exact)
    layout = call.layout
    s, t = w.constant("s", static_ints(layout.shape)), w.constant("t", static_ints(layout.strides))
    d = w.constant("d", layout.dtype)
    x = define(call.name)
    w.add(f"r = {w.constant('f', fn)}({', '.join(args)})")
    w.add(f"{x} = T[{key[call.name]}] = r if r.stride() == {t} else relayout(r, {s}, {t}, {d})")


def _written_out_library(call: ExternCall, in_place) -> bool:
    """Whether the straight-line form calls `call` itself (`_library`), its result then exactly in
    the call's layout: a library call with a fresh result and tensor or constant arguments."""
    return call.name not in in_place and fresh_library_call(call) is not None


def _library(w: _Writer, call, fn, flat, local, define, key, inputs: set, exact: dict) -> None:
    """A library call with a fresh result (a convolution): its result stands as the buffer where
    the library laid it out as planned, else `in_layout` copies it (or says what is wrong)."""
    tensors = _argument_views(w, call, local, inputs, exact)
    args = [tensors[v] if is_tensor else w.constant("c", v) for is_tensor, v in flat]
    t = w.constant("t", static_ints(call.layout.strides))
    check = w.constant("check", lambda result, call=call: in_layout(call, result, {}, []))
    x = define(call.name)
    w.add(f"r = {w.constant('f', fn)}({', '.join(args)})")
    w.add(f"{x} = T[{key[call.name]}] = r if r.stride() == {t} else {check}(r)")


def plain_matmul(call) -> object | None:
    """The torch function of a library matmul without parameters (the one `EXTERN_KERNELS` still
    binds: tests and users may swap entries), else None."""
    fn = MATMULS.get(call.kernel)
    if fn is None or EXTERN_KERNELS.get(call.kernel) is not fn or call.params or call.kwargs:
        return None
    return fn
