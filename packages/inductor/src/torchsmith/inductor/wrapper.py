"""The Python side of a compiled graph: allocates buffers, calls the C++ kernels through ctypes,
runs extern calls with torch, and returns the outputs as strided views of the buffers."""

import ctypes

import torch

from torchsmith.inductor.cpp_codegen import Kernel
from torchsmith.inductor.errors import RuntimeCallError
from torchsmith.inductor.externs import run_extern, tensor_of
from torchsmith.inductor.loop_ir import ComputedBuffer, ExternCall, LoopProgram
from torchsmith.ir.symbolic import evaluate
from torchsmith.ir.types import TensorType


class CompiledGraph:
    """A callable running a `LoopProgram` with a built library: `compiled(*inputs)` returns the
    list of outputs. `source` is the generated C++ and `program` the loop IR it came from."""

    def __init__(
        self,
        program: LoopProgram,
        library: ctypes.CDLL,
        kernels: list[tuple[Kernel, tuple[ComputedBuffer, ...]]],
        source: str,
        graph,
        timings: dict[str, float] | None = None,
    ):
        self.program, self.source, self.graph = program, source, graph
        self.timings = timings or {}  # seconds per compile step, for reports
        # One step per kernel (run where its first buffer stands in program order) or extern call.
        self._steps = []
        group_of = {buffer.name: (kernel, group) for kernel, group in kernels for buffer in group}
        for buffer in program.buffers:
            if isinstance(buffer, ExternCall):
                self._steps.append(("extern", buffer, None))
                continue
            kernel, group = group_of[buffer.name]
            if buffer is not group[0]:
                continue
            fn = getattr(library, kernel.name)
            fn.restype = None
            n_pointers = len(kernel.writes) + len(kernel.reads)
            fn.argtypes = [ctypes.c_void_p] * n_pointers + [ctypes.c_int64] * len(program.symbols)
            self._steps.append(("kernel", group, (fn, kernel.writes + kernel.reads)))
        self._input_types = [(v.name, v.type) for v in graph.inputs]

    def _bind(self, inputs) -> dict[str, int]:
        from torchsmith.ir.interpreter import bind_symbols

        if len(inputs) != self.program.num_graph_inputs:
            raise RuntimeCallError(
                f"compiled graph {self.program.name} takes {self.program.num_graph_inputs} inputs, "
                f"got {len(inputs)}"
            )
        bindings = bind_symbols(self.graph, inputs) if self.program.symbols else {}
        for (name, t), actual in zip(self._input_types, inputs):
            if isinstance(t, TensorType):
                strides = tuple(evaluate(s, bindings) for s in t.strides)
                shape = tuple(evaluate(s, bindings) for s in t.shape)
                if (
                    actual.dtype != t.dtype
                    or tuple(actual.shape) != shape
                    or not _same_strides(shape, actual.stride(), strides)
                ):
                    raise RuntimeCallError(
                        f"input %{name} is {actual.dtype}{list(actual.shape)} with strides "
                        f"{actual.stride()}, but {self.program.name} was compiled for {t}; "
                        "recompile for these inputs"
                    )
        return bindings

    def __call__(self, *inputs) -> list[torch.Tensor]:
        bindings = self._bind(inputs)
        symbol_values = [bindings[s] for s in self.program.symbols]
        tensors: dict[str, torch.Tensor] = {b.name: inputs[b.position] for b in self.program.inputs}
        for kind, what, payload in self._steps:
            if kind == "extern":
                tensors[what.name] = run_extern(what, tensors, bindings)
                continue
            for buffer in what:
                layout = buffer.layout
                shape = [evaluate(d, bindings) for d in layout.shape]
                strides = [evaluate(d, bindings) for d in layout.strides]
                tensors[buffer.name] = torch.empty_strided(shape, strides, dtype=layout.dtype)
            fn, names = payload
            fn(*(tensors[n].data_ptr() for n in names), *symbol_values)
        return [tensor_of(tensors, v, bindings) for v in self.program.outputs]


def _same_strides(shape, actual, expected) -> bool:
    """Strides agree wherever they matter: kernels never step along a dim of size 1 (or 0 elements)."""
    if 0 in shape:
        return True
    return all(size == 1 or a == e for size, a, e in zip(shape, actual, expected))
