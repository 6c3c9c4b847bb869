"""The CPU pipeline: `compile_graph` (an `aten.*` or `prims.*` graph -> a callable running generated
C++), as a list of named steps run by `torchsmith.ir`'s pass runner (`print(CPU_PIPELINE)` lists them;
`python -m torchsmith.inductor --pipeline` prints both pipelines). `backend="inductor"` (device_compilers.py)
reaches it through autograd_aot.

The steps after `cache lookup` return their state unchanged when the lookup found the program (a
prims graph compiled before, in any process, by the same compiler code): the runner then records no
time for them, and the compile goes straight to `build`. The runner times every step (into
`CompiledGraph.timings` and an `inductor/time` event), verifies the graph and the loop IR between
steps under `TORCHSMITH_VERIFY=1` (`TORCHSMITH_VERIFY_LOOPS=1`: the loop IR alone) and dumps them
under `TORCHSMITH_DUMP_IR`. The loop IR, the fusion decisions and the C++ are `inductor/loops`,
`inductor/fusion` and `inductor/code` events.
"""

import logging
import os
from dataclasses import dataclass, replace

from torchsmith.inductor.cpp.build import load_library
from torchsmith.inductor.cpp.codegen import generate_cpp, local_buffers
from torchsmith.inductor.errors import LoweringError
from torchsmith.inductor.fusion.memory_plan import MemoryPlan, describe, plan_memory
from torchsmith.inductor.fusion.scheduler import FusionDecision, Schedule, log_decision, schedule
from torchsmith.inductor.loop_ir.program import LoopProgram
from torchsmith.inductor.loop_ir.verify import register_loop_ir_kind, verify_step
from torchsmith.inductor.lowering.channels_last import ChannelsLastPlan, plan_channels_last
from torchsmith.inductor.lowering.conv_fold import fold_conv_affine
from torchsmith.inductor.lowering.copies import elide_identity_copies
from torchsmith.inductor.lowering.decompose import to_prims
from torchsmith.inductor.lowering.inline import inline_pointwise
from torchsmith.inductor.lowering.lower import lower
from torchsmith.inductor.lowering.sink import sink_output_externs
from torchsmith.inductor.runtime import compile_cache
from torchsmith.inductor.runtime.cache_files import set_size_limit_mb
from torchsmith.inductor.runtime.cached_program import (
    CachedProgramError,
    CppProgram,
    cpp_program_from_json,
    cpp_program_to_json,
)
from torchsmith.inductor.runtime.size_outputs import split_size_outputs
from torchsmith.inductor.runtime.wrapper import CompiledGraph
from torchsmith.ir import Graph
from torchsmith.ir.events import emit
from torchsmith.ir.passes import Pipeline, Step

# `TORCHSMITH_LOGS=output_code` (compile_api's logs) shows the loop IR and the C++ of each graph.
code_log = logging.getLogger("torchsmith.inductor.output_code")

# Whether graphs with 2-D convolutions run them channels-last (channels_last.py); the option
# "layout_optimization" of compile_graph overrides it per graph.
LAYOUT_OPTIMIZATION = True

register_loop_ir_kind()


@dataclass(frozen=True, slots=True)
class CpuState:
    """What the CPU pipeline carries from step to step: the graph (then its prims form), the
    options it reads, each step's result as it is made, and `cached` once the C++ program is
    complete (read from the compile cache, or assembled by `codegen`)."""

    graph: Graph
    use_layout: bool = True
    key: str = ""
    cached: CppProgram | None = None
    layout: ChannelsLastPlan | None = None
    lowered: LoopProgram | None = None
    program: LoopProgram | None = None
    inlined: tuple[FusionDecision, ...] = ()
    plan: Schedule | None = None
    local: frozenset[str] = frozenset()
    memory: MemoryPlan | None = None
    library: object = None


def _decompose(state: CpuState) -> CpuState:
    prims_graph = to_prims(state.graph)
    devices = {v.type.device for v in prims_graph.values() if hasattr(v.type, "device")}
    if devices - {"cpu"}:
        raise LoweringError(
            f"graph {state.graph.name} uses devices {sorted(devices)}; the C++ backend runs on cpu only"
        )
    return state if prims_graph is state.graph else replace(state, graph=prims_graph)


