"""The GPU runtime: `TritonCompiledGraph` runs a loop program's Triton kernels and library calls in
an order where each runs after what it reads (`ordered_steps`), checking the call's inputs against
the compiled signature; static graphs run precomputed closures (`triton_steps`). The GPU pipeline
(`torchsmith.inductor.gpu_pipeline`) builds it.

CPU tensors run only under `TRITON_INTERPRET=1` (the interpreter), which is how the tests run here.
"""

import heapq
import logging

import sympy
import torch

from torchsmith.inductor.errors import LoweringError, RuntimeCallError
from torchsmith.inductor.loop_ir.in_place import in_place_updates
from torchsmith.inductor.loop_ir.program import ComputedBuffer, ExternCall, LoopProgram, loads
from torchsmith.inductor.runtime.externs import run_extern, tensor_of
from torchsmith.inductor.runtime.input_derived import (
    input_state,
    module_state,
    step_accesses,
    unchanged_inputs,
)
from torchsmith.inductor.runtime.triton_launch import load_kernels
from torchsmith.inductor.runtime.triton_steps import matmul_functions, static_steps
from torchsmith.inductor.triton.codegen import generate_folded, source_hash
from torchsmith.inductor.triton.folded_copy import foldable_copies
from torchsmith.ir.symbolic import evaluate
from torchsmith.ir.types import TensorType

log = logging.getLogger("torchsmith.inductor.triton_runtime")


