"""The GPU pipeline: `compile_graph_triton(graph, example_inputs, options)` compiles an `aten.*` or
`prims.*` graph on CUDA tensors to Triton kernels, as a list of named steps run by `torchsmith.ir`'s
pass runner (`print(GPU_PIPELINE)` lists them), and wraps the kernels in the GPU runtime
(`runtime.triton_graph.TritonCompiledGraph`): a callable with the same contract as the C++
backend's `CompiledGraph` (a list of outputs, equal to `interpret(graph, *inputs)`).

After the steps: options["max_autotune"] also tries the Triton matmul template per shape
(triton/matmul.py); options["triton.cudagraphs"] replays the result as a CUDA graph
(runtime/cuda_graphs.py). The runner times each step (into `timings` and `inductor/time` events),
verifies the graph and loop IR between steps under `TORCHSMITH_VERIFY=1` (the loop IR alone under
`TORCHSMITH_VERIFY_LOOPS=1`) and dumps them under `TORCHSMITH_DUMP_IR`.

CPU tensors run only under `TRITON_INTERPRET=1` (the interpreter), which is how the tests run here.
"""

import logging
import math
from dataclasses import dataclass, replace

import torch

from torchsmith.inductor.cpu_pipeline import verify_loops_requested
from torchsmith.inductor.errors import LoweringError
from torchsmith.inductor.fusion.scheduler import schedule
from torchsmith.inductor.loop_ir.program import LoopProgram
from torchsmith.inductor.loop_ir.verify import register_loop_ir_kind, verify_step
from torchsmith.inductor.lowering.channels_last import ChannelsLastPlan, plan_channels_last
from torchsmith.inductor.lowering.conv_fold import fold_conv_affine
from torchsmith.inductor.lowering.copies import elide_identity_copies
from torchsmith.inductor.lowering.decompose import to_prims
from torchsmith.inductor.lowering.inline import inline_pointwise
from torchsmith.inductor.lowering.lower import lower
from torchsmith.inductor.lowering.sink import sink_extern_inputs
from torchsmith.inductor.runtime.conv_relu import available as conv_relu_available
from torchsmith.inductor.runtime.size_outputs import split_size_outputs
from torchsmith.inductor.runtime.triton_graph import TritonCompiledGraph
from torchsmith.inductor.runtime.triton_launch import interpreting, load_kernels
from torchsmith.inductor.runtime.triton_workers import start_workers
from torchsmith.inductor.triton.bias_matmul import bias_matmuls
from torchsmith.inductor.triton.casts import inline_widening_casts
from torchsmith.inductor.triton.codegen import generate_triton, source_hash
from torchsmith.inductor.triton.cross import cut_row_blocks
from torchsmith.inductor.triton.split import split_reductions
from torchsmith.inductor.triton.upcast import upcast_half_norms
from torchsmith.ir import Graph
from torchsmith.ir.passes import Pipeline, Step
from torchsmith.ir.types import TensorType

code_log = logging.getLogger("torchsmith.inductor.output_code")

register_loop_ir_kind()

# A producer computed from graph inputs alone and read broadcast (BatchNorm's 1 / sqrt(var + eps),
# one value per channel) is recomputed per element up to this cost (index_math.count_ops): its own
# kernel would cost a launch, and the memory-bound kernel reading it has arithmetic to spare.
BROADCAST_INPUT_OPS = 8


@dataclass(frozen=True, slots=True)
class GpuState:
    """What the GPU pipeline carries from step to step: the graph (then its prims form), the
    options, and each step's result as it is made. `fixed_groups`: the kernel groups were given
    (tests), so the loop-IR rewrites and the scheduler leave the lowered program as it is."""

    graph: Graph
    options: dict
    groups: tuple | None = None
    fixed_groups: bool = False
    device: torch.device | None = None
    layout: ChannelsLastPlan | None = None
    program: LoopProgram | None = None
    source: str = ""
    kernels: tuple = ()
    launchers: tuple = ()


