"""Ahead-of-time autograd: traces a `torch.*` graph down to ATen ops on meta tensors, functionalizes
it, builds the joint forward+backward graph and partitions it by min-cut into a forward and a
backward graph run by a generated `torch.autograd.Function`.
"""

from torchsmith.autograd_aot.__about__ import __version__
from torchsmith.autograd_aot.errors import (
    AliasingError,
    AotAutogradError,
    FunctionalizationError,
    PartitionError,
    TraceError,
)
from torchsmith.autograd_aot.functionalize import dead_code_elimination, functionalize, is_functional
from torchsmith.autograd_aot.partition import MemoryReport, Partition, can_recompute, partition
from torchsmith.autograd_aot.pipeline import AotState, Lowered, aot_pipeline, lower
from torchsmith.autograd_aot.runtime import (
    AotFunction,
    CompiledProgram,
    aot_compile,
    aot_eager,
    aot_eager_backend,
    interpreter_compiler,
)
from torchsmith.autograd_aot.symbolic import input_symbols, lower_symbolic
from torchsmith.autograd_aot.trace import OutputSpec, TracedProgram, trace
from torchsmith.ir.errors import TorchsmithError

__all__ = [
    "__version__",
    "AliasingError", "AotAutogradError", "FunctionalizationError", "PartitionError", "TraceError",
    "TorchsmithError",
    "dead_code_elimination", "functionalize", "is_functional",
    "MemoryReport", "Partition", "can_recompute", "partition",
    "AotState", "Lowered", "aot_pipeline", "lower", "input_symbols", "lower_symbolic",
    "AotFunction", "CompiledProgram", "aot_compile", "aot_eager", "aot_eager_backend", "interpreter_compiler",
    "OutputSpec", "TracedProgram", "trace",
]