def _cache_lookup(state: CpuState) -> CpuState:
    """The program compiled before from this prims graph (any process, same compiler code)."""
    key = compile_cache.key_of(
        "cpp-program", compile_cache.graph_text(state.graph), f"layout={state.use_layout}"
    )
    doc = compile_cache.lookup(key)
    cached = None
    if doc is not None:
        try:
            cached = cpp_program_from_json(doc)
        except CachedProgramError as error:
            compile_cache.reject(key, str(error))
    return replace(state, key=key, cached=cached)


def _unless_cached(fn):
    """`fn` as a step that does nothing when the compile cache already holds the program."""

    def step(state: CpuState) -> CpuState:
        return state if state.cached is not None else fn(state)

    step.__name__ = fn.__name__
    return step


@_unless_cached
def _fold_convolutions(state: CpuState) -> CpuState:
    return replace(state, graph=fold_conv_affine(state.graph))


@_unless_cached
def _choose_layouts(state: CpuState) -> CpuState:
    return replace(state, layout=plan_channels_last(state.graph)) if state.use_layout else state


@_unless_cached
def _lower(state: CpuState) -> CpuState:
    # addmm=True: a bias add after a matmul runs inside torch.addmm (Triton fuses it its own way).
    lowered = elide_identity_copies(lower(state.graph, addmm=True, layout=state.layout, scatter_loops=True))
    return replace(state, lowered=lowered, program=lowered)


@_unless_cached
def _inline(state: CpuState) -> CpuState:
    program, inlined = inline_pointwise(state.lowered)
    return replace(state, program=program, inlined=tuple(inlined))


@_unless_cached
def _sink_outputs(state: CpuState) -> CpuState:
    return replace(state, program=sink_output_externs(state.program))


@_unless_cached
def _schedule(state: CpuState) -> CpuState:
    return replace(state, plan=schedule(state.program))


@_unless_cached
def _keep_local(state: CpuState) -> CpuState:
    return replace(state, local=frozenset(local_buffers(state.program, state.plan.groups)))


@_unless_cached
def _plan_memory(state: CpuState) -> CpuState:
    return replace(state, memory=plan_memory(state.program, list(state.plan.steps), state.local))


@_unless_cached
def _codegen(state: CpuState) -> CpuState:
    source, kernels = generate_cpp(state.program, state.plan.groups, state.local)
    cached = CppProgram(
        state.layout, state.lowered, state.program, state.inlined, state.plan, state.local,
        state.memory, source, tuple(kernels),
    )  # fmt: skip
    compile_cache.store(state.key, cpp_program_to_json(cached))
    return replace(state, cached=cached)


def _build(state: CpuState) -> CpuState:
    # A graph of extern calls only has no kernel to build: no compiler process.
    if not state.cached.kernels:
        return state
    return replace(state, library=load_library(state.cached.source))


CPU_PIPELINE = Pipeline(
    "inductor",
    (
        Step("decompose", _decompose, "prims graph (aten ops decomposed; prims graphs pass through)"),
        Step("cache lookup", _cache_lookup, "the C++ program of this graph compiled before, if any"),
        Step("fold convolutions", _fold_convolutions, "eval BatchNorm (affine epilogues) in conv weights"),
        Step("choose layouts", _choose_layouts, "channels-last plan around 2-D convolutions"),
        Step("lower", _lower, "loop IR, one buffer per node (bias + mm as one addmm extern call)"),
        Step("inline", _inline, "loop IR with cheap pointwise producers inlined into consumers"),
        Step("sink output externs", _sink_outputs, "output-only extern calls as late as their inputs live"),
        Step("schedule", _schedule, "kernel groups and extern calls in order, each fusion decision"),
        Step("keep local", _keep_local, "intermediates kept inside their kernel (no memory)"),
        Step("plan memory", _plan_memory, "storage reuse, in place where possible"),
        Step("codegen", _codegen, "one C++ translation unit (stored in the compile cache)"),
        Step("build", _build, "the compiled and loaded library (disk cache by source hash)"),
    ),
)


