"""The entry point of the C++ path: `compile_graph` (an `aten.*` or `prims.*` graph -> a callable
running generated C++). `backend="inductor"` (backend.py) reaches it through autograd_aot.

The pipeline, one step per line::

    decompose        aten -> prims (prims graphs pass through)
    cache lookup     a prims graph compiled before (any process): skip   compile_cache
                     to the build
    choose layouts   channels-last around 2-D convolutions              channels_last.plan_channels_last
    lower            prims -> loop IR, one buffer per node (bias + mm   lower.lower
                     as one addmm extern call)
    inline           cheap pointwise producers into their consumers     inline.inline_pointwise
    schedule         buffers -> kernel groups (vertical, horizontal)    scheduler.schedule
    keep local       intermediates kept inside their kernel (softmax's  cpp_codegen.local_buffers
                     exp row): no memory
    plan memory      storage reuse, in place where possible             memory_plan.plan_memory
    codegen          one C++ translation unit                           cpp_codegen.generate_cpp
    build            compile and load (disk cache)                      cpp_build.load_library
    wrap             the Python caller                                  wrapper.CompiledGraph

Each step's seconds go into `CompiledGraph.timings` and an `inductor/time` event; the loop IR, the
fusion decisions and the C++ are `inductor/loops`, `inductor/fusion` and `inductor/code` events.
"""

import logging
import time

from torchsmith.inductor.cpp.build import load_library
from torchsmith.inductor.cpp.codegen import generate_cpp, local_buffers
from torchsmith.inductor.errors import LoweringError
from torchsmith.inductor.fusion.memory_plan import describe, plan_memory
from torchsmith.inductor.fusion.scheduler import log_decision, schedule
from torchsmith.inductor.lowering.channels_last import plan_channels_last
from torchsmith.inductor.lowering.inline import inline_pointwise
from torchsmith.inductor.lowering.lower import lower
from torchsmith.inductor.runtime import compile_cache
from torchsmith.inductor.runtime.cache_files import set_size_limit_mb
from torchsmith.inductor.runtime.cached_program import (
    CachedProgramError,
    cpp_program_from_json,
    cpp_program_to_json,
)
from torchsmith.inductor.runtime.wrapper import CompiledGraph
from torchsmith.ir import Graph
from torchsmith.ir.events import emit

# `TORCHSMITH_LOGS=output_code` (compile_api's logs) shows the loop IR and the C++ of each graph.
code_log = logging.getLogger("torchsmith.inductor.output_code")

# Whether graphs with 2-D convolutions run them channels-last (channels_last.py); the option
# "layout_optimization" of compile_graph overrides it per graph.
LAYOUT_OPTIMIZATION = True


def to_prims(graph: Graph) -> Graph:
    """`graph` with every aten op decomposed to prims (prims graphs pass through). Ops with no
    decomposition stay whole: the lowering runs them as extern calls (eager fallback)."""
    if all(node.op.startswith("prims.") for node in graph.nodes):
        return graph
    import torchsmith.prims

    return torchsmith.prims.decompose(graph, on_missing="keep")


class _Timer:
    """Times the steps of one compile into `timings` and emits an `inductor/time` event per step."""

    def __init__(self, timings: dict[str, float]):
        self.timings = timings

    def __call__(self, step: str, fn, *args):
        start = time.perf_counter()
        result = fn(*args)
        seconds = time.perf_counter() - start
        self.timings[step] = seconds
        emit("inductor", "time", step=step, seconds=seconds)
        return result


