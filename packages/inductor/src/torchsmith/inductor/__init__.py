"""The code generator: lowers a `prims.*` graph to a loop-level IR, fuses loops, and emits C++/OpenMP
kernels for the CPU and Triton kernels for the GPU, cached on disk by source hash.

    compiled = torchsmith.inductor.compile_graph(graph, example_inputs)
    outputs = compiled(*inputs)          # == torchsmith.ir.interpret(graph, *inputs)

The custom-backend form is `torchsmith.inductor.compile_fx.inductor_backend`. It is deliberately not
exported here yet: compile_api enables `backend="inductor"` when this package exports
`inductor_backend`, which waits until autograd_aot feeds it aten graphs (capture's graphs are
`torch.*`, which this package does not lower).
"""

from torchsmith.inductor.__about__ import __version__
from torchsmith.inductor.compile_fx import compile_graph, to_prims
from torchsmith.inductor.cpp_build import STATS as BUILD_STATS
from torchsmith.inductor.cpp_build import load_library
from torchsmith.inductor.cpp_codegen import generate_cpp
from torchsmith.inductor.errors import (
    BuildError,
    CodegenError,
    InductorError,
    LoweringError,
    RuntimeCallError,
)
from torchsmith.inductor.loop_ir import LoopProgram, format_program
from torchsmith.inductor.lower import LOWERINGS, lower, register_lowering
from torchsmith.inductor.wrapper import CompiledGraph

__all__ = [
    "BUILD_STATS",
    "LOWERINGS",
    "BuildError",
    "CodegenError",
    "CompiledGraph",
    "InductorError",
    "LoopProgram",
    "LoweringError",
    "RuntimeCallError",
    "__version__",
    "compile_graph",
    "format_program",
    "generate_cpp",
    "load_library",
    "lower",
    "register_lowering",
    "to_prims",
]