def ordered_steps(program: LoopProgram, groups) -> list:
    """Kernels (by group) and extern calls in an order where each runs after what it reads:
    program order of a step's first buffer, delayed until its inputs exist (a fused group runs
    when its last outside input is ready)."""
    step_of, steps = {}, []
    for k, group in enumerate(groups):
        steps.append(("kernel", k))
        for b in group:
            step_of[b.name] = len(steps) - 1
    for buffer in program.buffers:
        if isinstance(buffer, ExternCall):
            steps.append(("extern", buffer))
            step_of[buffer.name] = len(steps) - 1
    position = {b.name: i for i, b in enumerate(program.buffers)}
    first, deps = [], []
    for s, (kind, what) in enumerate(steps):
        members = groups[what] if kind == "kernel" else (what,)
        first.append(min(position[b.name] for b in members))
        reads = set()
        for b in members:
            reads |= (
                {a.buffer for a in b.args}
                if isinstance(b, ExternCall)
                else {ld.buffer for ld in loads(b.body.value)}
            )
        deps.append({step_of[r] for r in reads if r in step_of and step_of[r] != s})
    users = [[] for _ in steps]
    for s, ds in enumerate(deps):
        for d in ds:
            users[d].append(s)
    pending = [len(ds) for ds in deps]
    ready = [(first[s], s) for s in range(len(steps)) if pending[s] == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        _, s = heapq.heappop(ready)
        order.append(steps[s])
        for u in users[s]:
            pending[u] -= 1
            if pending[u] == 0:
                heapq.heappush(ready, (first[u], u))
    if len(order) != len(steps):
        raise LoweringError(f"graph {program.name}: the kernel groups read each other in a cycle")
    return order


class TritonCompiledGraph:
    """A callable running a `LoopProgram` with Triton kernels: `compiled(*inputs)` returns the list
    of outputs. `source` is the generated Python/Triton module, `program` its loop IR."""

    def __init__(self, program, launchers, kernels, source, graph, device, matmul=None, timings=None):
        self.program, self.source, self.graph, self.device = program, source, graph, device
        self.kernels = [spec for spec, _ in kernels]
        # What each step computes, for reports: a kernel's group, or one extern call.
        self.steps = [tuple(group) for _, group in kernels] + [
            (b,) for b in program.buffers if isinstance(b, ExternCall)
        ]
        self.timings = timings or {}
        self._matmul = matmul  # max-autotune: a tuned replacement for extern mm calls, or None
        launch_of = {k: launcher for k, launcher in enumerate(launchers)}
        groups = [group for _, group in kernels]
        # max-autotune: matmuls whose consumer may run as the template's epilogue, by consumer name.
        self.epilogues = {}
        if matmul is not None:
            from torchsmith.inductor.triton.mm_epilogue import FusedEpilogue, find_pairs

            pairs = find_pairs(program, groups)
            self.epilogues = {
                name: FusedEpilogue(mm, group_of(groups, name)[0], program) for name, mm in pairs.items()
            }
        deferred = {fused.mm.name for fused in self.epilogues.values()}
        self._groups = groups
        self._kernel_step_of: dict[int, int] = {}  # group index -> its step (plain kernel launches)
        self._steps = []
        for kind, what in ordered_steps(program, groups):
            if kind == "extern":
                if what.name not in deferred:  # a deferred product runs at its consumer's step
                    self._steps.append(("extern", what, None))
                continue
            fused = self.epilogues.get(groups[what][0].name)
            if fused is not None:
                self._steps.append(("epilogue", launch_of[what], fused))
                continue
            spec = launchers[what].spec
            allocate = [_allocation(b) for b in groups[what] if b.name in spec.writes]
            self._kernel_step_of[what] = len(self._steps)
            self._steps.append(("kernel", launch_of[what], allocate))
        self._input_types = [(v.name, v.type) for v in graph.inputs]
        self._compiled_ahead = False
        # Static graphs check inputs against precomputed signatures: a call is mostly launches.
        self._signatures = None
        self._static = None
        # A static graph's steps as one generated function (triton_straight), made after the
        # first call through the closures (when each kernel's binary is bound); None before.
        self._straight = None
        # The first call's inputs (`input_derived.input_state`): the parameters and buffers among
        # them that the call writing the straight-line form finds unchanged are taken as unchanging.
        self._first_inputs = None
        self._keeping = [True]  # cleared for good by `stop_keeping_input_derived`
        self._in_place: dict = {}
        self.folded_copies: list[str] = []  # in-place index_copy calls their sources' kernels do
        # The device index inputs must be on (-1: the CPU); a graph traced on `cuda` means the
        # device current at compile time.
        self._device_index = -1 if device.type == "cpu" else device.index
        if self._device_index is None:
            self._device_index = torch.cuda.current_device()
        if not program.symbols:
            self._signatures = [
                (k, t.dtype, torch.Size(_ints(t.shape)), _ints(t.strides))
                for k, (_, t) in enumerate(self._input_types)
                if isinstance(t, TensorType)
            ]
            # Calls after the first run the steps as closures over their precomputed sizes.
            steps, outputs = static_steps(program, self._steps, device, matmul)
            inputs = [(b.name, b.position) for b in program.inputs]
            self._static = (inputs, steps, outputs)

    def write_back_into_inputs(self, written_back: dict) -> None:
        """Output `j` of `written_back={j: k}` is copied into input `k` by the caller (a
        functionalized in-place update): calls with static sizes compute such an output in input
        `k` itself where `loop_ir.in_place` allows, and return that input, so the copy is one of a
        tensor onto itself. The first call (and graphs with size symbols) still make a new tensor."""
        if self._static is None:
            return
        in_place = in_place_updates(self.program, written_back)
        if in_place:
            self._fold_copies(in_place)
            positions, _, _ = self._static
            steps, outputs = static_steps(self.program, self._steps, self.device, self._matmul, in_place)
            self._static = (positions, steps, outputs)
            self._in_place, self._straight = in_place, None

    def _fold_copies(self, in_place: dict) -> None:
        """Let the kernels computing the sources of in-place `index_copy` calls store them into the
        copies' targets (`triton.folded_copy`): each such call's step becomes an alias of its
        target, and its kernel's step launches the new kernel, allocating no buffer for the source."""
        group_of = {b.name: k for k, group in enumerate(self._groups) for b in group}
        step_of = {name: k for k, step in enumerate(self._steps) for name in step_accesses(step)[1]}
        step_of |= {b.name: s for g, s in self._kernel_step_of.items() for b in self._groups[g]}
        folds = [f for f in foldable_copies(self.program, self._groups, in_place, step_of)
                 if group_of[f.host] in self._kernel_step_of]  # not a max-autotune epilogue
        if not folds:
            return
        source, specs = generate_folded(self.program, self._groups, folds)
        launchers = load_kernels(source, source_hash(source), list(specs.values())) if specs else []
        folded = {}
        for (k, spec), launcher in zip(specs.items(), launchers):
            allocate = [_allocation(b) for b in self._groups[k] if b.name in spec.writes]
            self._steps[self._kernel_step_of[k]] = ("kernel", launcher, allocate)
            folded |= {f.call: f for f in folds if group_of[f.host] == k}
        calls = {b.name: b for b in self.program.buffers if isinstance(b, ExternCall)}
        for k, (kind, what, _) in enumerate(self._steps):
            if kind == "extern" and what.name in folded:
                self._steps[k] = ("alias", calls[what.name], folded[what.name].target.buffer)
        self.folded_copies = sorted(folded)
        self._drop_unread_kernels()
        log.info("graph %s: %d index_copy calls stored by the kernels computing their sources",
                 self.program.name, len(folded))

    def _drop_unread_kernels(self) -> None:
        """Drop the kernel steps whose results nothing reads any more (an index a folded copy's
        kernel computes itself) and that write no graph input."""
        inputs = {b.name for b in self.program.inputs}
        read = {view.buffer for view in self.program.outputs}
        for step in self._steps:
            read |= step_accesses(step)[0]
        dead = {k for k, step in enumerate(self._steps)
                if step[0] == "kernel" and not (step_accesses(step)[1] & (read | inputs))}
        if not dead:
            return
        kept = [k for k in range(len(self._steps)) if k not in dead]
        moved = {old: new for new, old in enumerate(kept)}
        self._steps = [self._steps[k] for k in kept]
        self._kernel_step_of = {g: moved[k] for g, k in self._kernel_step_of.items() if k in moved}

    def _matches_signatures(self, inputs) -> bool:
        if self._signatures is None or len(inputs) != self.program.num_graph_inputs:
            return False
        # Runs on every call over every input (a model's parameters too): the cheapest reads first,
        # the device as `get_device()` (an int: -1 on the CPU), dtypes by identity.
        device_index = self._device_index
        for k, dtype, shape, strides in self._signatures:
            x = inputs[k]
            if x.dtype is not dtype or x.shape != shape or x.stride() != strides:
                return False
            if x.get_device() != device_index:
                return False
        return True

    def _bind(self, inputs) -> dict:
        from torchsmith.ir.interpreter import bind_symbols

        if self._matches_signatures(inputs):
            return {}

        if len(inputs) != self.program.num_graph_inputs:
            raise RuntimeCallError(
                f"compiled graph {self.program.name} takes {self.program.num_graph_inputs} inputs, "
                f"got {len(inputs)}"
            )
        bindings = bind_symbols(self.graph, inputs) if self.program.symbols else {}
        for (name, t), actual in zip(self._input_types, inputs):
            if isinstance(t, TensorType):
                shape = tuple(evaluate(s, bindings) for s in t.shape)
                strides = tuple(evaluate(s, bindings) for s in t.strides)
                if (
                    actual.dtype != t.dtype
                    or tuple(actual.shape) != shape
                    or not _on(actual.device, self.device)
                    or any(size != 1 and a != e for size, a, e in zip(shape, actual.stride(), strides))
                ):
                    raise RuntimeCallError(
                        f"input %{name} is {actual.dtype}{list(actual.shape)} on {actual.device} with "
                        f"strides {actual.stride()}, but {self.program.name} was compiled for {t}; "
                        "recompile for these inputs"
                    )
        return bindings

    def _compile_ahead(self, inputs, bindings: dict, symbols: list) -> None:
        """Before the first launch, compile every kernel (each config it may be tuned over) in
        parallel threads instead of one after another as the launches reach them. Buffers not
        yet computed stand in by their dtype (Triton's warmup takes a dtype for a pointer)."""
        from torchsmith.inductor.runtime.triton_launch import compile_in_parallel

        self._compiled_ahead = True

        tensors = {b.name: inputs[b.position] for b in self.program.inputs}
        work = []
        for kind, what, _ in self._steps:
            if kind != "kernel":
                continue
            spec = what.spec
            names = spec.writes + spec.reads
            args = [tensors[n] if n in tensors else _dtype_of(self.program, n) for n in names]
            numels = what.static_numels or [int(evaluate(n, bindings)) for n in spec.numels]
            work.append((what, args, symbols, numels))
        compile_in_parallel(work, self.device)

    def _straight_line(self, inputs=()):
        """The static steps as one generated function (`triton_straight.straight_gpu`); the steps
        computed from module state in `inputs` unchanged since the first call keep their results
        between calls."""
        from torchsmith.inductor.runtime.triton_straight import straight_gpu

        _, steps, outputs = self._static
        matmuls = matmul_functions(self._steps, self._matmul)
        plain = {name: fn for name, fn in matmuls.items() if name not in self._in_place}
        first = self._first_inputs
        unchanged = unchanged_inputs(first, inputs) if first is not None and inputs else set()
        unchanging = {k for k in unchanged if module_state(self._input_types[k][0])}
        return straight_gpu(self.program, self._steps, steps, outputs, self.device, plain,
                            signatures=self._signatures, device_index=self._device_index,
                            in_place=frozenset(self._in_place), unchanging=frozenset(unchanging),
                            keeping=self._keeping)

    def stop_keeping_input_derived(self) -> None:
        """From now on every call computes the values it derives from unchanging inputs (a CUDA
        graph recording must hold those kernels: its replays read the parameters as they are)."""
        self._keeping[0] = False

    def _checked_straight_line(self, inputs, expected: list):
        """The generated function, once it reproduced `expected` (this call's outputs through the
        closures) on the same inputs; False (the closures stay) where it did not. A graph that
        updates an input in place would apply the update twice, so it is not rerun."""
        try:
            straight = self._straight_line(inputs)
            if self._in_place:
                return straight
            again = straight(inputs)
        except Exception as error:  # noqa: BLE001 - the closures keep running the graph
            log.warning("graph %s: no straight-line form (%s); its steps run one by one", self.program.name,
                        error)
            return False
        if again is not None and not all(map(_same_tensor, again, expected)):
            log.warning("graph %s: its straight-line form computed other values; its steps run one by one",
                        self.program.name)
            return False
        return straight

    def __call__(self, *inputs) -> list[torch.Tensor]:
        straight = self._straight
        if straight:  # it checks the inputs against the signatures itself
            result = straight(inputs)
            if result is not None:  # None: inputs unlike the compiled ones, or launches hooked
                return result
        if self._compiled_ahead and self._static is not None and self._matches_signatures(inputs):
            positions, steps, outputs = self._static
            tensors = {name: inputs[position] for name, position in positions}
            for step in steps:
                step(tensors)
            result = [read(tensors) for read in outputs]
            if straight is None:
                self._straight = self._checked_straight_line(inputs, result)
            return result
        bindings = self._bind(inputs)
        symbols = [bindings[s] for s in self.program.symbols]
        if not self._compiled_ahead:
            self._compile_ahead(inputs, bindings, symbols)
            if self._static is not None:
                self._first_inputs = input_state(inputs)
        tensors = {b.name: inputs[b.position] for b in self.program.inputs}
        for kind, what, allocate in self._steps:
            if kind == "alias":  # a folded copy: its kernel wrote the target
                tensors[what.name] = tensors[allocate]
                continue
            if kind == "epilogue":
                allocate.run(tensors, bindings, what, symbols, self.device)
                continue
            if kind == "extern":
                if self._matmul is not None and what.kernel == "prims.mm":
                    a, b = (tensor_of(tensors, v, bindings) for v in what.args)
                    tensors[what.name] = self._matmul(a, b)
                else:
                    tensors[what.name] = run_extern(what, tensors, bindings)
                continue
            for name, shape, strides, dtype in allocate:
                if bindings:
                    shape = [evaluate(d, bindings) for d in shape]
                    strides = [evaluate(d, bindings) for d in strides]
                tensors[name] = torch.empty_strided(shape, strides, dtype=dtype, device=self.device)
            spec = what.spec
            args = [tensors[n] for n in spec.writes + spec.reads]
            what.launch(args, symbols, bindings)
        return [tensor_of(tensors, v, bindings) for v in self.program.outputs]


# How far two runs of the same kernels may land apart, relative to a result's largest magnitude:
# atomic adds (split reductions, attention backwards) sum in another order each run. A straight-line
# form that reads or writes the wrong buffer lands much farther off.
_RUN_TO_RUN = {torch.float64: 1e-6, torch.float32: 1e-4, torch.float16: 2e-2, torch.bfloat16: 2e-2}


def _same_tensor(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether two runs' results are the same values and layout, up to the order atomic sums take
    (`_RUN_TO_RUN`; nan equal to nan)."""
    if a.dtype != b.dtype or a.shape != b.shape or a.stride() != b.stride():
        return False
    if torch.equal(a, b):
        return True
    tolerance = _RUN_TO_RUN.get(a.dtype)
    if tolerance is None or a.numel() == 0:
        return False
    finite = b.isfinite()
    if not torch.equal(finite, a.isfinite()):
        return False
    if not torch.equal(a[~finite].nan_to_num(0.0, 1.0, -1.0), b[~finite].nan_to_num(0.0, 1.0, -1.0)):
        return False  # nan, inf and -inf where the other run has the same
    scale = b[finite].abs().max().item() if finite.any() else 0.0
    return bool(torch.allclose(a[finite], b[finite], rtol=tolerance, atol=tolerance * max(scale, 1e-30)))


def _dtype_of(program: LoopProgram, name: str) -> torch.dtype:
    return next(b.layout.dtype for b in program.buffers if b.name == name)


def _ints(dims) -> tuple:
    return tuple(int(d) for d in dims)


def _allocation(buffer: ComputedBuffer) -> tuple:
    """(name, shape, strides, dtype) of a buffer to allocate; plain ints when the sizes are static."""
    layout = buffer.layout
    static = all(sympy.sympify(d).is_Integer for d in (*layout.shape, *layout.strides))
    shape, strides = (
        (_ints(layout.shape), _ints(layout.strides)) if static else (layout.shape, layout.strides)
    )
    return buffer.name, shape, strides, layout.dtype


def group_of(groups, name: str):
    return next(g for g in groups if g[0].name == name)


def _on(actual: torch.device, expected: torch.device) -> bool:
    """`cuda:0` is on `cuda` (the current device when the graph was traced without an index)."""
    return actual.type == expected.type and (expected.index is None or actual.index == expected.index)