def verify_loops_requested() -> bool:
    """Whether TORCHSMITH_VERIFY_LOOPS=1 asks for the loop IR to be verified after every step
    (TORCHSMITH_VERIFY=1 verifies every IR, through the pass runner)."""
    return os.environ.get("TORCHSMITH_VERIFY_LOOPS", "") not in ("", "0")


def compile_graph(graph: Graph, example_inputs=None, options: dict | None = None) -> CompiledGraph:
    """Compile `graph` for the CPU; the result, called with the graph's inputs, returns the same
    list of outputs as `torchsmith.ir.interpret(graph, *inputs)` (sizes among them as Python ints:
    `runtime.size_outputs`). `options` is compile_api's
    options dict; the C++ path reads `"cpp.threads"` (OpenMP threads of its kernels, None: OpenMP's
    default), `"layout_optimization"` (channels-last convolutions; default `LAYOUT_OPTIMIZATION`)
    and `"cache.size_limit_mb"` (the disk caches' bound, process-wide; see `cache_files`).

    >>> fn = compile_graph(graph, [x])   # doctest: +SKIP
    >>> fn(x)                            # doctest: +SKIP
    """
    options = options or {}
    # Size outputs (ints the backward needs) are no kernel's business: computed per call from the
    # inputs' sizes and put back among the outputs by the wrapper.
    graph, sizes = split_size_outputs(graph)
    limit = options.get("cache.size_limit_mb")
    if limit is not None:
        set_size_limit_mb(limit)
    use_layout = bool(options.get("layout_optimization", LAYOUT_OPTIMIZATION))
    state = CpuState(graph, use_layout)
    timings: dict[str, float] = {}
    hit = False
    check_loops = verify_loops_requested()
    for run in CPU_PIPELINE.iterate(state):
        if check_loops:
            verify_step(state, run.state, CPU_PIPELINE.stage, run.step)
        state = run.state
        if run.stamp is not None:
            timings[run.step] = run.stamp.seconds
        if run.step == "cache lookup":
            hit = state.cached is not None
    cached = state.cached
    layout = cached.layout
    decisions = (*((layout.decision,) if layout is not None else ()), *cached.inlined, *cached.plan.decisions)
    if hit:  # TORCHSMITH_LOGS=fusion shows the decisions whether they were made now or before
        for decision in decisions:
            log_decision(decision)
    emit("inductor", "loops", name=graph.name, program=cached.program)
    emit("inductor", "fusion", name=graph.name, decisions=decisions)
    emit("inductor", "code", name=graph.name, language="c++", source=cached.source)
    if code_log.isEnabledFor(logging.INFO):
        code_log.info(
            "%s",
            format_output_code(
                graph.name, cached.lowered, cached.program, cached.plan, cached.memory, cached.source, layout
            ),
        )
    compiled = CompiledGraph(
        cached.program, state.library, list(cached.kernels), cached.source, state.graph, timings,
        steps=list(cached.plan.steps), memory_plan=cached.memory, decisions=decisions,
        threads=options.get("cpp.threads"),
    )  # fmt: skip
    return compiled if sizes is None else sizes.wrap(compiled)


def format_output_code(name: str, lowered, program, plan, memory, source: str, layout=None) -> str:
    """The `output_code` log of one graph: the layout choice (if any), loop IR before and after
    inlining, the kernels with the IR node each fused buffer came from, the memory plan, then the C++."""
    lines = [f"===== graph {name}: {layout.decision.reason} ====="] if layout is not None else []
    lines += [f"===== graph {name}: loop IR =====", str(lowered)]
    if program != lowered:
        lines += [f"===== graph {name}: loop IR after inlining =====", str(program)]
    lines.append(f"===== graph {name}: {len(plan.groups)} kernels, {len(plan.steps)} steps =====")
    kernel = 0
    for step in plan.steps:
        if hasattr(step[0], "kernel"):
            lines.append(f"extern {step[0].name} = {step[0].kernel}  # {step[0].origin}")
            continue
        lines.append(f"kernel{kernel}:")
        kernel += 1
        lines += [f"  {b.name:<20} # {b.origin or '?'}" for b in step]
    lines.append(f"===== graph {name}: memory plan: {describe(memory)} =====")
    lines += [str(a) for a in memory.allocations if a.donor is not None]
    lines += [f"===== graph {name}: C++ =====", source]
    return "\n".join(lines)