def _upcast(state: GpuState) -> GpuState:
    graph = upcast_half_norms(state.graph)
    return state if graph is state.graph else replace(state, graph=graph)


def _decompose(state: GpuState) -> GpuState:
    graph = to_prims(state.graph)
    return state if graph is state.graph else replace(state, graph=graph)


def _bias_matmuls(state: GpuState) -> GpuState:
    if state.options.get("max_autotune"):
        return state  # the matmul template fuses the bias into its own epilogue
    graph = bias_matmuls(state.graph)
    return state if graph is state.graph else replace(state, graph=graph)


def _pick_device(state: GpuState) -> GpuState:
    devices = {v.type.device for v in state.graph.values() if isinstance(v.type, TensorType)}
    device = _single_device(state.graph.name, devices)
    if device.type == "cuda" and not interpreting():
        start_workers()  # they start while this graph lowers: the kernels compile at its first call
    return replace(state, device=device)


def _wants_channels_last(state: GpuState) -> bool:
    return bool(state.options.get("layout_optimization", _channels_last_pays(state.graph)))


def _fold_convolutions(state: GpuState) -> GpuState:
    if state.device is None or state.device.type != "cuda" or not _wants_channels_last(state):
        return state  # the fused convolution + ReLU runs on channels-last CUDA tensors only
    if not conv_relu_available(state.device):
        return state
    graph = fold_conv_affine(state.graph, before_relu=True)
    return state if graph is state.graph else replace(state, graph=graph)


def _choose_layouts(state: GpuState) -> GpuState:
    if not _wants_channels_last(state):
        return state
    return replace(state, layout=plan_channels_last(state.graph))


def _inline(program: LoopProgram) -> LoopProgram:
    return inline_pointwise(program, broadcast_input_ops=BROADCAST_INPUT_OPS)[0]


def _lower(state: GpuState) -> GpuState:
    return replace(state, program=elide_identity_copies(lower(state.graph, layout=state.layout)))


def _on_program(fn):
    """A step rewriting the loop program, skipped when the kernel groups were given."""

    def step(state: GpuState) -> GpuState:
        if state.fixed_groups:
            return state
        program = fn(state.program)
        return state if program is state.program else replace(state, program=program)

    step.__name__ = fn.__name__
    return step


def _schedule(state: GpuState) -> GpuState:
    if state.fixed_groups:
        return state
    groups = schedule(state.program, target="triton").groups
    return replace(state, groups=tuple(tuple(g) for g in groups))


def _codegen(state: GpuState) -> GpuState:
    source, kernels = generate_triton(state.program, [tuple(g) for g in state.groups])
    return replace(state, source=source, kernels=tuple(kernels))


def _load(state: GpuState) -> GpuState:
    launchers = load_kernels(state.source, source_hash(state.source), [spec for spec, _ in state.kernels])
    return replace(state, launchers=tuple(launchers))


GPU_PIPELINE = Pipeline(
    "inductor",
    (
        Step("upcast half norms", _upcast, "graph with float16/bfloat16 layer and batch norms in float32"),
        Step("decompose", _decompose, "prims graph (aten ops decomposed; prims graphs pass through)"),
        Step("bias matmuls", _bias_matmuls, "graph with half-precision mm + bias as one addmm call"),
        Step("pick device", _pick_device, "the one CUDA device of the graph (compile workers started)"),
        Step("fold convolutions", _fold_convolutions, "eval BatchNorm in conv weights where a ReLU follows"),
        Step("choose layouts", _choose_layouts, "channels-last plan around 2-D convolutions"),
        Step("lower", _lower, "loop IR, one buffer per node"),
        Step("inline", _on_program(_inline), "loop IR with cheap producers inlined"),
        Step("widening casts", _on_program(inline_widening_casts), "loop IR reading widened values in place"),
        Step("row blocks", _on_program(cut_row_blocks), "column reductions beside row ones in row blocks"),
        Step("split reductions", _on_program(split_reductions), "long narrow reductions in two stages"),
        Step("sink extern inputs", _on_program(sink_extern_inputs), "extern calls' inputs computed last"),
        Step("schedule", _schedule, "kernel groups (vertical, horizontal, reduction epilogues)"),
        Step("codegen", _codegen, "one Python/Triton module (groups one kernel cannot hold split)"),
        Step("load", _load, "launchers of the compiled kernels (compiled in workers ahead of the call)"),
    ),
)


