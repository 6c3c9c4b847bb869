"""`backend="inductor"`: capture's torch-level graph through torchsmith.autograd_aot (forward and backward
decomposed to prims) to the inductor's generated kernels. compile_api wires the stages (the dependency
rules of docs/architecture.md): the inductor itself never imports autograd_aot.
"""

import warnings
from collections.abc import Callable

import torch

from torchsmith.autograd_aot import aot_compile
from torchsmith.autograd_aot.runtime import python_compiler
from torchsmith.inductor.device_compilers import (
    STATS,
    check_backward,
    check_supported,
    compile_for_device,
    prepare_device,
    to_prims_keep,
    with_input_strides,
)
from torchsmith.inductor.errors import InductorError
from torchsmith.inductor.host_inputs import move_host_inputs, moved
from torchsmith.inductor.lowering.fallback import lower_fallback
from torchsmith.inductor.lowering.lower import LOWERINGS, register_lowering
from torchsmith.ir import Graph, lookup_op
from torchsmith.ir.gc_pause import paused_gc

Compiler = Callable[[Graph, list], Callable]

# Dialects whose ops the stages know by name; any other op with an operator overload behind it is a
# torch.library custom op capture recorded
_KNOWN_DIALECTS = ("aten.", "prims.", "torch.", "operator.", "math.", "allow_in_graph.")


def keep_custom_ops_whole(graph: Graph) -> Graph:
    """`graph` after registering the inductor's extern fallback for each `torch.library` custom op
    in it (`transformers.grouped_mm_fallback.default`): the op runs its own kernel, as torch.compile
    runs it, since its body is opaque by design."""
    for node in graph.nodes:
        if node.op in LOWERINGS or node.op.startswith(_KNOWN_DIALECTS):
            continue
        if isinstance(lookup_op(node.op).eager, torch._ops.OpOverload):
            register_lowering(node.op)(lower_fallback)
    return graph


def backward_compiler(options: dict | None) -> Compiler:
    """The backward's compiler. It runs inside `.backward()`, where compile_api cannot fall back, so
    with `options["fallback"] == "eager"` a graph the inductor refuses runs as eager ops (one warning)."""
    fallback = (options or {}).get("fallback", "eager") == "eager"

    def compile_backward(graph: Graph, example_inputs) -> Callable:
        graph = with_input_strides(graph, example_inputs)
        try:
            with paused_gc():  # as for the forward (fallback.Backend)
                return compile_for_device(keep_custom_ops_whole(graph), example_inputs, options)
        except InductorError as e:
            if not fallback:
                raise
            STATS.backward_fallbacks += 1
            warnings.warn(
                f"torchsmith: stage inductor could not compile the backward graph {graph.name}, which runs "
                f"as eager ops instead: {e}",
                stacklevel=2,
            )
            import torchsmith.prims  # noqa: F401  (the graph's prims ops, for the interpreter)

            return python_compiler(graph, example_inputs)

    return compile_backward


def inductor_backend(graph: Graph, example_inputs, options: dict | None = None) -> Callable:
    """The `"inductor"` backend (`backend(graph, example_inputs) -> callable`): capture's graph through
    torchsmith.autograd_aot (forward compiled now; backward, when an input requires grad, compiled on
    first use) to generated kernels. Raises `UnsupportedGraphError` for graphs it cannot compile.
    `options` is compile_api's options dict (see torchsmith.compile): with "fallback": "eager" (the
    default) a backward the inductor refuses runs as eager ops with one warning; with "raise" the
    backward is checked when the forward compiles, and refused then.

        >>> compiled = inductor_backend(graph, [x, w])   # doctest: +SKIP
        >>> (y,) = compiled(x, w)                         # doctest: +SKIP
    """
    host = move_host_inputs(graph)
    graph, example_inputs = host.graph, moved(example_inputs, host.positions, host.device)
    prepare_device(check_supported(graph))
    # With the default fallback a backward the inductor refuses runs as eager ops (one warning), so
    # checking it up front would only cost a second lowering of the backward; with
    # fallback="raise" the user wants the error now, not inside `.backward()`.
    raising = (options or {}).get("fallback", "eager") != "eager"
    function = aot_compile(
        graph,
        example_inputs,
        lambda g, inputs: compile_for_device(keep_custom_ops_whole(g), inputs, options),
        backward_compiler(options), decompose=to_prims_keep,
        check_backward=check_backward if raising else None,
    )
    write_back_in_place(function)
    lend_saved_outputs(function)
    return HostInputsMoved(function, host.positions, host.device) if host.positions else function


class HostInputsMoved:
    """A compiled function whose graph reads some cpu inputs on its device (`host_inputs`): each call
    moves them there first."""

    def __init__(self, function, positions: tuple[int, ...], device: str):
        self.function, self.positions, self.device = function, positions, device

    def __call__(self, *inputs):
        return self.function(*moved(inputs, self.positions, self.device))

    def __getattr__(self, name):
        return getattr(self.function, name)


def write_back_in_place(function) -> None:
    """Tell the compiled forward of each inference program which of its outputs the runtime copies
    back into mutated inputs (`runtime.run_program`: the new values follow the user's outputs), where
    the forward takes that hint (CUDA graphs write them into the inputs themselves, so a KV cache
    updated in place is never copied whole). Programs with in-place shape changes pass their inputs
    as views, and training programs run inside an autograd.Function: neither is told."""
    for program in function.programs.values():
        hint = getattr(program.forward_fn, "write_back_into_inputs", None)
        if hint is None or program.is_training or program.traced.metadata_mutations:
            continue
        if program.mutated_inputs:
            first = program.traced.num_outputs
            hint({first + j: k for j, k in enumerate(program.mutated_inputs)})


def lend_saved_outputs(function) -> None:
    """Tell the compiled forward of each training program which of its outputs only its backward
    reads (the saved values after the user's outputs), where the forward takes that hint: CUDA
    graphs then hand those out without copying them (`cuda_graphs.CudaGraphRunner.lend_outputs`)."""
    for program in function.programs.values():
        hint = getattr(program.forward_fn, "lend_outputs", None)
        if hint is None or not program.is_training:
            continue
        first = program.traced.num_outputs + len(program.mutated_inputs)
        hint(range(first, len(program.forward_graph.outputs)))


def pipeline_text() -> str:
    """`backend="inductor"` on one screen: each stage's steps as its pass runner lists them, from
    capture's graph to built kernels (what `python -m torchsmith pipeline` prints)."""
    from torchsmith.autograd_aot.pipeline import aot_pipeline
    from torchsmith.inductor.cpu_pipeline import CPU_PIPELINE

    parts = [
        "capture: the Python function run symbolically from its bytecode: a torch-level graph and its guards",
        str(aot_pipeline(to_prims_keep)),
        "forward now, backward at the first .backward(): compile_for_device picks the device's pipeline",
        str(CPU_PIPELINE).replace("inductor pipeline:", "inductor pipeline (device cpu):"),
    ]
    try:
        from torchsmith.inductor.gpu_pipeline import GPU_PIPELINE
    except ImportError:  # the GPU path needs triton
        parts.append("GPU (Triton) inductor pipeline: not available (pip install triton)")
    else:
        parts.append(str(GPU_PIPELINE).replace("inductor pipeline:", "inductor pipeline (device cuda):"))
    return "\n".join(parts)
