"""The Python side of a compiled graph: allocates buffers as the memory plan says, calls the C++
kernels (through `native_calls` or ctypes), runs extern calls with torch, and returns the outputs as
strided views.

Per-call work is kept small: tensors live in a list indexed by slot numbers fixed at compile time,
each step is a closure over its precomputed arguments, and without size symbols every shape, stride
and input check is a constant tuple and the steps run as one generated function (`straight_line`).
"""

import ctypes
import weakref

import sympy
import torch

from torchsmith.inductor.cpp.codegen import Kernel
from torchsmith.inductor.errors import RuntimeCallError
from torchsmith.inductor.fusion.memory_plan import MemoryPlan, plan_memory, storage_key
from torchsmith.inductor.loop_ir.program import (
    Buffer,
    ComputedBuffer,
    ExternCall,
    Layout,
    LoopProgram,
    TensorView,
)
from torchsmith.inductor.runtime import native_calls
from torchsmith.inductor.runtime.extern_plan import (
    library_plan,
    matmul_plan,
    plannable,
    returns_own_layout,
    static_extern_step,
)
from torchsmith.inductor.runtime.externs import run_extern
from torchsmith.inductor.runtime.straight_line import ClosureStep, KernelStep, straight_line
from torchsmith.ir.symbolic import evaluate
from torchsmith.ir.types import TensorType


def steps_in_program_order(program: LoopProgram, kernels) -> list[tuple[Buffer, ...]]:
    """The steps when no schedule is given: each kernel group runs where its first buffer stands."""
    group_of = {buffer.name: group for _, group in kernels for buffer in group}
    steps = []
    for buffer in program.buffers:
        if isinstance(buffer, ExternCall):
            steps.append((buffer,))
        elif group_of[buffer.name][0].name == buffer.name:
            steps.append(tuple(group_of[buffer.name]))
    return steps