def compile_graph_triton(graph: Graph, example_inputs=None, options: dict | None = None, groups=None):
    """Compile `graph` (aten or prims, tensors on one CUDA device) to Triton kernels.

    `options` is compile_api's dict (`max_autotune`, `triton.cudagraphs`, ...); `groups` overrides
    the fusion groups (tests). Returns a callable: `compiled(*inputs) -> list[Tensor]`.
    """
    options = options or {}
    graph, sizes = split_size_outputs(graph)  # ints computed per call from the inputs' sizes
    state = GpuState(graph, options, groups=None if groups is None else tuple(tuple(g) for g in groups))
    state = replace(state, fixed_groups=groups is not None)
    timings = {}
    check_loops = verify_loops_requested()
    for run in GPU_PIPELINE.iterate(state):
        if check_loops:
            verify_step(state, run.state, GPU_PIPELINE.stage, run.step)
        state = run.state
        if run.stamp is not None:
            timings[run.step] = run.stamp.seconds
    if code_log.isEnabledFor(logging.INFO):
        code_log.info(
            "loop IR of %s:\n%s\n\nTriton of %s:\n%s", graph.name, state.program, graph.name, state.source
        )
    matmul = None
    if options.get("max_autotune"):
        from torchsmith.inductor.triton.matmul import tuned_matmul

        matmul = tuned_matmul
    compiled = TritonCompiledGraph(
        state.program, list(state.launchers), list(state.kernels), state.source, state.graph, state.device,
        matmul, timings,
    )  # fmt: skip
    if options.get("triton.cudagraphs"):
        from torchsmith.inductor.runtime.cuda_graphs import cudagraphify

        compiled = cudagraphify(compiled, mutated_inputs=options.get("mutated_inputs", ()))
    return compiled if sizes is None else sizes.wrap(compiled)


def _channels_last_pays(graph: Graph) -> bool:
    """Channels-last by default where a graph's 2-D convolutions are mostly dense ones: cuDNN runs
    NCHW convolutions as NHWC kernels wrapped in transposes of its own (half precision) or slower
    kernels (float32, TF32), about twice the time of a channels-last call, copies of the input and
    weight included; grouped (depthwise) convolutions gain nothing. So: dense convolutions doing at
    least twice the grouped ones' work, every 2-D one of static sizes."""
    dense = grouped = 0
    for node in graph.nodes:
        if node.op != "prims.convolution" or node.args[6]:  # transposed
            continue
        out, weight = node.outputs[0].type, node.args[1].type
        if len(out.shape) != 4:
            continue  # 1-D and 3-D convolutions keep their layout either way
        if not all(isinstance(d, int) for d in (*out.shape, *weight.shape)):
            return False
        work = math.prod(out.shape) * math.prod(weight.shape[1:])
        if node.args[8] > 1:
            grouped += work
        else:
            dense += work
    return dense > 0 and dense >= 2 * grouped


def _single_device(name: str, devices: set[str]) -> torch.device:
    if len(devices) > 1:
        raise LoweringError(
            f"graph {name} mixes devices {sorted(devices)}; one Triton graph runs on one device"
        )
    device = torch.device(next(iter(devices), "cuda"))
    if device.type == "cpu" and not interpreting():
        raise LoweringError(
            f"graph {name} runs on cpu: the Triton backend needs CUDA tensors (or TRITON_INTERPRET=1 to "
            "run kernels in Triton's interpreter); the C++ backend compiles cpu graphs"
        )
    if device.type not in ("cuda", "cpu"):
        raise LoweringError(f"graph {name} runs on {device}; the Triton backend supports CUDA devices")
    return device