def compile_graph(graph: Graph, example_inputs=None, options: dict | None = None) -> CompiledGraph:
    """Compile `graph` for the CPU; the result, called with the graph's inputs, returns the same
    list of outputs as `torchsmith.ir.interpret(graph, *inputs)`. `options` is compile_api's
    options dict; the C++ path reads `"cpp.threads"` (OpenMP threads of its kernels, None: OpenMP's
    default), `"layout_optimization"` (channels-last convolutions; default `LAYOUT_OPTIMIZATION`)
    and `"cache.size_limit_mb"` (the disk caches' bound, process-wide; see `cache_files`).

    >>> fn = compile_graph(graph, [x])   # doctest: +SKIP
    >>> fn(x)                            # doctest: +SKIP
    """
    timings: dict[str, float] = {}
    timed = _Timer(timings)
    limit = (options or {}).get("cache.size_limit_mb")
    if limit is not None:
        set_size_limit_mb(limit)
    prims_graph = timed("decompose", to_prims, graph)
    devices = {v.type.device for v in prims_graph.values() if hasattr(v.type, "device")}
    if devices - {"cpu"}:
        raise LoweringError(
            f"graph {graph.name} uses devices {sorted(devices)}; the C++ backend runs on cpu only"
        )
    use_layout = bool((options or {}).get("layout_optimization", LAYOUT_OPTIMIZATION))
    # A process that compiled this prims graph before (same compiler code) skips to the build.
    key = timed("cache key", _program_key, prims_graph, use_layout)
    cached = timed("cache lookup", _cached_program, key)
    hit = cached is not None
    if not hit:
        cached = _lower_to_cpp(prims_graph, use_layout, timed)
        compile_cache.store(key, cpp_program_to_json(cached))
    layout, lowered, program, inlined, plan, local, memory, source, kernels = cached
    decisions = (*((layout.decision,) if layout is not None else ()), *inlined, *plan.decisions)
    if hit:  # TORCHSMITH_LOGS=fusion shows the decisions whether they were made now or before
        for decision in decisions:
            log_decision(decision)
    emit("inductor", "loops", name=graph.name, program=program)
    emit("inductor", "fusion", name=graph.name, decisions=decisions)
    emit("inductor", "code", name=graph.name, language="c++", source=source)
    # A graph of extern calls only has no kernel to build: skip the compiler process.
    library = timed("build", load_library, source) if kernels else None
    if code_log.isEnabledFor(logging.INFO):
        code_log.info("%s", format_output_code(graph.name, lowered, program, plan, memory, source, layout))
    return CompiledGraph(
        program, library, kernels, source, prims_graph, timings,
        steps=list(plan.steps), memory_plan=memory, decisions=decisions,
        threads=(options or {}).get("cpp.threads"),
    )  # fmt: skip


def _program_key(prims_graph: Graph, use_layout: bool) -> str:
    return compile_cache.key_of("cpp-program", compile_cache.graph_text(prims_graph), f"layout={use_layout}")


def _cached_program(key: str) -> tuple | None:
    """The cached `_lower_to_cpp` result of `key`, or None (a miss, or an entry that does not read)."""
    doc = compile_cache.lookup(key)
    if doc is None:
        return None
    try:
        return cpp_program_from_json(doc)
    except CachedProgramError as error:
        compile_cache.reject(key, str(error))
        return None


def _lower_to_cpp(prims_graph: Graph, use_layout: bool, timed) -> tuple:
    """Everything between the prims graph and the C++ source: what the compile cache keeps."""
    layout = timed("choose layouts", plan_channels_last, prims_graph) if use_layout else None
    # addmm=True: a bias add after a matmul runs inside torch.addmm (Triton fuses it its own way).
    lowered = timed("lower", lambda g: lower(g, addmm=True, layout=layout, scatter_loops=True), prims_graph)
    program, inlined = timed("inline", inline_pointwise, lowered)
    plan = timed("schedule", schedule, program)
    # Intermediates a kernel writes and reads within one outer iteration get no memory at all.
    local = timed("keep local", local_buffers, program, plan.groups)
    memory = timed("plan memory", plan_memory, program, list(plan.steps), local)
    source, kernels = timed("codegen", generate_cpp, program, plan.groups, local)
    return layout, lowered, program, inlined, plan, local, memory, source, kernels


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