class CompiledGraph:
    """A callable running a `LoopProgram` with a built library: `compiled(*inputs)` returns the
    list of outputs. `source` is the generated C++, `program` the loop IR it came from, `steps` the
    execution order, `memory_plan` the storage reuse and `decisions` the fusion decisions."""

    def __init__(
        self,
        program: LoopProgram,
        library: ctypes.CDLL,
        kernels: list[tuple[Kernel, tuple[ComputedBuffer, ...]]],
        source: str,
        graph,
        timings: dict[str, float] | None = None,
        *,
        steps: list[tuple[Buffer, ...]] | None = None,
        memory_plan: MemoryPlan | None = None,
        decisions: tuple = (),
        threads: int | None = None,
    ):
        self.program, self.source, self.graph = program, source, graph
        self.timings = timings or {}  # seconds per compile step, for reports
        self.decisions = tuple(decisions)
        self.steps = steps if steps is not None else steps_in_program_order(program, kernels)
        self.memory_plan = memory_plan or plan_memory(program, self.steps)
        self._static = not program.symbols
        slot_of: dict[str, int] = {}
        for b in program.inputs:
            slot_of[b.name] = len(slot_of)
        for step in self.steps:
            for b in step:
                slot_of[b.name] = len(slot_of)
        self._slots, self._input_slots = len(slot_of), [(slot_of[b.name], b.position) for b in program.inputs]
        # every graph input a buffer in its own position: the call's inputs are the first slots as given
        self._inputs_in_order = self._input_slots == [(k, k) for k in range(program.num_graph_inputs)]
        self._no_values = (None,) * (self._slots - program.num_graph_inputs)
        kernel_of = {group[0].name: kernel for kernel, group in kernels}
        donors = self.memory_plan.donor_of()
        layouts = {b.name: b.layout for b in program.inputs}
        input_names = frozenset(layouts)
        layouts.update((b.name, b.layout) for step in self.steps for b in step)
        if self._static:
            layouts.update(self._layouts_as_read(layouts))
        self._run = []
        plan = []  # the same steps for the straight-line form (graphs without size symbols)
        # buffers whose tensor is exactly their layout at storage offset 0 (what kernel steps allocate,
        # what planned library matmuls return): their layouts
        allocated: dict = {}
        # buffers whose tensor only ever gives kernels an address: no library call reads it and no
        # output shows it, so in a dead buffer's storage it can be that buffer's tensor as it is
        tensor_read = {v.buffer for v in program.outputs} | {
            a.buffer for step in self.steps if isinstance(step[0], ExternCall) for a in step[0].args
        }
        for step, frees in zip(self.steps, self.memory_plan.frees, strict=True):
            drop = [slot_of[n] for n in frees]
            if isinstance(step[0], ExternCall) and self._static and plannable(step[0]):
                self._run.append(static_extern_step(step[0], slot_of, layouts, drop, input_names))
                planned = (matmul_plan(step[0], slot_of, layouts, drop, input_names)
                           or library_plan(step[0], slot_of, layouts, drop, input_names))
                plan.append(planned if planned is not None else ClosureStep(self._run[-1]))
                if returns_own_layout(step[0]):
                    allocated[step[0].name] = step[0].layout
            elif isinstance(step[0], ExternCall):
                self._run.append(self._extern_step(step[0], slot_of, drop))
                plan.append(ClosureStep(self._run[-1]))
            else:
                kernel = kernel_of[step[0].name]
                # Kernel-local buffers (cpp_local) have no storage: only what the kernel writes.
                stored = [b for b in step if b.name in kernel.writes]
                allocs = [
                    self._allocation(b, layouts[b.name], donors.get(b.name), slot_of, allocated,
                                     address_only=b.name not in tensor_read)
                    for b in stored
                ]
                for b, alloc in zip(stored, allocs, strict=True):
                    # the tensor the slot holds: the donor's own where it serves as it is
                    allocated[b.name] = allocated[donors[b.name]] if alloc[-1] else layouts[b.name]
                fn, arg_slots = self._kernel_function(library, kernel, slot_of)
                self._run.append(self._kernel_step(fn, arg_slots, allocs, drop))
                plan.append(KernelStep(fn, tuple(allocs), tuple(arg_slots), tuple(drop)))
        # `_run` is what runs unless it is the list made here: the step loop stays for callers that
        # replace it (a benchmark timing each step)
        self._planned_run = self._run
        native_ready = native_calls.EXTENSION.loaded() is not None
        self._straight = straight_line(plan, program.name) if self._static else None
        if self._straight is not None and not native_ready and any(isinstance(s, KernelStep) for s in plan):
            # written again with native kernel calls once they load (kept as it is where they never do);
            # the callback holds the wrapper weakly, so a dropped graph's library still unloads
            self._plan = plan
            native_calls.EXTENSION.when_ready(_rewrite_straight_line(weakref.ref(self)))
        self._outputs = [self._output(view, slot_of) for view in program.outputs]
        self._expected = [
            (position, value.name, value.type)
            for position, value in enumerate(graph.inputs)
            if isinstance(value.type, TensorType)
        ]
        if self._static:
            self._expected_static = [
                (pos, name, t, t.dtype, tuple(t.shape), tuple(t.strides)) for pos, name, t in self._expected
            ]
        from torchsmith.inductor.cpp.indirect import index_check
        from torchsmith.inductor.cpp.zero_division import zero_division_check

        self._check = index_check(library, program)
        self._zero_check = zero_division_check(library, program)
        self._threads = _openmp_threads(threads) if threads is not None and self._run else None
        self._inputs_checked = False  # set by assume_example_inputs

    def assume_example_inputs(self) -> None:
        """The caller promises that every later call passes tensors of the graph's input types
        (dtype, sizes, strides), having checked them itself (torchsmith.compile's guards do, before
        the AOT runtime calls its inference program): calls of a graph without size symbols then
        skip the per-input checks. With symbols the checks bind the sizes and always run."""
        self._inputs_checked = self._static

    # ---- compile-time preparation of the steps ----------------------------------------------------

    def _dims(self, dims):
        """Constant ints without symbols; otherwise the expressions, evaluated per call."""
        return tuple(int(d) for d in dims) if self._static else tuple(dims)

    def _layouts_as_read(self, layouts: dict) -> dict:
        """Buffers the kernels write whose tensor is made in the layout the library calls read them
        with instead of their own: a buffer no graph output shows, read by planned extern calls
        through one view at offset 0 over exactly its storage (a [B*S, H*D] product as [B, S, H, D]
        heads). The kernels only take its address, and the extern calls then read the tensor itself
        rather than a new view of it per call."""
        outputs = {v.buffer for v in self.program.outputs}
        written = {b.name for step in self.steps if not isinstance(step[0], ExternCall) for b in step}
        views: dict[str, set] = {}
        for step in self.steps:
            if isinstance(step[0], ExternCall):
                for v in step[0].args:
                    if v.buffer in written:
                        seen = (tuple(v.shape), tuple(v.strides), v.offset) if plannable(step[0]) else None
                        views.setdefault(v.buffer, set()).add(seen)
        chosen = {}
        for name, seen in views.items():
            if name in outputs or len(seen) != 1 or None in seen:
                continue
            ((shape, strides, offset),) = seen
            own = layouts[name]
            read = Layout(shape, strides, own.dtype)
            if offset == 0 and (shape, strides) != (tuple(own.shape), tuple(own.strides)) and (
                storage_key(read) == storage_key(own)
            ):
                chosen[name] = read
        return chosen

    def _allocation(self, buffer: ComputedBuffer, layout, donor: str | None, slot_of, allocated: dict,
                    address_only: bool = False):
        """(slot, donor slot or -1, shape, strides, dtype, leaves, same) of `buffer`'s tensor in
        `layout` (its own, or the one extern calls read it in): `same` when the donor's tensor is
        known to start its storage (`allocated`) and is this very layout, or `buffer`'s tensor is
        `address_only`, so it serves as it is (the kernels only take its address) instead of as a
        new view of its storage."""
        donor_slot = -1 if donor is None else slot_of[donor]
        shape, strides = self._dims(layout.shape), self._dims(layout.strides)
        # A graph output in a dead buffer's storage is detached from that buffer: eager's result is
        # no view, and FSDP2 warns of (and loses its backward hook on) a block output that is one.
        leaves = donor is not None and any(v.buffer == buffer.name for v in self.program.outputs)
        donor_layout = allocated.get(donor)
        same = self._static and donor_layout is not None and (
            (address_only and not leaves)
            or (self._dims(donor_layout.shape), self._dims(donor_layout.strides)) == (shape, strides)
        )
        return slot_of[buffer.name], donor_slot, shape, strides, layout.dtype, leaves, same

    def _kernel_function(self, library, kernel: Kernel, slot_of):
        """The kernel's ctypes function and the slots of the buffers whose addresses it takes."""
        fn = getattr(library, kernel.name)
        fn.restype = None
        names = kernel.writes + kernel.reads
        fn.argtypes = [ctypes.c_void_p] * len(names) + [ctypes.c_int64] * len(self.program.symbols)
        return fn, [slot_of[n] for n in names]

    def _kernel_step(self, fn, arg_slots, allocs, drop):
        static = self._static

        def run(values, bindings, symbol_values, scratch):
            for slot, donor, shape, strides, dtype, leaves, same in allocs:
                if not static:
                    shape = [evaluate(d, bindings) for d in shape]
                    strides = [evaluate(d, bindings) for d in strides]
                if donor < 0:
                    values[slot] = torch.empty_strided(shape, strides, dtype=dtype)
                elif same:
                    values[slot] = values[donor].detach() if leaves else values[donor]
                elif leaves:
                    values[slot] = values[donor].as_strided(shape, strides, 0).detach()
                else:
                    values[slot] = values[donor].as_strided(shape, strides, 0)
            fn(*[values[s].data_ptr() for s in arg_slots], *symbol_values)
            for s in drop:
                values[s] = None

        return run

    def _extern_step(self, call: ExternCall, slot_of, drop):
        reads = [(name, slot_of[name]) for name in dict.fromkeys(a.buffer for a in call.args)]
        out = slot_of[call.name]

        def run(values, bindings, symbol_values, scratch):
            for name, slot in reads:
                scratch[name] = values[slot]
            values[out] = result = run_extern(call, scratch, bindings)
            scratch[call.name] = result
            for s in drop:
                values[s] = None

        return run

    def _output(self, view: TensorView, slot_of):
        slot = slot_of[view.buffer]
        source = next((b.layout for b in self.program.inputs if b.name == view.buffer), None)
        computed = source is None
        if computed:
            source = next(b.layout for step in self.steps for b in step if b.name == view.buffer)
        whole = tuple(view.shape) == tuple(source.shape) and tuple(view.strides) == tuple(source.strides)
        if whole and view.offset == 0:
            return slot, None
        offset = int(evaluate(view.offset, {})) if self._static else view.offset
        # An output reshaping a whole buffer of ours that backs no other output (a matmul's [B*S, D]
        # result as [B, S, D]) is no view in eager: the op eager ends with (a residual add, say) makes
        # a fresh tensor. Returned detached from the buffer it stays no view, as FSDP2 expects of a
        # block's output (its backward hook is lost when a view is written in place).
        alone = sum(v.buffer == view.buffer for v in self.program.outputs) == 1
        same_size = sympy.expand(_numel(view.shape) - _numel(source.shape)) == 0 and view.offset == 0
        detached = computed and alone and same_size
        return slot, (self._dims(view.shape), self._dims(view.strides), offset, detached)

    # ---- per call -------------------------------------------------------------------------------

    def _bind(self, inputs) -> dict[str, int]:
        if len(inputs) != self.program.num_graph_inputs:
            raise RuntimeCallError(
                f"compiled graph {self.program.name} takes {self.program.num_graph_inputs} inputs, "
                f"got {len(inputs)}"
            )
        if self._static:
            for pos, name, t, dtype, shape, strides in self._expected_static:
                x = inputs[pos]
                if x.dtype != dtype or x.shape != shape or (
                    x.stride() != strides and not _same_strides(shape, x.stride(), strides)
                ):
                    self._mismatch(name, t, x)
            return {}
        from torchsmith.ir.interpreter import bind_symbols

        bindings = bind_symbols(self.graph, inputs)
        for pos, name, t in self._expected:
            actual = inputs[pos]
            strides = tuple(evaluate(s, bindings) for s in t.strides)
            shape = tuple(evaluate(s, bindings) for s in t.shape)
            if (
                actual.dtype != t.dtype
                or tuple(actual.shape) != shape
                or not _same_strides(shape, actual.stride(), strides)
            ):
                self._mismatch(name, t, actual)
        return bindings

    def _mismatch(self, name: str, t: TensorType, actual) -> None:
        raise RuntimeCallError(
            f"input %{name} is {actual.dtype}{list(actual.shape)} with strides {actual.stride()}, but "
            f"{self.program.name} was compiled for {t}; recompile for these inputs"
        )

    def __call__(self, *inputs) -> list[torch.Tensor]:
        bindings = {} if self._inputs_checked else self._bind(inputs)
        symbol_values = [bindings[s] for s in self.program.symbols]
        if self._inputs_in_order:
            values = [*inputs, *self._no_values]
        else:
            values = [None] * self._slots
            for slot, position in self._input_slots:
                values[slot] = inputs[position]
        scratch: dict = {}
        if self._threads is not None:
            set_threads, get_threads, wanted = self._threads
            previous = get_threads()
            set_threads(wanted)  # per calling thread, so per call; restored for other graphs' kernels
            try:
                if self._straight is not None and self._run is self._planned_run:
                    self._straight(values, bindings, symbol_values, scratch)
                else:
                    for run in self._run:
                        run(values, bindings, symbol_values, scratch)
            finally:
                set_threads(previous)
        elif self._straight is not None and self._run is self._planned_run:
            self._straight(values, bindings, symbol_values, scratch)
        else:
            for run in self._run:
                run(values, bindings, symbol_values, scratch)
        # Both flags are taken before either error is raised: neither may outlive this call.
        zero_division = self._zero_check() if self._zero_check is not None else None
        if self._check is not None:
            self._check()
        if zero_division is not None:
            raise zero_division
        outputs = []
        for slot, view in self._outputs:
            base = values[slot]
            if view is None:
                outputs.append(base)
                continue
            shape, strides, offset, detached = view
            if not self._static:
                shape = [evaluate(d, bindings) for d in shape]
                strides = [evaluate(d, bindings) for d in strides]
                offset = evaluate(offset, bindings)
            out = base.as_strided(shape, strides, base.storage_offset() + offset)
            outputs.append(out.detach() if detached else out)
        return outputs


