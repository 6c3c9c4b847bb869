"""The code generator: lowers a `prims.*` graph to a loop-level IR, fuses loops, and emits C++/OpenMP
kernels for the CPU and Triton kernels for the GPU, cached on disk by source hash.

    compiled = torchsmith.inductor.compile_graph(graph, example_inputs)
    outputs = compiled(*inputs)          # == torchsmith.ir.interpret(graph, *inputs)

`compile_for_device(graph, example_inputs, options)` (device_compilers.py) picks the code generator of the
graph's device and raises `UnsupportedGraphError` (stage, op, source line) for what it cannot compile;
`register_device_compiler` is where a device's code generator plugs in. `backend="inductor"` itself
(capture's graph through torchsmith.autograd_aot to these kernels) is wired by compile_api, in
`torchsmith.inductor_backend`.
"""

from torchsmith.inductor.__about__ import __version__
from torchsmith.inductor.cpp.build import STATS as BUILD_STATS
from torchsmith.inductor.cpp.build import load_library
from torchsmith.inductor.cpp.codegen import generate_cpp
from torchsmith.inductor.cpu_pipeline import compile_graph
from torchsmith.inductor.device_compilers import STATS as BACKEND_STATS
from torchsmith.inductor.device_compilers import compile_for_device, register_device_compiler
from torchsmith.inductor.errors import (
    BuildError,
    CodegenError,
    InductorError,
    LoweringError,
    RuntimeCallError,
    UnsupportedGraphError,
)
from torchsmith.inductor.loop_ir.program import LoopProgram, format_program
from torchsmith.inductor.lowering.decompose import to_prims
from torchsmith.inductor.lowering.lower import LOWERINGS, lower, register_lowering
from torchsmith.inductor.runtime.wrapper import CompiledGraph
from torchsmith.ir.errors import TorchsmithError  # the root of every torchsmith error

__all__ = [
    "BACKEND_STATS",
    "BUILD_STATS",
    "LOWERINGS",
    "BuildError",
    "CodegenError",
    "CompiledGraph",
    "InductorError",
    "LoopProgram",
    "LoweringError",
    "RuntimeCallError",
    "UnsupportedGraphError",
    "__version__",
    "compile_graph",
    "format_program",
    "generate_cpp",
    "compile_for_device",
    "load_library",
    "lower",
    "register_device_compiler",
    "register_lowering",
    "to_prims",
]


def __getattr__(name: str):
    # The Triton entry point loads on first use, so that importing this package never imports triton.
    if name == "compile_graph_triton":
        from torchsmith.inductor.gpu_pipeline import compile_graph_triton

        return compile_graph_triton
    raise AttributeError(f"module 'torchsmith.inductor' has no attribute {name!r}")