def _numel(dims) -> sympy.Expr:
    total = sympy.Integer(1)
    for d in dims:
        total = total * sympy.sympify(d)
    return sympy.expand(total)


def _rewrite_straight_line(wrapper_ref):
    """A callback giving the wrapper (while it lives) its straight-line function written anew."""

    def rewrite():
        wrapper = wrapper_ref()
        if wrapper is not None:
            wrapper._straight = straight_line(wrapper._plan, wrapper.program.name)
            wrapper._plan = None

    return rewrite


def _openmp_threads(threads: int):
    """(omp_set_num_threads, omp_get_max_threads, threads) of the OpenMP runtime the generated libraries
    link. They ask for libgomp.so.1 by name, which resolves to the copy already loaded: torch's own
    where its wheel bundles one, so torch.set_num_threads reaches our kernels as well and
    `cpp.threads` overrides it for one graph's call only (set before, restored after)."""
    import ctypes.util

    if not isinstance(threads, int) or threads < 1:
        raise RuntimeCallError(f'options["cpp.threads"] must be an int >= 1 or None, got {threads!r}')
    name = ctypes.util.find_library("gomp") or "libgomp.so.1"
    gomp = ctypes.CDLL(name)
    gomp.omp_set_num_threads.argtypes, gomp.omp_set_num_threads.restype = [ctypes.c_int], None
    gomp.omp_get_max_threads.argtypes, gomp.omp_get_max_threads.restype = [], ctypes.c_int
    return gomp.omp_set_num_threads, gomp.omp_get_max_threads, threads


def _same_strides(shape, actual, expected) -> bool:
    """Strides agree wherever they matter: kernels never step along a dim of size 1 (or 0 elements)."""
    if 0 in shape:
        return True
    return all(size == 1 or a == e for size, a, e in zip(shape, actual, expected))
